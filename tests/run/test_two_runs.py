"""Two runs at once in one process (issue 46): two `Evaluator`s, `evaluate` inside an `Evaluator`, and the paired
comparison's two sides, each with worker processes. They share multiprocessing's forkserver: the first to close
must not stop it under the other's live workers (it hung for ever in `os.waitpid`). Every run is bounded in a
subprocess, so that a hang fails the test in minutes, and each gives the episodes of the plain run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, read_episodes, read_json
from tests.run.test_mode_pairs import ENV, PLAIN, RANDOM, act, episodes_under, reference, remote, same_episodes, server
from tests.store.test_store import kill_group, wait_for

__all__ = ["act", "reference", "server"]  # fixtures used here

BOUND_S = 240  # a run of these takes seconds; a hang is caught well before pytest's own limit
PAIRED = ["eval.n_episodes=4", "eval.sequential.round=2"]

SCRIPT = textwrap.dedent(
    """
    import json
    import lerobot_hydra
    from lerobot_hydra import Evaluator
    from tests.run.test_mode_pairs import random_policy

    if __name__ == "__main__":
        overrides, out, answer = {overrides!r}, {out!r}, {answer!r}
        policy, got = random_policy(), {{}}

        def records(results):
            return [r.to_dict() for r in results.episodes]

        with Evaluator(overrides) as first, Evaluator(overrides) as second:  # the second closes first
            got["first"] = records(first.evaluate(policy))
            got["second"] = records(second.evaluate(policy))
            got["inside"] = records(lerobot_hydra.evaluate(policy, overrides))  # while both keep their workers
        shards = [[*overrides, "eval.num_shards=2", f"eval.shard_id={{k}}"] for k in (0, 1)]
        with Evaluator(shards[0]) as zero, Evaluator(shards[1]) as one:
            got["shards"] = records(zero.evaluate(policy)) + records(one.evaluate(policy))
        if out:
            with Evaluator([*overrides, "eval.recording=all"], out_dir=out + "/a") as a:
                with Evaluator([*overrides, "eval.recording=all"], out_dir=out + "/b") as b:
                    got["recorded_a"] = records(a.evaluate(policy))
                    got["recorded_b"] = records(b.evaluate(policy))
        with open(answer, "w") as f:
            json.dump(got, f)
    """
)


def bounded(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=BOUND_S)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"two runs in one process hung past {BOUND_S} s: {(err.stderr or b'')[-2000:]!r}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def api_script(tmp_path: Path, out: str) -> dict[str, list[dict[str, Any]]]:
    script = tmp_path / "two_evaluators.py"
    answer = tmp_path / "episodes.json"
    script.write_text(SCRIPT.format(overrides=[*ENV, *PLAIN], out=out, answer=str(answer)))
    bounded([sys.executable, str(script)], tmp_path)
    return json.loads(answer.read_text())


def test_two_evaluators_and_evaluate_inside_one_give_the_plain_runs_episodes(tmp_path: Path, reference: Any) -> None:
    got = api_script(tmp_path, "")
    want = reference(*PLAIN, *RANDOM)["episodes"]
    for name in ("first", "second", "inside", "shards"):
        same_episodes(got[name], want)


@pytest.mark.lerobot
def test_two_evaluators_recording_at_once_record_their_own_episodes(tmp_path: Path, reference: Any) -> None:
    from tests.run.test_mode_pairs import recorded_episodes

    got = api_script(tmp_path, str(tmp_path / "api"))
    for side in ("a", "b"):
        same_episodes(got[f"recorded_{side}"], reference(*PLAIN, *RANDOM)["episodes"])
        recorded_episodes([tmp_path / "api" / side / "eval_001"], tmp_path / f"joined_{side}", got[f"recorded_{side}"])


def paired_command(out: Path, baseline: list[str], candidate: list[str]) -> list[str]:
    sides = ["--baseline", *baseline, "--candidate", *candidate]
    tests = ["--detect", "30", "--discordance", "40", "--out", str(out)]
    return [sys.executable, "-m", "lerobot_hydra.app.paired_sequential", *sides, *tests, "--", *ENV, *PAIRED]


def test_the_paired_comparisons_sides_with_workers_give_their_plain_runs(tmp_path: Path, reference: Any) -> None:
    proc = bounded(paired_command(tmp_path, RANDOM, ["policy=metaworld_expert"]), tmp_path)
    assert "reach-v3:" in proc.stdout and (tmp_path / "sequential.json").exists()
    same_episodes(read_episodes(tmp_path / "baseline"), reference(*PLAIN, *RANDOM)["episodes"])
    same_episodes(read_episodes(tmp_path / "candidate"), reference(*PLAIN, "policy=metaworld_expert")["episodes"])


@pytest.mark.lerobot
def test_the_paired_comparison_with_a_served_side(tmp_path: Path, server: Any, act: list[str], reference: Any) -> None:
    _, announce = server(1)
    bounded(paired_command(tmp_path, remote(announce), RANDOM), tmp_path)
    same_episodes(read_episodes(tmp_path / "baseline"), reference(*act, *PLAIN)["episodes"])
    same_episodes(read_episodes(tmp_path / "candidate"), reference(*PLAIN, *RANDOM)["episodes"])


def test_a_killed_paired_comparison_resumes_both_sides(tmp_path: Path, reference: Any) -> None:
    command = paired_command(tmp_path, RANDOM, ["policy=metaworld_expert"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        wait_for(lambda: len(episodes_under(tmp_path)) >= 3, proc)
    finally:
        kill_group(proc)
    bounded(command, tmp_path)
    assert read_json(tmp_path / "sequential.json")["per_task"]
    same_episodes(read_episodes(tmp_path / "baseline"), reference(*PLAIN, *RANDOM)["episodes"])
    same_episodes(read_episodes(tmp_path / "candidate"), reference(*PLAIN, "policy=metaworld_expert")["episodes"])
