"""A deterministic vla-eval model server for the tests, built on vla-eval's own `PredictModelServer` and served by
vla-eval's own `serve_async` (its websocket loop, sessions and chunk buffer):

    python -m tests.helpers.vla_eval_server --port-file <file> [--mode normal] [--chunk 3] [--log <file>]

Its chunk is a smooth function of the observation (state, both images' means, the instruction's length), with a
gripper that changes sign. `--mode` is `normal` or a comma list of: `error` (ERROR for the observations of LIBERO's
task 1 and MetaWorld's push-v3), `hang` (never answers an observation), `quat` (declares a quaternion state, which
LIBERO does not send), `metaworld` (serves MetaWorld: one camera, 4-D state and action). With `--log`, every
observation it receives is a JSON line (its episode, task, state and image sums: `trace`). `InProcess` runs the
same model without a server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.policies.base import RowResettablePolicy

ROOT = Path(__file__).resolve().parents[2]

PARAMS = {"send_state": True, "send_wrist_image": True}
METAWORLD_PARAMS = {"send_state": True}


def chunk_of(obs: dict[str, Any], size: int) -> np.ndarray:
    """LIBERO (an 8-D state, two cameras): 7-D actions; MetaWorld (a 4-D state, one camera): 4-D."""
    state = np.asarray(obs["states"], dtype=np.float64)
    means = [float(obs["images"][name].mean()) / 255.0 for name in sorted(obs["images"])]
    level = means[0] - (means[1] if len(means) > 1 else 0.0)
    text = len(obs["task_description"]) / 100.0
    grip = state[6] if len(state) == 8 else state[3]
    rows = []
    for k in range(size):
        position = 0.5 * np.sin(3.0 * state[:3] + k + level + text)
        rotation = 0.05 * np.cos(state[3:6] + k) if len(state) == 8 else np.zeros(0)
        gripper = np.sin(7.0 * grip + 0.9 * k + level)
        rows.append(np.concatenate([position, rotation, [gripper]]))
    return np.asarray(rows)


def trace(obs: dict[str, Any]) -> list[Any]:
    """What identifies an observation: its state (exactly, as JSON floats round-trip) and each image's sum."""
    images = obs["images"]
    return [[float(x) for x in obs["states"]], *(int(images[name].sum(dtype=np.int64)) for name in sorted(images))]


def model_server(mode: str, chunk: int, log: Path | None = None) -> Any:
    flags = set(mode.split(","))
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.specs import (
        GRIPPER_CLOSE_POS,
        IMAGE_RGB,
        LANGUAGE,
        POSITION_DELTA,
        RAW,
        ROTATION_AA,
        STATE_EEF_POS_AA_GRIP,
        STATE_EEF_POS_QUAT_GRIP,
    )

    class Deterministic(PredictModelServer):
        def __init__(self) -> None:
            super().__init__(chunk_size=chunk)
            self.tasks: dict[str, int] = {}
            self.failing: set[str] = set()  # sessions running a task that `error` fails

        async def on_episode_start(self, config: dict[str, Any], ctx: Any) -> None:
            task = config["task"]
            self.tasks[ctx.session_id] = int(task["task_id"])
            failing = task["task_id"] == 1 or task["suite"] == "push-v3"
            (self.failing.add if failing else self.failing.discard)(ctx.session_id)
            await super().on_episode_start(config, ctx)

        async def on_observation(self, obs: dict[str, Any], ctx: Any) -> None:
            if log is not None:
                line = {"episode": ctx.episode_id, "task": self.tasks.get(ctx.session_id), "obs": trace(obs)}
                with log.open("a") as file:
                    file.write(json.dumps(line) + "\n")
            await super().on_observation(obs, ctx)

        def predict(self, obs: dict[str, Any], ctx: Any) -> dict[str, Any]:
            if "error" in flags and ctx.session_id in self.failing:
                raise RuntimeError("this model fails on this task")
            if "hang" in flags:
                time.sleep(3600)
            return {"actions": chunk_of(obs, chunk)}

        def get_observation_params(self) -> dict[str, Any]:
            return dict(METAWORLD_PARAMS if "metaworld" in flags else PARAMS)

        def get_action_spec(self) -> dict[str, Any]:
            if "metaworld" in flags:
                return {"position": POSITION_DELTA, "gripper": GRIPPER_CLOSE_POS}
            return {"position": POSITION_DELTA, "rotation": ROTATION_AA, "gripper": GRIPPER_CLOSE_POS}

        def get_observation_spec(self) -> dict[str, Any]:
            if "metaworld" in flags:
                return {"image": IMAGE_RGB, "state": RAW, "language": LANGUAGE}
            state = STATE_EEF_POS_QUAT_GRIP if "quat" in flags else STATE_EEF_POS_AA_GRIP
            return {"agentview": IMAGE_RGB, "wrist": IMAGE_RGB, "state": state, "language": LANGUAGE}

    return Deterministic()


