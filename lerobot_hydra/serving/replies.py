"""What a client accepts from a server: our extension's metadata of the right types, and action chunks of the
expected shape, a numeric dtype and finite values. Anything else is one line naming the server's url, before any
action reaches an env (so no episode is recorded from a bad reply)."""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError

METADATA_TYPES: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "policy": (str,),
    "reads": (list,),
    "history": (int,),
    "chunk": (int,),
    "action_dim": (int, type(None)),
    "max_batch_size": (int,),
    "identity": (dict,),
}


def checked_metadata(ours: dict[str, Any], url: str) -> dict[str, Any]:
    """Our server's description, every entry of its type (a broken or foreign server is one line)."""
    for key, kinds in METADATA_TYPES.items():
        if type(ours.get(key)) not in kinds:
            raise UserError(f"the policy server at {url} sent bad metadata: '{key}' is {ours.get(key)!r}")
    if not all(isinstance(key, str) for key in ours["reads"]) or min(ours["history"], ours["max_batch_size"]) < 1:
        raise UserError(f"the policy server at {url} sent bad metadata: reads, history or max_batch_size")
    return ours


def checked_actions(actions: Any, url: str, rows: int | None, action_dim: int) -> np.ndarray:
    """An action chunk as float32: (rows, chunk, action_dim) for our extension, (chunk, action_dim) for openpi."""
    if not isinstance(actions, np.ndarray) or actions.dtype.kind not in "biuf":
        what = f"dtype {actions.dtype}" if isinstance(actions, np.ndarray) else f"a {type(actions).__name__}"
        raise UserError(f"the policy server at {url} sent actions of {what}, not a numeric array")
    if rows is None and actions.ndim == 1:
        actions = actions.reshape(1, -1)
    leading = () if rows is None else (rows,)
    if actions.shape[: len(leading)] != leading or actions.ndim != len(leading) + 2 or not actions.shape[-2]:
        expected = ", ".join([*(str(r) for r in leading), "chunk", str(action_dim)])
        raise UserError(f"the policy server at {url} sent actions of shape {actions.shape}; expected ({expected})")
    if actions.shape[-1] != action_dim:
        raise UserError(
            f"the policy server at {url} sent actions of shape {actions.shape}; this env needs {action_dim} per step"
        )
    if not np.isfinite(actions).all():
        raise UserError(f"the policy server at {url} sent non-finite actions (nan or inf)")
    return actions.astype(np.float32)


def checked_noise(noise: Any, url: str, rows: int) -> list[bytes]:
    if not isinstance(noise, list) or len(noise) != rows or not all(isinstance(n, bytes) for n in noise):
        raise UserError(f"the policy server at {url} sent no noise state per row (its 'noise' is not {rows} bytes)")
    return noise
