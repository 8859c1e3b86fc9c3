"""Policy serving that lets no one in (docs/security.md): no code from the wire on either side, API keys at the
handshake (as openpi's client sends them), bounded and checked requests, hostile clients and servers met in one
line. Real servers on loopback, a tiny ACT checkpoint built here, real MetaWorld simulators, and the real openpi
packages from PyPI (openpi-client, openpi-server)."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import socket
import stat
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.serving.keys import ENV_VAR
from lerobot_hydra.serving.wire import EXTENSION_KEY, METADATA_KEY, ProtocolError, packb, unpackb
from tests.conftest import evaluate_here, read_episodes
from tests.serving.test_policy_server import RUN, checkpoints, outcomes, serve_config, served  # noqa: F401

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]


class Payload:
    """Unpickling it creates the file `path`: a stand-in for any code a peer would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def pickled_map(marker: Path) -> dict[bytes, Any]:
    """The msgpack-numpy package's encoding of an object array: its decoder unpickles `data`."""
    data = pickle.dumps(Payload(marker))
    return {b"nd": True, b"type": "|O", b"kind": b"O", b"shape": (), b"data": data}


def test_the_decoder_takes_numeric_arrays_and_plain_values_only(tmp_path: Path) -> None:
    values = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.int64(7), "b": np.bool_(True), "t": "x"}
    decoded = unpackb(packb({**values, "n": None, "raw": b"\x00"}))
    assert np.array_equal(decoded["a"], values["a"]) and decoded["a"].dtype == np.float32
    assert decoded["s"] == 7 and decoded["b"] and decoded["t"] == "x" and decoded["n"] is None
    marker = tmp_path / "ran"
    array = {b"__ndarray__": True, b"data": b"\x00" * 8, b"dtype": "<f4", b"shape": [2]}
    hostile = {
        "pickle": msgpack.packb({"obs": pickled_map(marker)}),
        "object dtype": msgpack.packb({**array, b"dtype": "|O"}),
        "structured dtype": msgpack.packb({**array, b"dtype": "[('a', 'O')]"}),
        "short data": msgpack.packb({**array, b"shape": [3]}),
        "negative shape": msgpack.packb({**array, b"shape": [-2]}),
        "extension": msgpack.packb(msgpack.ExtType(1, b"x")),
        "garbage": b"\xc1\x00",
        "deep": b"\x91" * 100_000 + b"\xc0",
        "scalar overflow": msgpack.packb({b"__npgeneric__": True, b"data": 300, b"dtype": "|u1"}),
    }
    for name, data in hostile.items():
        with pytest.raises(ProtocolError):
            unpackb(data)
            pytest.fail(f"{name} was decoded")
    with pytest.raises(ValueError, match="dtype object"):
        packb({"x": np.array([None], dtype=object)})
    assert not marker.exists()


def test_no_pickle_eval_exec_or_content_driven_import_in_the_package() -> None:
    """A scan of the package's source: no module decodes code; the few that use pickle or import by name do so
    for their own processes' pipes or the user's config, never in serving, and nothing imports msgpack_numpy."""
    import ast

    import lerobot_hydra

    root = Path(lerobot_hydra.__file__).parent
    pickle_users = {  # own worker pipes; a restricted unpickler of local files; dumps only
        "vector/slot_vector.py",
        "vector/slot_worker.py",
        "envs/libero_init_states.py",
        "envs/metaworld.py",
    }
    importers = {  # modules named by the user's own config (a _target_, a gym id, policy.function), never a message
        "schemas/schema.py",
        "envs/gym.py",
        "policies/function.py",
        "policies/lerobot/config.py",
        "policies/lerobot/checkpoint.py",
        # env.python's workers: the env config's _target_ and its preload modules, taken from the user's config by
        # the parent that started the worker, sent over that worker's own pipe (an env.python worker takes no other)
        "vector/wire.py",
        "vector/foreign_worker.py",
    }
    found: dict[str, set[str]] = {"pickle": set(), "import_module": set(), "code": set()}
    for path in root.rglob("*.py"):
        name = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            if any(m.split(".")[0] in {"pickle", "marshal", "dill", "cloudpickle", "shelve"} for m in modules):
                found["pickle"].add(name)
            assert not any(m.startswith("msgpack_numpy") for m in modules), name
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if called in {"eval", "exec", "compile", "__import__"} and isinstance(func, ast.Name):
                    found["code"].add(name)
                if called == "import_module":
                    found["import_module"].add(name)
    assert found["code"] == set()
    assert found["pickle"] <= pickle_users and found["import_module"] <= importers, found
    assert not any(n.startswith("serving/") for group in found.values() for n in group)


