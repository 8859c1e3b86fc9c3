"""The Python API on a live policy: the episodes eval.py gives for the same weights saved as a checkpoint, workers
kept warm between an Evaluator's calls and released by close(), and the caller's torch state left alone."""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from devkit.lerobot_checkpoints import METAWORLD_ACTION, METAWORLD_STATE, TINY_ACT, build_policy, save_policy
from lerobot_hydra.core.errors import UserError
from tests.conftest import _no_leftovers, read_episodes, run_here

TASKS = ["reach-v3", "push-v3"]
STEPS = 20
METAWORLD = ["env=metaworld", f"env.task=[{','.join(TASKS)}]", "env.obs_type=state", f"env.episode_length={STEPS}"]
EPISODES = ["eval.n_episodes=3", "eval.batch_size=2"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}
# What decides an episode (not its wall time or video).
OUTCOME = (
    "task_group",
    "task_id",
    "task_name",
    "episode_index",
    "seed",
    "success",
    "sum_reward",
    "max_reward",
    "steps",
)


def outcome(record: dict[str, Any]) -> tuple:
    return tuple(record[f] for f in OUTCOME)


@pytest.fixture(scope="module")
def act() -> tuple[Any, Any, Any]:
    """A tiny ACT as a training loop holds it: policy and processors in memory."""
    return build_policy("act", METAWORLD_STATE, METAWORLD_ACTION, **TINY_ACT)


def test_a_live_policy_gives_the_episodes_eval_py_gives_its_checkpoint(
    act: tuple[Any, Any, Any], tmp_path: Path
) -> None:
    import lerobot_hydra

    policy, pre, post = act
    checkpoint = save_policy(tmp_path / "act", policy, pre, post)
    run_here(*METAWORLD, *EPISODES, "policy=act", f"policy.path={checkpoint}", out_dir=tmp_path / "cli", env=ONE_THREAD)
    cli = sorted(outcome(r) for r in read_episodes(tmp_path / "cli"))
    with _no_leftovers():
        results = lerobot_hydra.evaluate(policy, [*METAWORLD, *EPISODES], preprocessor=pre, postprocessor=post)
    live = sorted(outcomes(results))
    assert len(cli) == len(TASKS) * 3
    assert live == cli
    assert results.overall.n_episodes == len(cli)
    assert len({o[6] for o in cli}) > 1  # the episodes differ: the policy's actions reached the simulator


def outcomes(results: Any) -> list[tuple]:
    return [outcome(dataclasses.asdict(r)) for t in results.tasks for r in t.records]


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.name() != "wandb-core"}


def test_an_evaluator_keeps_its_workers_between_calls_and_releases_them(act: tuple[Any, Any, Any]) -> None:
    from lerobot_hydra import Evaluator

    policy, pre, post = act
    before_threads = {t.ident for t in threading.enumerate()}
    shm_before = set(os.listdir("/dev/shm"))
    with _no_leftovers():
        with Evaluator([*METAWORLD, *EPISODES, "eval.use_async_envs=true"]) as evaluator:
            first = evaluator.evaluate(policy, preprocessor=pre, postprocessor=post, step=1)
            workers = _children()
            assert len(workers) >= 2  # two sub-envs in workers (and their forkserver)
            second = evaluator.evaluate(policy, preprocessor=pre, postprocessor=post, step=2)
            assert _children() == workers  # the same processes ran the second evaluation
        assert not _children()
    assert outcomes(first) == outcomes(second)  # warm workers run the same episodes
    assert {t.ident for t in threading.enumerate()} <= before_threads
    assert set(os.listdir("/dev/shm")) <= shm_before
    with pytest.raises(UserError, match="closed"):
        evaluator.evaluate(policy, preprocessor=pre, postprocessor=post)


def test_evaluation_leaves_the_callers_torch_state_alone(act: tuple[Any, Any, Any]) -> None:
    import lerobot_hydra

    policy, pre, post = act
    policy.train()
    torch.manual_seed(123)
    rng = torch.get_rng_state()
    devices = {p.device for p in policy.parameters()}
    weights = [p.detach().clone() for p in policy.parameters()]
    with torch.enable_grad():
        lerobot_hydra.evaluate(policy, [*METAWORLD, "eval.n_episodes=1"], preprocessor=pre, postprocessor=post)
        assert torch.is_grad_enabled()
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(m.training for m in policy.modules())
    assert {p.device for p in policy.parameters()} == devices
    assert all(torch.equal(a, b) for a, b in zip(weights, policy.parameters(), strict=True))
    policy.eval()


class Constant:
    """A lerobot_hydra Policy (the protocol, not a LeRobot policy): the same action on every row."""

    def reset(self, task: Any, episode_seeds: Any) -> None:
        self.rows = len(episode_seeds)

    def select_action(self, batch: dict[str, Any]) -> Any:
        return torch.zeros(self.rows, 4)

    def fork(self) -> Constant:
        return Constant()

    def finish(self) -> None:
        pass


def test_any_policy_object_and_a_run_dir_on_request(tmp_path: Path) -> None:
    import lerobot_hydra

    results = lerobot_hydra.evaluate(Constant(), [*METAWORLD, "eval.n_episodes=2"], out_dir=tmp_path, step=7)
    assert [t.n_episodes for t in results.tasks] == [2, 2]
    run_dir = tmp_path / "step_000000007"
    assert sorted(outcome(r) for r in read_episodes(run_dir)) == sorted(
        outcome(dataclasses.asdict(r)) for t in results.tasks for r in t.records
    )
    assert (run_dir / "eval_info.json").is_file()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda e: e(Constant(), ["policy=act"]), "leave policy= out"),
        (lambda e: e(Constant(), ["eval.n_episodes=0"]), "eval.n_episodes must be at least 1"),
        (lambda e: e(Constant(), ["env.nope=1"]), "nope"),
        (lambda e: e(object(), METAWORLD), "neither a LeRobot PreTrainedPolicy nor a lerobot_hydra Policy"),
        (lambda e: e(Constant(), ["eval.max_episodes_rendered=1"]), "pass out_dir="),
    ],
)
def test_mistakes_are_one_line_errors(call: Any, message: str) -> None:
    import lerobot_hydra

    with pytest.raises(UserError, match=message) as err:
        call(lerobot_hydra.evaluate)
    assert "\n" not in str(err.value)


def test_a_lerobot_policy_needs_its_processors(act: tuple[Any, Any, Any]) -> None:
    import lerobot_hydra

    with pytest.raises(UserError, match="needs its processors"):
        lerobot_hydra.evaluate(act[0], METAWORLD)


def test_policy_live_on_the_command_line_says_what_to_use(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="policy=live evaluates a policy object from Python"):
        run_here(*METAWORLD, "eval.n_episodes=1", "eval.batch_size=1", "policy=live", out_dir=tmp_path)
