"""A tiny MolmoAct2 (LeRobot 0.6) built offline.

LeRobot loads MolmoAct2 from `checkpoint_path` (allenai/MolmoAct2 on the Hub, or a local folder) with its own model
code (`molmoact2_hf_model`): the folder holds `config.json`, `model.safetensors`, `processor_config.json` and a Qwen2
tokenizer (and `norm_stats.json` for a `norm_tag`; the tiny one has none: its processors keep the dataset stats they
were built with). Written here: a one-layer vision tower over 28x28 images, a one-layer text model of width 32 and a
one-layer action expert, random but seeded; a byte-level BPE tokenizer without merges (every byte is a token) with
MolmoAct2's special tokens. The continuous action mode only, so the discrete action tokenizer
(allenai/MolmoAct2-FAST-Tokenizer) is not needed; `max_action_dim` stays 32, the only one LeRobot accepts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devkit.lerobot_checkpoints import byte_tokenizer

WIDTH = 32
IMAGE = 28
MAX_ACTION_DIM = 32  # LeRobot refuses a MolmoAct2 checkpoint of any other
HORIZON = 4
STATE_TOKENS = 16
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|image|>", "<|video|>", "<im_patch>", "<im_low>", "<im_start>"]
SPECIAL += ["<low_res_im_start>", "<frame_start>", "<im_end>", "<frame_end>", "<im_col>", "<action_output>"]
SPECIAL += ["<action_start>", "<action_end>", "<state_start>", "<state_end>", "<setup_start>", "<setup_end>"]
SPECIAL += ["<control_start>", "<control_end>"]


def tiny_tokenizer() -> Any:
    from lerobot.policies.molmoact2.processor_molmoact2 import STATE_TOKEN_PREFIX

    return byte_tokenizer(SPECIAL + [f"{STATE_TOKEN_PREFIX}{i}>" for i in range(STATE_TOKENS)])


def tiny_molmoact2_model(directory: Path) -> Path:
    """The model folder that `checkpoint_path` names."""
    import torch
    from lerobot.policies.molmoact2.molmoact2_hf_model.configuration_molmoact2 import MolmoAct2Config
    from lerobot.policies.molmoact2.molmoact2_hf_model.modeling_molmoact2 import (
        MolmoAct2ForConditionalGeneration,
    )

    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(directory)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL}
    heads = {"num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 16}
    vit = {"hidden_size": WIDTH, "intermediate_size": 64, "num_hidden_layers": 1, **heads}
    vit |= {"image_default_input_size": (IMAGE, IMAGE), "image_patch_size": 14, "image_num_pos": 4}
    adapter = {"vit_layers": (-1,), "hidden_size": WIDTH, "intermediate_size": 64, "text_hidden_size": WIDTH, **heads}
    text = {"hidden_size": WIDTH, "intermediate_size": 64, "num_hidden_layers": 1, **heads}
    text |= {"vocab_size": len(tokenizer), "additional_vocab_size": 0, "max_position_embeddings": 512}
    expert = {"hidden_size": WIDTH, "num_layers": 1, "num_heads": 2, "ffn_multiple_of": 16, "timestep_embed_dim": 16}
    config = MolmoAct2Config(
        vit_config=vit,
        adapter_config=adapter,
        text_config=text,
        action_expert_config=expert,
        max_action_dim=MAX_ACTION_DIM,
        max_action_horizon=HORIZON,
        action_mode="continuous",
        flow_matching_num_steps=2,
        image_start_token_id=ids["<im_start>"],
        low_res_image_start_token_id=ids["<low_res_im_start>"],
        image_end_token_id=ids["<im_end>"],
        image_low_res_id=ids["<im_low>"],
        image_patch_id=ids["<im_patch>"],
        image_col_id=ids["<im_col>"],
        frame_start_token_id=ids["<frame_start>"],
        frame_end_token_id=ids["<frame_end>"],
        action_output_token_id=ids["<action_output>"],
        action_start_token_id=ids["<action_start>"],
        action_end_token_id=ids["<action_end>"],
        state_start_token_id=ids["<state_start>"],
        state_end_token_id=ids["<state_end>"],
        num_state_tokens=STATE_TOKENS,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    MolmoAct2ForConditionalGeneration(config).save_pretrained(directory)
    for code in directory.glob("*.py"):  # transformers copies the config's module beside it: nothing loads it
        code.unlink()
    images = {"size": {"height": IMAGE, "width": IMAGE}, "max_crops": 1, "patch_size": 14, "pooling_size": [2, 2]}
    videos = {"size": {"height": IMAGE, "width": IMAGE}, "patch_size": 14, "pooling_size": [2, 2]}
    processor = {"image_processor": images, "video_processor": videos}
    (directory / "processor_config.json").write_text(json.dumps(processor))
    return directory.resolve()


def tiny_molmoact2_config(root: Path) -> dict[str, Any]:
    """The tiny molmoact2 config, its model folder written to `root/molmoact2_model`."""
    return {
        "checkpoint_path": str(tiny_molmoact2_model(root / "molmoact2_model")),
        "action_mode": "continuous",
        "inference_action_mode": "continuous",
        "chunk_size": HORIZON,
        "n_action_steps": HORIZON,
        "num_state_tokens": STATE_TOKENS,
        "num_flow_timesteps": 2,
        "enable_inference_cuda_graph": False,
        "model_dtype": "float32",
    }
