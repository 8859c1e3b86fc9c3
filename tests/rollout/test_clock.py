"""eval.clock's rows against LeRobot's own async-inference bookkeeping, and its settings refused in one line."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from queue import Queue
from typing import Any

import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.policies.clock import Clock, TimedRow
from lerobot_hydra.schemas.clock import AGGREGATE_WEIGHTS, ClockConfig

pytest.importorskip("lerobot")

CHUNK, ACTION_DIM, STEPS = 8, 3, 80


class _Robot:
    """What LeRobot's `control_loop_action` sends to: the action, as the robot's dict, kept."""

    action_features = [f"a{i}" for i in range(ACTION_DIM)]

    def send_action(self, action: dict[str, float]) -> dict[str, float]:
        return action


@pytest.fixture(scope="module")
def robot_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[type]:
    """LeRobot's RobotClient class. Importing it sets up logging to `logs/robot_client_<time>.log` in the working
    directory, on the root logger: imported here from a temporary directory, the root logger put back after."""
    root = logging.getLogger()
    handlers, level, cwd = list(root.handlers), root.level, os.getcwd()
    os.chdir(tmp_path_factory.mktemp("lerobot_logs"))
    try:
        from lerobot.async_inference.robot_client import RobotClient

        yield RobotClient
    finally:
        os.chdir(cwd)
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
            handler.close()
        for handler in [h for h in handlers if h not in root.handlers]:
            root.addHandler(handler)
        root.setLevel(level)


def lerobot_client(robot_client: type, threshold: float) -> Any:
    """LeRobot's RobotClient with only the state its queue bookkeeping reads (no robot, server or threads)."""
    client = robot_client.__new__(robot_client)
    client.robot = _Robot()
    client.action_queue, client.action_queue_lock, client.action_queue_size = Queue(), threading.Lock(), []
    client.latest_action, client.latest_action_lock = -1, threading.Lock()
    client.action_chunk_size, client._chunk_size_threshold = -1, threshold
    return client


def chunks() -> Callable[[], list[Any]]:
    import torch

    generator = torch.Generator().manual_seed(0)
    return lambda: list(torch.randn(CHUNK, ACTION_DIM, generator=generator))


@pytest.mark.parametrize("threshold", [0.0, 0.5])
@pytest.mark.parametrize("aggregate", list(AGGREGATE_WEIGHTS))
def test_a_row_chooses_lerobots_action_at_every_step(robot_client: type, aggregate: str, threshold: float) -> None:
    """A row here and LeRobot 0.6.1's (and 0.4.4's) client, driven step by step with the same chunks and latencies
    (0 to 5 steps, drawn per chunk): LeRobot's threshold test, TimedAction queue, dropping of passed timesteps,
    aggregate function and action pop choose the same action at every step; a held step sends nothing there."""
    from lerobot.async_inference.configs import get_aggregate_function
    from lerobot.async_inference.helpers import TimedAction

    config = ClockConfig("modeled", 25.0, "uniform", 25.0, threshold, aggregate)
    row, client = TimedRow(Clock(config, fps=100.0), seed=7, task="t"), lerobot_client(robot_client, threshold)
    ours, theirs = chunks(), chunks()
    in_flight: tuple[int, list[Any]] | None = None  # LeRobot's side: (step it arrives, its TimedActions)
    held = 0
    for step in range(STEPS):
        row.arrive()
        if in_flight is not None and in_flight[0] == step:
            client._aggregate_action_queues(in_flight[1], get_aggregate_function(aggregate))
            in_flight = None
        asks = row.wants_chunk()
        assert asks == (in_flight is None and client._ready_to_send_observation())
        if asks:
            row.request(ours(), wall_ms=0.0)
            latency = row.timing.latency_steps[-1]
            timed = [TimedAction(0.0, client.latest_action + 1 + i, a) for i, a in enumerate(theirs())]
            client.action_chunk_size = max(client.action_chunk_size, len(timed))  # as its receive_actions does
            if latency == 0:
                client._aggregate_action_queues(timed, get_aggregate_function(aggregate))
            else:
                in_flight = (step + latency, timed)
        action = row.pop()
        if client.actions_available():
            sent = client.control_loop_action()
            assert list(sent.values()) == action.tolist()
        else:
            held += 1  # LeRobot's robot sends nothing; the row repeats its last action
        assert row.latest == client.latest_action
    assert row.timing.held_steps == held
    assert row.timing.inferences >= STEPS // CHUNK - 2 and len(set(row.timing.latency_steps)) > 2
    if threshold == 0:
        assert held > 0  # an empty queue waits out its chunk


