"""Every pair of run modes composes, or is refused in one line naming both settings, before anything runs.

The modes: a plain run, static shards, dynamic claims, sequential stopping in one process, a sequential sweep, a
remote policy, recording, the Python API, a resume after SIGKILL, and two runs at once in one process (two
`Evaluator`s, `evaluate` inside one, the paired comparison's sides). `PAIRS` has a row for each of the 45 pairs:
the test that shows the pair gives the episodes of the plain run with the same settings (successes and steps
identical, rewards to 1e-5 relative; a recording holding exactly the episodes of episodes.jsonl), here or elsewhere
in the suite, or the reason it is refused or is no pair. All runs: MetaWorld state, two tasks, 10 steps an episode,
each step sleeping 20 ms (so that a run can be killed mid-way), random actions or a tiny ACT for a served policy,
two sub-envs stepped by worker processes (`eval.batch_size=2`, async): every mode allows workers, and every row's
test runs with them."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lerobot_hydra.core.errors import UserError
from tests.conftest import ROOT, _no_leftovers, evaluate_here, read_episodes, read_json, run_eval
from tests.store.test_store import kill_group, start_eval, wait_for

MODES = ("plain", "static", "dynamic", "sequential", "sweep", "remote", "recording", "api", "resume", "twice")
ENV = [
    "env._target_=tests.helpers.slow_shard_env.SlowShardMetaWorldConfig",
    "+env.step_sleep_s=0.02",
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=state",
    "env.episode_length=10",
    "device=cpu",
    "eval.max_episodes_rendered=0",
    "eval.batch_size=2",
]
PLAIN = ["eval.n_episodes=4"]
# Every episode fails: each task stops `below` 50% after 8 episodes, 4 rounds of 2, before the maximum of 10.
SEQUENTIAL = [
    "eval.n_episodes=10",
    "eval.sequential.stop=threshold",
    "eval.sequential.threshold=50",
    "eval.sequential.round=2",
]
RANDOM = ["policy=random"]
SHARDS = ["eval.shard_id=0,1"]
# A claimed block is run by as many sub-envs as it has episodes (at most the batch), and a block is 1/8 of what
# remains of its shard's region (2 shards; here a region is one task's episodes of the run, or of the round): with
# more than 8 the first blocks hold 2, and the pool with workers they start runs the later 1-episode blocks too.
# With PLAIN's 4, every block is 1 episode, stepped in-process (docs/work-queue.md).
DYNAMIC = ["eval.n_episodes=10", "eval.claims=dynamic"]
# Rounds of 10 for dynamic claims: every task stops below 30% after 2 rounds, before the maximum of 30.
SEQUENTIAL_DYNAMIC = [
    "eval.n_episodes=30",
    "eval.sequential.stop=threshold",
    "eval.sequential.threshold=30",
    "eval.sequential.round=10",
    "eval.claims=dynamic",
]
ONE_POLICY_SWEEP = [*SHARDS, "hydra/sweeper=sequential"]


def outcome(r: dict[str, Any]) -> tuple:
    return (r["task_group"], r["task_id"], r["episode_index"], r["seed"], r["success"], r["steps"], r["init_state_id"])


def same_episodes(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert sorted(map(outcome, got)) == sorted(map(outcome, want))
    rewards = {outcome(r): r["sum_reward"] for r in want}
    for r in got:
        assert math.isclose(r["sum_reward"], rewards[outcome(r)], rel_tol=1e-5, abs_tol=1e-9)


@pytest.fixture(scope="module")
def act(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    pytest.importorskip("lerobot")
    from devkit.lerobot_checkpoints import tiny_act

    return ["policy=act", f"policy.path={tiny_act(tmp_path_factory.mktemp('act') / 'act')}"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The plain run of each setting (policy, sequential or not), computed once."""
    cache: dict[tuple[str, ...], dict[str, Any]] = {}

    def run(*overrides: str) -> dict[str, Any]:
        if overrides not in cache:
            cache[overrides] = evaluate_here(tmp_path_factory.mktemp("reference"), *ENV, *overrides)
        return cache[overrides]

    yield run


