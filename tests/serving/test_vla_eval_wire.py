"""`policy=vla_eval`'s wire format and handshake, without vla-eval installed (both Python lines): what a server
may send is decoded strictly, and a server that is not there, or speaks another protocol version, is one line."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import numpy as np
import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.serving.vla_eval.client import VlaEvalPolicyConfig
from lerobot_hydra.serving.vla_eval.wire import pack, unpack
from lerobot_hydra.serving.wire import ProtocolError


def message(payload: dict[str, Any], kind: str = "action", **extra: Any) -> bytes:
    return msgpack.packb({"type": kind, "payload": payload, "seq": 1, "timestamp": 0.0, **extra}, use_bin_type=True)


def array_map(data: bytes, dtype: str, shape: list[int]) -> dict[str, Any]:
    return {"__ndarray__": True, "data": data, "dtype": dtype, "shape": shape}


def test_messages_round_trip_in_each_image_format() -> None:
    image = np.random.default_rng(0).integers(0, 256, (6, 5, 3), dtype=np.uint8)
    for image_format in ("png", "raw", "jpeg"):
        payload = {"images": {"a": image}, "states": np.arange(3.0), "n": np.int64(4)}
        kind, got, seq = unpack(pack("observation", payload, 7, image_format))
        assert (kind, seq, got["n"]) == ("observation", 7, 4) and np.array_equal(got["states"], np.arange(3.0))
        assert got["images"]["a"].shape == image.shape
        assert image_format == "jpeg" or np.array_equal(got["images"]["a"], image)  # png and raw are lossless


@pytest.mark.parametrize(
    "payload, refusal",
    [
        ({"a": array_map(b"\0" * 8, "|O", [1])}, "dtype '|O'"),
        ({"a": array_map(b"\0" * 7, "<f8", [1])}, "wrong size"),
        ({"a": array_map(b"\0" * 8, "<f8", [-1])}, "shape [-1]"),
        ({"a": {**array_map(b"\0" * 8, "<f8", [1]), "extra": 1}}, "array map with the keys"),
        (
            {"a": {"__image__": True, "format": "png", "data": b"%!PS-Adobe-3.0 EPSF-3.0\n", "shape": [1, 1, 3]}},
            "not png",
        ),
        ({"a": {"__image__": True, "format": "bmp", "data": b"", "shape": [1, 1, 3]}}, "format 'bmp'"),
    ],
)
def test_what_a_server_may_not_send_is_refused(payload: dict[str, Any], refusal: str) -> None:
    with pytest.raises(ProtocolError, match=refusal.replace("[", r"\[").replace("]", r"\]").replace("|", r"\|")):
        unpack(message(payload))


def test_an_image_of_another_shape_than_declared_and_extension_types_are_refused() -> None:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(buffer, format="PNG")
    with pytest.raises(ProtocolError, match="declared"):
        unpack(message({"a": {"__image__": True, "format": "png", "data": buffer.getvalue(), "shape": [3, 2, 3]}}))
    with pytest.raises(ProtocolError, match="extension"):
        unpack(message({"a": msgpack.ExtType(1, b"x")}))
    with pytest.raises(ProtocolError, match="type 'bogus'"):
        unpack(message({}, kind="bogus"))


@contextmanager
def fake_server(reply: Callable[[Any], None]) -> Iterator[str]:
    """A websocket server of this process whose handler is `reply` (it gets the connection)."""
    from websockets.sync.server import serve

    server = serve(reply, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
    finally:
        server.shutdown()
        thread.join(10)


def test_a_server_of_another_protocol_version_is_one_line() -> None:
    def hello_v2(connection: Any) -> None:
        connection.recv()
        connection.send(message({"protocol_version": 2, "harness_version": "9.0"}, kind="hello"))
        connection.recv()  # until the client leaves

    with fake_server(hello_v2) as url:
        with pytest.raises(UserError, match=rf"^the vla-eval model server at {url} speaks protocol version 2, this "):
            _ = VlaEvalPolicyConfig(url=url, connect_timeout_s=10).server


def test_a_server_that_is_not_vla_eval_is_one_line() -> None:
    def openpi_like(connection: Any) -> None:
        connection.send(msgpack.packb({"metadata": 1}))
        connection.recv()

    with fake_server(openpi_like) as url:
        with pytest.raises(UserError, match=rf"^the vla-eval model server at {url} sent its HELLO that is not the "):
            _ = VlaEvalPolicyConfig(url=url, connect_timeout_s=10, timeout_s=5).server


def test_no_server_there_is_one_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(
        UserError,
        match=rf"^no vla-eval model server answered at ws://127.0.0.1:{port} within policy.connect_timeout_s=0.5 ",
    ):
        _ = VlaEvalPolicyConfig(url=f"ws://127.0.0.1:{port}", connect_timeout_s=0.5).server


def test_settings_are_checked() -> None:
    with pytest.raises(UserError, match="policy.url must be ws://"):
        VlaEvalPolicyConfig(url="localhost:8000")
    with pytest.raises(UserError, match="policy.image_format must be one of png, jpeg, raw"):
        VlaEvalPolicyConfig(url="ws://h:1", image_format="webp")


LIBERO_SERVER = {
    "model_server": "LiberoModel",
    "action_spec": {
        "position": {"name": "position", "dims": 3, "format": "delta_xyz"},
        "rotation": {"name": "rotation", "dims": 3, "format": "axis_angle"},
        "gripper": {"name": "gripper", "dims": 1, "format": "binary_close_positive"},
    },
    "observation_spec": {"image": {"name": "image", "dims": 0, "format": "rgb_hwc_uint8"}},
}


def test_metaworld_and_pusht_conventions() -> None:
    """MetaWorld sends its camera upright as rendered, its 4-D state and the text; a server whose actions hold a
    rotation does not fit it, nor one asking for a wrist camera; PushT needs its image and state as a map."""
    from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
    from lerobot_hydra.envs.pusht import PushTEnvConfig
    from lerobot_hydra.serving.vla_eval.conventions import convention_for
    from lerobot_hydra.serving.vla_eval.specs import check_specs

    metaworld = MetaWorldEnvConfig(task="reach-v3", features_map={"pixels": "observation.image"})
    convention = convention_for(metaworld, {"send_state": True})
    raw = {"pixels": np.arange(2 * 4 * 4 * 3, dtype=np.uint8).reshape(2, 4, 4, 3), "agent_pos": np.ones((2, 4))}
    sent = convention.observation(raw, 1, "reach the goal")
    assert sent["task_description"] == "reach the goal" and np.array_equal(sent["images"]["corner2"], raw["pixels"][1])
    assert np.array_equal(sent["states"], np.ones(4)) and convention.action_dim == 4
    assert convention.reads == {"observation.image", "observation.agent_pos"}
    with pytest.raises(
        UserError, match=r"does not fit MetaWorld: action rotation: the server produces axis_angle\(3\)"
    ):
        check_specs(LIBERO_SERVER, "ws://h:1", convention.env_name, convention.observation_spec, convention.action_spec)
    with pytest.raises(UserError, match="asks send_wrist_image, which MetaWorld here does not offer"):
        convention_for(metaworld, {"send_wrist_image": True})
    with pytest.raises(UserError, match="use env.obs_type=pixels_agent_pos"):
        convention_for(MetaWorldEnvConfig(task="reach-v3", obs_type="pixels"), {"send_state": True})

    pusht = PushTEnvConfig(gym_id="gym_pusht/PushT-v0", gym_kwargs={"obs_type": "pixels_agent_pos"})
    convention = convention_for(pusht, {"send_state": True})
    assert convention.action_dim == 2 and set(convention.observation_spec) == {"top", "language", "state"}
    with pytest.raises(UserError, match="use env.gym_kwargs.obs_type=pixels_agent_pos"):
        convention_for(PushTEnvConfig(gym_id="gym_pusht/PushT-v0", gym_kwargs={"obs_type": "state"}), {})
