"""Real-time chunking on the clock (`eval.clock.join=rtc`, lerobot_hydra/policies/lerobot/rtc.py): each row asks for
its next chunk at the clock's threshold, LeRobot's guidance sees the row's leftover and the delay LeRobot's RTC engine
assumes, and the chunk replaces the queue when its latency has passed, exactly as LeRobot's own RTC action queue
does it; per row, so refill, batch size, shards and drawn latencies leave every episode as it is. Tiny SmolVLA, pi0
and pi0.5 (built offline, chunks of 8) on tests/helpers/drift_env.py."""

from __future__ import annotations

import contextlib
import dataclasses
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
FPS = 30.0  # DriftEnvConfig's
RTC = {"execution_horizon": HORIZON}
# (latency in steps, queue threshold in actions, execution_horizon) -> the steps at which a row asks for a chunk. The
# first: 4 actions executed, 2 more while it computes, a leftover of 4 padded to 6; the second: asks with 5 left, cut
# to 3.
TIMINGS = {(DELAY, THRESHOLD, HORIZON): [0, 4, 8, 12], (1, 5, 3): [0, 3, 6, 9, 12]}
SEED = 1000


def rtc_clock(delay: int, threshold: int, **settings: Any) -> Any:
    """A modeled clock of `delay` steps per inference at the drift env's fps, asking at `threshold` actions left."""
    from lerobot_hydra.policies.clock import Clock
    from lerobot_hydra.schemas.clock import ClockConfig

    # Half a step less than `delay` steps: rounded up to `delay` (a whole number of steps in ms is no exact float).
    config = ClockConfig("modeled", (delay - 0.5) * 1000.0 / FPS, chunk_size_threshold=threshold / CHUNK, join="rtc")
    return Clock(dataclasses.replace(config, **settings), FPS)


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


def load(
    path: Path, rtc: dict[str, Any] | None = RTC, clock: Any = None, **settings: Any
) -> tuple[DriftEnvConfig, Any]:
    """The drift env and the policy built as eval.py builds it, on `clock` (default: 2 steps, asking at 4 left)."""
    from lerobot_hydra.policies.lerobot.config import LeRobotPolicyConfig

    env = DriftEnvConfig(pixels=True, episode_length=30)
    policy = LeRobotPolicyConfig(path=str(path), device="cpu", rtc=rtc, **settings).build(env, "cpu")
    policy.use_clock(rtc_clock(DELAY, THRESHOLD) if clock is None else clock)
    return env, policy


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
    steps: a chunk asked for at step t is merged at step t + delay. The episode's first chunk is awaited, used from
    its first action (real_delay 0; policies/clock.py). (its actions, the steps that asked, whether the guidance
    changed a chunk)"""
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
    env, policy = load(checkpoint(checkpoints, family), {"execution_horizon": horizon}, rtc_clock(delay, threshold))
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
    timing_record = policy.row_timing(0)
    assert timing_record["latency_steps"] == [0] + [delay] * (len(expected_asks) - 1)


# Latencies drawn per inference (1 to 4 steps at 30 fps), so rows asking at one step may assume different delays.
DRAWN = {"distribution": "uniform", "latency_ms": 80.0, "spread_ms": 45.0}


@pytest.mark.parametrize("family", ["smolvla", pytest.param("pi05", marks=pytest.mark.slow)])
def test_rtc_rows_refill_and_keep_their_episodes_across_batches_and_shards(
    checkpoints: dict[str, Path], family: str
) -> None:
    from tests.lerobot.test_lerobot_refill import run

    path = checkpoint(checkpoints, family)
    clock = rtc_clock(DELAY, THRESHOLD, **DRAWN)
    env, policy = load(path, clock=clock)
    batched, _ = run(env, policy, 3)
    # Float kernels round differently for another batch size (~1e-7 in an action on CPU): rewards to 1e-5.
    rewards = [reward for o in batched for reward in o[3:5]]
    shards = sorted(run(env, policy.fork(), 2, [0, 3, 4])[0] + run(env, policy.fork(), 2, [1, 2, 5])[0])
    for other in (run(env, policy.fork(), 1)[0], shards):
        assert [o[:3] + o[5:] for o in other] == [o[:3] + o[5:] for o in batched]
        assert [reward for o in other for reward in o[3:5]] == pytest.approx(rewards, rel=1e-5, abs=1e-6)
    # The same clock joining the same chunks unguided (latest_only replaces the queue as RTC does): other actions.
    _, plain = load(
        path,
        None,
        dataclasses.replace(clock, config=dataclasses.replace(clock.config, join="aggregate", aggregate="latest_only")),
    )
    unguided = [reward for o in run(env, plain, 3)[0] for reward in o[3:5]]
    assert unguided != pytest.approx(rewards, rel=1e-3)  # the guidance changes what the policy does


def test_rows_asking_together_get_one_guided_pass_per_assumed_delay(smolvla: Path) -> None:
    """Rows asking at one step with different assumed delays (their episodes drew other latencies) go in one guided
    pass per delay, every pass of the batch's size with each row at its own position."""
    env, policy = load(smolvla, clock=rtc_clock(DELAY, THRESHOLD, **DRAWN))
    passes: list[tuple[int, int | None, int]] = []  # (step, assumed delay or None: unguided, batch size)
    predict = policy.policy.predict_action_chunk

    def counted(batch: dict[str, Any], **kwargs: Any) -> Any:
        passes.append((step, kwargs.get("inference_delay"), len(batch["observation.state"])))
        return predict(batch, **kwargs)

    policy.policy.predict_action_chunk = counted
    policy.reset(env.tasks()[0], [SEED, SEED + 1, SEED + 2])
    for step, batch in enumerate(drifting_batches(env, 40)):  # noqa: B007 (`counted` reads it)
        policy.select_action({k: v if k == "task" else np.concatenate([v] * 3) for k, v in batch.items()})
    assert all(size == 3 for _, _, size in passes)
    by_step: dict[int, list[int | None]] = {}
    for at, delay, _ in passes:
        by_step.setdefault(at, []).append(delay)
    assert all(len(set(delays)) == len(delays) for delays in by_step.values())  # one pass per delay
    assert any(len([d for d in delays if d is not None]) >= 2 for delays in by_step.values())


