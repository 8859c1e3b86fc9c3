"""One batching policy server for N env shards vs the same server at max_batch_size=1, and vs the limit.

    python -m speed.policy_server            # everything
    python -m speed.policy_server --checks   # only the cost of the security checks (docs/security.md)

The accelerator is simulated: one device, calls serialised, a flat 40 ms per call up to 32 rows (each further 32
rows another call). It is served by our server (`lerobot_hydra.serving.server.PolicyServer`, in this process);
N = 8 client shards, each a process running the real `policy=remote` client (`RemotePolicy`: per-row action
queues, the batched wire extension) over 8 sub-envs whose step takes a fixed 50 ms (a fake env: λ = 8 / 0.05 =
160 observations/s per shard), with chunks of 8 actions (ACT, diffusion, SmolVLA and pi0 act in chunks; only a
row whose queue is empty asks the server). Throughput = observations stepped per second by all shards over a
steady window. The limit is min(env-limited N·λ, device-limited μ(B)·chunk with μ(B) = B rows / 40 ms).
Target: >= 0.8 of the limit at N = 8. Also printed: the same with chunks of 1 (a request every step), and a real
tiny ACT checkpoint on the CPU (its μ(B) measured first).

The checks (docs/security.md): every shard presents an API key the server requires, every request is decoded by
our strict decoder and checked before it is batched, messages are bounded. Measured in the same run against the
server as it was before them (`Unchecked`: plain msgpack with openpi's array maps, no key, no checks, no size
limit), at chunks of 1 (a request every step: the most requests per observation). Target: >= 0.95.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.serving.chunks import ChunkRows
from lerobot_hydra.serving.keys import ENV_VAR
from lerobot_hydra.serving.schema import ServeConfig
from lerobot_hydra.serving.server import PolicyServer
from lerobot_hydra.serving.wire import EXTENSION_KEY, METADATA_KEY, packb
from speed.harness.timing import verdict

SHARDS, ROWS, STEP_S, CHUNK = 8, 8, 0.05, 8
CALL_S, FLAT_ROWS = 0.040, 32
WARMUP_S, WINDOW_S = 2.0, 8.0
NOISE_BYTES = 5056  # a CPU torch generator's state, as a real server's rows carry it
KEY = "benchmark-key"  # the shards (spawned: they inherit the environment) present it


class Unchecked(PolicyServer):
    """The server before the checks: plain msgpack with openpi's array maps, no key, no checks, no size limit."""

    def __init__(self, policy: Any, settings: ServeConfig) -> None:
        super().__init__(policy, settings, KEY, key_given=False)  # loopback, a key not given: none required
        self.max_size = None  # type: ignore[assignment]

    async def _answer(self, websocket: Any, data: Any) -> None:
        import msgpack

        def arrays(obj: dict) -> Any:
            if b"__ndarray__" in obj:
                return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
            return obj

        message = msgpack.unpackb(data, object_hook=arrays, raw=False)
        if message.get(EXTENSION_KEY) == "done":
            await websocket.send(packb({"ok": True}))
            return
        rows = ChunkRows(message["frames"], message["task"], message["seed"], message["noise"])
        actions, noise = await self._infer(rows)
        self.stats.requests += 1
        await websocket.send(packb({"actions": actions, "noise": noise}))


