"""The policy server (`lerobot-hydra-serve`) and `policy=remote`: tiny LeRobot checkpoints built offline, served
on a free port of this machine, evaluated on real MetaWorld simulators; results are those of in-process
evaluation. Also: an openpi-protocol server written here, the health endpoint and the batching across clients,
and a server killed mid-run."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import tiny_act, tiny_diffusion
from lerobot_hydra.core.errors import UserError
from tests.conftest import ROOT, evaluate_here, outcome, read_episodes

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

ENV = ["env.task=reach-v3", "env.obs_type=state", "device=cpu"]
RUN = [*ENV, "env.episode_length=12", "eval.use_async_envs=false", "eval.max_episodes_rendered=0"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("checkpoints")
    act, diffusion = tiny_act(root / "act"), tiny_diffusion(root / "diffusion")  # chunks of 8 and 4 actions
    return {"act": ["policy=act", f"policy.path={act}"], "diffusion": ["policy=diffusion", f"policy.path={diffusion}"]}


def serve_config(*overrides: str, name: str = "serve") -> Any:
    """The config tree composed with `overrides` (`name`: serve, or config for eval.py's)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import lerobot_hydra.app.serve  # noqa: F401  registers the serve schema

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            return compose(config_name=name, overrides=list(overrides))
    finally:
        GlobalHydra.instance().clear()


@contextmanager
def served(tmp_path: Path, *overrides: str, env: Sequence[str] = ENV) -> Iterator[tuple[Any, Path]]:
    """Our server in a thread of this process, on a free port, announced in tmp_path/server.json; `env`: the
    overrides that choose its env (MetaWorld's reach-v3 state by default)."""
    from lerobot_hydra.app.serve import serve

    announce = tmp_path / "server.json"
    cfg = serve_config(*env, "serve.host=127.0.0.1", f"serve.announce={announce}", *overrides)
    ready: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            serve(cfg, server_ready=ready.append)
        except BaseException as err:
            failed.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    while not ready and not failed:
        time.sleep(0.05)
    if failed:
        raise failed[0]
    try:
        yield ready[0], announce
    finally:
        ready[0].stop()
        thread.join(60)
    assert not thread.is_alive() and not announce.exists()  # a stopped server takes its announce file away


def outcomes(run_dir: Path) -> list[tuple]:
    return sorted(outcome(r) for r in read_episodes(run_dir))


def health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
        assert response.status == 200 and response.headers["Content-Type"] == "application/json"
        return json.loads(response.read())


def test_act_through_the_server_records_as_in_process(checkpoints: dict[str, list[str]], tmp_path: Path) -> None:
    act = checkpoints["act"]
    here = [*act, *RUN, "eval.n_episodes=3"]
    evaluate_here(tmp_path / "here", *here, "eval.batch_size=2")
    with served(tmp_path, *act, "serve.max_batch_size=2", "serve.shards=1") as (server, announce):
        remote = ["policy=remote", f"policy.url={announce}"]
        evaluate_here(tmp_path / "remote", *RUN, "eval.n_episodes=3", *remote, "eval.batch_size=3")
        assert server.stopped.wait(30)  # its one shard completed: the server stopped by itself
        stats = server.stats.snapshot()
    assert len(outcomes(tmp_path / "here")) == 3
    assert outcomes(tmp_path / "remote") == outcomes(tmp_path / "here")
    # Chunks of 8 over 12 steps: 2 per episode, asked by 3 rows, in messages of at most 2 rows.
    assert stats["rows"] == 6 and stats["requests"] == 4 and stats["clients_done"] == 1


def test_stochastic_noise_is_drawn_per_episode_on_the_server(checkpoints: dict[str, list[str]], tmp_path: Path) -> None:
    """Diffusion (2 observations of history, noise in every denoising step) through the server at two batch
    sizes equals the in-process run: the server draws each row's noise from its episode's seed."""
    diffusion = checkpoints["diffusion"]
    common = [*RUN, "eval.n_episodes=4"]
    evaluate_here(tmp_path / "here", *diffusion, *common, "eval.batch_size=3")
    here = outcomes(tmp_path / "here")
    assert len({o[5] for o in here}) == 4  # every episode its own rewards
    with served(tmp_path, *diffusion, "serve.max_batch_size=3") as (_, announce):
        remote = ["policy=remote", f"policy.url={announce}"]
        for batch_size in (1, 4):
            evaluate_here(tmp_path / f"remote{batch_size}", *common, *remote, f"eval.batch_size={batch_size}")
            assert outcomes(tmp_path / f"remote{batch_size}") == here


def test_a_served_policy_runs_on_the_real_time_clock_as_in_process(
    checkpoints: dict[str, list[str]], tmp_path: Path
) -> None:
    """ACT (chunks of 8) on a modeled clock of 100 ms (8 steps at 80 fps) through the server: each row's queue
    runs under LeRobot's async-inference rules in the client, so the records equal the in-process run's, timing
    included; on a measured clock each chunk is charged its request's wall time, and the records say so."""
    from lerobot_hydra.policies.clock import MEASURED

    timing = ("inferences", "latency_steps", "latency_ms", "held_steps", "not_reproducible")
    clock = ["eval.clock.mode=modeled", "eval.clock.latency_ms=100", "eval.clock.aggregate=latest_only"]
    common = [*RUN, "eval.n_episodes=3", *clock]
    act = checkpoints["act"]
    evaluate_here(tmp_path / "here", *act, *common, "eval.batch_size=2")
    with served(tmp_path, *act, "serve.max_batch_size=3") as (_, announce):
        remote = ["policy=remote", f"policy.url={announce}"]
        evaluate_here(tmp_path / "remote", *common, *remote, "eval.batch_size=3")
        evaluate_here(tmp_path / "measured", *RUN, "eval.n_episodes=2", *remote, "eval.clock.mode=measured")

    def timed(run_dir: Path) -> list[tuple]:
        return sorted((*outcome(r), *(str(r[k]) for k in timing)) for r in read_episodes(run_dir))

    assert timed(tmp_path / "remote") == timed(tmp_path / "here")
    # The first chunk awaited; the second asked at 4 actions left, 8 steps away: the row holds 4 steps.
    assert all(r["latency_steps"] == [0, 8] and r["held_steps"] == 4 for r in read_episodes(tmp_path / "remote"))
    for record in read_episodes(tmp_path / "measured"):
        assert record["latency_ms"] == record["infer_ms"] and all(ms > 0 for ms in record["latency_ms"])
        assert record["not_reproducible"] == MEASURED


@pytest.mark.slow
def test_smolvla_with_pixels_and_language_through_the_server(tmp_path: Path) -> None:
    """Flow matching with per-row noise, a camera and the task text tokenized on the server."""
    from devkit.lerobot_checkpoints import METAWORLD_ACTION, tiny_smolvla

    features = {"observation.image": ("VISUAL", (3, 32, 32)), "observation.state": ("STATE", (4,))}
    smolvla = ["policy=smolvla", f"policy.path={tiny_smolvla(tmp_path / 'smolvla', features, METAWORLD_ACTION)}"]
    pixels = ["env.obs_type=pixels_agent_pos", "env.observation_height=32", "env.observation_width=32"]
    chunks = ["policy.overrides={n_action_steps: 2}"]
    common = [*RUN, *pixels, "env.episode_length=4", "eval.n_episodes=3"]
    evaluate_here(tmp_path / "here", *smolvla, *chunks, *common, "eval.batch_size=3")
    with served(tmp_path, *smolvla, *chunks, *pixels) as (_, announce):
        evaluate_here(tmp_path / "remote", *common, "policy=remote", f"policy.url={announce}", "eval.batch_size=2")
    assert len({o[5] for o in outcomes(tmp_path / "here")}) == 3
    assert outcomes(tmp_path / "remote") == outcomes(tmp_path / "here")
    # Both drew the camera only on the steps SmolVLA reads (eval.render=read); drawn at every step, the same.
    evaluate_here(tmp_path / "every", *smolvla, *chunks, *common, "eval.batch_size=3", "eval.render=every_step")
    assert outcomes(tmp_path / "every") == outcomes(tmp_path / "here")


def openpi_codec() -> tuple[Callable[[Any], Any], Callable[[dict], Any]]:
    """openpi's array encoding for msgpack, as its msgpack_numpy module defines it."""

    def encode(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            return {b"__ndarray__": True, b"data": obj.tobytes(), b"dtype": obj.dtype.str, b"shape": obj.shape}
        return obj

    def decode(obj: dict) -> Any:
        if b"__ndarray__" in obj:
            return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
        return obj

    return encode, decode


def openpi_request(port: int, observation: dict[str, Any]) -> dict[str, Any]:
    """One request as openpi's client makes it (msgpack with openpi's array encoding, written here)."""
    import msgpack
    from websockets.sync.client import connect

    encode, decode = openpi_codec()
    with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as websocket:
        metadata = msgpack.unpackb(websocket.recv(), object_hook=decode)
        assert "lerobot_hydra" in metadata
        websocket.send(msgpack.packb(observation, default=encode))
        return msgpack.unpackb(websocket.recv(), object_hook=decode)


def openpi_server(received: list[dict[str, Any]], chunk: int) -> tuple[Callable[[], None], int]:
    """A minimal server of openpi's protocol, with openpi's array encoding: metadata on connect, then one
    observation per request, answered with {"actions": [chunk, 4]}. Returns (stop, port)."""
    import msgpack
    from websockets.asyncio.server import serve

    encode, decode = openpi_codec()

    async def handler(websocket: Any) -> None:
        await websocket.send(msgpack.packb({"server": "openpi-like"}, default=encode))
        async for message in websocket:
            obs = msgpack.unpackb(message, object_hook=decode)
            received.append(obs)
            # Toward +x, scaled by the hand's height: the actions depend on the observation.
            actions = np.zeros((chunk, 4), dtype=np.float32)
            actions[:, 0] = float(obs["observation.state"][2])
            await websocket.send(msgpack.packb({"actions": actions}, default=encode))

    started = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["stop"] = asyncio.Event()
        async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
            box["port"] = next(iter(server.sockets)).getsockname()[1]
            started.set()
            await box["stop"].wait()

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True).start()
    started.wait(30)
    return (lambda: loop.call_soon_threadsafe(box["stop"].set)), box["port"]


def test_remote_evaluates_a_policy_served_by_an_openpi_protocol_server(tmp_path: Path) -> None:
    received: list[dict[str, Any]] = []
    stop, port = openpi_server(received, chunk=5)
    try:
        evaluate_here(
            tmp_path,
            *RUN,
            "eval.n_episodes=2",
            "eval.batch_size=2",
            "policy=remote",
            f"policy.url=ws://127.0.0.1:{port}",
        )
    finally:
        stop()
    records = read_episodes(tmp_path)
    assert sorted(r["episode_index"] for r in records) == [0, 1] and all(r["steps"] == 12 for r in records)
    assert len(received) == 2 * 3  # 12 steps in chunks of 5: 3 requests per episode
    first = received[0]
    assert first["prompt"] == records[0]["task"] and first["observation.state"].shape == (4,)
    assert first["observation.state"].dtype.kind == "f"


def test_health_endpoint_and_log_show_requests_of_two_clients_batched(
    checkpoints: dict[str, list[str]], tmp_path: Path, caplog: Any
) -> None:
    from lerobot_hydra.schemas.schema import instantiate_node

    with caplog.at_level(logging.INFO, logger="lerobot_hydra"):
        with served(tmp_path, *checkpoints["act"], "serve.max_wait_ms=2000", "serve.log_interval_s=0.2") as (
            server,
            announce,
        ):
            cfg = serve_config(*RUN, "policy=remote", f"policy.url={announce}", name="config")
            env = instantiate_node(cfg.env)
            config = instantiate_node(cfg.policy)
            clients = [config.build(env, "cpu") for _ in range(2)]
            task = env.tasks()[0]
            batch: dict[str, Any] = {"task": [task.description] * 2}
            batch["observation.state"] = np.full((2, 4), 0.5, np.float32)
            batch["observation.environment_state"] = np.zeros((2, 39), np.float32)
            actions: list[np.ndarray] = []

            def step(client: Any) -> None:
                client.reset(task, [1000, 1001])
                actions.append(client.select_action(batch))

            threads = [threading.Thread(target=step, args=(client,)) for client in clients]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            stats = health(server.port)
            time.sleep(0.5)  # a log line after the batch
            openpi_reply = openpi_request(server.port, {**{k: v[0] for k, v in batch.items()}, "prompt": "reach"})
            other = serve_config("env=pusht", "policy=remote", f"policy.url={announce}", "device=cpu", name="config")
            with pytest.raises(UserError, match="reads observation.environment_state, which this env does not"):
                instantiate_node(other.policy).build(instantiate_node(other.env), "cpu")
    assert len(actions) == 2 and actions[0].shape == (2, 4) and np.array_equal(actions[0], actions[1])
    assert stats["connections"] == 2 and stats["requests"] == 2 and stats["rows"] == 4
    assert stats["batches"] == 1 and stats["mean_batch_size"] == 4.0
    assert stats["latency_ms"]["p50"] > 0
    # An openpi client's request (one observation, no seed) gets one chunk: ACT's 8 actions.
    assert openpi_reply["actions"].shape == (8, 4) and np.isfinite(openpi_reply["actions"]).all()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("serve: ")]
    assert any("batch size 4.0 (max 4)" in line for line in lines), lines


