"""A tiny EO1 (LeRobot 0.6) built offline: a Qwen2.5-VL backbone (one layer of width 32, a one-block vision tower,
random but seeded weights) saved with its processor into a folder that stands in for Qwen/Qwen2.5-VL-3B-Instruct:
a word-level tokenizer with Qwen's special tokens, Qwen2-VL's image processor at 28x28-pixel units, and a minimal
chat template of our own (system, user with images and text, assistant)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import word_tokenizer

SPECIAL = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
SPECIAL += ["<|image_pad|>", "<|video_pad|>"]
WORDS = "push the t shaped block onto target reach a goal position system user assistant you are robot -".split()
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<|im_end|> {% endfor %}"
)
PIXELS = {"image_min_pixels": 28 * 28 * 4, "image_max_pixels": 28 * 28 * 16}  # 2x2 to 4x4 merged patches


def tiny_qwen25_vl(directory: Path) -> Path:
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
    )
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tokenizer = word_tokenizer(WORDS, SPECIAL, additional_special_tokens=SPECIAL[2:])
    images = Qwen2VLImageProcessor(
        min_pixels=PIXELS["image_min_pixels"], max_pixels=PIXELS["image_max_pixels"], patch_size=14, merge_size=2
    )
    Qwen2_5_VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=Qwen2VLVideoProcessor(), chat_template=TEMPLATE
    ).save_pretrained(directory)
    vocab = len(tokenizer) + 16  # room for the EO1 tokens its processor step adds
    text = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    text |= {"num_key_value_heads": 1, "vocab_size": vocab, "max_position_embeddings": 512}
    text["rope_scaling"] = {"type": "mrope", "mrope_section": [2, 3, 3]}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32}
    vision |= {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "fullatt_block_indexes": [0]}
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config={**vision, "window_size": 56},
        image_token_id=tokenizer.convert_tokens_to_ids("<|image_pad|>"),
        video_token_id=tokenizer.convert_tokens_to_ids("<|video_pad|>"),
        vision_start_token_id=tokenizer.convert_tokens_to_ids("<|vision_start|>"),
        vocab_size=vocab,
    )
    torch.manual_seed(0)
    Qwen2_5_VLForConditionalGeneration(config).save_pretrained(directory)
    return directory


def tiny_eo1_config(root: Path) -> dict[str, Any]:
    """The tiny eo1 config, its backbone and processor written to `root/eo1_vlm`."""
    return {
        "vlm_base": str(tiny_qwen25_vl(root / "eo1_vlm").resolve()),
        "chunk_size": 4,
        "n_action_steps": 4,
        "num_denoise_steps": 2,
        "max_state_dim": 8,
        "max_action_dim": 8,
        "dtype": "float32",
        **PIXELS,
    }
