"""LeRobot policies in mixed-task batches: rows of different tasks (each with its own language instruction, which
SmolVLA reads) in one batch give exactly each task's episodes run alone, and a row without an episode asks for no
chunk. Tiny ACT and SmolVLA checkpoints (built offline) on tests/helpers/drift_env.py's three tasks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from devkit.lerobot_checkpoints import tiny_act, tiny_smolvla
from tests.helpers.drift_env import DRIFT_ACTION, DRIFT_PIXELS, DRIFT_STATE, DriftEnvConfig, episode_length
from tests.helpers.same_outcomes import assert_same_outcomes
from tests.rollout.test_mixed_tasks import alone, outcomes, run

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

EPISODES = 4


def loader(path: Path, pixels: bool, overrides: dict[str, Any] | None = None) -> tuple[DriftEnvConfig, Any]:
    from lerobot_hydra.policies.lerobot.config import LeRobotPolicyConfig

    env = DriftEnvConfig(n_tasks=3, pixels=pixels, episode_length=30)
    policy = LeRobotPolicyConfig(path=str(path), device="cpu", overrides=overrides).build(env, "cpu")
    return env, policy


@pytest.mark.parametrize("family", ["act", pytest.param("smolvla", marks=pytest.mark.slow)])
def test_mixed_task_batches_give_each_tasks_episodes(tmp_path: Path, family: str) -> None:
    if family == "act":
        env, policy = loader(tiny_act(tmp_path / "act", DRIFT_STATE, DRIFT_ACTION), pixels=False)
    else:
        path = tiny_smolvla(tmp_path / "smolvla", DRIFT_PIXELS, DRIFT_ACTION)
        env, policy = loader(path, pixels=True, overrides={"n_action_steps": 3})
    expected = alone(env, policy.fork, EPISODES, 3)
    assert [o[-2] for o in expected] == [episode_length(k, i) for i in range(3) for k in range(EPISODES)]
    assert len({o[4] for o in expected}) == len(expected)
    assert_same_outcomes(outcomes(run(env, policy, EPISODES, 3, True)), expected)  # mixed: to float rounding


def test_rows_without_an_episode_ask_for_no_chunk(tmp_path: Path) -> None:
    """ACT queuing 2 actions of each chunk: an episode of L steps asks for ceil(L / 2) chunks, and a row whose
    episode has ended while its batch goes on asks for none."""
    path = tiny_act(tmp_path / "act", DRIFT_STATE, DRIFT_ACTION)
    env, policy = loader(path, pixels=False, overrides={"n_action_steps": 2})
    asked: list[int] = []
    chunks = policy._chunks

    def counted(observations: dict[str, Any], rows: list[int], size: int) -> Any:
        asked.extend(rows)
        return chunks(observations, rows, size)

    policy._chunks = counted
    records = run(env, policy, 4, 3, False, env.tasks()[:1])  # rows 1 and 2 end at steps 10 and 6, row 0 at 16
    assert len(asked) == sum(math.ceil(r.steps / 2) for r in records)
