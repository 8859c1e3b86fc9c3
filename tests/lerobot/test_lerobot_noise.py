"""Stochastic LeRobot policies (tiny diffusion, SmolVLA, pi0, pi0.5, pi0-FAST, ..., built offline) on real MetaWorld
simulators: every episode's outcome is the same whatever its batch size, batch-mates, shard, lane or a resume,
because its noise comes from its own row's generator, seeded from its episode."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import (
    METAWORLD_ACTION,
    METAWORLD_STATE,
    save_checkpoint,
    tiny_diffusion,
    tiny_smolvla,
)
from lerobot_hydra.app.evaluation import evaluate_config
from lerobot_hydra.schemas.schema import instantiate_node
from tests.conftest import outcome, read_episodes
from tests.helpers.tiny_eo1 import tiny_eo1_config
from tests.helpers.tiny_evo1 import tiny_evo1_config
from tests.helpers.tiny_groot import tiny_groot
from tests.helpers.tiny_lingbot_va import tiny_lingbot_va_config
from tests.helpers.tiny_molmoact2 import tiny_molmoact2_config
from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06, tiny_gemma, tiny_pi
from tests.helpers.tiny_pi_fast import tiny_pi_fast
from tests.helpers.tiny_vla_jepa import tiny_vla_jepa_config
from tests.helpers.tiny_wall_x import tiny_wall_x_config
from tests.helpers.tiny_xvla import tiny_xvla

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

EPISODES = 4
TASK = ["env.task=reach-v3", "eval.use_async_envs=false"]
# Two chunks per episode, so that a row's generator also advances within its episode. SmolVLA needs a camera
# (small frames: it resizes them itself), and a MetaWorld frame costs ~0.25 s on CPU: short episodes.
STATE = ["env.obs_type=state", "env.episode_length=8"]  # diffusion: chunks of 4 actions
PIXELS = ["env.obs_type=pixels_agent_pos", "env.observation_height=32", "env.observation_width=32"]
PIXELS += ["env.episode_length=4", "policy.overrides={n_action_steps: 2}"]
METAWORLD_PIXELS = {"observation.image": ("VISUAL", (3, 32, 32)), "observation.state": ("STATE", (4,))}
SHAPES = (METAWORLD_PIXELS, METAWORLD_ACTION)


class Checkpoints(dict[str, list[str]]):
    """Each family's overrides; its tiny checkpoint is built the first time a test asks for it."""

    def __init__(self, builders: dict[str, Callable[[], list[str]]]) -> None:
        super().__init__()
        self.builders = builders

    def __contains__(self, kind: object) -> bool:
        return kind in self.builders

    def __missing__(self, kind: str) -> list[str]:
        self[kind] = self.builders[kind]()
        return self[kind]


def builders(root: Path) -> dict[str, Callable[[], list[str]]]:
    def path(kind: str, config: Callable[[], dict[str, Any]]) -> str:
        return f"policy.path={save_checkpoint(root / kind, kind, METAWORLD_PIXELS, METAWORLD_ACTION, **config())}"

    def without_yaml(kind: str, config: Callable[[], dict[str, Any]]) -> Callable[[], list[str]]:
        return lambda: ["policy=act", path(kind, config), *PIXELS]  # no YAML: any loads any family

    def with_yaml(kind: str, build: Callable[..., Path], *args: Any) -> Callable[[], list[str]]:
        return lambda: [f"policy={kind}", f"policy.path={build(root / kind, *args)}", *PIXELS]

    diffusion = lambda: tiny_diffusion(root / "diffusion", METAWORLD_STATE, METAWORLD_ACTION)  # noqa: E731
    built = {
        "diffusion": lambda: ["policy=diffusion", f"policy.path={diffusion()}", *STATE],
        "smolvla": with_yaml("smolvla", tiny_smolvla, METAWORLD_PIXELS, METAWORLD_ACTION),
    }
    if not lerobot_06():
        return built
    dim = METAWORLD_ACTION[0]
    built |= {kind: with_yaml(kind, tiny_pi, kind, METAWORLD_PIXELS, METAWORLD_ACTION) for kind in ("pi0", "pi05")}
    built |= {
        "xvla": with_yaml("xvla", tiny_xvla, METAWORLD_PIXELS, METAWORLD_ACTION),  # no per-row hook: one row at a time
        "groot": with_yaml("groot", tiny_groot, METAWORLD_PIXELS, METAWORLD_ACTION),  # noise drawn inline: one row
        "eo1": without_yaml("eo1", lambda: tiny_eo1_config(root)),
        "evo1": without_yaml("evo1", lambda: tiny_evo1_config(root)),
        "vla_jepa": without_yaml("vla_jepa", lambda: tiny_vla_jepa_config(root, dim)),
        "molmoact2": without_yaml("molmoact2", lambda: tiny_molmoact2_config(root)),
        "wall_x": without_yaml("wall_x", lambda: tiny_wall_x_config(root)),
    }
    # Chunks of 4 actions, then 8 (n_action_steps is not a setting): its second chunk feeds frames back.
    lingbot = lambda: tiny_lingbot_va_config(root, "observation.image", dim)  # noqa: E731
    built["lingbot_va"] = lambda: ["policy=act", path("lingbot_va", lingbot), *PIXELS[:3], "env.episode_length=6"]
    # pi0-FAST decodes greedily (no noise, rows batched) or samples at a temperature (one row at a time).
    fast = functools.cache(lambda: ["policy=pi0_fast", f"policy.path={tiny_pi_fast(root / 'pi0_fast', *SHAPES)}"])
    built["pi0_fast"] = lambda: [*fast(), *PIXELS]
    unsampled = [o for o in PIXELS if not o.startswith("policy.overrides")]
    built["pi0_fast_sampled"] = lambda: [*fast(), *unsampled, "policy.overrides={n_action_steps: 2, temperature: 1.0}"]
    return built


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    root = tmp_path_factory.mktemp("checkpoints")
    with tiny_gemma() if lerobot_06() else contextlib.nullcontext():  # pi0 and pi0.5 at a tiny size, loaded here
        yield Checkpoints(builders(root))


