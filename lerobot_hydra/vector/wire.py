"""The control messages between this process and a foreign worker (one started from `env.python`'s interpreter):
versioned JSON, checked against a fixed schema on arrival, never pickled (the two sides may run different Pythons
and numpy versions).

A call is `{"v": PROTOCOL, "call": name, "args": [...], "kwargs": {...}, "write_obs": bool}`, an answer
`{"v": PROTOCOL, "ok": true, "result": ...}` or `{"v": PROTOCOL, "ok": false, "user_error" | "traceback": text}`.
Values are JSON's own, plus three tagged objects: an env config (`{"__env__": {"_target_": class path, "fields":
{...}}}`, instantiated on the worker side: only `EnvConfig` subclasses), a task (`{"__task__": {...}}`) and an array
(`{"__array__": {"dtype", "shape", "offset"}}`, whose bytes follow the JSON text after a NUL byte: a rendered frame).
Tuples travel as lists and arrive as tuples, except inside an env config's fields (lists, as Hydra makes them).
A step's observation, action and results never travel here: they go through shared memory (vector/shared_memory.py).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import EnvConfig, TaskSpec

PROTOCOL = 1
# The calls a worker answers (SlotEnv's methods that the vector env calls).
CALLS = frozenset({"bind", "prepare", "reset", "render", "close", "task_description", "draw_next", "prerender"})
CALL_KEYS = {"v", "call", "args", "kwargs", "write_obs"}
SEPARATOR = b"\0"


class WireError(ValueError):
    """A message that does not follow the schema."""


def encode_call(name: str, args: tuple, kwargs: dict[str, Any], write_obs: bool) -> bytes:
    message = {"v": PROTOCOL, "call": name, "args": [_encode(a) for a in args], "kwargs": _encode(kwargs)}
    return json.dumps({**message, "write_obs": write_obs}).encode()


def decode_call(data: bytes) -> tuple[str, tuple, dict[str, Any], bool]:
    message, _ = _split(data)
    if not isinstance(message, dict) or set(message) != CALL_KEYS:
        raise WireError(f"a call must hold exactly the keys {sorted(CALL_KEYS)}")
    _check_version(message)
    name, args, kwargs, write_obs = message["call"], message["args"], message["kwargs"], message["write_obs"]
    if name not in CALLS:
        raise WireError(f"unknown call {name!r}; known: {', '.join(sorted(CALLS))}")
    if not isinstance(args, list) or not isinstance(kwargs, dict) or not isinstance(write_obs, bool):
        raise WireError("a call's args must be a list, its kwargs an object and write_obs a boolean")
    return name, tuple(_decode(a, b"") for a in args), {k: _decode(v, b"") for k, v in kwargs.items()}, write_obs


def encode_reply(ok: bool, value: Any) -> bytes:
    """An answer: `value` the call's result (ok), else a UserError or a traceback (worker_failure())."""
    if not ok:
        key = "user_error" if isinstance(value, UserError) else "traceback"
        return json.dumps({"v": PROTOCOL, "ok": False, key: str(value)}).encode()
    payload: list[bytes] = []
    text = json.dumps({"v": PROTOCOL, "ok": True, "result": _encode(value, payload)}).encode()
    return text + SEPARATOR + b"".join(payload) if payload else text


def decode_reply(data: bytes) -> tuple[bool, Any]:
    """(True, result) or (False, a UserError or a traceback), as the pickled answers of in-family workers."""
    message, payload = _split(data)
    if not isinstance(message, dict) or not isinstance(message.get("ok"), bool):
        raise WireError("an answer must be an object with a boolean 'ok'")
    _check_version(message)
    if message["ok"]:
        if set(message) != {"v", "ok", "result"}:
            raise WireError("a successful answer holds exactly v, ok and result")
        return True, _decode(message["result"], payload)
    if set(message) == {"v", "ok", "user_error"} and isinstance(message["user_error"], str):
        return False, UserError(message["user_error"])
    if set(message) == {"v", "ok", "traceback"} and isinstance(message["traceback"], str):
        return False, message["traceback"]
    raise WireError("a failed answer holds exactly v, ok and one text: user_error or traceback")


def _split(data: bytes) -> tuple[Any, bytes]:
    text, _, payload = data.partition(SEPARATOR)
    try:
        return json.loads(text), payload
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WireError(f"not a JSON message: {err}") from err


def _check_version(message: dict[str, Any]) -> None:
    if message.get("v") != PROTOCOL:
        raise WireError(f"message version {message.get('v')!r}, this side speaks {PROTOCOL}")


def _encode(value: Any, payload: list[bytes] | None = None) -> Any:
    if isinstance(value, EnvConfig):
        cls = type(value)
        fields = {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return {"__env__": {"_target_": f"{cls.__module__}.{cls.__qualname__}", "fields": fields}}
    if isinstance(value, TaskSpec):
        return {"__task__": dataclasses.asdict(value)}
    if isinstance(value, np.ndarray):
        if payload is None:
            raise WireError("arrays travel only in answers")
        array = np.ascontiguousarray(value)
        offset = sum(len(p) for p in payload)
        payload.append(array.tobytes())
        return {"__array__": {"dtype": array.dtype.str, "shape": list(array.shape), "offset": offset}}
    if isinstance(value, dict):
        return {str(k): _encode(v, payload) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v, payload) for v in value]
    return _plain(value)


def _plain(value: Any) -> Any:
    """JSON's own value for `value` (numpy scalars as Python's; containers element by element)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise WireError(f"a {type(value).__name__} cannot travel to a foreign worker")


def _decode(value: Any, payload: bytes) -> Any:
    if isinstance(value, list):
        return tuple(_decode(v, payload) for v in value)
    if not isinstance(value, dict):
        return value
    if set(value) == {"__env__"}:
        return _env_config(value["__env__"])
    if set(value) == {"__task__"}:
        return TaskSpec(**value["__task__"])
    if set(value) == {"__array__"}:
        spec = value["__array__"]
        dtype, shape, offset = np.dtype(spec["dtype"]), tuple(spec["shape"]), int(spec["offset"])
        if dtype.hasobject:
            raise WireError("object arrays never travel")
        count = int(np.prod(shape))
        return np.frombuffer(payload, dtype, count, offset).reshape(shape).copy()
    return {k: _decode(v, payload) for k, v in value.items()}


def _env_config(spec: Any) -> EnvConfig:
    """The env config a message describes, made on this side from its class and fields."""
    if not isinstance(spec, dict) or set(spec) != {"_target_", "fields"} or not isinstance(spec["fields"], dict):
        raise WireError("an env config holds exactly _target_ and fields")
    module_name, _, name = str(spec["_target_"]).rpartition(".")
    cls = getattr(importlib.import_module(module_name), name, None)
    if not (isinstance(cls, type) and issubclass(cls, EnvConfig) and dataclasses.is_dataclass(cls)):
        raise WireError(f"{spec['_target_']} is not an EnvConfig dataclass")
    return cls(**spec["fields"])


def env_to_json(env: EnvConfig) -> dict[str, Any]:
    """An env config as a message carries it (its class and fields)."""
    return _encode(env)


def env_from_json(data: Any) -> EnvConfig:
    if not isinstance(data, dict) or set(data) != {"__env__"}:
        raise WireError("not an env config")
    return _env_config(data["__env__"])


class JsonCodec:
    """The messages of a foreign worker (`slot_worker.PickleCodec`'s interface)."""

    encode_call = staticmethod(encode_call)
    decode_call = staticmethod(decode_call)
    encode_reply = staticmethod(encode_reply)
    decode_reply = staticmethod(decode_reply)
