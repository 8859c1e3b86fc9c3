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


# What MuJoCo accepts in MUJOCO_GL on Linux (mujoco/gl_context.py), and the platforms PyOpenGL knows.
MUJOCO_GL_VALUES = {"egl", "osmesa", "glfw", "glx", "enable", "enabled", "on", "true", "1"}
MUJOCO_GL_OFF = {"disable", "disabled", "off", "false", "0"}
PYOPENGL_PLATFORMS = {"egl", "osmesa", "glx", "x11", "linux", "linux2", "posix", "wayland", "xwayland"}


def check_gl_variables() -> None:
    """MUJOCO_GL and PYOPENGL_PLATFORM from the environment, refused in one line before any simulator is imported
    (MuJoCo and PyOpenGL raise at import otherwise, inside a worker)."""
    from lerobot_hydra.core.errors import UserError

    gl = os.environ.get("MUJOCO_GL", "").strip().lower()
    platform = os.environ.get("PYOPENGL_PLATFORM", "").strip().lower()
    if gl and gl not in MUJOCO_GL_VALUES | MUJOCO_GL_OFF:
        raise UserError(
            f"MUJOCO_GL={os.environ['MUJOCO_GL']} is not a MuJoCo rendering backend; use egl (an NVIDIA GPU), "
            "osmesa (CPU) or glfw (a display), or unset it to have one chosen"
        )
    if platform and gl in ("egl", "osmesa") and platform != gl:
        raise UserError(
            f"PYOPENGL_PLATFORM={os.environ['PYOPENGL_PLATFORM']} disagrees with MUJOCO_GL={gl}; set "
            f"PYOPENGL_PLATFORM={gl} or unset it"
        )
    if platform and platform not in PYOPENGL_PLATFORMS:
        raise UserError(
            f"PYOPENGL_PLATFORM={os.environ['PYOPENGL_PLATFORM']} is not a PyOpenGL platform; use egl, osmesa or "
            "glx, or unset it"
        )


def configure_mujoco_gl() -> str:
    """egl when an NVIDIA GPU is visible, else osmesa; an explicit MUJOCO_GL wins. Says which, once. Bad values of
    MUJOCO_GL or PYOPENGL_PLATFORM are refused in one line (`check_gl_variables`)."""
    check_gl_variables()
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