@pytest.fixture
def server(tmp_path: Path, act: list[str]) -> Iterator[Any]:
    """Our policy server for `shards` clients, in a thread of this process: yields start(shards) -> announce path."""
    from tests.serving.test_policy_server import served

    started: list[Any] = []

    def start(shards: int) -> tuple[Any, Path]:
        context = served(tmp_path, *act, f"serve.shards={shards}", env=ENV[2:5] + ["device=cpu"])
        started.append(context)
        return context.__enter__()

    yield start
    for context in started:
        context.__exit__(None, None, None)


def remote(announce: Path) -> list[str]:
    return ["policy=remote", f"policy.url={announce}", "policy.connect_timeout_s=30"]


def recorded_episodes(run_dirs: list[Path], out: Path, records: list[dict[str, Any]]) -> None:
    """The recordings of `run_dirs`, joined, hold exactly the episodes of `records`, step for step."""
    from lerobot_hydra.publish.recording_parts import merge_recordings
    from tests.rollout.test_recording import assert_matches, load

    root = merge_recordings(run_dirs, out)
    assert root is not None
    assert_matches(load(root), records)


# --- pairs run here ---------------------------------------------------------------------------------------------


@pytest.mark.lerobot
def test_remote_x_sequential(tmp_path: Path, server: Any, act: list[str], reference: Any) -> None:
    """The reproduction of issue 33: the served policy is told the run completed once, after its last round."""
    policy_server, announce = server(1)
    info = evaluate_here(tmp_path / "run", *ENV, *SEQUENTIAL, *remote(announce))
    want = reference(*act, *SEQUENTIAL)
    same_episodes(info["episodes"], want["episodes"])
    assert info["sequential"]["per_task"] == want["sequential"]["per_task"]
    assert {t["n_episodes"] for t in info["sequential"]["per_task"].values()} == {8}  # 4 rounds, stopped early
    assert policy_server.stopped.wait(30), "the server stops once its one client's run completed"
    assert policy_server.stats.snapshot()["clients_done"] == 1


@pytest.mark.lerobot
def test_remote_x_plain(tmp_path: Path, server: Any, act: list[str], reference: Any) -> None:
    policy_server, announce = server(1)
    info = evaluate_here(tmp_path / "run", *ENV, *PLAIN, *remote(announce))
    same_episodes(info["episodes"], reference(*act, *PLAIN)["episodes"])
    assert policy_server.stopped.wait(30) and policy_server.stats.snapshot()["clients_done"] == 1


@pytest.mark.lerobot
@pytest.mark.parametrize("claims", [PLAIN, DYNAMIC], ids=["static", "dynamic"])
def test_remote_x_shards(tmp_path: Path, server: Any, act: list[str], reference: Any, claims: list[str]) -> None:
    policy_server, announce = server(2)
    run_eval(*ENV, *claims, *remote(announce), *SHARDS, out_dir=tmp_path, multirun=True)
    same_episodes(read_json(tmp_path / "eval_info.json")["episodes"], reference(*act, claims[0])["episodes"])
    assert policy_server.stopped.wait(30) and policy_server.stats.snapshot()["clients_done"] == 2


@pytest.mark.lerobot
def test_remote_x_sequential_sweep(tmp_path: Path, server: Any, act: list[str], reference: Any) -> None:
    """Each shard job runs every round; only its last launch tells the server its run completed."""
    policy_server, announce = server(2)
    run_eval(*ENV, *SEQUENTIAL, *remote(announce), *ONE_POLICY_SWEEP, out_dir=tmp_path, multirun=True)
    merged = read_json(tmp_path / "eval_info.json")
    want = reference(*act, *SEQUENTIAL)
    same_episodes(merged["episodes"], want["episodes"])
    assert merged["sequential"]["per_task"] == want["sequential"]["per_task"]
    assert policy_server.stopped.wait(30) and policy_server.stats.snapshot()["clients_done"] == 2


