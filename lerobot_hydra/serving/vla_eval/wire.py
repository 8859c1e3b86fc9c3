"""vla-eval's model-server wire format, read strictly.

Every message is one msgpack map `{type, payload, seq, timestamp}`: `type` one of `MESSAGE_TYPES`, `payload` a
map, `seq` the sender's counter (a server's ACTION or ERROR echoes its OBSERVATION's), `timestamp` seconds since
the epoch. Arrays travel as `{"__ndarray__": true, "data", "dtype", "shape"}` (bool, int, uint and float dtypes
only), images (uint8 HWC with 1, 3 or 4 channels) as `{"__image__": true, "format", "data", "shape"}` with the
format `png` (vla-eval's default, lossless), `jpeg` or `raw` (then a plain array), numpy scalars as Python numbers.

Decoding accepts nothing else: no msgpack extension types, no other dtype, an array's bytes must match its shape,
and an image is decoded by Pillow's PNG or JPEG plugin only (never a format Pillow would guess from the bytes), so
nothing decoded from a server runs code.
"""

from __future__ import annotations

import io
import math
import time
from typing import Any

import numpy as np

from lerobot_hydra.serving.wire import DTYPE, ProtocolError, msgpack

PROTOCOL_VERSION = 1  # vla-eval's `protocol_version` (0.8.0)
MESSAGE_TYPES = ("hello", "observation", "action", "episode_start", "episode_end", "error")
IMAGE_FORMATS = ("png", "jpeg", "raw")
ARRAY_KEYS = frozenset({"__ndarray__", "data", "dtype", "shape"})
PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG"}


def _is_image(value: np.ndarray) -> bool:
    return value.ndim == 3 and value.dtype == np.uint8 and value.shape[2] in (1, 3, 4)


def encoder(image_format: str) -> Any:
    """msgpack's `default` hook sending images in `image_format` (png, jpeg or raw), as vla-eval's codec does."""

    def encode(obj: Any) -> Any:
        if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind not in "biuf":
            raise ValueError(f"values of dtype {obj.dtype} cannot be sent to a vla-eval model server")
        if isinstance(obj, np.ndarray):
            if image_format != "raw" and _is_image(obj):
                return _encode_image(obj, image_format)
            return {"__ndarray__": True, "data": obj.tobytes(), "dtype": obj.dtype.str, "shape": list(obj.shape)}
        if isinstance(obj, np.generic):
            return obj.item()
        return obj

    return encode


def _encode_image(image: np.ndarray, image_format: str) -> dict[str, Any]:
    from PIL import Image

    buffer = io.BytesIO()
    picture = Image.fromarray(image[..., 0] if image.shape[2] == 1 else image)
    if image_format == "jpeg":
        picture.save(buffer, format="JPEG", quality=95)  # vla-eval's quality
    else:
        picture.save(buffer, format="PNG")
    return {"__image__": True, "format": image_format, "data": buffer.getvalue(), "shape": list(image.shape)}


def _dtype(value: Any) -> np.dtype:
    if not isinstance(value, str) or not DTYPE.fullmatch(value):
        raise ProtocolError(f"an array of dtype {value!r} (only bool, int, uint and float dtypes are accepted)")
    return np.dtype(value)


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple) or not all(type(d) is int and d >= 0 for d in value):
        raise ProtocolError(f"an array of shape {value!r}")
    return tuple(value)


def _array(obj: dict[str, Any]) -> np.ndarray:
    if set(obj) != ARRAY_KEYS:
        raise ProtocolError(f"an array map with the keys {sorted(map(str, obj))}")
    dtype, shape, data = _dtype(obj["dtype"]), _shape(obj["shape"]), obj["data"]
    if not isinstance(data, bytes) or len(data) != math.prod(shape) * dtype.itemsize:
        raise ProtocolError(f"an array of shape {shape} and dtype {dtype} whose data has the wrong size")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _image(obj: dict[str, Any]) -> np.ndarray:
    fmt = obj.get("format")
    if fmt == "raw" and set(obj) == {"__image__", "format", "data", "dtype", "shape"}:
        return _array({"__ndarray__": True, "data": obj["data"], "dtype": obj["dtype"], "shape": obj["shape"]})
    if fmt not in PIL_FORMATS or set(obj) != {"__image__", "format", "data", "shape"}:
        raise ProtocolError(f"an image map of format {fmt!r} with the keys {sorted(map(str, obj))}")
    shape, data = _shape(obj["shape"]), obj["data"]
    if not isinstance(data, bytes):
        raise ProtocolError("an image without bytes")
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data), formats=[PIL_FORMATS[fmt]]) as picture:
            image = np.array(picture)
    except (OSError, ValueError, SyntaxError) as err:
        raise ProtocolError(f"an image that is not {fmt} ({err})") from None
    image = image.reshape(*image.shape[:2], -1)
    if image.shape != shape or image.dtype != np.uint8:
        raise ProtocolError(f"a {fmt} image of shape {image.shape}, declared {shape}")
    return image


def _decode(obj: dict[Any, Any]) -> Any:
    if "__image__" in obj:
        return _image(obj)
    if "__ndarray__" in obj:
        return _array(obj)
    return obj


def _refuse_extension(code: int, data: bytes) -> Any:
    raise ProtocolError(f"a msgpack extension value (type {code})")


def pack(kind: str, payload: dict[str, Any], seq: int, image_format: str = "png") -> bytes:
    message = {"type": kind, "payload": payload, "seq": seq, "timestamp": time.time()}
    return msgpack.packb(message, default=encoder(image_format), use_bin_type=True)


def unpack(data: Any) -> tuple[str, dict[str, Any], int]:
    """(type, payload, seq) of a server's message; a `ProtocolError` for anything but the format above."""
    if not isinstance(data, bytes):
        raise ProtocolError(f"a {type(data).__name__} message, not binary msgpack")
    try:
        message = msgpack.unpackb(data, object_hook=_decode, ext_hook=_refuse_extension, raw=False, timestamp=0)
    except ProtocolError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException, RecursionError) as err:
        raise ProtocolError(f"malformed msgpack ({type(err).__name__}: {err})") from None
    if not isinstance(message, dict) or not {"type", "payload", "seq", "timestamp"} <= set(message):
        raise ProtocolError("a message without its type, payload, seq and timestamp")
    kind, payload, seq = message["type"], message["payload"], message["seq"]
    if kind not in MESSAGE_TYPES or not isinstance(payload, dict) or type(seq) is not int:
        raise ProtocolError(f"a message of type {kind!r} with a {type(payload).__name__} payload and seq {seq!r}")
    return kind, payload, seq
