"""A hand-written LIBERO evaluation: the machine's limit for eval.py's LIBERO work (speed/vs_libero_loop.py).

    python -m speed.baselines.libero_loop --checkpoint DIR --out DIR --tasks libero_spatial:0,libero_spatial:1 \
        --episodes 2 --steps 40 --size 256 [--film] [--batch 2] [--filmed 1]

What one would write by hand to evaluate a LeRobot checkpoint on LIBERO as fast as this machine allows:
hf-libero's `OffScreenRenderEnv` in one forked worker process per episode of a batch (`--batch`, by default the
episodes per task; a task's episodes run batch after batch, each batch from its reset to its last episode's end),
every camera drawn at every step, the workers forked after LIBERO is imported and before torch, so they build
their first simulators while the main process imports LeRobot and loads the policy; LeRobot's own policy class
and saved processors in the main process, called on the whole batch; frames for the videos (of the first
`--filmed` episodes of each task) taken from the agentview observation, encoded with PyAV in a background thread.
The episode protocol is eval.py's `env=libero`: episode k of a task starts from the task's stored init state
k mod 50, seeded with 1000 + k, after 10 no-op settling steps, and ends at success or after `--steps` steps.
Prints a JSON list of [task, episode, success, steps, sum_reward] last.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

SEED = 1000
SETTLE_STEPS = 10
NOOP = np.array([0, 0, 0, 0, 0, 0, -1.0])
CAMERAS = ["agentview", "robot0_eye_in_hand"]
KEYS = {"agentview": "observation.images.image", "robot0_eye_in_hand": "observation.images.image2"}


def observe(raw: dict[str, Any]) -> dict[str, np.ndarray]:
    obs = {camera: raw[f"{camera}_image"] for camera in CAMERAS}
    obs["state"] = np.concatenate([raw["robot0_eef_pos"], raw["robot0_eef_quat"], raw["robot0_gripper_qpos"]])
    return obs


def worker(conn: Connection, size: int, steps: int, render_threads: int) -> None:
    os.environ["LP_NUM_THREADS"] = str(render_threads)  # read when the first GL context is created
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    from lerobot_hydra.envs.libero_init_states import load_init_states

    env, init_states = None, []
    while True:
        command, arg = conn.recv()
        if command == "task":
            if env is not None:
                env.close()
            suite, task_id = arg
            task = benchmark.get_benchmark_dict()[suite]().get_task(task_id)
            folder = task.problem_folder
            env = OffScreenRenderEnv(
                bddl_file_name=str(Path(get_libero_path("bddl_files")) / folder / task.bddl_file),
                camera_names=CAMERAS,
                camera_heights=size,
                camera_widths=size,
                horizon=SETTLE_STEPS + steps,
            )
            init_states = load_init_states(Path(get_libero_path("init_states")) / folder / task.init_states_file)
            conn.send(task.language)
        elif command == "reset":
            env.seed(SEED + arg)
            env.reset()
            raw = env.set_init_state(init_states[arg % len(init_states)])
            for _ in range(SETTLE_STEPS):
                raw, _, _, _ = env.step(NOOP)
            conn.send(observe(raw))
        elif command == "step":
            raw, reward, _, _ = env.step(arg)
            conn.send((observe(raw), float(reward), bool(env.check_success())))
        else:
            if env is not None:
                env.close()
            return


def axis_angle(quat: np.ndarray) -> np.ndarray:
    vector, w = quat[..., :3], quat[..., 3]
    norm = np.linalg.norm(vector, axis=-1, keepdims=True)
    return np.where(norm > 1e-8, vector * 2.0 * np.arctan2(norm, w[..., None]) / np.maximum(norm, 1e-300), 0.0)


def policy_batch(observations: list[dict[str, np.ndarray]], instruction: str) -> dict[str, Any]:
    import torch

    batch: dict[str, Any] = {}
    for camera, key in KEYS.items():
        images = np.stack([o[camera][::-1, ::-1] for o in observations])  # LIBERO renders upside down
        batch[key] = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous().float() / 255.0
    states = np.stack([o["state"] for o in observations])
    state = np.concatenate([states[:, :3], axis_angle(states[:, 3:7]), states[:, 7:]], axis=1)
    batch["observation.state"] = torch.from_numpy(state).float()
    batch["task"] = [instruction] * len(observations)
    return batch


def encode(path: Path, frames: list[np.ndarray], fps: int = 20) -> None:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "veryfast", "crf": "23", "threads": "2"})
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())


def run_task(conns: list[Connection], policy: Any, pre: Any, post: Any, task: tuple[str, int], args) -> list:
    if task != args.built:  # the first task's simulators were asked for at the workers' start
        for conn in conns:
            conn.send(("task", task))
    instruction = [conn.recv() for conn in conns][0]
    args.built = task
    rows = []
    for first in range(0, args.episodes, len(conns)):
        episodes = list(range(first, min(first + len(conns), args.episodes)))
        rows += run_batch(conns[: len(episodes)], episodes, policy, pre, post, task, instruction, args)
    return rows


def run_batch(
    conns: list[Connection], episodes: list[int], policy: Any, pre: Any, post: Any, task: tuple, instruction: str, args
) -> list:
    import torch

    for k, conn in zip(episodes, conns, strict=True):
        conn.send(("reset", k))
    observations = [conn.recv() for conn in conns]
    filmed = [k for k in episodes if args.film and k < args.filmed]
    films: list[list[np.ndarray]] = [[o["agentview"][::-1, ::-1].copy()] for o in observations[: len(filmed)]]
    policy.reset()
    alive, steps, rewards, success = [True] * len(conns), [0] * len(conns), [0.0] * len(conns), [False] * len(conns)
    while any(alive):
        with torch.inference_mode():
            actions = post(policy.select_action(pre(policy_batch(observations, instruction)))).numpy()
        for i, conn in enumerate(conns):
            if alive[i]:
                conn.send(("step", actions[i].astype(np.float64)))
        for i, conn in enumerate(conns):
            if alive[i]:
                observations[i], reward, success[i] = conn.recv()
                steps[i], rewards[i] = steps[i] + 1, rewards[i] + reward
                if i < len(films):
                    films[i].append(observations[i]["agentview"][::-1, ::-1].copy())
                alive[i] = not success[i] and steps[i] < args.steps
    name = f"{task[0]}_{task[1]}"
    for k, frames in zip(filmed, films, strict=True):
        thread = threading.Thread(target=encode, args=(args.out / f"{name}_episode_{k}.mp4", frames))
        thread.start()
        args.encoders.append(thread)
    return [[name, k, success[i], steps[i], rewards[i]] for i, k in enumerate(episodes)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tasks", required=True, help="suite:task_id,...")
    parser.add_argument("--episodes", type=int, default=2, help="per task")
    parser.add_argument("--batch", type=int, help="episodes stepped together (worker processes); default: --episodes")
    parser.add_argument("--filmed", type=int, default=10**9, help="with --film: the first N episodes of each task")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--film", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.encoders = []
    tasks = [(suite, int(i)) for suite, i in (item.split(":") for item in args.tasks.split(","))]

    from lerobot_hydra.envs.libero_setup import prepare_libero

    prepare_libero()
    import libero.libero.benchmark  # noqa: F401  (imported once, before the fork: it imports torch)
    import libero.libero.envs  # noqa: F401

    batch = args.batch or args.episodes
    render_threads = max(1, len(os.sched_getaffinity(0)) // batch)
    context = mp.get_context("fork")
    conns = []
    for _ in range(batch):
        parent, child = context.Pipe()
        context.Process(target=worker, args=(child, args.size, args.steps, render_threads), daemon=True).start()
        parent.send(("task", tasks[0]))  # the first simulators build while torch and LeRobot load
        conns.append(parent)
    args.built = tasks[0]
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    policy = ACTPolicy.from_pretrained(str(args.checkpoint))
    policy.eval()
    pre, post = make_pre_post_processors(policy.config, pretrained_path=str(args.checkpoint))
    rows = [row for task in tasks for row in run_task(conns, policy, pre, post, task, args)]
    for conn in conns:
        conn.send(("close", None))
    for thread in args.encoders:
        thread.join()
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
