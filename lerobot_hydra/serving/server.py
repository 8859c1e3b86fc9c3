"""The policy server's loop: websocket connections (asyncio), one batching thread that owns the policy, stats.

Each connection's requests become jobs on one queue. The batching thread takes the first waiting job, then
more until `max_batch_size` rows or `max_wait_ms` after the first job arrived (a job that would overflow the
batch starts the next one), runs one forward pass over all their rows and answers each job. `GET /healthz` on
the same port answers the stats as JSON.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
import queue
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.serving.chunks import ChunkPolicy, ChunkRows
from lerobot_hydra.serving.schema import ServeConfig
from lerobot_hydra.serving.wire import EXTENSION_KEY, packb, unpackb

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


def single_observation(policy: ChunkPolicy, message: dict[str, Any]) -> ChunkRows:
    """An openpi client's request (one observation, no seed) as one row: its history is that observation."""
    frames = {}
    for key in policy.metadata(1)["lerobot_hydra"]["reads"]:
        value = np.asarray(message[key])
        frames[key] = np.repeat(value[None, None], policy.history, axis=1)
    task = message.get("prompt", message.get("task", ""))
    return ChunkRows(frames, [str(task)], [None], [None])


class PolicyServer:
    """Serves `policy` as `settings` say; `on_listening(port)` runs once it listens; `settings.shards` > 0 stops
    it once that many distinct clients reported their run complete."""

    def __init__(self, policy: ChunkPolicy, settings: ServeConfig) -> None:
        self.policy, self.host, self.port, self.shards = policy, settings.host, settings.port, settings.shards
        self.log_interval_s = settings.log_interval_s
        self.stats = Stats()
        self.metadata = policy.metadata(settings.max_batch_size)
        self.batcher = Batcher(policy, settings.max_batch_size, settings.max_wait_ms / 1000, self.stats)
        self.stopped = threading.Event()  # set once the server has closed
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

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
        async with serve(
            self._handle, self.host, self.port, compression=None, max_size=None, process_request=self._health
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

    def _health(self, connection: Any, request: Any) -> Any:
        if request.path != "/healthz":
            return None
        response = connection.respond(http.HTTPStatus.OK, json.dumps(self.stats.snapshot()) + "\n")
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "application/json"
        return response

    async def _handle(self, websocket: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        self.stats.open += 1
        self.stats.connections += 1
        try:
            await websocket.send(packb(self.metadata))
            async for data in websocket:
                message = unpackb(data)
                kind = message.get(EXTENSION_KEY) if isinstance(message, dict) else None
                if kind == "done":
                    await websocket.send(packb({"ok": True}))
                    self._client_done(str(message.get("client")))
                    continue
                rows = (
                    ChunkRows(message["frames"], message["task"], message["seed"], message["noise"])
                    if kind
                    else single_observation(self.policy, message)
                )
                start = time.monotonic()
                actions, noise = await self._infer(rows)
                self.stats.latencies_ms.append((time.monotonic() - start) * 1000)
                self.stats.requests += 1
                self.stats.rows += len(rows)
                reply = {"actions": actions, "noise": noise} if kind else {"actions": actions[0]}
                await websocket.send(packb(reply))
        except ConnectionClosed:
            pass
        except Exception as err:  # as openpi: the error as text, then close
            log.warning("a request failed: %s", err)
            try:
                await websocket.send(traceback.format_exc())
                await websocket.close(1011, "policy server error; its traceback is the previous message")
            except ConnectionClosed:
                pass
        finally:
            self.stats.open -= 1

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

    def _client_done(self, client: str) -> None:
        self.stats.done.add(client)
        log.info("client %s completed its run (%d of %s)", client, len(self.stats.done), self.shards or "-")
        if self.shards and len(self.stats.done) >= self.shards:
            log.info("every one of the %d shards completed: the server stops", self.shards)
            assert self._stop is not None
            self._stop.set()