@contextmanager
def fake_server(handler: Callable[[Any], Any]) -> Iterator[str]:
    """A websocket server on loopback run by `handler(websocket)` (async); yields its url."""
    from websockets.asyncio.server import serve

    started, box = threading.Event(), {}

    async def main() -> None:
        box["stop"] = asyncio.Event()
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            box["port"] = next(iter(server.sockets)).getsockname()[1]
            started.set()
            await box["stop"].wait()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield f"ws://127.0.0.1:{box['port']}"
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(30)


OURS = {"version": 1, "policy": "fake", "reads": ["observation.environment_state", "observation.state"]}
OURS.update({"history": 1, "chunk": 4, "action_dim": 4, "max_batch_size": 8, "identity": {}})


def hostile_server(kind: str, marker: Path) -> Callable[[Any], Any]:
    """A server that answers the first request (or the connection) as `kind` says."""

    async def handler(websocket: Any) -> None:
        if kind == "pickled metadata":
            await websocket.send(msgpack.packb({METADATA_KEY: pickled_map(marker)}))
            return
        if kind == "bad metadata":
            await websocket.send(packb({METADATA_KEY: {**OURS, "reads": "observation.state"}}))
            return
        await websocket.send(packb({METADATA_KEY: OURS}))
        async for message in websocket:
            rows = len(msgpack.unpackb(message, raw=False)["task"])
            actions = np.zeros((rows, 4, 4), np.float32)
            noise = [b"\x00" * 16] * rows
            if kind == "closes":
                return
            if kind == "text":
                await websocket.send("Traceback (most recent call last):\nRuntimeError: the policy broke")
            elif kind == "pickled reply":
                await websocket.send(msgpack.packb({"actions": pickled_map(marker), "noise": noise}))
            elif kind == "wrong shape":
                await websocket.send(packb({"actions": actions[:, :, :3], "noise": noise}))
            elif kind == "non-finite":
                actions[0, 1, 2] = np.nan
                await websocket.send(packb({"actions": actions, "noise": noise}))

    return handler


