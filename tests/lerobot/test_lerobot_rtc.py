"""Real-time chunking with a simulated latency (`policy.rtc`, lerobot_hydra/policies/lerobot/rtc.py): each row asks
for its next chunk at the queue threshold, LeRobot's guidance sees the row's leftover, and the chunk takes over
`inference_delay` steps later, exactly as LeRobot's own RTC action queue does it; per row, so refill, batch size
and shards leave every episode as it is. Tiny SmolVLA, pi0 and pi0.5 (built offline, chunks of 8) on
tests/helpers/drift_env.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import tiny_act, tiny_smolvla
from tests.helpers.drift_env import DRIFT_ACTION, DRIFT_PIXELS, DriftEnvConfig
from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06, tiny_gemma, tiny_pi

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

CHUNK, DELAY, THRESHOLD, HORIZON = 8, 2, 4, 6
RTC = {"inference_delay": DELAY, "queue_threshold": THRESHOLD, "execution_horizon": HORIZON}
# (inference_delay, queue_threshold, execution_horizon) -> the steps at which a row asks for a chunk. The first:
# 4 actions executed, 2 more while it computes, a leftover of 4 padded to 6; the second: asks with 5 left, cut to 3.
TIMINGS = {(DELAY, THRESHOLD, HORIZON): [0, 4, 8, 12], (1, 5, 3): [0, 3, 6, 9, 12]}
SEED = 1000


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("rtc")
    chunks = {"chunk_size": CHUNK, "n_action_steps": CHUNK}
    built = {"smolvla": tiny_smolvla(root / "smolvla", DRIFT_PIXELS, DRIFT_ACTION, **chunks)}
    with tiny_gemma() if lerobot_06() else contextlib.nullcontext():  # pi0 and pi0.5 at a tiny size, loaded here
        if lerobot_06():
            for kind in ("pi0", "pi05"):
                built[kind] = tiny_pi(root / kind, kind, DRIFT_PIXELS, DRIFT_ACTION, **chunks)
        yield built


def checkpoint(checkpoints: dict[str, Path], family: str) -> Path:
    if family not in checkpoints:
        pytest.skip(LEROBOT_06_ONLY)
    return checkpoints[family]


@pytest.fixture(scope="module")
def smolvla(checkpoints: dict[str, Path]) -> Path:
    return checkpoints["smolvla"]


def load(path: Path, rtc: dict[str, Any] | None = RTC, **settings: Any) -> tuple[DriftEnvConfig, Any]:
    from lerobot_hydra.policies.lerobot.config import LeRobotPolicyConfig

    env = DriftEnvConfig(pixels=True, episode_length=30)
    return env, LeRobotPolicyConfig(path=str(path), device="cpu", rtc=rtc, **settings).build(env, "cpu")


def drifting_batches(env: DriftEnvConfig, steps: int) -> list[dict[str, Any]]:
    """One row's observations over `steps` steps: the state moves every step, so every chunk sees another one."""
    from tests.lerobot.test_lerobot_policies import first_batch

    batch = first_batch(env)
    return [{**batch, "observation.state": batch["observation.state"] + 0.05 * step} for step in range(steps)]


def normalized(left: Any, horizon: int) -> Any:
    """The leftover cut or zero-padded to `horizon`: LeRobot 0.6's own helper, written out for 0.4.4, which has
    no RTC engine."""
    try:
        from lerobot.rollout.inference.rtc import _normalize_prev_actions_length
    except ImportError:
        import torch

        left = left[:horizon]
        return torch.cat([left, left.new_zeros((horizon - len(left), left.shape[1]))])
    return _normalize_prev_actions_length(left, target_steps=horizon)


