"""A tiny GR00T N1.7 (LeRobot 0.6) built offline.

LeRobot builds the policy with `GR00TN17.from_pretrained(base_model_path)`, a whole N1.7 model folder
(nvidia/GR00T-N1.7-3B on the Hub), and its preprocessor loads the tokenizer, image and video processors of
nvidia/Cosmos-Reason2-2B (`GrootN17VLMEncodeStep.model_name`). Both are made here in local folders:
- the backbone: a Qwen3-VL of one layer of width 32 and a one-block vision tower, saved with its processor (the
  tiny vla_jepa's, whose tokenizer carries Qwen's special tokens and the chat template);
- the base model: `GR00TN17Config` over that backbone (`model_name` names its folder), a 2-block DiT action head
  of width 32, random but seeded weights, saved with `save_pretrained` (no sidecar statistics: the preprocessor
  normalizes with the dataset stats it is given, as when fine-tuning the base model on a new embodiment);
- the policy: LeRobot's `GrootPolicy` over that base, saved with its processors, the VLM step pointed at the
  backbone's folder, and camera frames resized to 32x32 before the VLM processor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import Action, Features, save_checkpoint
from tests.helpers.tiny_vla_jepa import tiny_qwen3_vl

# LeRobot 0.4.4's groot is GR00T N1.5: its Eagle 2.5 backbone is built from `AutoConfig.from_pretrained(...,
# trust_remote_code=True)` over LeRobot's vendored Eagle code and the Hub's lerobot/eagle2hg-processor-groot-n1p5.
GROOT_06_ONLY = "the tiny GR00T is N1.7 (LeRobot 0.6); 0.4.4's N1.5 runs Eagle remote code from the Hub"
WIDTH = 32
HORIZON = 4
MAX_DIM = 8
TINY_GROOT_MODEL = {
    "model_name": "",  # the backbone's folder
    "backbone_model_type": "qwen",
    "model_dtype": "float32",
    "dtype": "float32",
    "select_layer": 1,
    "backbone_embedding_dim": WIDTH,
    "hidden_size": WIDTH,
    "input_embedding_dim": WIDTH,
    "max_state_dim": MAX_DIM,
    "max_action_dim": MAX_DIM,
    "action_horizon": HORIZON,
    "max_seq_len": 16,
    "max_num_embodiments": 11,  # "new_embodiment" is id 10
    "num_inference_timesteps": 2,
    "image_target_size": [32, 32],
    "image_crop_size": [28, 28],
    "diffusion_model_cfg": {
        "positional_embeddings": None,
        "num_layers": 2,
        "num_attention_heads": 2,
        "attention_head_dim": WIDTH // 2,
        "norm_type": "ada_norm",
        "dropout": 0.0,
        "final_dropout": True,
        "output_dim": WIDTH,
        "interleave_self_attention": True,
    },
    "vl_self_attention_cfg": {
        "positional_embeddings": None,
        "num_layers": 1,
        "num_attention_heads": 2,
        "attention_head_dim": WIDTH // 2,
        "dropout": 0.0,
        "final_dropout": True,
    },
}


def tiny_groot_base(directory: Path) -> Path:
    """A GR00T N1.7 model folder (`base_model_path`) over a tiny Qwen3-VL in `directory/backbone`."""
    import torch
    from lerobot.policies.groot.groot_n1_7 import GR00TN17, GR00TN17Config

    backbone = tiny_qwen3_vl(directory / "backbone").resolve()
    config = GR00TN17Config(**{**TINY_GROOT_MODEL, "model_name": str(backbone)})
    torch.manual_seed(0)
    GR00TN17(config, load_backbone_weights=False).save_pretrained(directory)
    return directory.resolve()


def tiny_groot_config(root: Path) -> dict[str, Any]:
    """The tiny groot config for `save_checkpoint`, its base model written to `root/groot_base`; its VLM step reads
    the backbone's processor and resizes frames to 32x32."""
    base = tiny_groot_base(root / "groot_base")
    vlm = {"model_name": str(base / "backbone"), "image_target_size": [32, 32], "image_crop_size": [28, 28]}
    return {
        "base_model_path": str(base),
        "chunk_size": HORIZON,
        "n_action_steps": HORIZON,
        "max_state_dim": MAX_DIM,
        "max_action_dim": MAX_DIM,
        "use_bf16": False,
        "step_changes": {"GrootN17VLMEncodeStep": vlm},
    }


def tiny_groot(directory: Path, features: Features, action: Action, **changes: Any) -> Path:
    """A groot checkpoint in `directory`, its base model and backbone in `directory/groot_base`."""
    return save_checkpoint(directory, "groot", features, action, **{**tiny_groot_config(directory), **changes})