HOSTILE = {
    "pickled metadata": "sent its metadata that is not the protocol's: a map with binary keys",
    "bad metadata": "sent bad metadata: 'reads' is 'observation.state'",
    "closes": "went away",
    "text": "failed: RuntimeError: the policy broke",
    "pickled reply": "sent a reply that is not the protocol's",
    "wrong shape": "sent actions of shape (2, 4, 3); this env needs 4 per step",
    "non-finite": "sent non-finite actions",
}


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_a_hostile_or_broken_server_is_one_line_naming_it_and_nothing_is_recorded(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with fake_server(hostile_server(kind, marker)) as url:
        with pytest.raises(UserError) as failure:
            remote = ["policy=remote", f"policy.url={url}", "policy.connect_timeout_s=20"]
            evaluate_here(tmp_path / "run", *RUN, "eval.n_episodes=2", "eval.batch_size=2", *remote)
    message = str(failure.value)
    assert "\n" not in message and url in message and HOSTILE[kind] in message, message
    assert not marker.exists()
    assert not (tmp_path / "run" / "episodes.jsonl").exists() or not read_episodes(tmp_path / "run")


def connect(port: int, key: str | None = None, scheme: str = "ws") -> Any:
    from websockets.sync.client import connect as ws_connect

    headers = {"Authorization": f"Api-Key {key}"} if key else None
    return ws_connect(f"{scheme}://127.0.0.1:{port}", compression=None, max_size=None, additional_headers=headers)


def chunk_request(server: Any, rows: int = 1) -> dict[str, Any]:
    frames = {k: np.full((rows, server.policy.history, *s), 0.5, np.float32) for k, s in server.policy.features.items()}
    listed = {"task": ["reach"] * rows, "seed": [3] * rows, "noise": [None] * rows}
    return {EXTENSION_KEY: "chunks", "frames": frames, **listed}


def refused(websocket: Any, data: bytes) -> str:
    """Sends `data`; returns the server's one-line reason (its text frame) once it has closed the connection."""
    from websockets.exceptions import ConnectionClosed

    websocket.send(data)
    reason = websocket.recv(timeout=60)
    with pytest.raises(ConnectionClosed):
        websocket.recv(timeout=60)
    return reason


def test_hostile_clients_lose_their_connection_in_one_log_line_and_others_are_served(
    checkpoints: dict[str, list[str]],  # noqa: F811
    tmp_path: Path,
    caplog: Any,
) -> None:
    marker = tmp_path / "ran"
    with caplog.at_level(logging.INFO, logger="lerobot_hydra"), served(tmp_path, *checkpoints["act"]) as (server, _):
        port = server.port
        good = chunk_request(server)
        bad = {
            "pickle": msgpack.packb({**good, "frames": pickled_map(marker)}),
            "garbage": b"\xc1 not msgpack",
            "shape": packb({**good, "frames": {k: v[:, :, :2] for k, v in good["frames"].items()}}),
            "rows": packb(chunk_request(server, rows=server.spec.max_rows + 1)),
            "noise": packb({**good, "noise": [b"\x00" * 7]}),
            "openpi": packb({"observation.state": np.zeros(3, np.float32), "prompt": "x"}),
        }
        reasons = {}
        for name, data in bad.items():
            with connect(port) as websocket:
                websocket.recv()  # metadata
                reasons[name] = refused(websocket, data)
        from websockets.exceptions import ConnectionClosed

        with connect(port) as websocket:  # one message over the limit derived from the observation features
            websocket.recv()
            websocket.send(b"\x00" * (server.max_size + 1))
            with pytest.raises(ConnectionClosed) as closed:
                websocket.recv(timeout=60)
        with connect(port) as websocket:  # the server serves on
            websocket.recv()
            websocket.send(packb(good))
            reply = unpackb(websocket.recv(timeout=60))
    assert reply["actions"].shape == (1, 8, 4) and np.isfinite(reply["actions"]).all()
    assert not marker.exists()
    assert "binary keys" in reasons["pickle"] and "malformed msgpack" in reasons["garbage"]
    assert "of shape (1, 1, 2)" in reasons["shape"] and "a request of 33 rows" in reasons["rows"]
    assert "noise state that is not" in reasons["noise"]
    assert reasons["openpi"].startswith("the policy server refused a message: observation.")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("closed the connection of 127.0.0.1:")]
    assert len(lines) == len(bad) + 1 and "over the limit" in lines[-1], lines
    assert server.max_size < 2**21  # 32 rows of 43 floats + 1 MiB: a small policy accepts small messages


