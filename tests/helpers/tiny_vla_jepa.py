"""A tiny VLA-JEPA (LeRobot 0.6) built offline: a Qwen3-VL backbone (one layer of width 32, a one-block vision
tower over 16-pixel patches, random but seeded weights) saved with its processor into a folder that
`qwen_model_name` names in place of Qwen/Qwen3-VL-2B-Instruct: a word-level tokenizer with Qwen's special tokens,
Qwen2-VL's fast image processor and a minimal chat template of our own. The JEPA world model (a V-JEPA 2 video
encoder, facebook/vjepa2-vitl-fpc64-256) is a training-time module: left out (`enable_world_model=False`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import word_tokenizer

SPECIAL = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
SPECIAL += ["<|image_pad|>", "<|video_pad|>"]
WORDS = "your task is push the t shaped block onto target reach a goal position . infer temporal dynamics from".split()
WORDS += "frames and produce corresponding policy actions user assistant -".split()
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def tiny_qwen3_vl(directory: Path) -> Path:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tokenizer = word_tokenizer(WORDS, SPECIAL, additional_special_tokens=SPECIAL[2:])
    images = Qwen2VLImageProcessorFast(min_pixels=32 * 32 * 4, max_pixels=32 * 32 * 16, patch_size=16, merge_size=2)
    Qwen3VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(), chat_template=TEMPLATE
    ).save_pretrained(directory)
    text = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    text |= {"num_key_value_heads": 1, "head_dim": 16, "vocab_size": len(tokenizer), "max_position_embeddings": 512}
    text["rope_scaling"] = {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 32}
    vision |= {"patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "deepstack_visual_indexes": [0]}
    ids = {
        f"{name}_token_id": tokenizer.convert_tokens_to_ids(f"<|{token}|>")
        for name, token in (("image", "image_pad"), ("video", "video_pad"), ("vision_start", "vision_start"))
    }
    config = Qwen3VLConfig(
        text_config=text,
        vision_config={**vision, "num_position_embeddings": 16},
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        **ids,
    )
    torch.manual_seed(0)
    Qwen3VLForConditionalGeneration(config).save_pretrained(directory)
    return directory


def tiny_vla_jepa_config(root: Path, action_dim: int) -> dict[str, Any]:
    """The tiny vla_jepa config for `action_dim`-dimensional actions and states, its backbone written to
    `root/vla_jepa_vlm`."""
    return {
        "qwen_model_name": str(tiny_qwen3_vl(root / "vla_jepa_vlm").resolve()),
        "enable_world_model": False,
        "torch_dtype": "float32",
        "chunk_size": 4,
        "n_action_steps": 4,
        "action_dim": action_dim,
        "state_dim": action_dim,
        "gripper_dim": action_dim - 1,
        "num_action_tokens_per_timestep": 1,
        "num_embodied_action_tokens_per_instruction": 2,
        "num_inference_timesteps": 2,
        "action_hidden_size": 32,
        "action_num_layers": 1,
        "action_num_heads": 2,
        "action_dropout": 0.0,
        "num_target_vision_tokens": 4,
        "action_max_seq_len": 64,
        "repeated_diffusion_steps": 1,
        "resize_images_to": (64, 64),
    }
