"""A tiny X-VLA (LeRobot 0.6) built offline: its Florence-2 backbone (a DaViT vision tower and a BART encoder) from
a small native `transformers` config in the policy's own `florence_config`, random but seeded weights, and a
word-level tokenizer saved beside the checkpoint in place of facebook/bart-large."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import Action, Features, save_checkpoint, word_tokenizer

WIDTH = 32
FLORENCE = {
    "vision_config": {
        "depths": [1, 1],
        "patch_size": [7, 3],
        "patch_stride": [4, 2],
        "patch_padding": [3, 1],
        "patch_prenorm": [False, True],
        "embed_dim": [8, 16],
        "num_heads": [1, 2],
        "num_groups": [1, 2],
        "window_size": 2,
        "drop_path_rate": 0.0,
        "projection_dim": WIDTH,
        "max_position_embeddings": 8,
        "max_temporal_embeddings": 4,
    },
    "text_config": {
        "d_model": WIDTH,
        "encoder_layers": 1,
        "decoder_layers": 1,
        "encoder_attention_heads": 2,
        "decoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "max_position_embeddings": 64,
    },
}
TINY_XVLA = {
    "chunk_size": 4,
    "n_action_steps": 4,
    "num_denoising_steps": 2,
    "hidden_size": WIDTH,
    "depth": 1,
    "num_heads": 2,
    "len_soft_prompts": 2,
    "num_domains": 2,
    "dim_time": 8,
    "max_len_seq": 64,
    "action_mode": "auto",
    "max_state_dim": 8,
    "max_action_dim": 8,
    "tokenizer_max_length": 16,
    "resize_imgs_with_padding": (32, 32),  # 4x4 patches: within the tiny position table
}


def tiny_xvla_config(root: Path) -> dict[str, Any]:
    """The tiny xvla config, its tokenizer written to `root/xvla_tokenizer`. States and actions are normalized by
    mean and std (the family's default is none), so that the random head's actions land around the action mean."""
    from lerobot.configs.types import NormalizationMode

    words = "push the t shaped block onto target reach a goal position pick and place open drawer close".split()
    words += "up black bowl between plate ramekin it on".split()  # LIBERO's libero_spatial task 0
    special = ["<unk>", "<pad>", "<s>", "</s>", "<image>"]
    tokenizer = word_tokenizer(words + ["-", "."], special, bos_token="<s>", eos_token="</s>")
    tokenizer.save_pretrained(root / "xvla_tokenizer")
    florence = {
        **FLORENCE,
        "text_config": {**FLORENCE["text_config"], "vocab_size": len(tokenizer), "pad_token_id": 1},
        "image_token_id": special.index("<image>"),
        "pad_token_id": 1,
        "bos_token_id": 2,
        "eos_token_id": 3,
    }
    modes = {"VISUAL": NormalizationMode.IDENTITY, "STATE": NormalizationMode.MEAN_STD}
    return {
        **TINY_XVLA,
        "florence_config": florence,
        "tokenizer_name": str((root / "xvla_tokenizer").resolve()),
        "normalization_mapping": {**modes, "ACTION": NormalizationMode.MEAN_STD},
    }


def tiny_xvla(directory: Path, features: Features, action: Action, **changes: Any) -> Path:
    """An xvla checkpoint in `directory`, its tokenizer in `directory/xvla_tokenizer`; `changes`: other fields."""
    config = {**tiny_xvla_config(directory), **changes}
    return save_checkpoint(directory, "xvla", features, action, **config)


# lerobot/xvla-libero's interface: two LIBERO cameras, the 20-D ee6d state that LeRobot's XVLA LIBERO processor
# makes, and 20-D ee6d actions (position, 6D rotation, gripper logit, twice).
XVLA_LIBERO_ACTION: Action = (20, 0.0, 0.5)
# Steps of LeRobot's default xvla preprocessor that lerobot-eval's XVLA LIBERO env processors do in its place
# (xvla-libero's own preprocessor has none of them: the env ones normalize images before it sees them).
ENV_DONE_STEPS = ("XVLAImageToFloatProcessorStep", "XVLAImageNetNormalizeProcessorStep", "XVLAAddDomainIdProcessorStep")


def xvla_libero_features(size: int) -> Features:
    camera = ("VISUAL", (3, size, size))
    return {
        "observation.images.image": camera,
        "observation.images.image2": camera,
        "observation.state": ("STATE", (20,)),
    }


def tiny_xvla_libero(directory: Path, size: int, tap: bool = False) -> Path:
    """A tiny xvla with lerobot/xvla-libero's interface (`xvla_libero_features(size)`, ee6d actions); `tap`:
    its preprocessor records what it is handed."""
    config = {**tiny_xvla_config(directory), "action_mode": "ee6d", "max_state_dim": 20, "max_action_dim": 20}
    features = xvla_libero_features(size)
    from tests.helpers.lerobot_tap import ObservationTap

    steps = (ObservationTap(),) if tap else ()
    return save_checkpoint(
        directory, "xvla", features, XVLA_LIBERO_ACTION, first_steps=steps, without_steps=ENV_DONE_STEPS, **config
    )