def test_keys_are_required_checked_and_served_to_openpi_clients(
    checkpoints: dict[str, list[str]],  # noqa: F811
    tmp_path: Path,
    caplog: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from openpi_client.websocket_client_policy import WebsocketClientPolicy
    from websockets.exceptions import InvalidStatus

    from lerobot_hydra.schemas.schema import instantiate_node

    monkeypatch.setenv(ENV_VAR, "the-key-of-this-test")  # a given key is required, even on loopback
    observation = {"observation.state": np.full(4, 0.5, np.float32), "prompt": "reach"}
    observation["observation.environment_state"] = np.zeros(39, np.float32)
    with caplog.at_level(logging.INFO, logger="lerobot_hydra"), served(tmp_path, *checkpoints["act"]) as (server, ann):
        info, mode = json_of(ann), stat.S_IMODE(ann.stat().st_mode)
        statuses = []
        for key in (None, "a-wrong-key"):
            with pytest.raises(InvalidStatus) as refusal:
                connect(server.port, key)
            statuses.append(refusal.value.response.status_code)
        with pytest.raises(InvalidStatus):
            WebsocketClientPolicy(f"ws://127.0.0.1:{server.port}")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=30) as response:
            health = response.read().decode()  # open to all: counts only
        openpi = WebsocketClientPolicy(f"ws://127.0.0.1:{server.port}", api_key="the-key-of-this-test")
        actions = openpi.infer(observation)["actions"]
        openpi._ws.close()
        # policy=remote by url takes the key from the environment; without it, one line.
        cfg = serve_config(*RUN, "policy=remote", f"policy.url=ws://127.0.0.1:{server.port}", name="config")
        remote = instantiate_node(cfg.policy)
        assert remote.server is not None and remote.server["chunk"] == 8
        monkeypatch.delenv(ENV_VAR)
        cfg = serve_config(*RUN, "policy=remote", f"policy.url=ws://127.0.0.1:{server.port}", name="config")
        with pytest.raises(UserError, match="refused this client: HTTP 401, no API key or a wrong one"):
            instantiate_node(cfg.policy).server  # noqa: B018
    assert statuses == [401, 401] and actions.shape == (8, 4) and np.isfinite(actions).all()
    assert info["api_key"] == "the-key-of-this-test" and mode == 0o600
    assert '"refused": 3' in health and "the-key-of-this-test" not in health
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused the connection of")]
    assert len(lines) == 4 and "no API key" in lines[0] and "a wrong API key" in lines[1], lines


def json_of(path: Path) -> dict[str, Any]:
    import json

    return json.loads(path.read_text())


def test_only_a_client_with_the_key_counts_toward_serve_shards(
    checkpoints: dict[str, list[str]],  # noqa: F811
    tmp_path: Path,
    caplog: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)  # a random key: optional on loopback, known from the announce file
    with caplog.at_level(logging.INFO, logger="lerobot_hydra"):
        with served(tmp_path, *checkpoints["act"], "serve.shards=1") as (server, announce):
            for key in (None, None):  # two anonymous "done"s: neither counts
                with connect(server.port, key) as websocket:
                    websocket.recv()
                    websocket.send(packb({EXTENSION_KEY: "done", "client": "intruder"}))
                    assert unpackb(websocket.recv(timeout=60)) == {"ok": False}
            assert server.stats.snapshot()["clients_done"] == 0 and not server.stopped.is_set()
            with connect(server.port, json_of(announce)["api_key"]) as websocket:
                websocket.recv()
                websocket.send(packb({EXTENSION_KEY: "done", "client": "shard-0"}))
                assert unpackb(websocket.recv(timeout=60)) == {"ok": True}
            assert server.stopped.wait(60)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ignored the 'done' of 127.0.0.1:")]
    assert len(lines) == 2


