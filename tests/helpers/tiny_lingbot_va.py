"""A tiny LingBot-VA (LeRobot 0.6) built offline.

LeRobot builds the dual-stream Wan transformer from the policy config and loads its frozen parts from
`wan_pretrained_path` (robbyant/lingbot-va-base on the Hub): `vae/` (diffusers' `AutoencoderKLWan`), `text_encoder/`
(`UMT5EncoderModel`) and `tokenizer/` (`T5TokenizerFast`). All three are made here in a local folder: a Wan2.2-shaped
VAE (48 latent channels and 16x spatial compression, as the policy assumes, at base width 8 with one residual block
per stage), a one-layer UMT5 encoder of width 32 and a T5 (Unigram) tokenizer over a few words. The transformer has
one layer of two 12-wide heads and reads one 32x32 camera (a 2x2 latent: one token per frame); weights are random
but seeded. LingBot-VA runs one env at a time (its noise is drawn for a batch of one), as lerobot_hydra's one-row
families do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

WIDTH = 32
Z_DIM = 48  # LingBot-VA draws its video noise with 48 channels (`_infer`): the Wan2.2 VAE's latent size
WORDS = "push the t shaped block onto target reach a goal position".split()


def tiny_wan(directory: Path) -> Path:
    """`vae/`, `text_encoder/` and `tokenizer/` in `directory`, as LingBot-VA's `wan_pretrained_path` holds them."""
    import torch
    from diffusers import AutoencoderKLWan
    from transformers import T5TokenizerFast, UMT5Config, UMT5EncoderModel

    # T5's Unigram layout (<pad>, </s>, <unk>, the word boundary), then one piece per word.
    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    tokenizer = T5TokenizerFast(vocab=pieces + [(f"\u2581{word}", -1.0) for word in WORDS], extra_ids=0)
    tokenizer.save_pretrained(directory / "tokenizer")
    torch.manual_seed(0)
    AutoencoderKLWan(
        base_dim=8,
        z_dim=Z_DIM,
        dim_mult=[1, 2, 2, 2],
        num_res_blocks=1,
        is_residual=True,
        in_channels=12,
        out_channels=12,
        patch_size=2,
        scale_factor_spatial=16,
        latents_mean=[0.0] * Z_DIM,
        latents_std=[1.0] * Z_DIM,
    ).save_pretrained(directory / "vae")
    text = UMT5Config(
        vocab_size=len(tokenizer), d_model=WIDTH, d_kv=16, d_ff=64, num_layers=1, num_heads=2, pad_token_id=0
    )
    UMT5EncoderModel(text).save_pretrained(directory / "text_encoder")
    return directory.resolve()


def tiny_lingbot_va_config(root: Path, camera: str = "observation.image", action_dim: int = 2) -> dict[str, Any]:
    """The tiny lingbot_va config for one camera and `action_dim`-dimensional actions, its frozen parts written to
    `root/lingbot_va_wan`."""
    return {
        "wan_pretrained_path": str(tiny_wan(root / "lingbot_va_wan")),
        "dtype": "float32",
        "num_attention_heads": 2,
        "attention_head_dim": 12,  # a multiple of 6: its frame, height and width rotary parts are even
        "in_channels": Z_DIM,
        "out_channels": Z_DIM,
        "action_dim": 8,
        "text_dim": WIDTH,
        "freq_dim": 16,
        "ffn_dim": 64,
        "num_layers": 1,
        "rope_max_seq_len": 64,
        "obs_cam_keys": [camera],
        "height": 32,
        "width": 32,
        "action_per_frame": 4,
        "frame_chunk_size": 2,
        "attn_window": 8,
        "num_inference_steps": 2,
        "action_num_inference_steps": 2,
        "guidance_scale": 1.0,
        "max_sequence_length": 16,
        "used_action_channel_ids": list(range(action_dim)),
    }