@pytest.mark.parametrize("threshold", [0.25, 0.5])
def test_an_rtc_row_follows_lerobots_rtc_queue_and_latency_rule(threshold: float) -> None:
    """join=rtc, driven step by step beside LeRobot's own RTC `ActionQueue` and `LatencyTracker`, merged as its RTC
    engine merges (the latency's steps dropped), with the same chunks and drawn latencies (0 to 5 steps): the same
    steps ask, the guidance gets the same leftover and the delay the engine assumes (the tracker's largest latency,
    in steps), the chunk replaces the queue from the same action, and each step executes the same action. Where the
    engine differs by design (an episode's first chunk awaited, an empty queue not guided), the row is driven as
    policies/clock.py says."""
    import math

    import torch
    from lerobot.policies.rtc.action_queue import ActionQueue
    from lerobot.policies.rtc.configuration_rtc import RTCConfig
    from lerobot.policies.rtc.latency_tracker import LatencyTracker

    fps = 100.0
    config = ClockConfig("modeled", 25.0, "uniform", 25.0, threshold, join="rtc")
    row = TimedRow(Clock(config, fps=fps), seed=7, task="t")
    queue, tracker = ActionQueue(RTCConfig(enabled=True)), LatencyTracker()
    ours, theirs = chunks(), chunks()
    in_flight: tuple[int, Any, int, int] | None = None  # LeRobot's side: (step it arrives, chunk, delay, index)
    guided = 0
    for step in range(STEPS):
        row.arrive()
        if in_flight is not None and in_flight[0] == step:
            _, chunk, steps, before = in_flight
            # As the engine: the latency's steps dropped, however many actions were executed meanwhile.
            queue.merge(chunk, chunk, steps, before)
            in_flight = None
        asks = row.wants_chunk()
        assert asks == (in_flight is None and (queue.empty() or queue.qsize() <= threshold * CHUNK))
        if asks:
            guidance = row.guidance()
            if queue.empty():
                assert guidance is None  # nothing to guide towards: an unguided pass
            else:
                guided += 1
                delay = math.ceil(tracker.max() * fps - 1e-9) if tracker.max() else 0
                assert guidance is not None and guidance[0] == delay
                assert torch.equal(torch.stack(guidance[1]), queue.get_left_over())
            row.request(ours(), wall_ms=0.0)
            steps, ms = row.timing.latency_steps[-1], row.timing.latency_ms[-1]
            tracker.add(ms / 1000.0)
            chunk = torch.stack(theirs())
            if steps == 0:
                queue.merge(chunk, chunk, 0, queue.get_action_index())
            else:
                in_flight = (step + steps, chunk, steps, queue.get_action_index())
        action = row.pop()
        expected = queue.get()
        if expected is None:
            assert row.held  # LeRobot's queue is empty: the robot waits, the row holds
        else:
            assert not row.held and torch.equal(action, expected), f"step {step}"
    assert guided >= 5 and row.timing.held_steps > 0


def test_latency_turns_into_control_steps_rounded_up() -> None:
    clock = Clock(ClockConfig("modeled", 100.0), fps=20.0)
    assert [clock.steps(ms) for ms in (0.0, 1.0, 50.0, 50.1, 100.0, 300.0)] == [0, 1, 1, 2, 2, 6]