class InProcess(RowResettablePolicy):
    """The same model without a server: each row keeps the chunk buffer vla-eval's server keeps per session, and
    its actions are applied as the client applies a server's (`convention`). `traces`: each episode's task and the
    `trace` of each observation, as the server logs them."""

    def __init__(self, convention: Any, chunk: int) -> None:
        self.convention, self.chunk = convention, chunk
        self.queues: list[deque[np.ndarray] | None] = []
        self.rows: list[list[Any]] = []
        self.traces: list[tuple[int, list[Any]]] = []

    def reset(self, task: Any, episode_seeds: Sequence[int | None]) -> None:
        self.queues, self.rows = [None] * len(episode_seeds), [[] for _ in episode_seeds]
        self.reset_slots(task, dict(enumerate(episode_seeds)))

    def reset_slots(self, task: Any, seeds: dict[int, int | None]) -> None:
        for i, seed in seeds.items():
            self.queues[i] = deque() if seed is not None else None
            if seed is not None:
                self.rows[i] = []
                self.traces.append((task.task_id, self.rows[i]))

    def select_action(self, batch: dict[str, Any]) -> np.ndarray:
        actions = np.zeros((len(self.queues), self.convention.action_dim), dtype=np.float32)
        for i, queue in enumerate(self.queues):
            if queue is None:
                continue
            observation = self.convention.observation(batch["raw"], i, str(batch["task"][i]))
            self.rows[i].append(trace(observation))
            if not queue:
                queue.extend(np.asarray(chunk_of(observation, self.chunk), dtype=np.float32))
            actions[i] = self.convention.action(queue.popleft())
        return actions

    def fork(self) -> InProcess:
        forked = InProcess(self.convention, self.chunk)
        forked.traces = self.traces
        return forked

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


def served_traces(log: Path) -> list[tuple[int, list[Any]]]:
    """The server's log as `InProcess.traces`: each episode's task and observations, in the order they came."""
    episodes: dict[str, tuple[int, list[Any]]] = {}
    for line in log.read_text().splitlines() if log.exists() else []:
        entry = json.loads(line)
        episodes.setdefault(entry["episode"], (entry["task"], []))[1].append(entry["obs"])
    return list(episodes.values())


def start_server(
    tmp: Path, mode: str = "normal", log: Path | None = None, chunk: int = 3
) -> tuple[subprocess.Popen, str]:
    """vla-eval's websocket loop serving the deterministic model (tests/helpers/vla_eval_server.py)."""
    port_file = tmp / f"port-{mode}"
    args = [sys.executable, "-m", "tests.helpers.vla_eval_server", "--port-file", str(port_file), "--mode", mode]
    args += ["--chunk", str(chunk), *(["--log", str(log)] if log is not None else [])]
    process = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while not port_file.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the vla-eval server did not start"
        time.sleep(0.1)
    return process, f"ws://127.0.0.1:{port_file.read_text()}"


def served(url: str) -> list[str]:
    return ["policy=vla_eval", f"policy.url={url}", "policy.connect_timeout_s=60", "policy.timeout_s=60"]


def traces_since(log: Path, start: int) -> list[tuple[int, list[Any]]]:
    lines = log.read_text().splitlines()[start:]
    part = log.with_suffix(f".{start}")
    part.write_text("".join(line + "\n" for line in lines))
    return served_traces(part)


def lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def canonical(traces: list[tuple[int, list[Any]]]) -> list[str]:
    return sorted(repr(t) for t in traces)


async def _serve(mode: str, chunk: int, port_file: Path, log: Path | None) -> None:
    import anyio
    from vla_eval.model_servers.serve import serve_async

    async with anyio.create_task_group() as group:
        port = await group.start(serve_async, model_server(mode, chunk, log), "127.0.0.1", 0)
        port_file.with_suffix(".tmp").write_text(str(port))
        port_file.with_suffix(".tmp").rename(port_file)


def main() -> None:
    import anyio

    parser = argparse.ArgumentParser()
    parser.add_argument("--port-file", type=Path, required=True)
    parser.add_argument("--mode", default="normal", help="normal, or a comma list of error, hang, quat, metaworld")
    parser.add_argument("--chunk", type=int, default=3)
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args()
    anyio.run(_serve, args.mode, args.chunk, args.port_file, args.log)


if __name__ == "__main__":
    main()