def launch_server(announce: Path, *overrides: str) -> subprocess.Popen:
    """`python -m lerobot_hydra.app.serve` in a subprocess, announcing itself in `announce`."""
    args = [sys.executable, "-m", "lerobot_hydra.app.serve", *overrides, *ENV, "serve.host=127.0.0.1"]
    args += [f"serve.announce={announce}", f"hydra.run.dir={announce.parent / 'serve'}"]
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(args, cwd=ROOT, env=environ)


def start_server(announce: Path, *overrides: str) -> tuple[subprocess.Popen, dict[str, Any]]:
    """`launch_server`, returned once it has announced itself."""
    server = launch_server(announce, *overrides)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and server.poll() is None:
        if announce.exists() and (info := json.loads(announce.read_text()))["pid"] == server.pid:
            return server, info
        time.sleep(0.1)
    server.kill()
    raise AssertionError(f"the server did not announce itself (exit status {server.poll()})")


def test_a_server_killed_mid_run_fails_the_run_in_one_line_and_a_rerun_resumes(
    checkpoints: dict[str, list[str]], tmp_path: Path
) -> None:
    act = checkpoints["act"]
    announce = tmp_path / "server.json"
    server, info = start_server(announce, *act)
    common = [*RUN, "env.episode_length=40", "eval.n_episodes=6", "eval.batch_size=2"]
    remote = ["policy=remote", f"policy.url={announce}", "policy.connect_timeout_s=120"]

    def kill_after_requests() -> None:
        while health(info["port"])["requests"] < 3:
            time.sleep(0.05)
        server.send_signal(signal.SIGKILL)

    threading.Thread(target=kill_after_requests, daemon=True).start()
    run_dir = tmp_path / "remote"
    try:
        with pytest.raises(UserError) as failure:
            evaluate_here(run_dir, *common, *remote)
    finally:
        server.kill()
        server.wait(60)
    message = str(failure.value)
    assert "\n" not in message and info["url"] in message and "went away" in message and "rerun" in message
    recorded = len(read_episodes(run_dir)) if (run_dir / "episodes.jsonl").exists() else 0
    assert recorded < 6
    assert json.loads(announce.read_text())["pid"] == server.pid  # a killed server cannot take its file away

    # The rerun starts while the announce file still names the dead server; it waits, reading the file again,
    # until the new server (another port) rewrites it, then resumes and completes. The policy's identity is the
    # served one, so a run naming the server by its url has the same fingerprint. SIGTERM stops the server cleanly.
    server = launch_server(announce, *act)
    try:
        evaluate_here(run_dir, *common, *remote)
        info = json.loads(announce.read_text())
        assert info["pid"] == server.pid
        evaluate_here(run_dir, *common, "policy=remote", f"policy.url={info['url']}")  # complete: nothing to run
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0 and not announce.exists()
    finally:
        server.kill()
    evaluate_here(tmp_path / "here", *act, *common)
    assert outcomes(run_dir) == outcomes(tmp_path / "here")


