"""A tiny FastWAM (LeRobot 0.6) built offline, and the one seam it needs.

LeRobot builds FastWAM's video and action experts from the policy config, its UMT5 text encoder and tokenizer from
`text_encoder_model_id`/`tokenizer_model_id` (local folders here: the tiny LingBot-VA's Wan parts), but its Wan2.2
VAE always from the Hub id `Wan-AI/Wan2.2-TI2V-5B-Diffusers` (`load_pretrained_wan_vae`, no setting names another).
So the tiny VAE is laid out as that repo in a Hugging Face cache of the test's own, and every process that builds
or loads the policy runs with `hub_env(root)` (`HF_HUB_CACHE` there, offline). That is a test seam: nothing in
lerobot_hydra knows of it, and the user's own cache is never written.

    PYTHONPATH=<checkout> python -m tests.helpers.tiny_fastwam <root> <checkpoint dir>   # under hub_env(root)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from tests.helpers.tiny_lingbot_va import tiny_wan

WAN22_DIFFUSERS = "Wan-AI/Wan2.2-TI2V-5B-Diffusers"
REVISION = "0" * 40
HEADS, HEAD_DIM, LAYERS, TEXT = 2, 12, 1, 32


def hub_env(root: Path) -> dict[str, str]:
    """The environment under which the tiny FastWAM in `root` builds and loads (its VAE in a local Hub cache)."""
    return {"HF_HUB_CACHE": str((root / "hub").resolve()), "HF_HUB_OFFLINE": "1"}


def tiny_wan_hub(root: Path) -> Path:
    """The tiny Wan parts in `root/wan`, the VAE also as `Wan-AI/Wan2.2-TI2V-5B-Diffusers` in `root/hub`."""
    wan = tiny_wan(root / "wan")
    repo = root / "hub" / f"models--{WAN22_DIFFUSERS.replace('/', '--')}"
    shutil.copytree(wan / "vae", repo / "snapshots" / REVISION / "vae", dirs_exist_ok=True)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return wan


def tiny_fastwam_config(root: Path, action_dim: int = 2, size: int = 96) -> dict[str, Any]:
    """The tiny fastwam config for `action_dim`-dimensional actions and states over one `size`x`size` camera (the
    family checks that the camera is of its image size)."""
    wan = tiny_wan_hub(root)
    width = HEADS * HEAD_DIM
    experts = {"num_heads": HEADS, "attn_head_dim": HEAD_DIM, "num_layers": LAYERS, "text_dim": TEXT}
    experts |= {"hidden_dim": width, "ffn_dim": 2 * width, "freq_dim": 16, "eps": 1e-6}
    video = {"patch_size": [1, 2, 2], "in_dim": 48, "out_dim": 48, "seperated_timestep": True}
    video |= {"video_attention_mask_mode": "first_frame_causal", "action_conditioned": False}
    video |= {"action_dim": action_dim, "action_group_causal_mask_mode": "group_diagonal"}
    return {
        "action_dim": action_dim,
        "proprio_dim": action_dim,
        "action_horizon": 4,
        "n_action_steps": 4,
        "num_video_frames": 5,
        "action_video_freq_ratio": 1,
        "image_size": (size, size),
        "context_len": 16,
        "tokenizer_max_len": 16,
        "tokenizer_model_id": str(wan / "tokenizer"),
        "text_encoder_model_id": str(wan),
        "base_model_id": None,
        "torch_dtype": "float32",
        "num_inference_steps": 2,
        "video_dit_config": {**experts, **video},
        "action_dit_config": {**experts, "action_dim": action_dim},
    }


# FastWAM reads its cameras from `observation.images.*` keys: PushT's camera reaches it through a rename map.
PUSHT_CAMERA = {"observation.images.image": ("VISUAL", (3, 96, 96)), "observation.state": ("STATE", (2,))}
PUSHT_RENAME = "policy.rename_map={observation.image: observation.images.image}"


def main() -> int:
    from devkit.lerobot_checkpoints import PUSHT_ACTION, save_checkpoint

    root, directory = Path(sys.argv[1]), Path(sys.argv[2])
    save_checkpoint(directory, "fastwam", PUSHT_CAMERA, PUSHT_ACTION, **tiny_fastwam_config(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
