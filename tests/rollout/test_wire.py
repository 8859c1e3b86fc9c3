"""The JSON control messages of foreign workers (vector/wire.py): what travels, and what is refused on arrival."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
from lerobot_hydra.vector.wire import WireError, decode_call, decode_reply, encode_call, encode_reply

TASK = TaskSpec("easy", 23, "reach-v3", "Reach a goal position.", 120)


def test_a_call_arrives_with_its_env_config_task_and_episode_made_on_the_worker_side() -> None:
    config = MetaWorldEnvConfig(task=["reach-v3"], obs_type="state", episode_length=120).without_processors()
    name, args, kwargs, write_obs = decode_call(encode_call("prepare", (config, TASK, True, (3, 1003)), {}, False))
    assert (name, kwargs, write_obs) == ("prepare", {}, False)
    assert args == (config, TASK, True, (3, 1003))
    reset = decode_call(encode_call("reset", (), {"seed": None, "options": {"episodes": [(0, 1000), None]}}, True))
    assert reset[2] == {"seed": None, "options": {"episodes": ((0, 1000), None)}} and reset[3]


def test_answers_carry_frames_as_raw_bytes_and_errors_as_text() -> None:
    frame = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    ok, value = decode_reply(encode_reply(True, frame))
    assert ok and value.dtype == np.uint8 and np.array_equal(value, frame)
    assert decode_reply(encode_reply(True, {"is_success": np.bool_(True), "init_state_id": np.int64(4)})) == (
        True,
        {"is_success": True, "init_state_id": 4},
    )
    ok, error = decode_reply(encode_reply(False, UserError("env.task: no such task")))
    assert not ok and isinstance(error, UserError) and str(error) == "env.task: no such task"
    assert decode_reply(encode_reply(False, "Traceback ...\nValueError: bad")) == (
        False,
        "Traceback ...\nValueError: bad",
    )


@pytest.mark.parametrize(
    "message",
    [
        {"v": 2, "call": "render", "args": [], "kwargs": {}, "write_obs": False},
        {"v": 1, "call": "__reduce__", "args": [], "kwargs": {}, "write_obs": False},
        {"v": 1, "call": "render", "args": {}, "kwargs": {}, "write_obs": False},
        {"v": 1, "call": "render", "args": [], "kwargs": {}},
        {"v": 1, "call": "bind", "args": [{"__env__": {"_target_": "os.system", "fields": {}}}], "kwargs": {},
         "write_obs": False},
    ],
)  # fmt: skip
def test_a_message_outside_the_schema_is_refused(message: dict) -> None:
    with pytest.raises(WireError):
        decode_call(json.dumps(message).encode())


def test_a_pickle_is_no_message() -> None:
    import pickle

    with pytest.raises(WireError):
        decode_call(pickle.dumps(("render", (), {}, False)))


def test_a_facts_request_is_answered_from_the_env_made_on_the_worker_side_and_anything_else_refused() -> None:
    """`foreign_worker --facts`: the env config's `measure` per task; a refusal of its settings travels as text."""
    from lerobot_hydra.vector.foreign_worker import facts
    from lerobot_hydra.vector.wire import PROTOCOL, env_to_json

    config = MetaWorldEnvConfig(task=["reach-v3"], obs_type="state").without_processors()
    request = {"v": PROTOCOL, "env": env_to_json(config), "tasks": [TASK.__dict__]}
    # MetaWorld declares its spaces without a simulator: it measures nothing, and says so as a traceback would.
    with pytest.raises(NotImplementedError):
        facts(request)
    for bad in ({**request, "v": PROTOCOL + 1}, {**request, "extra": 1}, {**request, "env": {"__env__": {}}}):
        with pytest.raises(WireError):
            facts(bad)
    not_an_env = {"__env__": {"_target_": "subprocess.Popen", "fields": {"args": "true"}}}
    with pytest.raises(WireError, match="is not an EnvConfig dataclass"):
        facts({**request, "env": not_an_env})