def run_in(compose: Callable, out_dir: Path, *overrides: str) -> list[tuple]:
    """eval.py's run, in this process: plan, shard, resume from out_dir's records, evaluate, write."""
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(*overrides, "device=cpu", "eval.max_episodes_rendered=0")
    evaluate_config(cfg, validate(cfg), out_dir, "")
    return sorted(outcome(r) for r in read_episodes(out_dir))


# Built offline on a tiny backbone each; a MetaWorld frame costs ~0.25 s on CPU, so each takes a minute or two.
SLOW_FAMILIES = ("smolvla", "pi0", "pi05", "xvla", "eo1", "evo1", "vla_jepa", "groot", "lingbot_va", "molmoact2")
SLOW_FAMILIES += ("wall_x", "pi0_fast", "pi0_fast_sampled")


@pytest.mark.parametrize(
    "family",
    ["diffusion", *(pytest.param(kind, marks=pytest.mark.slow) for kind in SLOW_FAMILIES)],
)
def test_stochastic_episodes_do_not_depend_on_batch_shard_or_resume(
    compose: Callable, policies: dict[str, list[str]], tmp_path: Path, family: str
) -> None:
    if family not in policies:
        pytest.skip(LEROBOT_06_ONLY)
    common = [*policies[family], *TASK, f"eval.n_episodes={EPISODES}"]
    batched = run_in(compose, tmp_path / "batch3", *common, "eval.batch_size=3")  # batches 0-2, 3
    assert len(batched) == EPISODES
    assert len({o[5] for o in batched}) == EPISODES  # every episode its own rewards
    assert run_in(compose, tmp_path / "batch1", *common, "eval.batch_size=1") == batched

    shards = []
    for shard in (0, 1):  # episodes 0-1 and 2-3, each shard one batch
        shard_args = [f"eval.shard_id={shard}", "eval.num_shards=2", "eval.batch_size=3"]
        shards += run_in(compose, tmp_path / f"shard{shard}", *common, *shard_args)
    assert sorted(shards) == batched

    # A killed run: only the first episode's record reached episodes.jsonl; the resume runs 1-3 as one batch.
    resumed = tmp_path / "resumed"
    run_in(compose, resumed, *common, "eval.batch_size=3")
    episodes = resumed / "episodes.jsonl"
    episodes.write_text(episodes.read_text().splitlines(keepends=True)[0])
    assert run_in(compose, resumed, *common, "eval.batch_size=3") == batched


@pytest.mark.slow
def test_smolvla_lanes_do_not_share_noise(compose: Callable, policies: dict[str, list[str]], tmp_path: Path) -> None:
    common = [*policies["smolvla"], "env.task=[reach-v3,push-v3]", "eval.use_async_envs=false"]
    common += ["eval.n_episodes=2", "eval.batch_size=2"]
    serial = run_in(compose, tmp_path / "serial", *common, "eval.max_parallel_tasks=1")
    assert len(serial) == 4
    assert run_in(compose, tmp_path / "lanes", *common, "eval.max_parallel_tasks=2") == serial


