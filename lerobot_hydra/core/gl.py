"""Choose MuJoCo's OpenGL backend before any simulator module is imported."""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("lerobot_hydra")


def nvidia_gpu_visible() -> bool:
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def configure_mujoco_gl() -> str:
    """egl when an NVIDIA GPU is visible, else osmesa; an explicit MUJOCO_GL wins. Says which, once."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        reason = "set in the environment"
    elif nvidia_gpu_visible():
        chosen, reason = "egl", "an NVIDIA GPU is visible"
    else:
        chosen, reason = "osmesa", "no GPU is visible; CPU rendering"
    os.environ["MUJOCO_GL"] = chosen
    # PyOpenGL (used by robosuite/LIBERO) must agree with MuJoCo.
    if chosen in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
    # PyOpenGL announces at INFO that an optional accelerator module is absent; that is noise here.
    logging.getLogger("OpenGL").setLevel(logging.WARNING)
    log.info("MUJOCO_GL=%s (%s)", chosen, reason)
    return chosen


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
