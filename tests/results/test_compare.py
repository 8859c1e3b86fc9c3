"""Comparisons on real MetaWorld runs: a sweep over two policies compared episode for episode, the compare CLI
pairing and refusing, and several seeds merged into per-seed rates, their spread and a pooled rate."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy.stats import binomtest, fisher_exact

from lerobot_hydra.core.labels import split_label
from lerobot_hydra.results.stats import wilson_interval
from lerobot_hydra.sweeps.compare import compare_dirs
from lerobot_hydra.sweeps.compare import main as compare_main
from lerobot_hydra.sweeps.shards import main as merge_main
from lerobot_hydra.sweeps.shards import merge_sweep
from tests.conftest import ROOT, evaluate_here, read_episodes, read_json, run_eval
from tests.helpers.browser import dump_dom

# Two tasks, three episodes each, state observations: the expert succeeds within 150 steps, random rarely.
FAST = ("env.task=[reach-v3,push-v3]", "env.obs_type=state", "eval.n_episodes=3", "env.episode_length=150")
# In this process; 50 steps, in which the expert succeeds in some episodes only (it needs 40 to 70).
IN_PROCESS = (
    *FAST,
    "env.episode_length=50",
    "eval.batch_size=1",
    "eval.use_async_envs=false",
    "eval.max_episodes_rendered=0",
)


def discordant(baseline_dir: Path, candidate_dir: Path) -> tuple[int, int, int]:
    """(baseline only, candidate only, pairs), pairing the two runs' episodes.jsonl by task and episode."""
    cand = {(e["task_group"], e["task_id"], e["episode_index"]): e["success"] for e in read_episodes(candidate_dir)}
    pairs = [
        (e["success"], cand[(e["task_group"], e["task_id"], e["episode_index"])]) for e in read_episodes(baseline_dir)
    ]
    return sum(a and not b for a, b in pairs), sum(b and not a for a, b in pairs), len(pairs)


