"""A process refused by a run dir's lock or identity check leaves that run's `.hydra/` files and job log alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobot_hydra.core.errors import UserError
from tests.conftest import run_here
from tests.store.test_store import hold_lock

SMALL = ("env.obs_type=state", "policy=random", "eval.n_episodes=2", "env.episode_length=10", "eval.batch_size=1")


def saved_files(run_dir: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in [*(run_dir / ".hydra").iterdir(), run_dir / "eval.log"]}


def test_a_refused_run_leaves_the_saved_overrides_and_the_job_log_alone(tmp_path: Path) -> None:
    from lerobot_hydra.store.shard_file import rerun_in_place

    run_dir = tmp_path / "run"
    run_here("env.task=[reach-v3]", *SMALL, out_dir=run_dir)
    before = saved_files(run_dir)
    assert set(before) == {"config.yaml", "hydra.yaml", "overrides.yaml", "eval.log"}
    assert "env.task=[reach-v3]" in before["overrides.yaml"] and "reach-v3" in before["config.yaml"]
    command = rerun_in_place(run_dir, 0, 1)
    assert "env.task=[reach-v3]" in command

    # Refused by the identity check: a resume with another configuration.
    with pytest.raises(UserError, match="holds results of a different configuration"):
        run_here("env.task=[push-v3]", *SMALL, out_dir=run_dir)
    # Refused by the lock: another process holds the dir.
    holder = hold_lock(run_dir, "an evaluation")
    try:
        with pytest.raises(UserError, match="is in use by an evaluation"):
            run_here("env.task=[push-v3]", *SMALL, "seed=7", out_dir=run_dir)
    finally:
        holder.kill()
        holder.wait(timeout=60)

    assert saved_files(run_dir) == before
    assert rerun_in_place(run_dir, 0, 1) == command