def reference(
    policy: Any, batches: list[dict[str, Any]], delay: int, threshold: int, horizon: int
) -> tuple[list[Any], list[int], bool]:
    """One row through LeRobot's own RTC action queue, as its RTC engine drives it, with the latency played out in
    steps: a chunk asked for at step t is merged at step t + delay. The episode's first chunk is used from its
    first action (real_delay 0: no time passes while it is computed; see lerobot/rtc.py). (its actions, the steps
    that asked, whether the guidance changed a chunk)"""
    import torch
    from lerobot.policies.rtc.action_queue import ActionQueue
    from lerobot.policies.rtc.configuration_rtc import RTCConfig

    from lerobot_hydra.policies.lerobot.noise import RowNoise, randn_rows

    model = policy.policy
    model.reset()
    queue = ActionQueue(RTCConfig(enabled=True, execution_horizon=horizon))
    noise = RowNoise()
    noise.start(SEED)
    shape = (1, model.config.chunk_size, model.config.max_action_dim)
    pending: tuple[int, Any, Any, int] | None = None
    actions, asked, guided = [], [], False
    for step, batch in enumerate(batches):
        processed = policy.preprocessor(policy._policy_batch(batch))
        if pending is not None and pending[0] == step:
            queue.merge(pending[1], pending[2], real_delay=delay, action_index_before_inference=pending[3])
            pending = None
        if pending is None and queue.qsize() <= threshold:
            asked.append(step)
            with torch.no_grad():
                initial = randn_rows([noise], shape, "cpu", torch.float32)
                if queue.empty():
                    chunk = model.predict_action_chunk(processed, noise=initial)
                    queue.merge(chunk[0], policy.postprocessor(chunk)[0], real_delay=0)
                else:
                    left = normalized(queue.get_left_over(), horizon)
                    chunk = model.predict_action_chunk(
                        processed,
                        noise=initial.clone(),
                        inference_delay=delay,
                        prev_chunk_left_over=left[None],
                        execution_horizon=horizon,
                    )
                    guided |= not torch.equal(chunk, model.predict_action_chunk(processed, noise=initial.clone()))
                    pending = (step + delay, chunk[0], policy.postprocessor(chunk)[0], queue.get_action_index())
        actions.append(queue.get())
    return actions, asked, guided


FIRST = next(iter(TIMINGS))


@pytest.mark.parametrize(
    ("family", "timing"), [("smolvla", timing) for timing in TIMINGS] + [("pi0", FIRST), ("pi05", FIRST)]
)
def test_a_row_follows_lerobots_own_rtc_action_queue(
    checkpoints: dict[str, Path], family: str, timing: tuple[int, int, int]
) -> None:
    delay, threshold, horizon = timing
    rtc = {"inference_delay": delay, "queue_threshold": threshold, "execution_horizon": horizon}
    env, policy = load(checkpoint(checkpoints, family), rtc)
    batches = drifting_batches(env, 15)
    expected, expected_asks, guided = reference(policy.fork(), batches, *timing)
    assert expected_asks == TIMINGS[timing]
    assert guided  # the leftover changed the chunks: a wrong leftover would show below

    asks: list[int] = []
    predict = policy.policy.predict_action_chunk

    def counted(batch: dict[str, Any], **kwargs: Any) -> Any:
        asks.append(step)
        return predict(batch, **kwargs)

    policy.policy.predict_action_chunk = counted
    policy.reset(env.tasks()[0], [SEED])
    for step, batch in enumerate(batches):
        action = policy.select_action(batch)
        assert np.array_equal(np.asarray(action)[0], np.asarray(expected[step])), f"step {step}"
    assert asks == expected_asks


@pytest.mark.parametrize("family", ["smolvla", pytest.param("pi05", marks=pytest.mark.slow)])
def test_rtc_rows_refill_and_keep_their_episodes_across_batches_and_shards(
    checkpoints: dict[str, Path], family: str
) -> None:
    from tests.lerobot.test_lerobot_refill import run

    smolvla = checkpoint(checkpoints, family)
    env, policy = load(smolvla)
    batched, steps = run(env, policy, 3)
    assert steps == 16  # sub-envs started their next episode at once (lockstep would take 23)
    # Float kernels round differently for another batch size (~1e-7 in an action on CPU): rewards to 1e-5.
    rewards = [reward for o in batched for reward in o[3:5]]
    shards = sorted(run(env, policy.fork(), 2, [0, 3, 4])[0] + run(env, policy.fork(), 2, [1, 2, 5])[0])
    for other in (run(env, policy.fork(), 1)[0], shards):
        assert [o[:3] + o[5:] for o in other] == [o[:3] + o[5:] for o in batched]
        assert [reward for o in other for reward in o[3:5]] == pytest.approx(rewards, rel=1e-5, abs=1e-6)
    _, plain = load(smolvla, rtc=None)
    unguided = [reward for o in run(env, plain, 3)[0] for reward in o[3:5]]
    assert unguided != pytest.approx(rewards, rel=1e-3)  # the setting changes what the policy does


