"""The wire format of policy serving: openpi's websocket + msgpack protocol, and our batched extension.

openpi's protocol: on connect the server sends one msgpack map (its metadata); then every binary message from
the client is an observation map and every reply an action map (`{"actions": array[chunk, action_dim]}` for
openpi's policies); a text message from the server is an error (openpi sends the traceback, then closes).
Arrays travel as openpi encodes them, a map `{"__ndarray__": true, "data", "dtype", "shape"}` (numpy scalars:
`__npgeneric__`).

Decoding is ours and strict, the same on both sides: plain msgpack values, and those two maps for numeric and
boolean dtypes only, whose bytes must match their shape. Anything else (an extension type, another array
encoding such as the msgpack-numpy package's pickled `nd` maps, an object or void dtype) is a `ProtocolError`:
nothing decoded from a peer ever runs code.

Our extension, used only when the server's metadata names it (`METADATA_KEY`): a message holding
`EXTENSION_KEY` is a control message: `chunks` carries several rows (each with its observation history, episode
seed and noise state) and is answered with a chunk per row; `done` tells the server that a client's run
completed.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import missing_extra

try:
    import msgpack
except ImportError as err:
    raise missing_extra(err.name or "msgpack", "serve") from err

METADATA_KEY = "lerobot_hydra"  # the server metadata's entry describing our extension
EXTENSION_KEY = "__lerobot_hydra__"  # a client message holding it is one of ours
PROTOCOL_VERSION = 1
# Byte order, then bool, signed, unsigned or floating, then the item size: numpy's `dtype.str` of those kinds.
DTYPE = re.compile(r"[<>|=]?[biuf][1-9][0-9]?")
ARRAY_KEYS = frozenset({b"__ndarray__", b"data", b"dtype", b"shape"})
SCALAR_KEYS = frozenset({b"__npgeneric__", b"data", b"dtype"})


class ProtocolError(ValueError):
    """A message that is not one of the protocol's: what was wrong, in a few words."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind not in "biuf":
        raise ValueError(f"values of dtype {obj.dtype} cannot be sent to or from a policy server")
    if isinstance(obj, np.ndarray):
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch tensor
        return _encode(obj.detach().to("cpu").numpy())
    return obj


def _dtype(value: Any) -> np.dtype:
    if not isinstance(value, str) or not DTYPE.fullmatch(value):
        raise ProtocolError(f"an array of dtype {value!r} (only numeric and boolean dtypes are accepted)")
    try:
        return np.dtype(value)
    except TypeError as err:
        raise ProtocolError(f"an array of dtype {value!r} ({err})") from None


def _array(obj: dict[Any, Any]) -> np.ndarray:
    if set(obj) != ARRAY_KEYS:
        raise ProtocolError(f"an array map with the keys {sorted(map(repr, obj))}")
    dtype, data, shape = _dtype(obj[b"dtype"]), obj[b"data"], obj[b"shape"]
    if not isinstance(shape, list | tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise ProtocolError(f"an array of shape {shape!r}")
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * dtype.itemsize:
        size = len(data) if isinstance(data, bytes) else type(data).__name__
        raise ProtocolError(f"an array of shape {tuple(shape)} and dtype {dtype} with {size} bytes of data")
    return np.ndarray(buffer=data, dtype=dtype, shape=tuple(shape))


def _scalar(obj: dict[Any, Any]) -> np.generic:
    if set(obj) != SCALAR_KEYS:
        raise ProtocolError(f"a scalar map with the keys {sorted(map(repr, obj))}")
    dtype, data = _dtype(obj[b"dtype"]), obj[b"data"]
    if type(data) not in (bool, int, float):
        raise ProtocolError(f"a scalar of dtype {dtype} holding a {type(data).__name__}")
    try:
        return dtype.type(data)
    except (OverflowError, ValueError) as err:
        raise ProtocolError(f"a scalar of dtype {dtype}: {err}") from None


def _decode(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return _array(obj)
    if b"__npgeneric__" in obj:
        return _scalar(obj)
    if any(isinstance(key, bytes) for key in obj):  # openpi encodes only its two maps with binary keys
        raise ProtocolError(f"a map with binary keys {sorted(repr(k) for k in obj if isinstance(k, bytes))[:4]}")
    return obj


def _refuse_extension(code: int, data: bytes) -> Any:
    raise ProtocolError(f"a msgpack extension value (type {code})")


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    """The message `data` decodes to; a `ProtocolError` for anything but the protocol's values."""
    if not isinstance(data, bytes):
        raise ProtocolError(f"a {type(data).__name__} message, not binary msgpack")
    try:
        return msgpack.unpackb(data, object_hook=_decode, ext_hook=_refuse_extension, raw=False, timestamp=0)
    except ProtocolError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as err:
        raise ProtocolError(f"malformed msgpack ({type(err).__name__}: {err})") from None
