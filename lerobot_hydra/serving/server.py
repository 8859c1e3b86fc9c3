"""The policy server's loop: websocket connections (asyncio), one batching thread that owns the policy, stats.

Each connection's requests become jobs on one queue. The batching thread takes the first waiting job, then
more until `max_batch_size` rows or `max_wait_ms` after the first job arrived (a job that would overflow the
batch starts the next one), runs one forward pass over all their rows and answers each job. `GET /healthz` on
the same port answers the stats as JSON.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.serving.chunks import ChunkPolicy, ChunkRows
from lerobot_hydra.serving.gate import Gate, peer
from lerobot_hydra.serving.keys import is_loopback, server_tls
from lerobot_hydra.serving.requests import RequestSpec, chunk_rows, single_observation
from lerobot_hydra.serving.schema import ServeConfig
from lerobot_hydra.serving.wire import EXTENSION_KEY, ProtocolError, packb, unpackb

POLICY_VIOLATION, MESSAGE_TOO_BIG, INTERNAL_ERROR = 1008, 1009, 1011  # websocket close codes

log = logging.getLogger("lerobot_hydra")


@dataclass
class Stats:
    open: int = 0
    connections: int = 0
    requests: int = 0
    rows: int = 0
    batches: int = 0
    batch_rows: int = 0
    done: set[str] = field(default_factory=set)
    refused: int = 0  # connections refused at the handshake or closed for a bad message
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
    recent_batches: deque[int] = field(default_factory=lambda: deque(maxlen=4096))

    def snapshot(self) -> dict[str, Any]:
        latency = np.asarray(self.latencies_ms) if self.latencies_ms else np.zeros(1)
        p50, p90, p99 = (float(np.percentile(latency, q)) for q in (50, 90, 99))
        return {
            "connections": self.open,
            "connections_total": self.connections,
            "requests": self.requests,
            "rows": self.rows,
            "batches": self.batches,
            "mean_batch_size": self.batch_rows / self.batches if self.batches else 0.0,
            "latency_ms": {"p50": p50, "p90": p90, "p99": p99},
            "clients_done": len(self.done),
            "refused": self.refused,
        }

    def line(self) -> str:
        s = self.snapshot()
        recent = list(self.recent_batches)
        self.recent_batches.clear()
        sizes = f"{np.mean(recent):.1f} (max {max(recent)})" if recent else "-"
        lat = s["latency_ms"]
        return (
            f"serve: {s['connections']} connections, {s['requests']} requests, {s['batches']} batches, batch size "
            f"{sizes} since the last line, {s['mean_batch_size']:.2f} overall; latency p50 {lat['p50']:.1f} ms, "
            f"p90 {lat['p90']:.1f} ms, p99 {lat['p99']:.1f} ms"
        )


@dataclass
class Job:
    rows: ChunkRows
    done: Callable[[Any], None]  # called from the batching thread with the result or the exception
    arrived: float = field(default_factory=time.monotonic)


class Batcher(threading.Thread):
    def __init__(self, policy: ChunkPolicy, max_batch_size: int, max_wait_s: float, stats: Stats) -> None:
        super().__init__(name="serve-batcher", daemon=True)
        self.policy, self.max_batch_size, self.max_wait_s, self.stats = policy, max_batch_size, max_wait_s, stats
        self.jobs: queue.Queue[Job | None] = queue.Queue()

    def run(self) -> None:
        held: Job | None = None
        while True:
            first = held if held is not None else self.jobs.get()
            held = None
            if first is None:
                return
            batch, size = [first], len(first.rows)
            while size < self.max_batch_size:
                wait = first.arrived + self.max_wait_s - time.monotonic()
                try:
                    job = self.jobs.get(timeout=wait) if wait > 0 else self.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is None or size + len(job.rows) > self.max_batch_size:
                    held = job
                    if job is None:
                        self.jobs.put(None)  # stop after this batch
                        held = None
                    break
                batch.append(job)
                size += len(job.rows)
            self._run(batch)

    def _run(self, batch: list[Job]) -> None:
        try:
            actions, noise = self.policy.infer(ChunkRows.concatenate([job.rows for job in batch]))
        except Exception as err:  # every job of the batch gets the error (its client reports it)
            for job in batch:
                job.done(err)
            return
        self.stats.batches += 1
        self.stats.batch_rows += len(actions)
        self.stats.recent_batches.append(len(actions))
        start = 0
        for job in batch:
            end = start + len(job.rows)
            job.done((actions[start:end], noise[start:end]))
            start = end

    def stop(self) -> None:
        self.jobs.put(None)


class PolicyServer:
    """Serves `policy` as `settings` say; `on_listening(port)` runs once it listens; `settings.shards` > 0 stops
    it once that many distinct clients that presented `key` reported their run complete. `key_given`: a key the
    user gave, required even on loopback (a random one is required beyond loopback only)."""

    def __init__(self, policy: ChunkPolicy, settings: ServeConfig, key: str, key_given: bool = True) -> None:
        self.policy, self.host, self.port, self.shards = policy, settings.host, settings.port, settings.shards
        self.log_interval_s = settings.log_interval_s
        self.stats = Stats()
        self.metadata = policy.metadata(settings.max_batch_size)
        self.batcher = Batcher(policy, settings.max_batch_size, settings.max_wait_ms / 1000, self.stats)
        self.spec = RequestSpec(policy.features, policy.history, settings.max_batch_size, policy.noise_state_bytes)
        mb = settings.max_message_mb
        self.max_size = int(mb * 2**20) if mb is not None else self.spec.max_message_bytes()
        self.max_in_flight = settings.max_in_flight
        self.tls = server_tls(settings.tls_cert, settings.tls_key)
        required = key_given or not is_loopback(self.host)
        self.gate = Gate(key, required, settings.max_connections, lambda: self.stats.open, self._health)
        self.stopped = threading.Event()  # set once the server has closed
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def scheme(self) -> str:
        return "wss" if self.tls is not None else "ws"

    def run(self, on_listening: Callable[[int], None] = lambda port: None) -> None:
        self.batcher.start()
        try:
            asyncio.run(self._serve(on_listening))
        finally:
            self.batcher.stop()
            self.batcher.join(timeout=60)
            self.stopped.set()

    def stop(self) -> None:
        """From any thread."""
        if self._loop is not None and self._stop is not None and not self.stopped.is_set():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # its loop closed meanwhile: it has stopped
                pass

    async def _serve(self, on_listening: Callable[[int], None]) -> None:
        from websockets.asyncio.server import serve

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):  # SLURM's scancel, Ctrl-C: stop cleanly
                self._loop.add_signal_handler(sig, self._signalled, sig)
        limits = {"max_size": self.max_size, "max_queue": self.max_in_flight}
        async with serve(
            self._handle, self.host, self.port, compression=None, process_request=self.gate, ssl=self.tls, **limits
        ) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            on_listening(port)
            reporter = asyncio.create_task(self._report())
            await self._stop.wait()
            reporter.cancel()
        log.info("%s", self.stats.line())

    def _signalled(self, sig: signal.Signals) -> None:
        log.info("policy server stopped by %s", sig.name)
        assert self._stop is not None
        self._stop.set()

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(self.log_interval_s)
            log.info("%s", self.stats.line())

    def _health(self) -> dict[str, Any]:
        self.stats.refused = self.gate.refused
        return self.stats.snapshot()

    async def _handle(self, websocket: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        self.stats.open += 1
        self.stats.connections += 1
        try:
            await websocket.send(packb(self.metadata))
            async for data in websocket:
                await self._answer(websocket, data)
        except ConnectionClosed as err:
            if MESSAGE_TOO_BIG in {getattr(err.rcvd, "code", None), getattr(err.sent, "code", None)}:
                self._refused(websocket, f"a message over the limit of {self.max_size} bytes (serve.max_message_mb)")
        except ProtocolError as err:
            self._refused(websocket, str(err))
            await self._fail(websocket, POLICY_VIOLATION, f"the policy server refused a message: {err}")
        except Exception as err:  # the policy failed: as openpi, the error as text, then close
            log.warning("a request of %s failed: %s: %s", peer(websocket), type(err).__name__, err)
            await self._fail(websocket, INTERNAL_ERROR, f"{type(err).__name__}: {err}")
        finally:
            self.stats.open -= 1

    def _refused(self, websocket: Any, why: str) -> None:
        self.gate.refused += 1
        log.warning("closed the connection of %s: %s", peer(websocket), why)

    @staticmethod
    async def _fail(websocket: Any, code: int, text: str) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await websocket.send(text)
            await websocket.close(code, "policy server error; the previous message says why")
        except ConnectionClosed:
            pass

    async def _answer(self, websocket: Any, data: Any) -> None:
        """One request: checked (a ProtocolError otherwise), batched with others, answered."""
        message = unpackb(data)
        if not isinstance(message, dict):
            raise ProtocolError(f"a {type(message).__name__} message, not a map")
        kind = message.get(EXTENSION_KEY)
        if kind == "done":
            trusted = websocket in self.gate.authenticated
            self._client_done(str(message.get("client")), websocket, trusted)
            await websocket.send(packb({"ok": trusted}))
            return
        if kind not in (None, "chunks"):
            raise ProtocolError(f"an unknown request {kind!r}")
        rows = chunk_rows(message, self.spec) if kind else single_observation(message, self.spec)
        start = time.monotonic()
        actions, noise = await self._infer(rows)
        self.stats.latencies_ms.append((time.monotonic() - start) * 1000)
        self.stats.requests += 1
        self.stats.rows += len(rows)
        await websocket.send(packb({"actions": actions, "noise": noise} if kind else {"actions": actions[0]}))

    async def _infer(self, rows: ChunkRows) -> tuple[np.ndarray, list[bytes]]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(result: Any) -> None:
            def settle() -> None:
                if isinstance(result, BaseException):
                    future.set_exception(result)
                else:
                    future.set_result(result)

            loop.call_soon_threadsafe(settle)

        self.batcher.jobs.put(Job(rows, done))
        return await future

    def _client_done(self, client: str, websocket: Any, trusted: bool) -> None:
        if not trusted:
            log.warning("ignored the 'done' of %s: it did not present the API key", peer(websocket))
            return
        self.stats.done.add(client)
        log.info("client %s completed its run (%d of %s)", client, len(self.stats.done), self.shards or "-")
        if self.shards and len(self.stats.done) >= self.shards:
            log.info("every one of the %d shards completed: the server stops", self.shards)
            assert self._stop is not None
            self._stop.set()
