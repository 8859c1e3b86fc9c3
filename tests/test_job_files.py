"""A process refused by a run dir's lock or identity check leaves that run's `.hydra/` files and job log alone."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_eval
from tests.test_store import hold_lock

SMALL = ("env.obs_type=state", "policy=random", "eval.n_episodes=2", "env.episode_length=10", "eval.batch_size=1")


def saved_files(run_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in [*(run_dir / ".hydra").iterdir(), run_dir / "eval.log"]}


def test_a_refused_run_leaves_the_saved_overrides_and_the_job_log_alone(tmp_path: Path) -> None:
    from lerobot_hydra.sinks.shard_file import rerun_in_place

    run_dir = tmp_path / "run"
    run_eval("env.task=[reach-v3]", *SMALL, out_dir=run_dir)
    before = saved_files(run_dir)
    assert set(before) == {"config.yaml", "hydra.yaml", "overrides.yaml", "eval.log"}
    assert "env.task=[reach-v3]" in before["overrides.yaml"] and "reach-v3" in before["config.yaml"]
    command = rerun_in_place(run_dir, 0, 1)
    assert "env.task=[reach-v3]" in command

    # Refused by the identity check: a resume with another configuration.
    other = run_eval("env.task=[push-v3]", *SMALL, out_dir=run_dir, check=False)
    assert other.returncode == 2 and "holds results of a different configuration" in other.stderr, other.stderr
    # Refused by the lock: another process holds the dir.
    holder = hold_lock(run_dir, "an evaluation")
    try:
        locked = run_eval("env.task=[push-v3]", *SMALL, "seed=7", out_dir=run_dir, check=False)
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert locked.returncode == 2 and "is in use by an evaluation" in locked.stderr, locked.stderr

    assert saved_files(run_dir) == before
    assert rerun_in_place(run_dir, 0, 1) == command
