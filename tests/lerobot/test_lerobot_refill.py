"""LeRobot policies with per-row state (action queue, observation history, ACT's temporal ensemble, noise) refill
a sub-env the moment its episode ends, and every episode is exactly the one LeRobot's own batch-wide
`select_action` gives it in lockstep. Tiny ACT, diffusion and SmolVLA checkpoints (built offline) on an env whose
rewards record every action and whose episodes end at different steps (tests/helpers/drift_env.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from devkit.lerobot_checkpoints import tiny_act, tiny_diffusion, tiny_smolvla
from tests.helpers.drift_env import DRIFT_ACTION, DRIFT_PIXELS, DRIFT_STATE, DriftEnvConfig, episode_length
from tests.helpers.same_outcomes import assert_same_outcomes

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

EPISODES = 6  # lengths 3, 10, 6, 13, 9, 5: in batches of 3, lockstep steps 10 + 13 times, refill 16
ENSEMBLED = {"temporal_ensemble_coeff": 0.01, "n_action_steps": 1}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any], bool]]:
    """family -> (checkpoint, policy.overrides, whether the env shows a camera)."""
    root = tmp_path_factory.mktemp("checkpoints")
    act = tiny_act(root / "act", DRIFT_STATE, DRIFT_ACTION)
    return {
        "act": (act, {}, False),
        "act_ensembled": (act, ENSEMBLED, False),
        "diffusion": (tiny_diffusion(root / "diffusion", DRIFT_STATE, DRIFT_ACTION), {}, False),
        "smolvla": (tiny_smolvla(root / "smolvla", DRIFT_PIXELS, DRIFT_ACTION), {"n_action_steps": 3}, True),
    }


def load(checkpoint: tuple[Path, dict[str, Any], bool]) -> tuple[DriftEnvConfig, Any]:
    from lerobot_hydra.policies.lerobot.config import LeRobotPolicyConfig

    path, overrides, pixels = checkpoint
    env = DriftEnvConfig(pixels=pixels, episode_length=30)
    return env, LeRobotPolicyConfig(path=str(path), device="cpu", overrides=overrides or None).build(env, "cpu")


def lockstep(policy: Any) -> Any:
    """The same loaded policy through LeRobot's own batch-wide `select_action` (no `reset_slots`: lockstep)."""
    from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy

    fork = policy.fork()
    return LeRobotPolicy(
        fork.policy, fork.preprocessor, fork.postprocessor, "cpu", False, fork.observation_keys, fork.noise
    )


def run(
    env: DriftEnvConfig, policy: Any, batch_size: int, episodes: list[int] | None = None
) -> tuple[list[tuple], int]:
    """(every episode's outcome, exact rewards included; how many batch steps the run took)."""
    from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
    from lerobot_hydra.rollout.progress import Progress
    from lerobot_hydra.rollout.runner import TaskWork

    steps = 0
    select = policy.select_action

    def counted(batch: dict[str, Any]) -> Any:
        nonlocal steps
        steps += 1
        return select(batch)

    policy.select_action = counted
    records: list[Any] = []
    pre, post = env.build_processors()
    work = [TaskWork(task, list(range(EPISODES)) if episodes is None else episodes) for task in env.tasks()]
    evaluate(
        LaneSettings(env, pre, post, 1000, batch_size, False), work, lambda: policy, records.append, Progress(60.0)
    )
    del policy.select_action
    fields = ("episode_index", "seed", "success", "sum_reward", "max_reward", "steps")
    return sorted(tuple(dataclasses.asdict(r)[f] for f in fields) for r in records), steps


@pytest.mark.parametrize(
    "family", ["act", "act_ensembled", "diffusion", pytest.param("smolvla", marks=pytest.mark.slow)]
)
def test_refilled_rows_give_exactly_the_episodes_of_lockstep(
    checkpoints: dict[str, tuple[Path, dict[str, Any], bool]], family: str
) -> None:
    env, policy = load(checkpoints[family])
    assert callable(getattr(policy, "reset_slots", None))
    locked, locked_steps = run(env, lockstep(policy), 3)
    assert [o[-1] for o in locked] == [episode_length(k) for k in range(EPISODES)]
    assert len({o[3] for o in locked}) == EPISODES  # the actions differ from episode to episode
    refilled, refilled_steps = run(env, policy, 3)
    assert (locked_steps, refilled_steps) == (23, 16)  # sub-envs started their next episode at once
    # Another row or batch-mate rounds differently (~1e-7 in an action on CPU; the digits vary with the CPU).
    assert_same_outcomes(refilled, locked)
    # Batches of one: the same.
    assert_same_outcomes(run(env, policy.fork(), 1)[0], run(env, lockstep(policy), 1)[0])


def test_refilled_stochastic_episodes_do_not_depend_on_batch_or_shard(
    checkpoints: dict[str, tuple[Path, dict[str, Any], bool]],
) -> None:
    """Each row's noise follows its own episode through refills: batch 3, batch 1 and two shards (other batch-mates,
    other rows) agree, to the float rounding of another batch size or position (see above)."""
    env, policy = load(checkpoints["diffusion"])
    batched = run(env, policy, 3)[0]
    runs = [run(env, policy, 1)[0], sorted(run(env, policy, 2, [0, 3, 4])[0] + run(env, policy, 2, [1, 2, 5])[0])]
    for other in runs:
        assert_same_outcomes(other, batched)


def test_a_family_run_row_by_row_refills_too(checkpoints: dict[str, tuple[Path, dict[str, Any], bool]]) -> None:
    """The fallback for families without noise hooks (each row a policy of its own) refills as well; diffusion
    through it draws the same noise as through its hooks, so its episodes are those of batches of one."""
    from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy

    env, hooked = load(checkpoints["diffusion"])
    base = hooked.fork()
    base.noise = None  # as for a family without hooks: it draws from torch's global generators
    rowwise, steps = run(env, RowwisePolicy(base), 3)
    assert steps == 16
    assert rowwise == run(env, hooked, 1)[0]


def test_a_row_asks_for_a_chunk_only_when_its_own_queue_is_empty(
    checkpoints: dict[str, tuple[Path, dict[str, Any], bool]],
) -> None:
    """A row whose episode restarts asks for a chunk; the other rows keep consuming theirs."""
    import numpy as np

    from tests.lerobot.test_lerobot_policies import first_batch

    env, policy = load(checkpoints["act"])  # chunks of 8 actions
    batch = {k: v.repeat(2, 0) if hasattr(v, "repeat") else [*v, *v] for k, v in first_batch(env).items()}
    steps: list[int] = []
    predict = policy.policy.predict_action_chunk

    def counted(inputs: dict[str, Any]) -> Any:
        steps.append(step)
        return predict(inputs)

    policy.policy.predict_action_chunk = counted
    task = env.tasks()[0]
    policy.reset(task, [1000, 1000])
    actions = []
    for step in range(1, 10):
        if step == 4:
            policy.reset_slots(task, {1: 1000})
        actions.append(np.asarray(policy.select_action(batch)))
    assert steps == [1, 4, 9]  # both rows; row 1's new episode; row 0's ninth action
    assert np.array_equal(actions[3][1], actions[0][1])  # row 1 started over
    assert not np.array_equal(actions[3][0], actions[0][0])  # row 0 went on with its chunk
