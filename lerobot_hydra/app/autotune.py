"""`lerobot-hydra-autotune <overrides>`: measure the configured env and policy on this machine, then
recommend eval.batch_size, eval.max_parallel_tasks, shards per node and MUJOCO_GL (`--server`: shards per policy
server and its batch size, autotune_server.py).

Every number comes from a probe of the actual env and policy in the config: vector-env step latency (with
rendering when the observations or videos need it) and policy latency per batch size, worker memory, the
policy's GPU memory and the CPU count. Nothing about models or simulators is assumed.
"""

from __future__ import annotations

import logging
import math
import shlex
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from lerobot_hydra.app.probing import compose
from lerobot_hydra.core.errors import UserError

log = logging.getLogger("lerobot_hydra")

PROBE_STEPS = 12
PROBE_MIN_S = 0.5
# A batch size is worth its extra workers while it adds at least this much throughput.
GOOD_ENOUGH = 0.9


@dataclass
class Probe:
    batch_size: int
    env_step_s: float  # wall time of one vector-env step (all sub-envs)
    policy_s: float  # wall time of pre-processing + select_action + post-processing for the batch
    render_s: float | None  # wall time of one render() of every sub-env (video cost), None if not measured
    worker_rss_mb: float  # resident memory per sub-env (worker process, or the in-process env)

    @property
    def steps_per_s(self) -> float:
        return self.batch_size / (self.env_step_s + self.policy_s)

    @property
    def policy_share(self) -> float:
        return self.policy_s / (self.env_step_s + self.policy_s)


@dataclass
class Recommendation:
    batch_size: int
    max_parallel_tasks: int
    shards_per_node: int
    mujoco_gl: str
    reasons: list[str] = field(default_factory=list)


def candidate_batch_sizes(cpus: int, n_episodes: int) -> list[int]:
    sizes, b = [], 1
    while b <= min(2 * cpus, n_episodes):
        sizes.append(b)
        b *= 2
    if n_episodes not in sizes and n_episodes <= 2 * cpus:
        sizes.append(n_episodes)
    return sorted(set(sizes))