@pytest.mark.lerobot
def test_remote_x_recording(tmp_path: Path, server: Any, act: list[str], reference: Any) -> None:
    _, announce = server(1)
    info = evaluate_here(tmp_path / "run", *ENV, *PLAIN, *remote(announce), "eval.recording=all")
    same_episodes(info["episodes"], reference(*act, *PLAIN)["episodes"])
    recorded_episodes([tmp_path / "run"], tmp_path / "joined", info["episodes"])


@pytest.mark.lerobot
def test_remote_x_resume(tmp_path: Path, server: Any, act: list[str], reference: Any) -> None:
    _, announce = server(2)  # the killed client never says it completed; the rerun does
    killed_then_resumed(tmp_path / "run", *ENV, *PLAIN, *remote(announce))
    same_episodes(read_episodes(tmp_path / "run"), reference(*act, *PLAIN)["episodes"])


@pytest.mark.lerobot
def test_recording_x_dynamic_claims(tmp_path: Path, reference: Any) -> None:
    run_eval(*ENV, *DYNAMIC, *RANDOM, "eval.recording=all", *SHARDS, out_dir=tmp_path, multirun=True)
    merged = read_json(tmp_path / "eval_info.json")
    same_episodes(merged["episodes"], reference(DYNAMIC[0], *RANDOM)["episodes"])
    from tests.rollout.test_recording import assert_matches, load

    assert_matches(load(tmp_path / "recording"), merged["episodes"])


@pytest.mark.lerobot
def test_recording_x_sequential(tmp_path: Path, reference: Any) -> None:
    info = evaluate_here(tmp_path / "run", *ENV, *SEQUENTIAL, *RANDOM, "eval.recording=all")
    same_episodes(info["episodes"], reference(*SEQUENTIAL, *RANDOM)["episodes"])
    recorded_episodes([tmp_path / "run"], tmp_path / "joined", info["episodes"])


@pytest.mark.lerobot
def test_recording_x_sequential_sweep(tmp_path: Path, reference: Any) -> None:
    run_eval(*ENV, *SEQUENTIAL, *RANDOM, "eval.recording=all", *ONE_POLICY_SWEEP, out_dir=tmp_path, multirun=True)
    merged = read_json(tmp_path / "eval_info.json")
    same_episodes(merged["episodes"], reference(*SEQUENTIAL, *RANDOM)["episodes"])
    from tests.rollout.test_recording import assert_matches, load

    assert_matches(load(tmp_path / "recording"), merged["episodes"])  # the merge joined every shard's parts


@pytest.mark.lerobot
def test_recording_x_api(tmp_path: Path, reference: Any) -> None:
    results = api_run(tmp_path, [*ENV, *PLAIN, "eval.recording=all"], out_dir=tmp_path / "api")
    same_episodes(results, reference(*PLAIN, *RANDOM)["episodes"])
    recorded_episodes([tmp_path / "api" / "eval_001"], tmp_path / "joined", results)


def test_plain_x_resume(tmp_path: Path, reference: Any) -> None:
    killed_then_resumed(tmp_path / "run", *ENV, *PLAIN, *RANDOM)
    same_episodes(read_episodes(tmp_path / "run"), reference(*PLAIN, *RANDOM)["episodes"])


@pytest.mark.parametrize("claims", [PLAIN, DYNAMIC], ids=["static", "dynamic"])
def test_shards_x_resume(tmp_path: Path, reference: Any, claims: list[str]) -> None:
    """Shard 0 is killed (holding claims: shard 1, started later, takes them over); its rerun completes it. Shard 1
    runs uninterrupted, so the merge also shows the plain x static and plain x dynamic rows."""
    shard = [*ENV, *claims, *RANDOM, "eval.num_shards=2"]
    # Killed after its first batch: of its 4 episodes (static) or of all 20, shard 1 not yet started (dynamic).
    killed_mid_run(tmp_path / "s0", [*shard, "eval.shard_id=0"], after=2, total=4 if claims == PLAIN else 20)
    for k in (1, 0):
        evaluate_here(tmp_path / f"s{k}", *shard, f"eval.shard_id={k}")
    merged = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.shards", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr
    same_episodes(read_json(tmp_path / "eval_info.json")["episodes"], reference(claims[0], *RANDOM)["episodes"])