def build(compose: Callable, *overrides: str) -> tuple[Any, Any]:
    cfg = compose(*overrides, "device=cpu")
    env = instantiate_node(cfg.env)
    return env, instantiate_node(cfg.policy).build(env, "cpu")


def test_a_family_without_noise_hooks_runs_row_by_row_with_the_same_noise(
    compose: Callable, policies: dict[str, list[str]]
) -> None:
    """The fallback for families without per-row hooks: rows one at a time, each with torch's global generators
    set to its own state. Diffusion through it draws the same numbers as through its hooks, so the episodes agree."""
    from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy
    from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy
    from lerobot_hydra.rollout.lanes import LaneSettings, evaluate
    from lerobot_hydra.rollout.progress import Progress
    from lerobot_hydra.rollout.runner import TaskWork

    env, hooked = build(compose, *policies["diffusion"], *TASK)
    assert isinstance(hooked, LeRobotPolicy) and hooked.noise is not None
    base = hooked.fork()
    base.noise = None  # as for a family without hooks: it draws from torch's global generators
    pre, post = env.build_processors()
    runs = []
    for policy, batch_size in ((hooked, 3), (RowwisePolicy(base), 3), (RowwisePolicy(base.fork()), 1)):
        records: list[Any] = []
        work = [TaskWork(task, list(range(EPISODES))) for task in env.tasks()]
        settings = LaneSettings(env, pre, post, 1000, batch_size, False)
        evaluate(settings, work, lambda p=policy: p, records.append, Progress(60.0))
        runs.append(sorted(outcome(dataclasses.asdict(r)) for r in records))
    assert len(runs[0]) == EPISODES
    assert runs[1] == runs[0] and runs[2] == runs[0]


def test_an_idle_row_draws_nothing_its_batch_mates_see(compose: Callable, policies: dict[str, list[str]]) -> None:
    from tests.lerobot.test_lerobot_policies import first_batch

    env, policy = build(compose, *policies["diffusion"], *TASK)
    task, one = env.tasks()[0], first_batch(env)
    two = {k: np.concatenate([v, v]) if isinstance(v, np.ndarray) else [*v, *v] for k, v in one.items()}
    policy.reset(task, [1000])
    alone = np.asarray(policy.select_action(one))
    for seeds in ([1000, None], [1000, 1001]):
        policy.reset(task, seeds)
        # To float rounding (another batch size): a draw of the other row's noise would move it by far more.
        np.testing.assert_allclose(np.asarray(policy.select_action(two))[:1], alone, rtol=1e-5, atol=1e-6)


def test_noise_drawn_past_the_row_generators_stops_the_run(compose: Callable, policies: dict[str, list[str]]) -> None:
    import torch

    from lerobot_hydra.core.errors import UserError
    from tests.lerobot.test_lerobot_policies import first_batch

    def draw_from_the_global_generator(*_: Any) -> None:  # as a LeRobot version that draws noise of its own
        torch.rand(1)

    env, policy = build(compose, *policies["diffusion"], *TASK)
    policy.policy.diffusion.unet.register_forward_hook(draw_from_the_global_generator)
    policy.reset(env.tasks()[0], [1000])
    with pytest.raises(UserError, match="the diffusion policy drew noise from torch's global generator"):
        policy.select_action(first_batch(env))


@pytest.mark.parametrize(
    "family, model", [("pi0", "pi0.modeling_pi0.PI0Pytorch"), ("pi05", "pi05.modeling_pi05.PI05Pytorch")]
)
def test_pi0_and_pi05_get_per_row_flow_matching_noise(family: str, model: str) -> None:
    """The hook is looked up on the installed LeRobot's model classes (the tiny builds above run it), and a model
    without it falls back to one row at a time."""
    import importlib
    from types import SimpleNamespace

    from lerobot_hydra.policies.lerobot.noise import flow_matching_noise, noise_hooks

    module, _, name = model.rpartition(".")
    model_class = getattr(importlib.import_module(f"lerobot.policies.{module}"), name)
    assert noise_hooks(SimpleNamespace(config=SimpleNamespace(type=family), model=model_class)) is flow_matching_noise
    assert noise_hooks(SimpleNamespace(config=SimpleNamespace(type=family), model=object())) is None  # no hook: rowwise
