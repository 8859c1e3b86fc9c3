"""Broken envs and settings that cannot take effect are reported in one line, never as a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobot_hydra.core.errors import UserError
from tests.conftest import read_episodes, run_eval, run_here
from tests.helpers.counting_env import CountingEnvConfig

BROKEN = ("env=gym", "env.package=tests.helpers.broken_env", "policy=random", "eval.batch_size=1", "seed=1000")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


def test_on_error_stop_a_nan_reward_ends_the_run_in_one_line_keeping_the_finished_episodes(tmp_path: Path) -> None:
    args = (*BROKEN, "env.gym_id=NanReward-v0", "eval.n_episodes=3", "eval.on_error=stop")
    proc = run_eval(*args, out_dir=tmp_path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = error_lines(proc.stderr)
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: the env NanReward-v0 returned a reward of nan at step 2 of episode 1 of task")
    assert [r["episode_index"] for r in read_episodes(tmp_path)] == [0], "episode 0 finished before: it stays"


def test_a_success_key_the_env_never_reports_is_refused_at_the_first_step(tmp_path: Path) -> None:
    with pytest.raises(UserError) as refused:
        run_here(*BROKEN, "env.gym_id=NanReward-v0", "env.success_key=nosuch", "eval.n_episodes=1", out_dir=tmp_path)
    assert error_lines(str(refused.value)) == [
        "env.success_key=nosuch: NanReward-v0 has no such key in the info of its step; its keys: is_success"
    ]


@pytest.mark.parametrize("use_async", [True, False])
def test_an_exception_building_the_env_is_one_line_naming_the_setting(tmp_path: Path, use_async: bool) -> None:
    from tests.rollout.test_vector import run

    with pytest.raises(UserError) as err:
        run(CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1, camera="nosuch"), 2, batch=2, use_async=use_async)
    assert str(err.value) == (
        "env.camera=nosuch: building the Counting env failed: Current sensor for observable nosuch_image is invalid"
    )
    with pytest.raises(UserError) as err:
        run(CountingEnvConfig(log_dir=str(tmp_path), n_tasks=1, camera="x"), 2, batch=2, use_async=use_async)
    assert str(err.value) == (
        "building the Counting env failed: Current sensor for observable x_image is invalid; check the env.* settings"
    )


@pytest.mark.parametrize("batch", [1, 2])
def test_with_on_error_stop_a_simulator_exception_stops_the_run_in_one_line_and_full_error_shows_its_traceback(
    tmp_path: Path, batch: int
) -> None:
    # Seed 1000 + 1 is odd: episode 1 raises at its third step, in this process (batch 1) or in a worker (batch 2).
    args = (*BROKEN[:-2], f"eval.batch_size={batch}", "seed=1000", "env.gym_id=Unstable-v0", "eval.n_episodes=3")
    args = (*args, "eval.on_error=stop")
    proc = run_eval(*args, out_dir=tmp_path / "run", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert error_lines(proc.stderr) == [
        "error: the Unstable-v0 simulator raised at step 3 of episode 1 of task Unstable/0 Unstable-v0: "
        "FloatingPointError: mujoco: simulation unstable (qacc is NaN); a simulator fault, not a policy failure, "
        "so nothing was recorded for this episode and the run stopped (eval.on_error=stop; eval.on_error=record "
        "retries it once, then records it as an error episode and goes on); the episodes recorded so far are kept; "
        "HYDRA_FULL_ERROR=1 shows the traceback"
    ], proc.stderr
    recorded = read_episodes(tmp_path / "run") if (tmp_path / "run" / "episodes.jsonl").exists() else []
    assert 1 not in [r["episode_index"] for r in recorded], "never recorded as a failed episode"
    full = run_eval(*args, out_dir=tmp_path / "full", check=False, env={"HYDRA_FULL_ERROR": "1"})
    assert full.returncode == 2
    assert "Traceback" in full.stderr and 'in step\n    raise FloatingPointError("mujoco' in full.stderr, full.stderr