class SimulatedAccelerator:
    """The server's policy interface (`ChunkPolicy`): a call costs CALL_S per FLAT_ROWS rows, serialised."""

    def __init__(self, chunk: int, action_dim: int = 4) -> None:
        self.chunk, self.action_dim, self.history = chunk, action_dim, 1
        self.features, self.noise_state_bytes = {"observation.state": (4,)}, NOISE_BYTES
        self.device = threading.Lock()

    def metadata(self, max_batch_size: int) -> dict[str, Any]:
        meta = {"version": 1, "policy": "simulated", "reads": ["observation.state"], "history": 1}
        return {METADATA_KEY: {**meta, "chunk": self.chunk, "max_batch_size": max_batch_size, "identity": {}}}

    def infer(self, rows: ChunkRows) -> tuple[np.ndarray, list[bytes]]:
        with self.device:
            time.sleep(CALL_S * -(-len(rows) // FLAT_ROWS))
        return np.zeros((len(rows), self.chunk, self.action_dim), np.float32), [bytes(NOISE_BYTES)] * len(rows)


def shard(url: str, server: dict[str, Any], shapes: dict[str, tuple[int, ...]], ready: Any, go: Any, out: Any) -> None:
    """One client shard: ROWS sub-envs stepping every STEP_S, asking for chunks through `policy=remote`'s client;
    puts the observations stepped inside the window (all shards start together, once all are connected)."""
    from lerobot_hydra.serving.client import RemotePolicy

    policy = RemotePolicy(url, 60.0, server, 4)
    policy.reset(None, list(range(ROWS)))  # type: ignore[arg-type]
    batch: dict[str, Any] = {key: np.full((ROWS, *shape), 0.5, np.float32) for key, shape in shapes.items()}
    batch["task"] = ["reach"] * ROWS
    ready.put(True)
    go.wait()
    start = time.time()
    counted = 0
    while time.time() < start + WARMUP_S + WINDOW_S:
        time.sleep(STEP_S)  # the env step
        policy.select_action(batch)
        if start + WARMUP_S <= time.time() <= start + WARMUP_S + WINDOW_S:  # a step completed in the window
            counted += ROWS
    out.put(counted)
    policy.connection.close()


def throughput(
    policy: Any, max_batch_size: int, shapes: dict[str, tuple[int, ...]], shards: int = SHARDS, checked: bool = True
) -> float:
    """Observations per second stepped by `shards` shards through one server of `policy` (`checked`: ours, with
    its key required and its checks; else `Unchecked`)."""
    settings = ServeConfig(host="127.0.0.1", max_batch_size=max_batch_size, log_interval_s=3600)
    server = PolicyServer(policy, settings, KEY) if checked else Unchecked(policy, settings)
    ports: list[int] = []
    thread = threading.Thread(target=server.run, args=(ports.append,), daemon=True)
    thread.start()
    while not ports:
        time.sleep(0.01)
    url = f"ws://127.0.0.1:{ports[0]}"
    context = mp.get_context("spawn")
    out, ready, go = context.Queue(), context.Queue(), context.Event()
    meta = server.metadata[METADATA_KEY]
    procs = [context.Process(target=shard, args=(url, meta, shapes, ready, go, out)) for _ in range(shards)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    go.set()
    total = sum(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
    server.stop()
    thread.join(30)
    return total / WINDOW_S


def limit(chunk: int, rows_per_s: float, shards: int = SHARDS) -> float:
    """min(env-limited, device-limited): observations per second."""
    return min(shards * ROWS / STEP_S, rows_per_s * chunk)


def simulated(chunk: int) -> tuple[float, float, float, float]:
    shapes = {"observation.state": (4,)}
    ours = throughput(SimulatedAccelerator(chunk), 32, shapes)
    single = throughput(SimulatedAccelerator(chunk), 1, shapes)
    return ours, single, limit(chunk, FLAT_ROWS / CALL_S), limit(chunk, 1 / CALL_S)


def tiny_act() -> tuple[float, float, float, float]:
    """The same shards through a tiny ACT on the CPU (one torch thread), with its μ(B) measured here."""
    import torch
    from hydra import compose, initialize_config_module

    from devkit.lerobot_checkpoints import METAWORLD_STATE
    from devkit.lerobot_checkpoints import tiny_act as build_tiny_act
    from lerobot_hydra.app.serve import build_chunk_policy

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_act(Path(tmp) / "act")
        overrides = ["policy=act", f"policy.path={path}", "env.task=reach-v3", "env.obs_type=state", "device=cpu"]
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            cfg = compose(config_name="serve", overrides=overrides)
        policy = build_chunk_policy(cfg)
    shapes = {key: shape for key, (_, shape) in METAWORLD_STATE.items()}
    mu = {}
    for size in (1, 32):
        frames = {key: np.full((size, 1, *shape), 0.5, np.float32) for key, shape in shapes.items()}
        rows = ChunkRows(frames, ["reach"] * size, list(range(size)), [None] * size)
        policy.infer(rows)
        start = time.perf_counter()
        for _ in range(20):
            policy.infer(rows)
        mu[size] = size * 20 / (time.perf_counter() - start)
    print(f"tiny ACT on the CPU: μ(1) = {mu[1]:.0f} rows/s, μ(32) = {mu[32]:.0f} rows/s", flush=True)
    ours, single = throughput(policy, 32, shapes), throughput(policy, 1, shapes)
    return ours, single, limit(policy.queue_length, mu[32]), limit(policy.queue_length, mu[1])


def report(name: str, result: tuple[float, float, float, float], target: float | None) -> bool:
    ours, single, best, best_single = result
    detail = (
        f"batching server {ours:.0f} obs/s, max_batch_size=1 {single:.0f} obs/s ({ours / single:.1f}x; its own "
        f"limit {best_single:.0f}); limit min(env {SHARDS * ROWS / STEP_S:.0f}, device) = {best:.0f} obs/s"
    )
    if target is None:
        print(f"info  {name}: {ours / best:.2f} of the limit  {detail}", flush=True)
        return True
    return verdict(name, ours / best, target, detail)


def checks() -> bool:
    """The same shards through the checked server and the unchecked one, alternated, chunks of 1."""
    shapes = {"observation.state": (4,)}
    runs: dict[bool, list[float]] = {True: [], False: []}
    for checked in (False, True, True, False):
        runs[checked].append(throughput(SimulatedAccelerator(1), 32, shapes, checked=checked))
    ours, before = sum(runs[True]) / 2, sum(runs[False]) / 2
    detail = (
        f"with key + checks {ours:.0f} obs/s ({', '.join(f'{v:.0f}' for v in runs[True])}), before them "
        f"{before:.0f} obs/s ({', '.join(f'{v:.0f}' for v in runs[False])}); limit {limit(1, FLAT_ROWS / CALL_S):.0f}"
    )
    return verdict(f"{SHARDS} shards, chunks of 1: the security checks vs none", ours / before, 0.95, detail)


def main() -> None:
    os.environ[ENV_VAR] = KEY
    if "--checks" in sys.argv[1:]:
        sys.exit(0 if checks() else 1)
    ok = checks()
    ok = report(f"{SHARDS} shards, chunks of {CHUNK}, simulated 40 ms device", simulated(CHUNK), 0.8) and ok
    report(f"{SHARDS} shards, chunks of 1, simulated 40 ms device", simulated(1), None)
    report(f"{SHARDS} shards, tiny ACT on the CPU", tiny_act(), None)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
