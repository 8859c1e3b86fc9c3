"""Shared helpers: run eval.py for real in a subprocess, compose the real config tree, read results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "lerobot_hydra" / "conf"

# Rendering on CPU everywhere in tests; tests never use a GPU.
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_eval(
    *overrides: str,
    out_dir: Path | None = None,
    multirun: bool = False,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    check: bool = True,
    config_videos: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python eval.py <overrides>` in a subprocess, with its output dir pinned to `out_dir`.

    Videos are off unless a test asks for them (rendering costs ~100 ms a frame on CPU) or keeps the config's
    own setting with `config_videos`."""
    args = [sys.executable, str(ROOT / "eval.py")]
    if multirun:
        args.append("-m")
    if out_dir is not None:
        args.append(f"hydra.{'sweep' if multirun else 'run'}.dir={out_dir}")
    if not config_videos and not any(o.startswith("eval.max_episodes_rendered=") for o in overrides):
        args.append("eval.max_episodes_rendered=0")
    args.extend(overrides)
    proc = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"eval.py {' '.join(overrides)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def read_episodes(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]


def outcome(record: dict[str, Any]) -> tuple:
    """What must not depend on batching, sharding or timing."""
    return (
        record["task_group"],
        record["task_id"],
        record["episode_index"],
        record["seed"],
        record["success"],
        round(record["sum_reward"], 6),
        round(record["max_reward"], 6),
        record["steps"],
        record.get("init_state_id"),
    )


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread in this process for a module's tests (tiny policies on a busy CPU)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def compose() -> Iterator[Any]:
    """Compose the real config tree with overrides (no app run)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import lerobot_hydra.app.main  # noqa: F401  registers the schemas and resolvers

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
        yield lambda *overrides, **kw: hydra_compose(config_name="config", overrides=list(overrides), **kw)
    GlobalHydra.instance().clear()


def evaluate_here(out_dir: Path, *overrides: str, label: str = "") -> dict[str, Any]:
    """A real evaluation in this process, without Hydra's app or a subprocess: compose the config tree with
    `overrides`, validate it and evaluate into `out_dir` (`label`: the combination label a sweep job would have)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import lerobot_hydra.app.main  # noqa: F401  registers the schemas and resolvers
    from lerobot_hydra.app.evaluation import evaluate_config
    from lerobot_hydra.config.schema import validate
    from lerobot_hydra.results.eval_info import to_eval_info

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            cfg = hydra_compose(config_name="config", overrides=list(overrides))
            return to_eval_info(evaluate_config(cfg, validate(cfg), out_dir, label))
    finally:
        GlobalHydra.instance().clear()