def test_policy_rtc_reaches_the_runtime_from_the_config_tree(smolvla: Path, compose: Any) -> None:
    from lerobot_hydra.policies.lerobot.rtc import SimulatedLatency
    from lerobot_hydra.schemas.schema import instantiate_node

    cfg = compose(
        "policy=smolvla", f"policy.path={smolvla}", "device=cpu", "policy.rtc={inference_delay: 2, queue_threshold: 4}"
    )
    node = instantiate_node(cfg.policy)
    assert node.rtc == {"inference_delay": 2, "queue_threshold": 4}
    node.rtc = {**node.rtc, "execution_horizon": 6}
    runtime = node.build(DriftEnvConfig(pixels=True), "cpu")
    assert runtime.rtc == SimulatedLatency(2, 4, 6)
    assert runtime.policy.config.rtc_config.enabled and runtime.policy.config.rtc_config.execution_horizon == 6
    assert runtime.fork().rtc == runtime.rtc


@pytest.mark.parametrize(
    ("rtc", "message"),
    [
        (3, r"policy.rtc must be a mapping such as \{inference_delay: 3\}, got 3"),
        ({}, r"policy.rtc needs inference_delay"),
        ({"inference_dely": 2}, r"policy.rtc.inference_dely is not an RTC setting \(did you mean 'inference_delay'"),
        ({"inference_delay": -1}, r"policy.rtc.inference_delay must be an integer >= 0, got -1"),
        ({"inference_delay": 5, "queue_threshold": 5}, r"inference_delay=5 is more than half the chunk \(8 actions\)"),
        ({"inference_delay": 2, "queue_threshold": 1}, r"policy.rtc.queue_threshold must be an integer >= 2, got 1"),
        ({"inference_delay": 0, "queue_threshold": 0}, r"policy.rtc.queue_threshold must be an integer >= 1, got 0"),
        (
            {"inference_delay": 2, "queue_threshold": 4},
            r"execution_horizon must be at most the chunk size \(8\), not 10",
        ),
        ({**RTC, "max_guidance_weight": "x"}, r"policy.rtc.max_guidance_weight must be a number > 0, got 'x'"),
        ({**RTC, "prefix_attention_schedule": "cubic"}, r"'cubic' is not a schedule; valid: ZEROS, ONES, LINEAR, EXP"),
    ],
)
def test_rtc_settings_are_checked_in_one_line(smolvla: Path, rtc: dict[str, Any], message: str) -> None:
    from lerobot_hydra.core.errors import UserError

    with pytest.raises(UserError, match=message):
        load(smolvla, rtc)


def test_rtc_is_refused_where_it_cannot_run(smolvla: Path, tmp_path: Path) -> None:
    import json
    import shutil

    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.serving.chunks import ChunkPolicy
    from tests.helpers.drift_env import DRIFT_STATE

    act = tiny_act(tmp_path / "act", DRIFT_STATE, DRIFT_ACTION)
    with pytest.raises(UserError, match=r"the act policy has no real-time chunking .*; remove policy.rtc"):
        load(act, {"inference_delay": 1})
    with pytest.raises(UserError, match=r"overrides.rtc_config takes only null \(RTC off\); turn real-time chunking"):
        load(smolvla, None, overrides={"rtc_config": {"enabled": True}})
    with pytest.raises(UserError, match=r"real-time chunking \(policy.rtc\) cannot be served yet"):
        ChunkPolicy(load(smolvla)[1], {}, "smolvla")

    # A checkpoint saved with RTC on records no latency: it needs one, or RTC off.
    saved = shutil.copytree(smolvla, tmp_path / "saved_with_rtc")
    config = json.loads((saved / "config.json").read_text())
    config["rtc_config"] = {"enabled": True, "execution_horizon": HORIZON}
    (saved / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match=r"enables real-time chunking \(rtc_config\); give its latency .*policy.rtc="):
        load(saved, None)
    assert load(saved, None, overrides={"rtc_config": None})[1].rtc is None
    assert load(saved, {"inference_delay": DELAY, "queue_threshold": THRESHOLD})[1].rtc.execution_horizon == HORIZON


def test_rtc_refuses_relative_actions() -> None:
    """pi0 and pi0.5 (LeRobot 0.6) may predict actions relative to the state, whose leftover LeRobot's engine
    re-anchors; refused rather than run differently (checked on the config alone: those checkpoints are gated)."""
    from types import SimpleNamespace

    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.policies.lerobot.rtc import configure

    config = SimpleNamespace(type="pi0", use_relative_actions=True, rtc_config=None, chunk_size=50)
    with pytest.raises(UserError, match=r"predicts relative actions \(use_relative_actions\).*without policy.rtc"):
        configure(config, {"inference_delay": 3})
