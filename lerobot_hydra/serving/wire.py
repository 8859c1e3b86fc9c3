"""The wire format of policy serving: openpi's websocket + msgpack-numpy protocol, and our batched extension.

openpi's protocol: on connect the server sends one msgpack map (its metadata); then every binary message from
the client is an observation map and every reply an action map (`{"actions": array[chunk, action_dim]}` for
openpi's policies); a text message from the server is an error (openpi sends the traceback, then closes).
Arrays travel as openpi encodes them, a map `{"__ndarray__": true, "data", "dtype", "shape"}` (numpy scalars:
`__npgeneric__`), which is what openpi servers decode; the maps of the msgpack-numpy package (`nd`) are
decoded too.

Our extension, used only when the server's metadata names it (`METADATA_KEY`): a message holding
`EXTENSION_KEY` is a control message: `chunks` carries several rows (each with its observation history, episode
seed and noise state) and is answered with a chunk per row; `done` tells the server that a client's run
completed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lerobot_hydra.core.errors import missing_extra

try:
    import msgpack
    import msgpack_numpy
except ImportError as err:
    raise missing_extra(err.name or "msgpack", "serve") from err

METADATA_KEY = "lerobot_hydra"  # the server metadata's entry describing our extension
EXTENSION_KEY = "__lerobot_hydra__"  # a client message holding it is one of ours
PROTOCOL_VERSION = 1


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "VOc":
            raise ValueError(f"arrays of dtype {obj.dtype} cannot be sent to a policy server")
        return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    if hasattr(obj, "detach") and hasattr(obj, "numpy"):  # a torch tensor
        return _encode(obj.detach().to("cpu").numpy())
    return obj


def _decode(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    if b"__npgeneric__" in obj:
        return np.dtype(obj[b"dtype"]).type(obj[b"data"])
    return msgpack_numpy.decode(obj)


def packb(obj: Any) -> bytes:
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpackb(data: bytes) -> Any:
    return msgpack.unpackb(data, object_hook=_decode, raw=False)
