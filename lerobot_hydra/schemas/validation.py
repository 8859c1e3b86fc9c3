"""Checks of user settings that need more than a schema: value ranges shared by every benchmark, seeds,
devices, which policy drives which env, and whether the selection holds any work. They run before any
simulator, policy or file is created, and each failure is one `UserError` line naming the setting."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, ListConfig
from omegaconf.errors import OmegaConfBaseException

from lerobot_hydra.core.errors import UserError

# Simulators seed numpy's legacy generator (MetaWorld, robosuite/LIBERO), which takes seeds in [0, 2**32).
MAX_SEED = 2**32 - 1
# Env keys that, where a benchmark has them, must be positive integers (null meaning "the benchmark's own").
POSITIVE_ENV_KEYS = ("episode_length", "observation_height", "observation_width", "fps")


def check_finite(node: DictConfig | ListConfig, prefix: str = "") -> None:
    """No setting is NaN or infinite (OmegaConf reads `nan`, `inf` as floats): the run's identity, shard files,
    records, eval_info.json and logger payloads are strict JSON, which has no such numbers."""
    keys = node.keys() if isinstance(node, DictConfig) else range(len(node))
    for key in keys:
        try:
            value = node[key]  # type: ignore[index]
        except OmegaConfBaseException:
            continue  # missing (???) or not resolvable here: checked where it is used
        name = f"{prefix}[{key}]" if isinstance(node, ListConfig) else f"{prefix}.{key}".lstrip(".")
        if isinstance(value, (DictConfig, ListConfig)):
            check_finite(value, name)
        elif isinstance(value, float) and not math.isfinite(value):
            raise UserError(
                f"{name}={value} is not a finite number, which the run's JSON files cannot hold; give a finite "
                f"number, or quote it to mean the text: '{name}=\"{value}\"'"
            )


def check_seeds(seed: int, n_episodes: int) -> None:
    """Episode k is seeded with seed + k: every seed of the run must fit the simulators' 32-bit seeds."""
    last = seed + n_episodes - 1
    if seed < 0:
        raise UserError(f"seed must be 0 or more, got {seed}")
    if last > MAX_SEED:
        raise UserError(
            f"seed={seed} with eval.n_episodes={n_episodes} gives episode seeds up to {last}, past the simulators' "
            f"limit of {MAX_SEED} (2**32 - 1); use seed <= {MAX_SEED - n_episodes + 1}"
        )


def check_env_values(env: DictConfig) -> None:
    """Ranges every benchmark shares: step limits, camera sizes and frame rates are at least 1."""
    for key in POSITIVE_ENV_KEYS:
        value = env.get(key)  # its type was checked against the env's schema already
        if value is not None and int(value) < 1:
            unset = " (or null for the benchmark's own)" if key == "episode_length" else ""
            raise UserError(f"env.{key} must be at least 1{unset}, got {value}")


def check_device(device: str, key: str) -> str:
    """A device that exists on this machine (auto and cpu always do). Returns it unchanged."""
    if device in ("auto", "cpu"):
        return device
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError as err:
        raise UserError(f"{key} '{device}' is not a torch device (auto, cpu, cuda, cuda:<i>, mps)") from err
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UserError(f"{key} is {device} but no CUDA GPU is visible; use device=cpu or device=auto")
        if parsed.index is not None and parsed.index >= count:
            raise UserError(f"{key} is {device} but only {count} CUDA GPU(s) are visible")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"{key} is mps but MPS is not available here; use device=cpu or device=auto")
    return device


def check_devices(cfg: DictConfig) -> None:
    """The top-level device, and a policy's own `device` when it sets another one, must be present here."""
    check_device(str(cfg.device), "device")
    policy_device = cfg.policy.get("device") if isinstance(cfg.policy, DictConfig) else None
    if isinstance(policy_device, str) and policy_device != cfg.device:
        check_device(policy_device, "policy.device")


def check_policy_fits_env(policy_cls: type, env_cls: type) -> None:
    """The policy family's own check of the env class it is asked to drive (`PolicyConfig.check_env`)."""
    check = getattr(policy_cls, "check_env", None)
    if callable(check):
        check(env_cls)


def require_tasks(tasks: Sequence[Any]) -> None:
    if not tasks:
        raise UserError("the env selects no task; check env.task (and env.task_ids)")


def check_shards_have_work(n_units: int, num_shards: int, n_tasks: int, n_episodes: int) -> None:
    """Every shard of a split gets at least one episode: more shards than episodes is a mistake in the sweep."""
    if num_shards > n_units:
        raise UserError(
            f"eval.num_shards={num_shards} exceeds the {n_units} episodes of this run ({n_tasks} task(s) x "
            f"eval.n_episodes={n_episodes}), so some shards would have no work; use eval.num_shards <= {n_units}"
        )


SEQUENTIAL_STOPS = ("precision", "threshold")


def check_sequential(seq: Any, num_shards: int | None) -> None:
    """eval.sequential: a known rule with what it needs, and every value it is given used and in range."""
    if seq.stop is None:
        given = [k for k in ("precision", "threshold") if getattr(seq, k) is not None]
        if given:
            raise UserError(
                f"eval.sequential.{given[0]} is set but eval.sequential.stop is null; "
                f"add eval.sequential.stop={'threshold' if 'threshold' in given else 'precision'}"
            )
        return
    if seq.stop not in SEQUENTIAL_STOPS:
        raise UserError(f"eval.sequential.stop={seq.stop} is unknown; use one of: {', '.join(SEQUENTIAL_STOPS)}")
    if getattr(seq, seq.stop) is None:
        example = "precision=5" if seq.stop == "precision" else "threshold=80"
        raise UserError(f"eval.sequential.stop={seq.stop} needs eval.sequential.{seq.stop}, e.g. {example}")
    if seq.round < 1 or not 0 < seq.alpha < 1:
        raise UserError(f"eval.sequential: round must be >= 1 and 0 < alpha < 1, got {seq.round} and {seq.alpha}")
    if seq.precision is not None and not 0 < seq.precision <= 50:
        raise UserError(f"eval.sequential.precision={seq.precision} points: give a half-width in (0, 50]")
    if seq.threshold is not None and not 0 < seq.threshold < 100:
        raise UserError(f"eval.sequential.threshold={seq.threshold}%: give a success rate strictly between 0 and 100")
    if num_shards is not None and num_shards > 1:
        raise UserError(
            "eval.sequential.stop with eval.num_shards > 1 needs hydra/sweeper=sequential (its rounds decide on "
            "every shard's episodes): python eval.py -m eval.shard_id=0,1 hydra/sweeper=sequential ..."
        )