def test_sequential_x_dynamic_claims(tmp_path: Path, reference: Any) -> None:
    """Rounds of 10, so that blocks of 2 start workers (`DYNAMIC`)."""
    run_eval(*ENV, *SEQUENTIAL_DYNAMIC, *RANDOM, *ONE_POLICY_SWEEP, out_dir=tmp_path, multirun=True)
    merged = read_json(tmp_path / "eval_info.json")
    want = reference(*SEQUENTIAL_DYNAMIC[:-1], *RANDOM)
    same_episodes(merged["episodes"], want["episodes"])
    assert merged["sequential"]["per_task"] == want["sequential"]["per_task"]
    assert {t["n_episodes"] for t in merged["sequential"]["per_task"].values()} == {20}  # 2 rounds, stopped early


def test_sequential_sweep_x_resume(tmp_path: Path, reference: Any) -> None:
    args = [*ENV, *SEQUENTIAL, *RANDOM, *ONE_POLICY_SWEEP, f"hydra.sweep.dir={tmp_path}"]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "eval.py"), "-m", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: len(episodes_under(tmp_path)) >= 6, proc)  # in round 2
    finally:
        kill_group(proc)
    run_eval(*args[:-1], out_dir=tmp_path, multirun=True)
    merged = read_json(tmp_path / "eval_info.json")
    want = reference(*SEQUENTIAL, *RANDOM)
    same_episodes(merged["episodes"], want["episodes"])
    assert merged["sequential"]["per_task"] == want["sequential"]["per_task"]


def test_sequential_x_api(tmp_path: Path, reference: Any) -> None:
    import lerobot_hydra

    with _no_leftovers(), lerobot_hydra.Evaluator([*ENV, *SEQUENTIAL]) as evaluator:
        results = evaluator.evaluate(random_policy())
    want = reference(*SEQUENTIAL, *RANDOM)
    same_episodes([r.to_dict() for r in results.episodes], want["episodes"])
    assert dict(results.sequential or {})["per_task"] == want["sequential"]["per_task"]


def test_static_shards_x_api(tmp_path: Path, reference: Any) -> None:
    got = []
    for shard in (0, 1):
        got += api_run(tmp_path, [*ENV, *PLAIN, "eval.num_shards=2", f"eval.shard_id={shard}"])
    same_episodes(got, reference(*PLAIN, *RANDOM)["episodes"])


