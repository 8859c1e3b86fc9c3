"""A tiny WALL-OSS (`wall_x`, LeRobot 0.6) built offline.

LeRobot loads Wall-X with `Qwen2_5_VLMoEForAction.from_pretrained(pretrained_name_or_path)` (x-square-robot/
wall-oss-flow on the Hub, or a local folder): its own MoE Qwen2.5-VL config, `AutoProcessor` and `model.safetensors`
from that folder. All three are written here: a Qwen2.5-VL of one layer of width 32 with two MLP experts (the text
tokens' and the action tokens'), a one-block vision tower, random but seeded; a Qwen2.5-VL processor with a
byte-level tokenizer that carries Wall-X's special tokens. The flow ("diffusion") prediction mode only, so the FAST
action tokenizer (lerobot/fast-action-tokenizer, remote code) is not loaded. Needs LeRobot's `wallx` extra (peft,
qwen-vl-utils, torchdiffeq).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import byte_tokenizer

WALL_X_06_ONLY = "the tiny wall_x is built on LeRobot 0.6's Wall-X config; 0.4.4's own MoE model was not attempted"
WIDTH = 32
MAX_DIM = 8
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
SPECIAL += ["<|propri|>", "<|action|>", "<|action_fast|>", "<|placeholder|>"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} {% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}{% endif %}"
    "{% endfor %}<|im_end|> {% endfor %}"
)


def tiny_wall_x_model(directory: Path) -> Path:
    """The folder that `pretrained_name_or_path` names."""
    import torch
    from lerobot.policies.wall_x.modeling_wall_x import Qwen2_5_VLMoEForAction
    from lerobot.policies.wall_x.qwen_model import Qwen2_5_VLConfig
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tokenizer = byte_tokenizer(SPECIAL)
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=14, merge_size=2),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=TEMPLATE,
    )
    processor.save_pretrained(directory)
    expert = {"hidden_size": WIDTH, "intermediate_size": 64, "hidden_act": "silu"}
    text = {"hidden_size": WIDTH, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}
    text |= {"num_key_value_heads": 1, "vocab_size": len(tokenizer), "max_position_embeddings": 4096}
    text |= {"rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "num_experts": 2, "mlp_moe": True}
    text |= {"experts": [expert, expert], "dim_inputs": (WIDTH, WIDTH), "dof_config": {"action": MAX_DIM}}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": WIDTH}
    vision |= {"patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "fullatt_block_indexes": [0]}
    ids = {
        f"{name}_token_id": tokenizer.convert_tokens_to_ids(f"<|{token}|>")
        for name, token in (("image", "image_pad"), ("video", "video_pad"), ("vision_start", "vision_start"))
    }
    config = Qwen2_5_VLConfig(
        text_config=text,
        vision_config={**vision, "window_size": 56},
        agent_pos_config={"state": MAX_DIM},
        vision_end_token_id=tokenizer.convert_tokens_to_ids("<|vision_end|>"),
        **ids,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    Qwen2_5_VLMoEForAction(config, processor=processor).save_pretrained(directory)
    return directory.resolve()


def tiny_wall_x_config(root: Path) -> dict[str, Any]:
    """The tiny wall_x config, its model folder written to `root/wall_x_model`."""
    return {
        "pretrained_name_or_path": str(tiny_wall_x_model(root / "wall_x_model")),
        "prediction_mode": "diffusion",
        "chunk_size": 4,
        "n_action_steps": 4,
        "max_action_dim": MAX_DIM,
        "max_state_dim": MAX_DIM,
    }
