"""Tiny pi0 and pi0.5 checkpoints (LeRobot 0.6), built offline: a PaliGemma backbone and Gemma action expert of a
few thousand weights per layer, random but seeded, and a word-level tokenizer saved beside the checkpoint.

LeRobot sizes these models from a fixed table (`get_gemma_config`: only "gemma_300m" and "gemma_2b", over a
SigLIP-So400m vision tower and PaliGemma's 257152-token vocabulary, 1.3 to 3.5 billion weights), which no config
field changes. `tiny_gemma()` swaps that table, inside the block only, for one tiny Gemma size, so the same
modeling code builds a 25M-weight model; every process that loads such a checkpoint must be inside it
(tests/helpers/lerobot_eval_rows.py runs LeRobot's own `lerobot-eval` so). This is a test seam: the adapter under test
loads the checkpoint through LeRobot's factory as it loads a real one.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import Action, Features, _features, _stats, word_tokenizer

# One Gemma size for the backbone and the action expert (their layers attend jointly: same depth and heads).
WIDTH, DEPTH, HEADS, HEAD_DIM, MLP = 32, 1, 2, 16, 64
VISION = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "patch_size": 14}
IMAGE = 28  # 2x2 patches
MODULES = ("lerobot.policies.pi0.modeling_pi0", "lerobot.policies.pi05.modeling_pi05")
MODULES += ("lerobot.policies.pi0_fast.modeling_pi0_fast",)  # tiny_pi_fast.py

TINY_PI = {
    "chunk_size": 4,
    "n_action_steps": 4,
    "num_inference_steps": 2,
    "max_state_dim": 8,
    "max_action_dim": 8,
    "image_resolution": (IMAGE, IMAGE),
    "tokenizer_max_length": 40,
    "dtype": "float32",
}


# Why these tiny builds need LeRobot 0.6 (3.12 line): LeRobot 0.4.4's pi0/pi0.5 refuse stock transformers (they need
# its patched fork: "An incorrect transformer version is used"), and its xvla reads Florence-2's remote-code config.
LEROBOT_06_ONLY = "tiny pi0/pi0.5/pi0_fast/xvla builds need LeRobot 0.6 (0.4.4: a patched transformers / remote code)"


def lerobot_06() -> bool:
    from lerobot_hydra.policies.lerobot.versions import lerobot_version

    return tuple(int(part) for part in lerobot_version().split(".")[:2]) >= (0, 6)


def _vision_config() -> Any:
    """A SigLIP vision config whose projection to the language width and MLP size stay tiny (LeRobot's PaliGemma
    builder sets them to the 2B model's after creating it), with a vision model registered for it."""
    from transformers import AutoModel, SiglipVisionConfig, SiglipVisionModel

    class TinyVision(SiglipVisionConfig):
        def __setattr__(self, key: str, value: Any) -> None:
            if key in ("projection_dim", "intermediate_size") and key in self.__dict__:
                return
            super().__setattr__(key, value)

    class TinyVisionModel(SiglipVisionModel):
        config_class = TinyVision

    AutoModel.register(TinyVision, TinyVisionModel, exist_ok=True)
    return TinyVision(**VISION, projection_dim=WIDTH, intermediate_size=32)


@contextlib.contextmanager
def tiny_gemma() -> Iterator[None]:
    """Inside the block, LeRobot's pi0, pi0.5 and pi0_fast build every Gemma variant at the tiny size."""
    import importlib
    from unittest import mock

    from transformers import PaliGemmaConfig
    from transformers.models.auto import CONFIG_MAPPING

    def paligemma() -> Any:
        config = PaliGemmaConfig()
        config.vision_config = _vision_config()
        return config

    mapping = {"paligemma": paligemma, "gemma": CONFIG_MAPPING["gemma"]}
    with contextlib.ExitStack() as stack:
        for name in MODULES:
            module = importlib.import_module(name)
            size = module.GemmaConfig(WIDTH, DEPTH, MLP, HEADS, 1, HEAD_DIM)
            stack.enter_context(mock.patch.object(module, "get_gemma_config", lambda _variant, s=size: s))
            stack.enter_context(mock.patch.object(module, "CONFIG_MAPPING", mapping))
        yield


def paligemma_tokenizer(directory: Path) -> Path:
    """A word-level tokenizer for pi0/pi0.5 prompts ("Task: ..., State: 12 200 ...;\\nAction: "), ids far below
    PaliGemma's vocabulary size."""
    words = "push the t shaped block onto target reach a goal position pick and place open drawer close".split()
    words += ["Task", "State", "Action", ":", ",", ";", "-", "."] + [str(n) for n in range(256)]
    word_tokenizer(words, ["<unk>", "<pad>", "<bos>", "<eos>"], bos_token="<bos>", eos_token="<eos>").save_pretrained(
        directory
    )
    return directory


def quantile_stats(features: Features, action: Action) -> dict[str, dict[str, Any]]:
    """`_stats` with the 1% and 99% quantiles pi0.5 normalizes states and actions by (its mean -+ std)."""
    stats = _stats(features, action)
    for values in stats.values():
        values.update(q01=values["min"], q99=values["max"], q10=values["min"], q90=values["max"])
    return stats


def tiny_pi(directory: Path, policy_type: str, features: Features, action: Action, **changes: Any) -> Path:
    """A `policy_type` ("pi0" or "pi05") checkpoint in `directory`, its tokenizer in `directory/tokenizer`;
    `changes`: config fields to set otherwise. Call inside `tiny_gemma()`."""
    import torch
    from lerobot.policies.factory import get_policy_class, make_policy_config, make_pre_post_processors
    from lerobot.processor.tokenizer_processor import TokenizerProcessorStep

    tokenizer = paligemma_tokenizer(directory / "tokenizer")
    inputs, outputs = _features(features, action[0])
    config = make_policy_config(
        policy_type, input_features=inputs, output_features=outputs, device="cpu", **{**TINY_PI, **changes}
    )
    torch.manual_seed(0)
    policy = get_policy_class(policy_type)(config)
    # LeRobot's recipe names google/paligemma-3b-pt-224: a folder of that name here stands in for the Hub while
    # the pipelines are made, then the tokenizer step is pointed at the checkpoint's own copy.
    hub_name = directory / "hub" / "google" / "paligemma-3b-pt-224"
    hub_name.parent.mkdir(parents=True, exist_ok=True)
    if not hub_name.exists():
        hub_name.symlink_to(tokenizer.resolve(), target_is_directory=True)
    with contextlib.chdir(directory / "hub"):
        preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=quantile_stats(features, action))
    for step in preprocessor.steps:
        if isinstance(step, TokenizerProcessorStep):
            step.tokenizer_name = str(tokenizer.resolve())
    shutil.rmtree(directory / "hub")
    policy.save_pretrained(directory)
    preprocessor.save_pretrained(directory)
    postprocessor.save_pretrained(directory)
    return directory
