"""The worked examples of the README and docs/, run as a new user would run them, shrunk to a small size (MetaWorld
state observations, two tasks, few and short episodes): their exit codes, the files they say are written and, where
a page shows output, the lines that matter (tables, decisions, errors) as the page shows them.

tests/config/test_docs.py checks that every eval.py command of the docs composes; here the examples run."""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lerobot_hydra.app.plan import main as plan_main
from tests.conftest import ROOT, read_json, run_eval

DOCS = ROOT / "docs"
TWO_TASKS = ("env.task=[reach-v3,push-v3]", "env.obs_type=state")


def block_after(page: Path, first: str) -> list[str]:
    """The lines of the fenced block of `page` whose first line starts with `first`, up to the fence."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    return lines[start:end]


def run_module(*args: str, cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """A console script as its module (`lerobot-hydra-plan` = `python -m lerobot_hydra.app.plan`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def test_readme_a_run_prints_its_table_and_writes_its_files(tmp_path: Path) -> None:
    """README "What a run prints", `env.task=easy eval.n_episodes=2` shrunk to two tasks."""
    out = tmp_path / "run"
    proc = run_eval(*TWO_TASKS, "env.episode_length=30", "eval.n_episodes=2", out_dir=out, config_videos=True)
    assert not (out / "videos").exists() and "experts' default films none" in (ROOT / "README.md").read_text()
    lines = proc.stdout.splitlines()
    first = lines.index(f"Evaluation results ({out / 'eval_info.json'})")
    assert lines[first + 1].split() == ["task", "episodes", "success", "95%", "CI"]
    rows = {line.split()[0]: line.split() for line in lines[first + 3 :] if line.startswith(("  ", "overall"))}
    assert rows["reach-v3"][1] == rows["push-v3"][1] == "2" and rows["overall"][1] == "4"
    assert f"Success plot: {out / 'success_by_task.png'}" in lines and f"Report: {out / 'report.html'}" in lines
    for name in ("episodes.jsonl", "eval_info.json", "report.html", "success_by_task.png"):
        assert (out / name).exists(), name
    assert glob.glob(str(out / "shard_*_of_*.json")), "the shard file (what a resume and a merge read)"


def _error_examples() -> list[tuple[str, str]]:
    """docs/outputs.md "Errors": each `$ python eval.py ...` line and the `error:` line the page shows under it."""
    block = block_after(DOCS / "outputs.md", "$ python eval.py env=metawrld")
    return [(block[i][len("$ python eval.py ") :], block[i + 1]) for i in range(0, len(block), 2)]


@pytest.mark.parametrize(("args", "shown"), _error_examples(), ids=[args for args, _ in _error_examples()])
def test_outputs_each_mistake_is_the_line_the_page_shows(tmp_path: Path, args: str, shown: str) -> None:
    proc = run_eval(*args.split(), out_dir=tmp_path / "out", check=False, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    if shown.endswith("..."):  # the page cuts a long list
        assert line.startswith(shown[: -len("...")].rstrip(" ,")), line
    else:
        assert line == shown
    assert not (tmp_path / "out").exists()


def test_sharding_a_sweep_dir_holds_the_layout_the_page_shows(tmp_path: Path) -> None:
    """docs/sharding.md "Layout of a sweep dir", over two shards in this process."""
    sweep = tmp_path / "sweep"
    shards = ("eval.shard_id=0,1", "env.task=reach-v3", "env.obs_type=state", "eval.n_episodes=2")
    run_eval(*shards, "env.episode_length=20", out_dir=sweep, multirun=True)
    layout = block_after(DOCS / "sharding.md", "<sweep dir>/")
    merged = next(line for line in layout if line.rstrip().endswith("the merge (one combination)"))
    shard = next(line for line in layout if "one shard job:" in line)
    for name in merged.split("the merge")[0].strip().split(", "):
        assert (sweep / name).is_file(), name
    (shard_dir,) = sweep.glob("**/shard_1_of_2")
    for name in shard.split("one shard job:")[1].strip().split(", "):
        name = name.replace("shard_2_of_4", "shard_1_of_2").rstrip("/")
        assert (shard_dir / name).exists(), name


class Still:
    """A policy meeting lerobot_hydra's Policy protocol: it never moves."""

    def reset(self, task: object, episode_seeds: list[int]) -> None:
        self.rows = len(episode_seeds)

    def select_action(self, batch: object) -> object:
        import numpy as np

        return np.zeros((self.rows, 4), np.float32)

    def fork(self) -> Still:
        return Still()

    def finish(self) -> None:
        pass


def test_training_the_api_names_its_run_dirs_as_the_page_says(tmp_path: Path) -> None:
    import lerobot_hydra

    overrides = ["env=metaworld", "env.task=reach-v3", "env.obs_type=state", "env.episode_length=5"]
    with lerobot_hydra.Evaluator([*overrides, "eval.n_episodes=1", "eval.batch_size=1"], out_dir=tmp_path) as ev:
        ev.evaluate(Still())
        ev.evaluate(Still(), step=7)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["eval_001", "step_000000007"]
    page = (DOCS / "training.md").read_text()
    assert all(f"`{name}`" in page for name in names), "docs/training.md names them"
    assert all((tmp_path / name / "eval_info.json").is_file() for name in names)


def _commands(text: str, program: str) -> set[str]:
    found = set()
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line.startswith(program):
            found.add(" ".join(line.split()))
    return found


def test_training_the_examples_docstring_shows_the_pages_commands() -> None:
    from examples import train_and_eval

    program = "python examples/train_and_eval.py"
    shown = _commands(train_and_eval.__doc__ or "", program)
    assert shown and shown <= _commands((DOCS / "training.md").read_text(), program)


def test_sequential_the_plan_prints_what_the_page_shows(capsys: pytest.CaptureFixture[str]) -> None:
    block = block_after(DOCS / "sequential.md", "$ lerobot-hydra-plan --baseline 90 --drop 5")
    assert block[0].split()[2:] == ["--baseline", "90", "--drop", "5"]
    assert plan_main(block[0].split()[2:]) == 0
    assert capsys.readouterr().out.splitlines() == block[1:]


def test_sequential_one_policy_stops_as_the_page_shows(tmp_path: Path) -> None:
    block = block_after(DOCS / "sequential.md", "$ python eval.py policy=metaworld_expert env.task=reach-v3")
    args = " ".join(line.rstrip("\\") for line in block[:2]).split()[3:]
    proc = run_eval(*args, out_dir=tmp_path / "run")
    logged = [line.split("] - ", 1)[-1] for line in proc.stdout.splitlines()]  # a log line, its prefix cut ("...")
    assert block[-1] in logged
    info = read_json(tmp_path / "run" / "eval_info.json")
    assert info["sequential"]["per_task"]["reach-v3"]["n_episodes"] == 10  # ten episodes instead of forty


RACE = DOCS / "sequential.md", "$ lerobot-hydra-sequential-compare --baseline policy=random"


@pytest.fixture(scope="module")
def race(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """docs/sequential.md's worked example as written (async workers), at most 20 episodes per task instead of 60
    (both tasks stop after 10 pairs either way), unfilmed."""
    out = tmp_path_factory.mktemp("race")
    block = block_after(*RACE)
    argv = " ".join(line.rstrip("\\") for line in block[:3]).split()[2:]
    argv = [str(out) if a == "runs/race" else a.strip('"') for a in argv]
    assert "eval.n_episodes=60" in argv
    argv[argv.index("eval.n_episodes=60")] = "eval.n_episodes=20"
    argv.append("eval.max_episodes_rendered=0")  # the random side would film 10 episodes per task
    return out, run_module("lerobot_hydra.app.paired_sequential", *argv, timeout=180)


def test_sequential_the_worked_example_decides_as_the_page_shows(race: tuple) -> None:
    out, proc = race
    assert proc.returncode == 0, proc.stderr
    decisions = block_after(*RACE)[3:]
    assert [line for line in proc.stdout.splitlines() if line.startswith(("reach-v3:", "push-v3:"))] == decisions
    assert (out / "sequential.json").is_file()
    for side in ("baseline", "candidate"):
        assert (out / side / "eval_info.json").is_file() and (out / side / "report.html").is_file()


def test_sequential_the_gate_reads_the_race_backwards_as_a_regression(race: tuple) -> None:
    out, _ = race
    block = block_after(DOCS / "sequential.md", "$ lerobot-hydra-compare runs/race/candidate runs/race/baseline")
    argv = block[0].split()[2:]
    proc = run_module("lerobot_hydra.sweeps.compare", *[a.replace("runs/race", str(out)) for a in argv])
    assert block[-2:] == ["$ echo $?", "1"] and proc.returncode == 1, proc.stderr
    shown = [line.replace("runs/race", str(out)) for line in block[1:-2]]
    assert proc.stdout.splitlines() + proc.stderr.splitlines() == shown


@pytest.mark.lerobot
@pytest.mark.slow
def test_recording_the_joined_dataset_loads_where_the_page_says(tmp_path: Path) -> None:
    run = tmp_path / "my-run"
    run_eval(*TWO_TASKS, "env.episode_length=10", "eval.n_episodes=1", "eval.recording=all", out_dir=run)
    page = DOCS / "recording.md"
    (one_liner,) = [line for line in page.read_text().splitlines() if "merge_recordings(" in line]
    code = one_liner.split('"')[1].replace("outputs/my-run-joined", str(tmp_path / "joined"))
    exec(code.replace("outputs/my-run", str(run)), {})  # the page's `python -c` one-liner, in this process
    load = re.search(r'`LeRobotDataset\("local/my-run", root="(outputs/my-run-joined/recording)"\)`', page.read_text())
    assert load is not None, "docs/recording.md says where the joined dataset loads from"
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    dataset = LeRobotDataset("local/my-run", root=load[1].replace("outputs/my-run-joined", str(tmp_path / "joined")))
    assert dataset.num_episodes == 2  # reach-v3 and push-v3, one episode each


@pytest.mark.lerobot
@pytest.mark.slow
def test_serving_a_standalone_server_logs_where_the_page_says(tmp_path: Path) -> None:
    from devkit.lerobot_checkpoints import tiny_act

    checkpoint = tiny_act(tmp_path / "act")
    assert "`./outputs/serve/<date>/<time>/`" in (DOCS / "serving.md").read_text()
    announce = tmp_path / "server.json"
    args = ["policy=act", f"policy.path={checkpoint}", "env.task=reach-v3", "env.obs_type=state", "device=cpu"]
    args += ["serve.host=127.0.0.1", f"serve.announce={announce}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "lerobot_hydra.app.serve", *args], cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 240
        while not announce.exists() and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert announce.exists(), "the server did not listen"
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
    (log,) = glob.glob(str(tmp_path / "outputs" / "serve" / "*" / "*" / "serve.log"))
    assert Path(log).stat().st_size > 0
