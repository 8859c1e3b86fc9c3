"""Sequential rounds in one process run on one run context: a 4-round run builds each task's simulator once and the
policy once, and gives the episodes of the same run planned without rounds."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_here
from tests.helpers.counting_builds import builds

TASKS = ["reach-v3", "push-v3"]


def counted(log_dir: Path) -> list[str]:
    return [
        "env._target_=tests.helpers.counting_builds.CountedMetaWorldConfig",
        f"+env.log_dir={log_dir}",
        "policy._target_=tests.helpers.counting_builds.CountedRandomConfig",
        f"+policy.log_dir={log_dir}",
        "policy=random",
        f"env.task=[{','.join(TASKS)}]",
        "env.obs_type=state",
        "env.episode_length=10",
        "eval.batch_size=2",
    ]


def test_four_rounds_build_each_tasks_simulator_once_and_the_policy_once(tmp_path: Path) -> None:
    # Every episode fails: each task stops below 50% after 8 episodes, at the end of round 4 of 2 episodes.
    sequential = ["eval.n_episodes=10", "eval.sequential.stop=threshold", "eval.sequential.threshold=50"]
    info = run_here(*counted(tmp_path), *sequential, "eval.sequential.round=2", out_dir=tmp_path / "run")
    assert [t["n_episodes"] for t in info["sequential"]["per_task"].values()] == [8, 8]
    built = builds(tmp_path)
    assert sorted(b["task"] for b in built if b["built"] == "simulator") == sorted(TASKS)
    assert len({b["pid"] for b in built if b["built"] == "simulator"}) == 2  # one worker per task
    assert [b["built"] for b in built].count("policy") == 1