def _rss_mb(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def probe(env_cfg: Any, policy: Any, env_pre: Any, env_post: Any, batch_size: int, render: bool) -> Probe:
    """Time the policy on real observations, and the env on random actions (a policy that succeeds
    quickly would otherwise leave finished, no longer simulating sub-envs in the measurement)."""
    import numpy as np
    import psutil

    from lerobot_hydra.processors.observation import RAW_KEY
    from lerobot_hydra.vector.task_envs import EnvPool

    task = env_cfg.tasks()[0]
    me = psutil.Process()
    before = {c.pid for c in me.children(recursive=True)}
    rss_before = me.memory_info().rss / 2**20
    pool = EnvPool(env_cfg, batch_size, batch_size > 1, env_cfg.spaces(task), render)
    vec = pool.vec
    space = vec.action_space
    space.seed(0)
    try:
        slots = {k: (task, k, 1000 + k) for k in range(batch_size)}
        obs, _ = pool.reset(slots, every_slot=True)
        policy.reset(task, [seed for _, _, seed in slots.values()])
        env_s = policy_s = 0.0
        steps = 0
        # Stop before the episodes end (a finished sub-env no longer simulates), but time one step at least.
        limit = max(1, task.max_steps - 1)
        while steps < min(PROBE_STEPS, limit) or (env_s + policy_s < PROBE_MIN_S and steps < limit):
            t0 = time.perf_counter()
            batch = env_pre({RAW_KEY: obs, "task": [task.description] * batch_size})
            env_post({"action": policy.select_action(batch)})
            t1 = time.perf_counter()
            obs, _, _, _, _ = vec.step(np.asarray(space.sample(), dtype=vec.single_action_space.dtype))
            env_s += time.perf_counter() - t1
            policy_s += t1 - t0
            steps += 1
        render_s = None
        if render:
            t0 = time.perf_counter()
            vec.call("render")
            render_s = time.perf_counter() - t0
        if batch_size > 1:
            # Async workers are forked by the forkserver (our child), so they are our grandchildren.
            workers = [c.pid for c in me.children(recursive=True) if c.pid not in before and c.ppid() != me.pid]
            rss = _rss_mb(workers) / max(1, len(workers))
        else:
            rss = max(0.0, me.memory_info().rss / 2**20 - rss_before)
    finally:
        pool.close()
    return Probe(batch_size, env_s / steps, policy_s / steps, render_s, rss)


def recommend(probes: list[Probe], cpus: int, gpus: int, n_tasks: int, gl: str, device: str) -> Recommendation:
    best = max(probes, key=lambda p: p.steps_per_s)
    chosen = min((p for p in probes if p.steps_per_s >= GOOD_ENOUGH * best.steps_per_s), key=lambda p: p.batch_size)
    reasons = [
        f"eval.batch_size={chosen.batch_size}: {chosen.steps_per_s:,.0f} env steps/s, "
        f"{100 * chosen.steps_per_s / best.steps_per_s:.0f}% of the best measured "
        f"(batch {best.batch_size}: {best.steps_per_s:,.0f}/s); larger batches add workers for little gain"
        if chosen is not best
        else f"eval.batch_size={chosen.batch_size}: the highest measured throughput, "
        f"{chosen.steps_per_s:,.0f} env steps/s over {len(probes)} batch sizes"
    ]
    share = chosen.policy_share
    spare_cpus = max(1, cpus // (chosen.batch_size + 1))
    if device.startswith("cuda") and share >= 0.25:
        lanes = max(1, min(n_tasks, spare_cpus, math.ceil(1 / max(1e-6, 1 - share))))
        reasons.append(
            f"eval.max_parallel_tasks={lanes}: the policy takes {100 * share:.0f}% of each step on the GPU; "
            f"{lanes} tasks at once keep it busy while the others simulate ({cpus} CPUs allow {spare_cpus})"
        )
    elif chosen.batch_size == 1:
        lanes = 1
        reasons.append(
            "eval.max_parallel_tasks=1: at eval.batch_size=1 the env runs in the shard's own process (no workers), "
            "where lanes would share one interpreter; more shards use the other CPUs"
        )
    else:
        lanes = max(1, min(n_tasks, spare_cpus))
        why = "policy inference is cheap" if share < 0.25 else "the policy runs on the CPU"
        reasons.append(
            f"eval.max_parallel_tasks={lanes}: {why} ({100 * share:.0f}% of a step); each lane needs "
            f"{chosen.batch_size} workers + 1 inference thread and there are {cpus} CPUs"
        )
    shards, why_shards = _shards(chosen.batch_size, lanes, cpus, gpus)
    reasons.append(f"shards per node: {shards}: {why_shards}")
    render_note = ""
    render_probe = next((p for p in probes if p.render_s is not None), None)
    if render_probe is not None:
        render_note = f"; a frame costs {1000 * render_probe.render_s / render_probe.batch_size:.0f} ms per sub-env"
    reasons.append(
        f"MUJOCO_GL={gl}: " + ("an NVIDIA GPU renders through EGL" if gl == "egl" else "CPU rendering") + render_note
    )
    return Recommendation(chosen.batch_size, lanes, shards, gl, reasons)


def _shards(batch_size: int, lanes: int, cpus: int, gpus: int) -> tuple[int, str]:
    """Shards per node and why: one per GPU; on CPUs, as many as the CPUs hold, a shard using its lanes' workers
    and inference threads (or one CPU, with its env in process at batch 1)."""
    if gpus:
        return gpus, f"one per GPU ({gpus} visible)"
    if batch_size == 1:
        return cpus, f"a shard at eval.batch_size=1 simulates in its own process on about one CPU; {cpus} CPUs"
    per_shard = lanes * (batch_size + 1)
    if per_shard >= cpus:
        return 1, f"one shard already uses every CPU through its workers ({per_shard} processes, {cpus} CPUs)"
    shards = cpus // per_shard
    return shards, f"a shard uses {per_shard} CPUs ({lanes} lane(s) x {batch_size} workers + 1 inference thread)"


def run(overrides: list[str]) -> Recommendation:
    import torch

    from lerobot_hydra.core.gl import nvidia_gpu_visible, resolve_device
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.schemas.schema import available_cpus, validate

    started = time.perf_counter()
    cfg = compose(overrides)
    eval_cfg = validate(cfg)
    # The device resolved here (auto -> cuda or cpu): the recommendation depends on where the policy computes.
    device = resolve_device(cfg.device)
    parts = build_run(cfg, device)  # the env, policy and processors eval.py runs, measured as it runs them
    gl, tasks, env_cfg, env_pre, env_post = parts.gl, parts.tasks, parts.run_env, parts.env_pre, parts.env_post
    policy = parts.build_policy()
    cpus = available_cpus()
    gpus = torch.cuda.device_count() if nvidia_gpu_visible() else 0
    render = eval_cfg.max_episodes_rendered > 0
    probes = []
    for b in candidate_batch_sizes(cpus, eval_cfg.n_episodes):
        probes.append(probe(env_cfg, policy, env_pre, env_post, b, render))
        p = probes[-1]
        print(
            f"  batch {b:>3}: env step {1000 * p.env_step_s:8.2f} ms, policy {1000 * p.policy_s:8.2f} ms, "
            f"{p.steps_per_s:9,.0f} env steps/s, {p.worker_rss_mb:6.0f} MB per sub-env",
            flush=True,
        )
    gpu_note = ""
    if device.startswith("cuda"):
        gpu_note = f", policy GPU memory {torch.cuda.max_memory_allocated() / 2**20:,.0f} MB"
    print(f"  {cpus} CPUs, {gpus} GPUs, policy on {device}{gpu_note}")
    rec = recommend(probes, cpus, gpus, len(tasks), gl, device)
    print("\nRecommendation:")
    for reason in rec.reasons:
        print(f"  - {reason}")
    kept = [o for o in overrides if not o.startswith(("eval.batch_size=", "eval.max_parallel_tasks="))]
    command = [
        "python",
        "eval.py",
        *kept,
        f"eval.batch_size={rec.batch_size}",
        f"eval.max_parallel_tasks={rec.max_parallel_tasks}",
    ]
    prefix = f"MUJOCO_GL={rec.mujoco_gl} "
    print(f"\n{prefix}{shlex.join(command)}")
    print(f"(measured in {time.perf_counter() - started:.0f} s)")
    return rec


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        args = sys.argv[1:]
        print(f"Probing {' '.join(args) or 'the default config'} ...", flush=True)
        if "--server" in args:  # shards per policy server and its batch size (autotune_server.py)
            from lerobot_hydra.app.autotune_server import server_main

            server_main([a for a in args if a != "--server"])
            return
        run(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