def test_modeled_latency_draws_depend_on_the_episode_and_task_only() -> None:
    config = ClockConfig("modeled", 100.0, "normal", 30.0)

    def draws(seed: int, task: str) -> list[float]:
        row = TimedRow(Clock(config, fps=10.0), seed, task)
        return [row._latency_ms(0.0) for _ in range(5)]

    assert draws(1003, "reach") == draws(1003, "reach")
    assert draws(1003, "reach") != draws(1004, "reach") != draws(1003, "push")
    assert all(ms >= 0 for ms in draws(1, "reach"))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["eval.clock.mode=modeled", "eval.clock.latency_ms=-5"], "eval.clock.latency_ms must be 0 or more"),
        (["eval.clock.mode=modeled", "eval.clock.aggregate=mean"], "weighted_average, latest_only, average"),
        (["eval.clock.mode=realtime"], "is not one of lockstep, modeled, measured"),
        (["eval.clock.latency_ms=100"], "eval.clock.latency_ms is used only with eval.clock.mode=modeled"),
        (["eval.clock.mode=measured", "eval.clock.latency_ms=100"], "used only with eval.clock.mode=modeled"),
        (["eval.clock.chunk_size_threshold=0.2"], "used only with eval.clock.mode=modeled or measured"),
        (["eval.clock.mode=modeled", "eval.clock.chunk_size_threshold=2"], "must lie in [0, 1]"),
        (["eval.clock.mode=modeled", "eval.clock.spread_ms=5"], "needs eval.clock.distribution=uniform or normal"),
        (["eval.clock.mode=modeled", "eval.clock.hold=still"], "is not one of repeat, noop"),
        (["eval.clock.mode=modeled", "eval.clock.join=guided"], "is not one of aggregate, rtc"),
        (["eval.clock.join=rtc"], "eval.clock.join is used only with eval.clock.mode=modeled or measured"),
        (
            ["eval.clock.mode=modeled", "eval.clock.join=rtc", "eval.clock.aggregate=average"],
            "eval.clock.aggregate is used only with eval.clock.join=aggregate",
        ),
    ],
)
def test_bad_clock_settings_are_one_line(compose: Callable, overrides: list[str], says: str) -> None:
    from lerobot_hydra.schemas.schema import validate

    with pytest.raises(UserError, match=None) as err:
        validate(compose("policy=metaworld_expert", "policy.chunk=4", *overrides))
    assert says in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["eval.clock.join=rtc"], "eval.clock.join=rtc: policy=metaworld_expert has no real-time chunking"),
        (["eval.clock.hold=noop"], "eval.clock.hold=noop: MetaWorld has no action that leaves the robot as it is"),
    ],
)
def test_a_clock_setting_the_policy_or_env_cannot_follow_is_refused_before_anything_runs(
    compose: Callable, overrides: list[str], says: str
) -> None:
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.schemas.schema import validate

    cfg = compose("policy=metaworld_expert", "policy.chunk=4", "eval.clock.mode=modeled", *overrides)
    validate(cfg)
    with pytest.raises(UserError) as err:
        build_run(cfg)
    assert str(err.value).startswith(says) and "use eval.clock." in str(err.value) and "\n" not in str(err.value)


def test_latency_with_a_policy_that_is_not_chunked_says_what_to_use(compose: Callable) -> None:
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.schemas.schema import validate

    cfg = compose("policy=metaworld_expert", "eval.clock.mode=modeled", "eval.clock.latency_ms=50")
    validate(cfg)
    with pytest.raises(UserError) as err:
        build_run(cfg)
    assert "eval.clock.mode=modeled" in str(err.value) and "policy.chunk=10" in str(err.value)
    cfg = compose("policy=random", "env=pusht", "eval.clock.mode=measured")
    validate(cfg)
    with pytest.raises(UserError, match="not chunks; use eval.clock.mode=lockstep, or a chunked policy \\("):
        build_run(cfg)
