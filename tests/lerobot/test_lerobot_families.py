"""Every LeRobot policy family goes through one loader (LeRobot's own factory and saved processors): tiny
checkpoints of the families that build offline are saved with LeRobot's classes and act on a real simulator;
the YAMLs of the widely used families compose to that loader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import (
    METAWORLD_ACTION,
    METAWORLD_STATE,
    PUSHT_ACTION,
    PUSHT_PIXELS,
    save_checkpoint,
    tiny_multi_task_dit_config,
)
from lerobot_hydra.core.errors import UserError
from tests.conftest import evaluate_here, read_episodes
from tests.helpers.tiny_eo1 import tiny_eo1_config
from tests.helpers.tiny_evo1 import tiny_evo1_config
from tests.helpers.tiny_groot import GROOT_06_ONLY, tiny_groot_config
from tests.helpers.tiny_lingbot_va import tiny_lingbot_va_config
from tests.helpers.tiny_molmoact2 import tiny_molmoact2_config
from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06
from tests.helpers.tiny_vla_jepa import tiny_vla_jepa_config
from tests.helpers.tiny_wall_x import WALL_X_06_ONLY, tiny_wall_x_config
from tests.helpers.tiny_xvla import tiny_xvla_config
from tests.lerobot.test_lerobot_policies import build, first_batch

pytest.importorskip("lerobot")
pytestmark = pytest.mark.lerobot

# Families at their LeRobot defaults (the ImageNet backbone left out: no Hub), or at a tiny config built in the
# test's folder (multi_task_dit on a tiny local CLIP, xvla on a tiny Florence-2 and a local tokenizer, eo1 on a tiny
# local Qwen2.5-VL with its processor, evo1 on a tiny local InternVL, vla_jepa on a tiny local Qwen3-VL).
FAMILIES: dict[str, tuple[Any, Any, list[str], dict[str, Any] | Callable[[Path], dict[str, Any]]]] = {
    "tdmpc": (METAWORLD_STATE, METAWORLD_ACTION, ["env.obs_type=state", "env.task=reach-v3"], {}),
    "vqbet": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], {"pretrained_backbone_weights": None}),
    "gaussian_actor": (METAWORLD_STATE, METAWORLD_ACTION, ["env.obs_type=state", "env.task=reach-v3"], {}),
    "multi_task_dit": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_multi_task_dit_config),
    "xvla": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_xvla_config),
    "eo1": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_eo1_config),
    "evo1": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_evo1_config),
    "vla_jepa": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], lambda root: tiny_vla_jepa_config(root, 2)),
    "groot": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_groot_config),
    "lingbot_va": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_lingbot_va_config),
    "molmoact2": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_molmoact2_config),
    "wall_x": (PUSHT_PIXELS, PUSHT_ACTION, ["env=pusht"], tiny_wall_x_config),
}
# Families that 0.4.4 has too, built here for 0.6 only (why: in each reason).
ONLY_06 = {"xvla": LEROBOT_06_ONLY, "groot": GROOT_06_ONLY, "wall_x": WALL_X_06_ONLY}
# Families whose noise has no per-row hook (noise.py): they run one row at a time (one_row.py).
ONE_ROW = {"vqbet", "gaussian_actor", "multi_task_dit", "xvla", "tdmpc", "evo1", "vla_jepa", "groot", "lingbot_va"}
ONE_ROW |= {"molmoact2", "wall_x"}


@pytest.mark.parametrize("kind", sorted(FAMILIES))
def test_a_family_without_a_yaml_loads_through_lerobots_factory_and_acts(
    compose: Callable, tmp_path: Path, kind: str
) -> None:
    import lerobot.policies  # noqa: F401  registers the families
    from lerobot.configs.policies import PreTrainedConfig

    if kind not in PreTrainedConfig.get_known_choices():
        pytest.skip(f"this LeRobot line has no {kind} family")
    features, action, env, config = FAMILIES[kind]
    if kind in ONLY_06 and not lerobot_06():
        pytest.skip(ONLY_06[kind])
    config = config(tmp_path) if callable(config) else config
    directory = save_checkpoint(tmp_path / kind, kind, features, action, **config)
    # Any LeRobot YAML loads any family: the checkpoint's config.json picks the class.
    env_config, policy = build(compose, "policy=act", f"policy.path={directory}", *env)
    runtime = getattr(policy, "base", policy)  # families without noise hooks run row by row around it
    assert runtime.policy.config.type == kind
    assert (type(policy).__name__ == "RowwisePolicy") == (kind in ONE_ROW)
    policy.reset(env_config.tasks()[0], [1000])
    acted = np.asarray(policy.select_action(first_batch(env_config)))
    _, action_space = env_config.spaces(env_config.tasks()[0])
    assert acted.shape == (1, action[0]) and action_space.contains(acted[0].astype(action_space.dtype))
    assert np.all(np.abs(acted - action[1]) < 4 * action[2])  # un-normalized by the saved postprocessor


@pytest.mark.parametrize("name", ["pi0_fast", "xvla"])
def test_new_family_yamls_compose_to_the_loader_with_their_hub_checkpoint(compose: Callable, name: str) -> None:
    from lerobot_hydra.schemas.schema import instantiate_node, validate

    cfg = compose(f"policy={name}", "device=cpu")
    validate(cfg)
    policy = instantiate_node(cfg.policy)
    assert type(policy).__name__ == "LeRobotPolicyConfig"
    assert policy.device == "cpu" and policy.path.startswith("lerobot/")


@pytest.mark.parametrize("name", ["groot", "multi_task_dit"])
def test_families_without_a_published_checkpoint_ask_for_one(compose: Callable, name: str) -> None:
    with pytest.raises(UserError, match="policy.path is empty; give a Hub repo id"):
        build(compose, f"policy={name}", "env.task=reach-v3")


# Families run end to end on PushT from their tiny build (each loads through its own YAML when it has one).
END_TO_END = {"multi_task_dit": "policy=multi_task_dit", "groot": "policy=groot"}
END_TO_END |= {
    "lingbot_va": "policy=act",
    "molmoact2": "policy=act",
    "wall_x": "policy=act",
}  # no YAMLs: any loads any family


@pytest.mark.parametrize("kind", sorted(END_TO_END))
def test_a_tiny_family_evaluates_end_to_end_offline(tmp_path: Path, kind: str) -> None:
    """LeRobot 0.6's multi_task_dit (CLIP vision and text encoders, a DiT denoiser), GR00T N1.7 (a Qwen3-VL
    backbone, a DiT flow-matching head) and LingBot-VA (a Wan VAE, a UMT5 text encoder, an autoregressive video-action
    transformer whose second chunk feeds the observed frames back) from tiny local builds: the whole eval path on
    PushT, the task string tokenized by the checkpoint's own tokenizer."""
    import lerobot.policies  # noqa: F401  registers the families
    from lerobot.configs.policies import PreTrainedConfig

    if kind not in PreTrainedConfig.get_known_choices():
        pytest.skip(f"{kind} is a LeRobot 0.6 family; this LeRobot line has none")
    if kind in ONLY_06 and not lerobot_06():
        pytest.skip(ONLY_06[kind])
    features, action, _, config = FAMILIES[kind]
    directory = save_checkpoint(tmp_path / kind, kind, features, action, **config(tmp_path))
    steps, episodes = 6, 2
    evaluate_here(
        tmp_path / "run",
        "env=pusht",
        END_TO_END[kind],
        f"policy.path={directory}",
        f"env.episode_length={steps}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.use_async_envs=false",
        "eval.max_episodes_rendered=0",
        "device=cpu",
    )
    records = sorted(read_episodes(tmp_path / "run"), key=lambda r: r["episode_index"])
    assert [(r["episode_index"], r["steps"]) for r in records] == [(k, steps) for k in range(episodes)]
    assert records[0]["sum_reward"] != records[1]["sum_reward"]  # two seeds, two episodes
