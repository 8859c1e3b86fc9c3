"""A client's request checked before it reaches the batch it would share with other clients' rows: the keys the
policy reads at their shapes, at most `max_batch_size` rows, task texts, seeds and noise states of the right types
and sizes. Anything else is a `ProtocolError` for that client alone. Also the largest message a server accepts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.policies.lerobot.noise import row_seed
from lerobot_hydra.serving.chunks import ChunkRows
from lerobot_hydra.serving.wire import ProtocolError

# torch.Generator.manual_seed's range, which a row's seed (episode seed + an offset) must stay in.
SEED_RANGE = (-(2**63), 2**64 - 1)
# Room for a message's task texts, seeds, noise states and framing beside its observations.
OVERHEAD_BYTES = 1 << 20
LARGEST_ITEM_BYTES = 8  # float64 / int64: the widest dtype the wire accepts


@dataclass(frozen=True)
class RequestSpec:
    """What a request of this server may hold."""

    features: dict[str, tuple[int, ...]]  # every key the policy reads, at its per-sample shape
    history: int
    max_rows: int
    noise_state_bytes: int | None  # the size of a noise generator's state (None: not checked)

    def max_message_bytes(self) -> int:
        """The largest request an honest client sends: max_rows rows of `history` frames of every feature at the
        widest dtype, plus room for the rest."""
        per_frame = sum(math.prod(shape) for shape in self.features.values()) * LARGEST_ITEM_BYTES
        noise = self.noise_state_bytes or 0
        return self.max_rows * (self.history * per_frame + noise) + OVERHEAD_BYTES


def _frames(value: Any, spec: RequestSpec, rows: int) -> dict[str, np.ndarray]:
    if not isinstance(value, dict) or set(value) != set(spec.features):
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ProtocolError(f"frames of {got}, not of the keys the policy reads {sorted(spec.features)}")
    for key, array in value.items():
        expected = (rows, spec.history, *spec.features[key])
        if not isinstance(array, np.ndarray) or array.shape != expected:
            got = array.shape if isinstance(array, np.ndarray) else type(array).__name__
            raise ProtocolError(f"{key} of shape {got}, not {expected}")
    return value


def _listed(message: dict[str, Any], name: str, rows: int, kinds: tuple[type, ...]) -> list[Any]:
    value = message.get(name)
    if not isinstance(value, list) or len(value) != rows or not all(type(v) in kinds for v in value):
        kind = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise ProtocolError(f"'{name}' must be a list of {rows} values of type {kind}")
    return value


def chunk_rows(message: dict[str, Any], spec: RequestSpec) -> ChunkRows:
    """Our extension's `chunks` request as rows (see chunks.py)."""
    tasks = message.get("task")
    rows = len(tasks) if isinstance(tasks, list) else 0
    if not 1 <= rows <= spec.max_rows:
        raise ProtocolError(f"a request of {rows} rows (1 to serve.max_batch_size={spec.max_rows} are served)")
    frames = _frames(message.get("frames"), spec, rows)
    tasks = _listed(message, "task", rows, (str,))
    seeds = _listed(message, "seed", rows, (int, type(None)))
    noise = _listed(message, "noise", rows, (bytes, type(None)))
    low, high = SEED_RANGE
    if any(s is not None and not low <= row_seed(s) <= high for s in seeds):
        raise ProtocolError(f"a seed outside [{low - row_seed(0)}, {high - row_seed(0)}]")
    if spec.noise_state_bytes is not None and any(n is not None and len(n) != spec.noise_state_bytes for n in noise):
        raise ProtocolError(f"a noise state that is not {spec.noise_state_bytes} bytes long")
    return ChunkRows(frames, tasks, seeds, noise)


def single_observation(message: dict[str, Any], spec: RequestSpec) -> ChunkRows:
    """An openpi client's request (one observation, no seed) as one row: its history is that observation."""
    frames = {}
    for key, shape in spec.features.items():
        value = message.get(key)
        if not isinstance(value, np.ndarray) or value.shape != shape:
            got = value.shape if isinstance(value, np.ndarray) else type(value).__name__
            raise ProtocolError(f"{key} of shape {got}, not {shape}")
        frames[key] = np.repeat(value[None, None], spec.history, axis=1)
    task = message.get("prompt", message.get("task", ""))
    if not isinstance(task, str):
        raise ProtocolError(f"a prompt of type {type(task).__name__}, not text")
    return ChunkRows(frames, [task], [None], [None])
