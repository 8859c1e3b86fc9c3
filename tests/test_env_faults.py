"""Broken envs and settings that cannot take effect are reported in one line, never as a traceback."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import read_episodes, run_eval

BROKEN = ("env=gym", "env.package=tests.broken_env", "policy=random", "eval.batch_size=1", "seed=1000")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_a_nan_reward_stops_the_run_in_one_line_and_keeps_the_finished_episodes(tmp_path: Path) -> None:
    proc = run_eval(*BROKEN, "env.gym_id=NanReward-v0", "eval.n_episodes=3", out_dir=tmp_path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: the env NanReward-v0 returned a reward of nan at step 2 of episode 1 of task")
    assert [r["episode_index"] for r in read_episodes(tmp_path)] == [0], "episode 0 finished before: it stays"
