"""The chunked LeRobot families on eval.clock, per-row ones and those run one row at a time (GR00T, X-VLA): with no
latency and a threshold of 0, the episodes of lockstep, and under modeled latency the same episodes whatever the
batch; real-time chunking (join=rtc) through eval's own path; the checkpoints that cannot run on the clock refused."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devkit.lerobot_checkpoints import METAWORLD_ACTION, METAWORLD_STATE, tiny_act
from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06, tiny_gemma
from tests.lerobot.test_lerobot_noise import STATE, TASK, Checkpoints, builders
from tests.rollout.test_clock_runs import ZERO, kept, run_in

pytest.importorskip("lerobot")

TIMING = ("inferences", "latency_steps", "held_steps")
LATENCY = ["eval.clock.mode=modeled", "eval.clock.latency_ms=40", "eval.clock.chunk_size_threshold=0.5"]


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("checkpoints")

    def act() -> list[str]:
        path = tiny_act(root / "act", METAWORLD_STATE, METAWORLD_ACTION, n_action_steps=4, chunk_size=4)
        return ["policy=act", f"policy.path={path}", *STATE]

    with tiny_gemma() if lerobot_06() else contextlib.nullcontext():
        yield Checkpoints({**builders(root), "act": act})


SLOW = ("smolvla", "pi0", "pi05", "groot", "xvla", "evo1", "vla_jepa", "molmoact2", "wall_x")


@pytest.mark.parametrize(
    ("family", "join"),
    [
        ("act", "aggregate"),
        ("diffusion", "aggregate"),
        ("smolvla", "rtc"),
        *(pytest.param(kind, "aggregate", marks=pytest.mark.slow) for kind in SLOW),
        *(pytest.param(kind, "rtc", marks=pytest.mark.slow) for kind in ("pi0", "pi05")),
    ],
)
def test_no_latency_and_threshold_0_is_lockstep(
    compose: Callable, policies: dict[str, list[str]], tmp_path: Path, family: str, join: str
) -> None:
    """For GR00T and X-VLA, run one row at a time with their noise from torch's generator, a chunk is what one
    `select_action` computes, postprocessed (row_chunks.py); with join=rtc a chunk asked for with an empty queue
    has no leftover to be guided towards."""
    if family not in policies:
        pytest.skip(LEROBOT_06_ONLY)
    policy = policies[family]
    if join == "rtc":  # RTC queues whole chunks (4 actions here), as LeRobot's RTC engine: lockstep with them too
        policy = [o for o in policy if not o.startswith(("policy.overrides=", "env.episode_length="))]
        policy += ["policy.overrides={n_action_steps: 4}", "env.episode_length=8"]
    common = [*policy, *TASK, "eval.n_episodes=3", "eval.batch_size=2", f"eval.clock.join={join}"]
    lockstep = run_in(compose, tmp_path / "lockstep", *common[:-1])
    assert kept(run_in(compose, tmp_path / "modeled", *common, *ZERO), TIMING) == kept(lockstep, TIMING)
    assert all(r["inferences"] >= 2 and len(r["infer_ms"]) == r["inferences"] for r in lockstep)
    # With latency the row executes its queue while a chunk is in flight: other episodes, the same for any batch.
    late = run_in(compose, tmp_path / "late2", *common, *LATENCY)
    assert kept(late, TIMING) != kept(lockstep, TIMING)
    assert kept(run_in(compose, tmp_path / "late1", *[*common, *LATENCY], "eval.batch_size=1")) == kept(late)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["policy.overrides={temporal_ensemble_coeff: 0.01, n_action_steps: 1}"], "temporal_ensemble_coeff: null"),
        (["eval.clock.join=rtc"], "eval.clock.join=rtc: the act policy has no real-time chunking"),
    ],
)
def test_a_checkpoint_that_cannot_run_in_real_time_is_refused_in_one_line(
    compose: Callable, policies: dict[str, list[str]], overrides: list[str], says: str
) -> None:
    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(*policies["act"], *TASK, *overrides, *LATENCY)
    validate(cfg)
    with pytest.raises(UserError) as err:
        build_run(cfg)
    assert says in str(err.value) and str(err.value).startswith("eval.clock.")


@pytest.mark.parametrize(
    ("config_json", "says"),
    [
        ({"type": "eo1"}, "eval.clock.mode=modeled: the eo1 policy runs its batch in lockstep here"),
        ({"type": "lingbot_va"}, "the lingbot_va policy's chunks depend on more than the row's observations"),
        ({"type": "tdmpc"}, "warm-starts every chunk from the previous chunk's plan"),
        ({"type": "tdmpc", "use_mpc": False}, None),
        ({"type": "groot"}, None),
        ({"type": "xvla"}, None),
        ({"type": "smolvla", "rtc_config": {"enabled": True}}, "enables real-time chunking (rtc_config); run it"),
        ({"type": "evo1", "rtc_config": {"enabled": True}}, "runs here for pi0, pi05, smolvla only; turn it off"),
    ],
)
def test_which_families_run_on_the_clock_is_known_from_config_json(config_json: dict, says: str | None) -> None:
    from lerobot_hydra.policies.lerobot.clocked import clock_refusal
    from lerobot_hydra.schemas.clock import ClockConfig

    why = clock_refusal(config_json, None, None, ClockConfig("modeled", 40.0))
    assert why == says if says is None else says in str(why)
