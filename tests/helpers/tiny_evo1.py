"""A tiny EVO1 (LeRobot 0.6) built offline: an InternVL backbone (a one-layer vision tower over 28x28 images and
a one-layer Qwen2 of width 32, random but seeded weights) with a word-level tokenizer carrying InternVL's image
tokens, saved into a folder that `vlm_model_name` names in place of OpenGVLab/InternVL3-1B-hf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import word_tokenizer

SPECIAL = ["<unk>", "<|endoftext|>", "<img>", "</img>", "<IMG_CONTEXT>"]
WORDS = "push the t shaped block onto target reach a goal position -".split()
WIDTH = 32


def tiny_internvl(directory: Path) -> Path:
    import torch
    from transformers import InternVLConfig, InternVLModel

    tokenizer = word_tokenizer(WORDS, SPECIAL, additional_special_tokens=SPECIAL[2:])
    tokenizer.save_pretrained(directory)
    vision = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32}
    text = {"model_type": "qwen2", "hidden_size": WIDTH, "intermediate_size": 64, "num_hidden_layers": 1}
    text |= {"num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": len(tokenizer)}
    config = InternVLConfig(
        vision_config={**vision, "image_size": [28, 28], "patch_size": [14, 14]},
        text_config={**text, "max_position_embeddings": 256},
        image_token_id=tokenizer.convert_tokens_to_ids("<IMG_CONTEXT>"),
        image_seq_length=1,  # 2x2 patches, pixel-shuffled by 0.5
        downsample_ratio=0.5,
    )
    torch.manual_seed(0)
    InternVLModel(config).save_pretrained(directory)
    return directory


def tiny_evo1_config(root: Path) -> dict[str, Any]:
    """The tiny evo1 config, its backbone and tokenizer written to `root/evo1_vlm`."""
    return {
        "vlm_model_name": str(tiny_internvl(root / "evo1_vlm").resolve()),
        "vlm_num_layers": 1,
        "vlm_dtype": "float32",
        "use_flash_attn": False,
        "enable_gradient_checkpointing": False,
        "image_resolution": (28, 28),
        "embed_dim": WIDTH,
        "hidden_dim": WIDTH,
        "state_hidden_dim": WIDTH,
        "num_heads": 2,
        "num_layers": 1,
        "num_inference_timesteps": 2,
        "chunk_size": 4,
        "n_action_steps": 4,
        "max_text_length": 32,
        "max_state_dim": 8,
        "max_action_dim": 8,
    }
