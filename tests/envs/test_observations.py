"""Observations only when read: the env computes what the policy reads (and what videos need), the same episodes
come out as when it computes everything (`env.compute_all_observations=true`), and what is not read is not rendered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.app.evaluation import evaluate_config
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.schemas.schema import instantiate_node, validate
from tests.conftest import outcome, read_episodes
from tests.helpers.metaworld_frames import count_frames

SIZE = 64
METAWORLD_RANDOM = (
    "env.task=[reach-v3]",
    "policy=random",
    "env.episode_length=20",
    f"env.observation_height={SIZE}",
    f"env.observation_width={SIZE}",
    "eval.n_episodes=3",
    "eval.batch_size=2",
    "eval.use_async_envs=false",  # in-process sub-envs, so that this process sees every render
)


def run_in_process(compose: Callable, out: Path, *overrides: str) -> list[dict[str, Any]]:
    cfg = compose(*overrides, "device=cpu")
    evaluate_config(cfg, validate(cfg), out, "")
    return read_episodes(out)


def computed(compose: Callable, *overrides: str) -> EnvConfig:
    """The env config the run's simulators get."""
    cfg = compose(*overrides)
    env = instantiate_node(cfg.env)
    return env.observing(instantiate_node(cfg.policy).reads(env))


def test_policies_declare_what_they_read(compose: Callable) -> None:
    random_env = computed(compose, "policy=random")
    assert random_env.obs_type == "state"  # type: ignore[attr-defined]
    space, _ = random_env.spaces(random_env.tasks()[0])
    assert set(space.spaces) == {"agent_pos", "environment_state"}  # what the workers' shared memory holds
    forced = computed(compose, "policy=random", "env.compute_all_observations=true")
    assert "pixels" in forced.spaces(forced.tasks()[0])[0].spaces
    expert = instantiate_node(compose().policy)
    assert expert.reads(instantiate_node(compose().env)) == {"observation.environment_state"}


def test_the_debug_option_does_not_change_the_run_identity(compose: Callable) -> None:
    from lerobot_hydra.run.identity import run_identity

    plain, forced = compose("policy=random"), compose("policy=random", "env.compute_all_observations=true")
    assert run_identity(plain, validate(plain)) == run_identity(forced, validate(forced))


def test_metaworld_random_renders_only_filmed_frames_and_keeps_its_episodes(
    compose: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frames = count_frames(monkeypatch)
    skipping = run_in_process(compose, tmp_path / "skip", *METAWORLD_RANDOM, "eval.max_episodes_rendered=1")
    skipped_frames = frames["drawn"]
    frames.clear()
    forced = ("eval.max_episodes_rendered=1", "env.compute_all_observations=true")
    everything = run_in_process(compose, tmp_path / "all", *METAWORLD_RANDOM, *forced)
    assert sorted(map(outcome, skipping)) == sorted(map(outcome, everything))
    assert len(skipping) == 3
    filmed = next(r for r in skipping if r["episode_index"] == 0)
    # Only episode 0's frames (after its reset and each step) were drawn; computing everything draws every step.
    assert skipped_frames == filmed["steps"] + 1
    assert frames["drawn"] >= sum(r["steps"] + 1 for r in everything)
    assert (tmp_path / "skip" / filmed["video_path"]).stat().st_size > 0


@pytest.fixture(scope="module")
def libero_one_camera(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ACT that reads LIBERO's agentview camera and the 8-D state, not the wrist camera."""
    from devkit.lerobot_checkpoints import tiny_act

    features = {"observation.images.image": ("VISUAL", (3, SIZE, SIZE)), "observation.state": ("STATE", (8,))}
    return tiny_act(tmp_path_factory.mktemp("act_libero"), features, (7, 0.0, 0.3))


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.lerobot
def test_libero_renders_only_the_camera_the_checkpoint_reads(
    compose: Callable, libero_one_camera: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from robosuite.utils.binding_utils import MjSim

    from lerobot_hydra.policies.lerobot.rows import PerRowLeRobotPolicy as Runtime  # ACT's runtime (per-row)

    renders = Counter[str]()
    render = MjSim.render

    def counted(self: Any, *args: Any, camera_name: str | None = None, **kwargs: Any) -> Any:
        renders[str(camera_name)] += 1
        return render(self, *args, camera_name=camera_name, **kwargs)

    seen: list[tuple[dict[str, np.ndarray], np.ndarray]] = []
    select = Runtime.select_action

    def recorded(self: Runtime, batch: dict[str, Any]) -> Any:
        action = select(self, batch)
        read = {k: np.array(v) for k, v in batch.items() if k in ("observation.images.image", "observation.state")}
        seen.append((read, np.array(action.detach() if hasattr(action, "detach") else action)))
        return action

    monkeypatch.setattr(MjSim, "render", counted)
    monkeypatch.setattr(Runtime, "select_action", recorded)
    run = (
        "env=libero",
        "policy=act",
        f"policy.path={libero_one_camera}",
        "env.task=libero_spatial",
        "env.task_ids=[0]",
        "env.episode_length=5",
        f"env.observation_height={SIZE}",
        f"env.observation_width={SIZE}",
        "eval.n_episodes=1",
        "eval.batch_size=1",
        "eval.max_episodes_rendered=0",
    )
    skipping = run_in_process(compose, tmp_path / "skip", *run)
    skipped_renders, skipped_seen = dict(renders), list(seen)
    renders.clear()
    seen.clear()
    everything = run_in_process(compose, tmp_path / "all", *run, "env.compute_all_observations=true")

    assert [outcome(r) for r in skipping] == [outcome(r) for r in everything]
    assert skipped_renders.get("robot0_eye_in_hand", 0) == 0 and skipped_renders["agentview"] > 0
    assert renders["robot0_eye_in_hand"] > 0 and renders["agentview"] == skipped_renders["agentview"]
    # The policy saw the same camera and state and chose the same actions at every step.
    assert len(skipped_seen) == len(seen) == 5
    for (batch_a, action_a), (batch_b, action_b) in zip(skipped_seen, seen, strict=True):
        assert batch_a.keys() == batch_b.keys() == {"observation.images.image", "observation.state"}
        assert all(np.array_equal(batch_a[k], batch_b[k]) for k in batch_a)
        assert np.array_equal(action_a, action_b)