def test_keys_tls_and_limits_are_settings_checked_in_one_line(
    checkpoints: dict[str, list[str]],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lerobot_hydra.app.serve import serve
    from lerobot_hydra.serving.keys import is_loopback, server_key
    from lerobot_hydra.serving.schema import validate_serve

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("node7")
    monkeypatch.delenv(ENV_VAR, raising=False)
    first, given = server_key(None)
    assert not given and len(first) >= 40 and server_key(None)[0] != first
    from lerobot_hydra.serving.schema import ServeConfig
    from lerobot_hydra.serving.server import PolicyServer

    class Stub:  # the served policy's interface, enough to build (not run) a server
        history, features, noise_state_bytes = 1, {}, None

        def metadata(self, max_batch_size: int) -> dict[str, Any]:
            return {}

    def required(host: str, given: bool) -> bool:
        return PolicyServer(Stub(), ServeConfig(host=host), "k", given).gate.key_required  # type: ignore[arg-type]

    assert required("0.0.0.0", False) and required("10.1.2.3", False) and required("127.0.0.1", True)
    assert not required("127.0.0.1", False)
    (tmp_path / "key").write_text("from-a-file\n")
    assert server_key(str(tmp_path / "key")) == ("from-a-file", True)
    act = [*checkpoints["act"], *RUN[:3]]
    cases = [
        (["serve.api_key_file=/no/such/key"], "serve.api_key_file=/no/such/key cannot be read"),
        (["serve.tls_cert=/x.pem"], "TLS needs both serve.tls_cert and serve.tls_key"),
        (["serve.shards=2"], "serve.shards=2 counts the clients that present the API key, which none could"),
        (["serve.max_connections=0"], "serve.max_connections must be at least 1"),
        (["serve.max_message_mb=0"], "serve.max_message_mb must be positive"),
    ]
    for overrides, words in cases:
        with pytest.raises(UserError, match=words):
            cfg = serve_config(*act, *overrides)
            serve(cfg, validate_serve(cfg))


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_tls_serves_wss_to_clients_that_trust_its_certificate(
    checkpoints: dict[str, list[str]],  # noqa: F811
    tmp_path: Path,
) -> None:
    cert, key = self_signed(tmp_path)
    act = checkpoints["act"]
    common = [*RUN, "eval.n_episodes=2", "eval.batch_size=2"]
    evaluate_here(tmp_path / "here", *act, *common)
    with served(tmp_path, *act, f"serve.tls_cert={cert}", f"serve.tls_key={key}") as (server, announce):
        info = json_of(announce)
        evaluate_here(tmp_path / "remote", *common, "policy=remote", f"policy.url={announce}")
        with pytest.raises(UserError, match=r"TLS with the policy server at wss://127\.0\.0\.1:\d+ failed"):
            evaluate_here(tmp_path / "untrusted", *common, "policy=remote", f"policy.url={info['url']}")
    assert info["url"].startswith("wss://127.0.0.1:") and info["tls_cert"] == str(cert)
    assert outcomes(tmp_path / "remote") == outcomes(tmp_path / "here")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_remote_evaluates_a_policy_served_by_openpis_websocket_policy_server(tmp_path: Path) -> None:
    from openpi_client.base_policy import BasePolicy
    from openpi_server import WebsocketPolicyServer

    received: list[dict[str, Any]] = []

    class TowardX(BasePolicy):
        def infer(self, obs: dict) -> dict:
            received.append(obs)
            actions = np.zeros((5, 4), np.float32)
            actions[:, 0] = float(obs["observation.state"][2])
            return {"actions": actions}

    port = free_port()
    server = WebsocketPolicyServer(TowardX(), host="127.0.0.1", port=port, metadata={"policy": "toward-x"})
    loop = asyncio.new_event_loop()
    task = loop.create_task(server.run())
    thread = threading.Thread(target=loop.run_until_complete, args=(asyncio.wait([task]),), daemon=True)
    thread.start()
    try:
        remote = ["policy=remote", f"policy.url=ws://127.0.0.1:{port}", "policy.connect_timeout_s=60"]
        evaluate_here(tmp_path, *RUN, "eval.n_episodes=2", "eval.batch_size=2", *remote)
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(30)
    records = read_episodes(tmp_path)
    assert sorted(r["episode_index"] for r in records) == [0, 1] and all(r["steps"] == 12 for r in records)
    assert len(received) == 2 * 3 and received[0]["prompt"] == records[0]["task"]  # 12 steps, chunks of 5


def test_the_announce_file_is_private_and_no_key_is_on_a_command_line(tmp_path: Path) -> None:
    from lerobot_hydra.app.serve import announce
    from lerobot_hydra.serving.sweep_job import PolicyServerConfig, server_command

    previous = os.umask(0o022)
    path = tmp_path / "server.json"
    try:
        announce(path, "ws://node7:1234", "secret-key", None)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json_of(path) == {"url": "ws://node7:1234", "pid": os.getpid(), "host": "node7", "port": 1234,
                             "api_key": "secret-key"}  # fmt: skip
    command = server_command(PolicyServerConfig(policy="act"), tmp_path, 2, [])
    assert not any("key" in part.lower() for part in command)