def test_parallel_tasks_have_their_own_connections_and_a_complete_rerun_counts_as_done(
    checkpoints: dict[str, list[str]], tmp_path: Path
) -> None:
    act = checkpoints["act"]
    common = [*RUN, "env.task=[reach-v3,push-v3]", "eval.n_episodes=2", "eval.batch_size=2"]
    evaluate_here(tmp_path / "here", *act, *common)
    with served(tmp_path, *act, "serve.shards=2") as (server, announce):
        remote = ["policy=remote", f"policy.url={announce}", "eval.max_parallel_tasks=2"]
        evaluate_here(tmp_path / "remote", *common, *remote)
        time.sleep(0.5)  # the server notices the closed connections
        stats = health(server.port)
        # The complete run again: nothing to run, no policy built, yet it tells the server: its second shard.
        evaluate_here(tmp_path / "remote", *common, *remote)
        assert server.stopped.wait(30)
    assert len(outcomes(tmp_path / "here")) == 4
    assert outcomes(tmp_path / "remote") == outcomes(tmp_path / "here")
    # The metadata look-up, the run's own connection and one per lane, all closed at its end; one client completed.
    assert stats["connections_total"] == 3 + 1 and stats["connections"] == 0 and stats["clients_done"] == 1


def test_serve_settings_are_checked(checkpoints: dict[str, list[str]]) -> None:
    from lerobot_hydra.serving.schema import validate_serve

    for override, words in [
        ("serve.max_batch_size=0", "serve.max_batch_size must be at least 1"),
        ("serve.port=70000", "serve.port must be 0"),
        ("serve.shards=-1", "serve.shards must be 0"),
    ]:
        with pytest.raises(UserError, match=words):
            validate_serve(serve_config(*checkpoints["act"], *ENV, override))
    with pytest.raises(UserError, match="policy=remote cannot be served"):
        validate_serve(serve_config(*ENV, "policy=remote"))