def test_api_x_resume(tmp_path: Path, reference: Any) -> None:
    """A training script killed mid-evaluation: run again, the evaluation of the same step resumes its run dir."""
    script = tmp_path / "train.py"
    script.write_text(API_SCRIPT.format(overrides=[*ENV, *PLAIN], out_dir=str(tmp_path / "evals")))
    command = [sys.executable, str(script)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the script imports this module's random_policy
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    run_dir = tmp_path / "evals" / "step_000001000"
    try:
        wait_for(lambda: len(episodes_under(run_dir)) >= 2, proc)
    finally:
        kill_group(proc)
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    same_episodes(read_episodes(run_dir), reference(*PLAIN, *RANDOM)["episodes"])


# --- refused pairs ------------------------------------------------------------------------------------------------


def test_dynamic_claims_x_api_is_refused() -> None:
    import lerobot_hydra

    with pytest.raises(UserError, match=r"eval.claims=dynamic .* the Python API"):
        lerobot_hydra.Evaluator([*ENV, "eval.claims=dynamic", "eval.num_shards=2"])


def test_remote_x_api_is_refused() -> None:
    import lerobot_hydra

    with pytest.raises(UserError, match=r"'policy=remote': the policy is the object you pass"):
        lerobot_hydra.Evaluator([*ENV, "policy=remote"])


def test_sequential_x_shards_in_one_process_is_refused(tmp_path: Path) -> None:
    for shards in (["eval.num_shards=2"], ["eval.num_shards=2", "eval.claims=dynamic"]):
        proc = run_eval(*ENV, *SEQUENTIAL, *RANDOM, *shards, out_dir=tmp_path, check=False)
        assert proc.returncode == 2
        assert "eval.sequential.stop with eval.num_shards > 1 needs hydra/sweeper=sequential" in proc.stderr


# --- the table --------------------------------------------------------------------------------------------------

HERE = "tests/run/test_mode_pairs.py"
SEQ_RUNS, SEQ_SWEEP = "tests/results/test_sequential_runs.py", "tests/sweeps/test_sequential_sweep.py"
RECORDING, RECORDING_KILLS = "tests/rollout/test_recording.py", "tests/rollout/test_recording_kills.py"
TWICE = "tests/run/test_two_runs.py"
ROWS: dict[tuple[str, str], str] = {
    ("plain", "static"): f"{HERE}::test_shards_x_resume",
    ("plain", "dynamic"): f"{HERE}::test_shards_x_resume",
    ("plain", "sequential"): f"{SEQ_RUNS}::{'test_the_stopping_point_and_records_do_not_depend_on_batch_size_workers'}",
    ("plain", "sweep"): f"{SEQ_SWEEP}::test_one_policy_stopping_over_shards_matches_the_single_process_run",
    ("plain", "remote"): f"{HERE}::test_remote_x_plain",
    ("plain", "recording"): f"{RECORDING}::test_a_recorded_run_loads_back_with_lerobot_and_matches_its_episode_records",
    ("plain", "api"): "tests/app/test_api.py::test_a_live_policy_gives_the_episodes_eval_py_gives_its_checkpoint",
    ("plain", "resume"): f"{HERE}::test_plain_x_resume",
    ("static", "dynamic"): "no pair: eval.claims is static or dynamic, two values of one setting",
    ("static", "sequential"): f"refused: {HERE}::test_sequential_x_shards_in_one_process_is_refused",
    ("static", "sweep"): f"{SEQ_SWEEP}::test_one_policy_stopping_over_shards_matches_the_single_process_run",
    ("static", "remote"): f"{HERE}::test_remote_x_shards",
    ("static", "recording"): f"{RECORDING_KILLS}::test_a_static_shard_killed_and_resumed_records_every_episode_once",
    ("static", "api"): f"{HERE}::test_static_shards_x_api",
    ("static", "resume"): f"{HERE}::test_shards_x_resume",
    ("dynamic", "sequential"): f"refused: {HERE}::test_sequential_x_shards_in_one_process_is_refused",
    ("dynamic", "sweep"): f"{HERE}::test_sequential_x_dynamic_claims",
    ("dynamic", "remote"): f"{HERE}::test_remote_x_shards",
    ("dynamic", "recording"): f"{HERE}::test_recording_x_dynamic_claims",
    ("dynamic", "api"): f"refused: {HERE}::test_dynamic_claims_x_api_is_refused",
    ("dynamic", "resume"): f"{HERE}::test_shards_x_resume",
    ("sequential", "sweep"): "no pair: sequential stopping runs its rounds in one process or in a sweep's jobs",
    ("sequential", "remote"): f"{HERE}::test_remote_x_sequential",
    ("sequential", "recording"): f"{HERE}::test_recording_x_sequential",
    ("sequential", "api"): f"{HERE}::test_sequential_x_api",
    ("sequential", "resume"): f"{SEQ_RUNS}::test_the_stopping_point_and_records_do_not_depend_on_batch_size_workers",
    ("sweep", "remote"): f"{HERE}::test_remote_x_sequential_sweep",
    ("sweep", "recording"): f"{HERE}::test_recording_x_sequential_sweep",
    ("sweep", "api"): "no pair: the Python API evaluates in its caller's process, which runs no sweep",
    ("sweep", "resume"): f"{HERE}::test_sequential_sweep_x_resume",
    ("remote", "recording"): f"{HERE}::test_remote_x_recording",
    ("remote", "api"): f"refused: {HERE}::test_remote_x_api_is_refused",
    ("remote", "resume"): f"{HERE}::test_remote_x_resume",
    ("recording", "api"): f"{HERE}::test_recording_x_api",
    ("recording", "resume"): f"{RECORDING_KILLS}::test_a_static_shard_killed_and_resumed_records_every_episode_once",
    ("api", "resume"): f"{HERE}::test_api_x_resume",
    ("twice", "plain"): f"{TWICE}::test_two_evaluators_and_evaluate_inside_one_give_the_plain_runs_episodes",
    ("twice", "static"): f"{TWICE}::test_two_evaluators_and_evaluate_inside_one_give_the_plain_runs_episodes",
    ("twice", "dynamic"): f"refused: {HERE}::test_dynamic_claims_x_api_is_refused",
    ("twice", "sequential"): f"{TWICE}::test_the_paired_comparisons_sides_with_workers_give_their_plain_runs",
    ("twice", "sweep"): "no pair: a sweep's jobs each run one run, in a process of their own",
    ("twice", "remote"): f"{TWICE}::test_the_paired_comparison_with_a_served_side",
    ("twice", "recording"): f"{TWICE}::test_two_evaluators_recording_at_once_record_their_own_episodes",
    ("twice", "api"): f"{TWICE}::test_two_evaluators_and_evaluate_inside_one_give_the_plain_runs_episodes",
    ("twice", "resume"): f"{TWICE}::test_a_killed_paired_comparison_resumes_both_sides",
}
PAIRS = {frozenset(pair): row for pair, row in ROWS.items()}


def test_every_pair_of_modes_has_a_row_naming_a_test_that_exists() -> None:
    assert set(PAIRS) == {frozenset(p) for p in itertools.combinations(MODES, 2)}
    for pair, row in PAIRS.items():
        if row.startswith("no pair: "):
            continue
        path, name = row.removeprefix("refused: ").split("::")
        source = (ROOT / path).read_text()
        assert f"def {name}" in source, f"{sorted(pair)}: {row} names no test (a test's name, or its start)"


# --- helpers --------------------------------------------------------------------------------------------------------

API_SCRIPT = textwrap.dedent(
    """
    from lerobot_hydra import Evaluator
    from tests.run.test_mode_pairs import random_policy

    if __name__ == "__main__":
        with Evaluator({overrides!r}, out_dir={out_dir!r}) as evaluator:
            evaluator.evaluate(random_policy(), step=1000)
    """
)


def random_policy() -> Any:
    """What `policy=random` builds for these runs, as a training loop would hand it over."""
    from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
    from lerobot_hydra.policies.random import RandomPolicyConfig

    return RandomPolicyConfig().build(MetaWorldEnvConfig(task="reach-v3", obs_type="state"), "cpu")


def api_run(tmp_path: Path, overrides: list[str], out_dir: Path | None = None) -> list[dict[str, Any]]:
    import lerobot_hydra

    with _no_leftovers(), lerobot_hydra.Evaluator(overrides, out_dir=out_dir) as evaluator:
        return [r.to_dict() for r in evaluator.evaluate(random_policy()).episodes]


def episodes_under(root: Path) -> list[str]:
    return [line for path in root.rglob("episodes.jsonl") for line in path.read_text().splitlines()]


def killed_then_resumed(run_dir: Path, *overrides: str) -> None:
    """eval.py SIGKILLed once it recorded 3 of its 8 episodes, then run again to the end."""
    killed_mid_run(run_dir, overrides, after=3, total=8)
    evaluate_here(run_dir, *overrides)


def killed_mid_run(run_dir: Path, overrides: Sequence[str], after: int, total: int) -> None:
    """eval.py SIGKILLed once it recorded `after` episodes; it had not recorded all its `total` (each step sleeps)."""
    proc = start_eval(run_dir, *overrides)
    try:
        wait_for(lambda: len(episodes_under(run_dir)) >= after, proc)
    finally:
        kill_group(proc)
    assert len(episodes_under(run_dir)) < total, "the kill should land mid-run"