@pytest.mark.slow
def test_a_sweep_over_two_policies_prints_and_writes_the_paired_comparison(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_eval(*FAST, "policy=random,metaworld_expert", "eval.batch_size=1", out_dir=sweep, multirun=True)
    assert "policy=metaworld_expert vs baseline policy=random" in proc.stdout
    assert "paired (6 episode pairs with the same tasks, seeds and initial states; McNemar exact test)" in proc.stdout
    summary = read_json(sweep / "sweep_summary.json")
    assert [r["combination"] for r in summary["combinations"]] == ["policy=random", "policy=metaworld_expert"]
    assert summary["baseline"] == "policy=random"
    (comparison,) = summary["comparisons"]
    assert comparison["paired"] and comparison["candidate"] == "policy=metaworld_expert"
    assert [t["task_name"] for t in comparison["per_task"]] == ["reach-v3", "push-v3"]
    random_dir, expert_dir = ((sweep / r["eval_info"]).parent for r in summary["combinations"])
    baseline_only, candidate_only, pairs = discordant(random_dir, expert_dir)
    overall = comparison["overall"]
    assert (overall["n_baseline_only"], overall["n_candidate_only"], overall["n_baseline"]) == (
        baseline_only,
        candidate_only,
        pairs,
    )
    assert overall["diff_pc"] == pytest.approx(100 * (candidate_only - baseline_only) / pairs)
    assert overall["p_value"] == pytest.approx(binomtest(candidate_only, baseline_only + candidate_only).pvalue)
    low, high = overall["ci95_diff_pc"]
    assert low < overall["diff_pc"] <= high
    # The plot, and the sweep's page with its plots drawn, in a real browser.
    assert (sweep / "comparison_forest.png").stat().st_size > 5000
    dom = dump_dom(sweep / "report.html")
    assert "Compared with the baseline policy=random" in dom and "McNemar p" in dom
    assert dom.count('data-state="loaded"') == 3 and 'data-state="error"' not in dom  # heatmap, forest, steps
    assert all((sweep / r["eval_info"]).with_name("report.html").is_file() for r in summary["combinations"])

    # The baseline named on the merge command line; one that names nothing is refused with the choices.
    assert merge_main([str(sweep), "--baseline", "metaworld_expert"]) == 0
    (flipped,) = read_json(sweep / "sweep_summary.json")["comparisons"]
    assert flipped["baseline"] == "policy=metaworld_expert" and flipped["candidate"] == "policy=random"
    assert flipped["overall"]["diff_pc"] == pytest.approx(-overall["diff_pc"])
    assert merge_sweep(sweep, baseline="policy=nope").problems == [
        "the baseline 'policy=nope' names none of the sweep's configurations; name one of: policy=random, "
        "policy=metaworld_expert"
    ]


def test_a_baseline_that_names_no_swept_value_or_outside_a_sweep_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    proc = run_eval(
        "policy=random,metaworld_expert",
        "hydra.callbacks.merge_shards.baseline=expert",
        out_dir=tmp_path / "sweep",
        multirun=True,
        check=False,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("error: hydra.callbacks.merge_shards.baseline='expert': 'expert' is none of the sweep's values")
    )
    assert "policy=metaworld_expert" in proc.stderr and not (tmp_path / "sweep").exists()
    shared = run_eval(
        "policy=random,metaworld_expert",
        "env.task=reach-v3",
        "hydra.callbacks.merge_shards.baseline=reach-v3",
        out_dir=tmp_path / "sweep",
        multirun=True,
        check=False,
    )
    assert shared.returncode == 2 and "baseline='reach-v3': it names no swept value" in shared.stderr
    single = run_eval("hydra.callbacks.merge_shards.baseline=random", out_dir=tmp_path / "run", check=False)
    assert single.returncode == 2 and not (tmp_path / "run").exists()
    assert (
        single.stderr.strip()
        .splitlines()[-1]
        .startswith("error: hydra.callbacks.merge_shards.baseline names the baseline of a sweep's comparisons; add -m")
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real runs: random and the expert on seed 1000, the expert on seed 2000."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name, overrides in {
        "random": ("policy=random",),
        "expert": ("policy=metaworld_expert",),
        "expert_2000": ("policy=metaworld_expert", "seed=2000"),
    }.items():
        out[name] = root / name
        evaluate_here(out[name], *IN_PROCESS, *overrides)
    return out


def test_compare_cli_pairs_two_runs_of_the_same_episodes(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "comparison.json"
    assert compare_main([str(runs["random"]), str(runs["expert"]), "--paired", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"B ({runs['expert']}) vs baseline A ({runs['random']})")
    assert "McNemar p" in printed and "reach-v3" in printed and "overall" in printed
    comparison = read_json(out)
    baseline_only, candidate_only, pairs = discordant(runs["random"], runs["expert"])
    assert comparison["paired"] and comparison["overall"]["n_baseline"] == pairs == 6 and candidate_only > 0
    assert (comparison["overall"]["n_baseline_only"], comparison["overall"]["n_candidate_only"]) == (
        baseline_only,
        candidate_only,
    )


def test_compare_cli_refuses_to_pair_other_seeds_and_compares_them_unpaired(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_hydra.sweeps.compare",
            str(runs["expert"]),
            str(runs["expert_2000"]),
            "--paired",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: A and B cannot be paired: different seeds (reach-v3: seeds 1000-1002 in A, seeds 2000-2002 in B); "
        "run both with the same tasks, eval.n_episodes and seed, or compare them unpaired (without --paired)"
    ]
    assert compare_main([str(runs["random"]), str(runs["expert_2000"])]) == 0
    assert "unpaired: different seeds (reach-v3: seeds 1000-1002 in A" in capsys.readouterr().out
    comparison = compare_dirs(runs["random"], runs["expert_2000"])
    a, b = read_json(runs["random"] / "eval_info.json"), read_json(runs["expert_2000"] / "eval_info.json")
    wins_a, wins_b = (sum(e["success"] for e in info["episodes"]) for info in (a, b))
    assert comparison["test"] == "Fisher exact"
    assert comparison["overall"]["p_value"] == pytest.approx(
        fisher_exact([[wins_b, 6 - wins_b], [wins_a, 6 - wins_a]]).pvalue
    )
    assert compare_main([str(runs["random"] / "missing"), str(runs["expert"])]) == 2


def test_seeds_merge_into_per_seed_rates_their_spread_and_a_pooled_rate(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    evaluate_here(sweep / "seed=1000", *IN_PROCESS, "policy=metaworld_expert", label="seed=1000")
    for shard in (0, 1):  # one seed run as two shards
        shard_args = (f"eval.shard_id={shard}", "eval.num_shards=2")
        evaluate_here(
            sweep / "seed=2000" / f"shard_{shard}_of_2",
            *IN_PROCESS,
            "policy=metaworld_expert",
            "seed=2000",
            *shard_args,
            label="seed=2000",
        )
    evaluate_here(sweep / "seed=3000", *IN_PROCESS, "policy=metaworld_expert", "seed=3000", label="seed=3000")
    result = merge_sweep(sweep)
    assert result.ok, result.problems
    summary = read_json(sweep / "sweep_summary.json")
    (pool,) = summary["multi_seed"]
    assert pool["seeds"] == [1000, 2000, 3000] and summary["comparisons"] == []
    infos = [read_json(sweep / d / "eval_info.json") for d in ("seed=1000", "seed=2000", "seed=3000")]
    rates = [info["overall"]["pc_success"] for info in infos]
    assert [s["pc_success"] for s in pool["per_seed"]] == rates
    assert pool["std_pc_success"] == pytest.approx(statistics.stdev(rates)) and len(set(rates)) > 1
    wins = sum(e["success"] for info in infos for e in info["episodes"])
    assert pool["pooled"]["n_episodes"] == 18
    assert pool["pooled"]["pc_success"] == pytest.approx(100 * wins / 18)
    assert pool["pooled"]["ci95_pc_success"] == pytest.approx([100 * x for x in wilson_interval(wins, 18)])
    assert [t["task_name"] for t in pool["per_task"]] == ["reach-v3", "push-v3"]
    # The pooled seeds compare with themselves episode for episode.
    pooled = compare_dirs(sweep, sweep, require_paired=True)
    assert pooled["overall"]["n_baseline"] == 18 and pooled["overall"]["diff_pc"] == 0


def test_the_sweeps_wandb_run_logs_the_comparisons_and_the_multi_seed_pools(tmp_path: Path) -> None:
    import wandb

    from lerobot_hydra.publish.publish import publish_sweep
    from lerobot_hydra.sweeps.summary import sweep_summary
    from tests.loggers.test_wandb import logged, offline_runs
    from tests.results.test_stats import entry

    entries = [
        entry(f"policy={p},seed={s}", {"policy": p, "seed": s, "n_episodes": 4}, wins)
        for p, wins in (("a", 1), ("b", 3))
        for s in (1000, 2000)
    ]
    summary = sweep_summary(entries, tmp_path, "policy=a")
    config = {"logger": {"wandb": {"_target_": "lerobot_hydra.loggers.wandb.WandbLoggerConfig", "mode": "offline"}}}
    publish_sweep([(e.name, e.results) for e in entries], tmp_path, summary, config)
    wandb.teardown()  # an offline run's file is written in the background: flush it before reading it back
    (run,) = offline_runs(tmp_path)
    assert run["job_type"] == "sweep" and run["config"]["run"]["baseline"] == "policy=a"
    overall = summary["comparisons"][0]["overall"]
    assert run["summary"]["compare/policy=b/diff_pc"] == pytest.approx(overall["diff_pc"]) == pytest.approx(50.0)
    assert run["summary"]["compare/policy=b/p_value"] == pytest.approx(overall["p_value"])
    assert run["summary"]["multi_seed/policy=a/std_pc_success"] == pytest.approx(0.0)
    for key in ("comparisons", "multi_seed", "combinations"):
        assert logged(run, f"media/table/{key}", ".table.json")
    assert logged(run, "media/images/plots/comparison_forest", ".png")
    assert (tmp_path / "report.html").is_file()


def test_compare_cli_refuses_a_json_target_it_cannot_write_before_comparing(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = [str(runs["random"]), str(runs["expert"])]
    assert compare_main([*pair, "--json", str(tmp_path / "no" / "such" / "c.json")]) == 2
    out, err = capsys.readouterr()
    assert (
        out == ""
        and err
        == f"error: --json {tmp_path / 'no' / 'such' / 'c.json'}: the folder "
        f"{tmp_path / 'no' / 'such'} does not exist; create it or name another file\n"
    )
    assert compare_main([*pair, "--json", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert (
        out == "" and err.startswith(f"error: --json {tmp_path} is a directory; name a file") and err.count("\n") == 1
    )


@pytest.mark.parametrize(
    ("spec", "sweep", "refusal"),
    [
        ("seed=1000", {"policy": ["a", "b"], "seed": ["1000", "2000"]}, "'seed=1000' names a seed or a shard"),
        ("1000", {"policy": ["a", "b"], "seed": ["1000", "2000"]}, "'1000' names a seed or a shard"),
        ("eval.shard_id=0", {"policy": ["a", "b"], "eval.shard_id": ["0", "1"]}, "names a seed or a shard"),
        (
            "policy=random",
            {"policy": ["x", "random"], "env.episode_length": ["10", "20"]},
            "it matches 2 combinations (policy=random,env.episode_length=10; policy=random,env.episode_length=20)",
        ),
        ("10", {"env.episode_length": ["10", "20"], "eval.n_episodes": ["10", "5"]}, "it matches 3 combinations"),
    ],
)
def test_a_baseline_must_pick_one_configuration_of_the_swept_values(
    spec: str, sweep: dict[str, list[str]], refusal: str
) -> None:
    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.sweeps.baseline import check_baseline

    with pytest.raises(UserError, match="^hydra.callbacks.merge_shards.baseline=") as err:
        check_baseline(spec, sweep)
    assert refusal in str(err.value)
    assert "shard_id" not in str(err.value).split("e.g. one of: ")[1] and "seed=" not in str(err.value).split(": ")[-1]


def test_a_baseline_in_a_policy_by_seed_sweep_is_a_policy() -> None:
    from lerobot_hydra.sweeps.baseline import check_baseline

    sweep = {"policy": ["a", "random"], "seed": ["1000", "2000"], "eval.shard_id": ["0", "1"], "env.task": ["[x]"]}
    check_baseline("policy=random", sweep)
    check_baseline("random", sweep)
    check_baseline(
        "policy=random,env.episode_length=10", {"policy": ["x", "random"], "env.episode_length": ["10", "20"]}
    )


def test_the_merge_refuses_a_baseline_it_cannot_use_also_with_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep, seeds = tmp_path / "sweep", tmp_path / "seeds"
    for out, label in (
        (sweep / "random", "policy=random"),
        (sweep / "expert", "policy=metaworld_expert"),
        (seeds / "s1000", "seed=1000"),
        (seeds / "s2000", "seed=2000"),
    ):
        evaluate_here(out, *IN_PROCESS, "eval.n_episodes=1", *split_label(label), label=label)
    capsys.readouterr()
    assert merge_main([str(sweep), "--check", "--baseline", "nosuch"]) == 1
    err = capsys.readouterr().err
    named = "error: the baseline 'nosuch' names none of the sweep's configurations; name one of: "
    assert err.startswith(named) and err.count("\n") == 1, err
    assert sorted(err[len(named) :].strip().split(", ")) == ["policy=metaworld_expert", "policy=random"]
    assert merge_main([str(sweep), "--check", "--baseline", "metaworld_expert"]) == 0
    capsys.readouterr()
    for args in (["--check"], []):
        assert merge_main([str(seeds), *args, "--baseline", "1000"]) == 1
        assert capsys.readouterr().err == (
            "error: the baseline '1000' has nothing to compare with: the sweep holds one configuration; leave it out\n"
        )
    assert merge_main([str(sweep / "random"), "--baseline", "random"]) == 1
    assert "the baseline 'random' has nothing to compare with" in capsys.readouterr().err
