"""Where a run's time goes, from py-spy samples of every process and thread it starts.

`profiled(command)` runs the command under `py-spy record --subprocesses --idle --threads` and returns its samples;
`breakdown` sorts each sample into one phase by the frames on its stack, and `print_breakdown` prints, per process
role (the main process, the env workers, the rest), the seconds spent in each phase. The main threads of the main
process and of the workers are charged their whole life (blocked samples count as waiting); other threads (video
encoders, progress) and helper processes (forkserver, resource tracker) only while busy. Frames are matched by
function and file names of hf-libero, robosuite, MuJoCo's bindings, torch, LeRobot, PyAV and the standard library,
never of the program under test, so eval.py and a hand-written loop are measured alike.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

RATE_HZ = 50
PHASES = ["process start and imports", "simulator creation", "physics", "rendering", "observation transfer",
          "policy", "video encoding", "waiting", "other"]  # fmt: skip
# A blocked leaf frame: the thread waits (for a worker, the policy, a lock, a queue, the OS).
BLOCKED = re.compile(r"^(\w+\.)?(select|poll|wait|_recv|recv|recv_into|acquire|sleep|readinto|read|accept|join|_wait"
                     r"|_wait_for_tstate_lock|_poll|get) \(")  # fmt: skip
# Helper processes of multiprocessing blocked in their own loops, idle thread-pool threads.
SERVER_LOOP = re.compile(
    r"\(multiprocessing/(resource_tracker|forkserver)\.py|^_worker \(concurrent/futures/thread\.py"
)
IMPORT = re.compile(r"^_find_and_load \(")
# Building a task's simulator: robosuite builds a MuJoCo model from XML and a render context, also at every hard
# reset (LIBERO resets hard, so each episode's reset rebuilds the simulator).
BUILD = re.compile(r"^(OffScreenRenderEnv\.__init__|MjSim\.from_xml_string|MjRenderContext\.__init__|"
                   r"MjRenderContext\._set_mujoco_context_and_buffers|MjSim\.free|.*\._load_model|"
                   r".*\._initialize_sim|MjSim\.__init__|MjRenderContextOffscreen\.__init__) \(")  # fmt: skip
ORDERED = [
    ("video encoding", re.compile(r"\(av/|VideoFrame|libx264|CodecContext|Stream\.encode|OutputContainer")),
    ("rendering", re.compile(r"^(MjRenderContext\.(render|read_pixels)|\w*render\w*) \((robosuite|mujoco)")),
    ("policy", re.compile(r"\((torch|lerobot/policies|lerobot/processor)/|^select_action \(")),
    ("physics", re.compile(r"\((robosuite|mujoco|libero)/")),
    ("observation transfer", re.compile(r"\(multiprocessing/(connection|shared_memory|reduction|queues)\.py|\(pickle")),
]  # fmt: skip


@dataclass(frozen=True)
class Sample:
    process: str  # its pid
    parent: str | None  # its parent's pid (None for the command itself)
    main_thread: bool
    frames: tuple[str, ...]  # outermost first
    count: int


def profiled(command: list[str], cwd: Path, env: dict[str, str], keep: Path | None = None) -> list[Sample]:
    """Runs `command` under py-spy (every process it starts, every thread, idle or not); `keep`: where to leave
    py-spy's raw samples (flamegraph.pl's input) for a closer look."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = keep or Path(tmp) / "profile.txt"
        py_spy = ["py-spy", "record", "--subprocesses", "--idle", "--threads", "--nonblocking", "--rate", str(RATE_HZ)]
        proc = subprocess.run(
            [*py_spy, "--format", "raw", "--output", str(raw), "--", *command],
            cwd=cwd, env=env, capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0 or not raw.exists():
            raise SystemExit(f"py-spy failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return [parse(line) for line in raw.read_text().splitlines() if line.strip()]


def parse(line: str) -> Sample:
    stack, _, count = line.rpartition(" ")
    parts = stack.split(";")
    chain = [p.split(":", 1)[0].removeprefix("process ") for p in parts if p.startswith("process ")]
    thread = next((p for p in parts if p.startswith("thread (")), "")
    frames = tuple(p for p in parts if not p.startswith(("process ", "thread (")))
    main = thread.endswith(": MainThread") or not any(f.startswith("Thread._bootstrap ") for f in frames)
    return Sample(chain[-1], chain[-2] if len(chain) > 1 else None, main, frames, int(count))


def phase(frames: tuple[str, ...]) -> str:
    if not frames:
        return "process start and imports"  # no Python frame yet
    if BLOCKED.match(frames[-1]) or SERVER_LOOP.search(frames[-1]):
        return "waiting"
    if any(IMPORT.match(f) for f in frames):
        return "process start and imports"
    if any(BUILD.match(f) for f in frames):
        return "simulator creation"
    for frame in reversed(frames):
        for name, pattern in ORDERED:
            if pattern.search(frame):
                return name
    return "other"


def roles(samples: list[Sample]) -> dict[str, str]:
    """main: the command's process; workers: processes that step a simulator; others (forkserver, trackers)."""
    stepping = {s.process for s in samples if any(f.startswith("MujocoEnv.step (") for f in s.frames)}
    return {
        s.process: "main" if s.parent is None else "workers" if s.process in stepping else "others" for s in samples
    }


def breakdown(samples: list[Sample]) -> dict[str, dict[str, float]]:
    """Seconds per phase per role; waiting counts only for the main threads of the main process and the workers
    (other threads and helper processes are charged only while busy)."""
    role_of = roles(samples)
    seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sample in samples:
        name = phase(sample.frames)
        if name != "waiting" or (sample.main_thread and role_of[sample.process] != "others"):
            seconds[role_of[sample.process]][name] += sample.count / RATE_HZ
    return seconds


def print_breakdown(label: str, samples: list[Sample]) -> dict[str, dict[str, float]]:
    role_of = roles(samples)
    seconds = breakdown(samples)
    print(f"breakdown, {label} (seconds; main: the main thread's life, workers: summed over workers):", flush=True)
    for role in ("main", "workers", "others"):
        if seconds.get(role):
            n = sum(1 for r in role_of.values() if r == role)
            parts = ", ".join(f"{name} {seconds[role][name]:.1f}" for name in PHASES if seconds[role].get(name))
            print(f"  {role} ({n} process{'es' if n > 1 else ''}): {parts}", flush=True)
    return seconds