def test_policy_rtc_reaches_the_runtime_from_the_config_tree(smolvla: Path, compose: Any) -> None:
    from lerobot_hydra.policies.clock import Clock
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.schemas.schema import validate

    clock = ["eval.clock.mode=modeled", "eval.clock.latency_ms=60", "eval.clock.join=rtc"]
    cfg = compose("policy=smolvla", f"policy.path={smolvla}", "device=cpu", "env=pusht", *clock)
    cfg.policy.rtc = {"execution_horizon": HORIZON}
    validate(cfg)
    parts = build_run(cfg)  # the clock checked against the policy; the policy built for the drift env, as parts would
    runtime = parts.policy.build(DriftEnvConfig(pixels=True), "cpu")
    runtime.use_clock(Clock(parts.clock, FPS))
    assert runtime.guided and runtime.clock.config.join == "rtc"
    assert runtime.policy.config.rtc_config.enabled and runtime.policy.config.rtc_config.execution_horizon == HORIZON
    assert runtime.fork().guided


@pytest.mark.parametrize(
    ("rtc", "message"),
    [
        (3, r"policy.rtc must be a mapping such as \{execution_horizon: 10\}, got 3"),
        ({"inference_delay": 2}, r"policy.rtc.inference_delay is the clock's now: .*eval.clock.join=rtc"),
        ({"queue_threshold": 2}, r"policy.rtc.queue_threshold is the clock's now"),
        ({"execution_horizn": 2}, r"policy.rtc.execution_horizn is not an RTC guidance setting \(did you mean"),
        ({"execution_horizon": 10}, r"execution_horizon must be an integer from 1 to the chunk size 8, not 10"),
        ({"max_guidance_weight": "x"}, r"policy.rtc.max_guidance_weight must be a number > 0, got 'x'"),
        ({"prefix_attention_schedule": "cubic"}, r"'cubic' is not a schedule; valid: ZEROS, ONES, LINEAR, EXP"),
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
    from lerobot_hydra.policies.lerobot.config import LeRobotPolicyConfig
    from lerobot_hydra.schemas.clock import ClockConfig
    from lerobot_hydra.serving.client import RemotePolicyConfig
    from tests.helpers.drift_env import DRIFT_STATE

    def refusal(path: Path, clock: ClockConfig, **settings: Any) -> str | None:
        return LeRobotPolicyConfig(path=str(path), device="cpu", **settings).clock_refusal(clock)

    rtc, lockstep = ClockConfig("modeled", 50.0, join="rtc"), ClockConfig()
    act = tiny_act(tmp_path / "act", DRIFT_STATE, DRIFT_ACTION)
    assert refusal(act, rtc) == (
        "eval.clock.join=rtc: the act policy has no real-time chunking (RTC exists for pi0, pi05, smolvla); use "
        "eval.clock.join=aggregate"
    )
    assert refusal(smolvla, rtc) is None
    assert refusal(smolvla, lockstep, rtc={"execution_horizon": 4}).startswith(
        "policy.rtc tunes real-time chunking, which runs on the clock: add eval.clock.mode=modeled"
    )
    assert "a served policy has no real-time chunking" in str(RemotePolicyConfig(url="ws://x").clock_refusal(rtc))
    with pytest.raises(UserError, match=r"policy.rtc: the act policy has no real-time chunking .*; remove policy.rtc"):
        load(act, {"execution_horizon": 4})
    with pytest.raises(UserError, match=r"overrides.rtc_config takes only null \(RTC off\); real-time chunking runs"):
        load(smolvla, None, overrides={"rtc_config": {"enabled": True}})

    # A checkpoint saved with RTC on: on the clock with join=rtc, or with RTC turned off.
    saved = shutil.copytree(smolvla, tmp_path / "saved_with_rtc")
    config = json.loads((saved / "config.json").read_text())
    config["rtc_config"] = {"enabled": True, "execution_horizon": HORIZON}
    (saved / "config.json").write_text(json.dumps(config))
    assert "enables real-time chunking (rtc_config); run it with eval.clock.mode=modeled" in str(
        refusal(saved, lockstep)
    )
    assert refusal(saved, rtc) is None and refusal(saved, lockstep, overrides={"rtc_config": None}) is None
    assert load(saved, None)[1].policy.config.rtc_config.execution_horizon == HORIZON


def test_rtc_refuses_relative_actions() -> None:
    """pi0 and pi0.5 (LeRobot 0.6) may predict actions relative to the state, whose leftover LeRobot's engine
    re-anchors; refused rather than run differently (checked on the config alone: those checkpoints are gated)."""
    from lerobot_hydra.policies.lerobot.clocked import clock_refusal
    from lerobot_hydra.schemas.clock import ClockConfig

    why = clock_refusal({"type": "pi0", "use_relative_actions": True}, None, None, ClockConfig("modeled", join="rtc"))
    assert why is not None and why.startswith("eval.clock.join=rtc: this pi0 checkpoint predicts relative actions")
