"""LIBERO's stored init states, loaded without unpickling arbitrary objects.

hf-libero ships each task's init states (`.pruned_init`) as a `torch.save`d numpy array: float64, one flattened
MuJoCo state per row. `torch.load(weights_only=True)` rebuilds only allowlisted globals; the allowlist here is
exactly what such an array needs (numpy's array reconstructor, `ndarray`, `dtype` and the float64 dtype class).
Any other global in the file, which is how a crafted pickle runs code, makes the load fail.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError

# The module numpy 1.x pickled its array reconstructor under (numpy 2 renamed numpy.core to numpy._core).
_RECONSTRUCT_NAMES = ("numpy.core.multiarray._reconstruct", "numpy._core.multiarray._reconstruct")


def _array_globals() -> list[Any]:
    reconstruct = np.ndarray((0,)).__reduce__()[0]
    return [
        *((reconstruct, name) for name in _RECONSTRUCT_NAMES),
        np.ndarray,
        np.dtype,
        type(np.dtype(np.float64)),
    ]


def load_init_states(path: Path) -> np.ndarray:
    """The (n_states, state_dim) float64 array stored in `path`; a file holding anything else is refused."""
    import torch

    try:
        with torch.serialization.safe_globals(_array_globals()):
            states = torch.load(path, weights_only=True)
    except pickle.UnpicklingError as err:
        # torch's message is a paragraph; what matters is the global it refused.
        refused = re.search(r"GLOBAL ([\w.]+)", str(err))
        reason = f"it names {refused[1]}" if refused else "objects other than arrays"
        raise UserError(
            f"LIBERO init states {path} hold more than a float64 array ({reason}); refusing to unpickle them. "
            'Reinstall LIBERO: pip install --force-reinstall -e ".[libero]"'
        ) from err
    if not isinstance(states, np.ndarray) or states.ndim != 2 or states.dtype != np.float64:
        raise UserError(f"LIBERO init states {path} are not a 2-D float64 array; reinstall hf-libero")
    return states
