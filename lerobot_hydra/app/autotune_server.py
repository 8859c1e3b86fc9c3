"""`lerobot-hydra-autotune --server <overrides>`: how many shards one policy server keeps up with, and its batch size.

Two measurements on this machine, with the env and policy of the config:
- λ, the observations one shard produces per second: its vector env stepped at `eval.batch_size` with random
  actions and no inference (env pre-processing included). A shard asks the server only when a row needs a new
  chunk, so it sends λ / k requests per second for a policy that queues k actions of each chunk.
- μ(B), the server's throughput at batch B = 1, 2, 4, ... `--max-batch`: the server's own chunk pass
  (`ChunkPolicy.infer`: pre-processing, the forward pass, post-processing) for B rows of a real observation;
  a policy the server cannot serve is refused as the server refuses it.
The recommendation keeps the load below SAFETY of the capacity: N shards with N·λ/k <= SAFETY·μ(B), at the batch
size B that allows the most shards (the smallest such B), and only a B that N shards can fill (N·batch_size >= B);
when one shard alone asks more than that, the fastest B one shard fills (the server is the bottleneck).
"""

from __future__ import annotations

import math
import shlex
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError

SAFETY = 0.8
DEFAULT_MAX_BATCH = 32
ENV_STEPS = 12
MIN_TIMED_S = 0.3
MIN_REPEATS = 3


@dataclass
class ServerRecommendation:
    obs_per_s: float  # λ: observations one shard produces per second
    steps_per_request: int  # k: env steps a chunk lasts (a row asks the server once per k steps)
    env_batch_size: int  # the shard's eval.batch_size the λ was measured at
    throughput: dict[int, float]  # μ(B): observations (chunk requests) the server answers per second at batch B
    shards: int
    max_batch_size: int
    reasons: list[str] = field(default_factory=list)

    @property
    def requests_per_s(self) -> float:
        return self.obs_per_s / self.steps_per_request


def batch_sizes(max_batch: int) -> list[int]:
    sizes = [1 << i for i in range(max_batch.bit_length()) if 1 << i <= max_batch]
    return sizes if sizes[-1] == max_batch else [*sizes, max_batch]


def recommend_server(
    obs_per_s: float, steps_per_request: int, env_batch_size: int, throughput: dict[int, float]
) -> ServerRecommendation:
    """Shards per server and serve.max_batch_size from λ, k and μ(B) (see the module docstring)."""
    demand = obs_per_s / steps_per_request  # requests per second of one shard
    options = []
    for b, mu in sorted(throughput.items()):
        n = max(1, math.floor(SAFETY * mu / demand))
        if b == 1 or n * env_batch_size >= b:  # a batch larger than N shards' rows is never filled
            options.append((n, -b))
    shards, neg_b = max(options)
    batch = -neg_b
    if shards * demand > SAFETY * throughput[batch]:  # overloaded at any batch: the fastest batch one shard fills
        batch = max((b for n, b in ((n, -nb) for n, nb in options) if n == shards), key=lambda b: throughput[b])
    rec = ServerRecommendation(obs_per_s, steps_per_request, env_batch_size, dict(throughput), shards, batch)
    capacity = SAFETY * throughput[batch]
    load = f"{shards} x {demand:,.1f} = {shards * demand:,.1f} requests/s"
    if shards * demand <= capacity:
        rec.reasons.append(
            f"shards per server: {shards}: {load} stays below {SAFETY:.0%} of the server's "
            f"{throughput[batch]:,.1f}/s at batch {batch} ({capacity:,.1f}/s); one more would pass it"
        )
    else:
        rec.reasons.append(
            f"shards per server: 1: one shard already asks {demand:,.1f} requests/s, above {SAFETY:.0%} of the "
            f"best the server answers at a batch one shard fills ({capacity:,.1f}/s at batch {batch}); the server "
            "is the bottleneck: give it a faster device, or fewer sub-envs per shard"
        )
    best = max(throughput, key=lambda b: throughput[b])
    if batch == best:
        why = f"the highest measured throughput ({throughput[batch]:,.1f}/s)"
    else:
        why = f"{throughput[batch]:,.1f}/s (batch {best}: {throughput[best]:,.1f}/s, no more shards or never full)"
    rec.reasons.append(
        f"serve.max_batch_size={batch}: {why}; {shards} shards x eval.batch_size={env_batch_size} rows ask at most "
        f"{shards * env_batch_size} chunks at once"
    )
    rec.reasons.append(
        f"λ = {obs_per_s:,.1f} observations/s per shard at eval.batch_size={env_batch_size}"
        + (f", a chunk every {steps_per_request} steps" if steps_per_request > 1 else ", a request every step")
    )
    return rec


def env_obs_per_s(env_cfg: Any, env_pre: Any, batch_size: int) -> tuple[float, dict[str, Any], Any]:
    """λ at `batch_size` (random actions, no inference), one pre-processed observation and the task."""
    from lerobot_hydra.processors.observation import RAW_KEY
    from lerobot_hydra.vector.task_envs import EnvPool

    task = env_cfg.tasks()[0]
    pool = EnvPool(env_cfg, batch_size, batch_size > 1, env_cfg.spaces(task), False)
    vec = pool.vec
    vec.action_space.seed(0)
    try:
        obs, _ = pool.reset({k: (task, k, 1000 + k) for k in range(batch_size)}, every_slot=True)
        first = env_pre({RAW_KEY: obs, "task": [task.description] * batch_size})
        steps, elapsed = 0, 0.0
        limit = max(1, task.max_steps - 1)  # a finished sub-env no longer simulates
        while steps < min(ENV_STEPS, limit) or (elapsed < MIN_TIMED_S and steps < limit):
            action = np.asarray(vec.action_space.sample(), dtype=vec.single_action_space.dtype)
            t0 = time.perf_counter()
            obs, _, _, _, _ = vec.step(action)
            env_pre({RAW_KEY: obs, "task": [task.description] * batch_size})
            elapsed += time.perf_counter() - t0
            steps += 1
    finally:
        pool.close()
    return batch_size * steps / elapsed, first, task


def server_obs_per_s(chunks: Any, observation: dict[str, Any], task: Any, batch: int) -> float:
    """μ(B): the server's own chunk pass (ChunkPolicy.infer) for B rows, each a copy of one observation."""
    from lerobot_hydra.serving.chunks import ChunkRows

    frames = {
        key: np.repeat(np.asarray(observation[key])[:1, None], chunks.history, axis=1).repeat(batch, axis=0)
        for key in chunks.runtime.observation_keys
    }
    rows = ChunkRows(frames, [task.description] * batch, [1000 + k for k in range(batch)], [None] * batch)
    times: list[float] = []
    while len(times) < MIN_REPEATS or sum(times) < MIN_TIMED_S:
        t0 = time.perf_counter()
        chunks.infer(rows)
        times.append(time.perf_counter() - t0)
    return batch / statistics.median(times)


def sweep_command(overrides: list[str], rec: ServerRecommendation, episodes: int) -> list[str]:
    """The recommended sweep: the probed policy becomes the server's, the shards its remote clients (at most one
    per episode of the run; with one shard per server, a server gains nothing: the run as it is)."""
    shards = min(rec.shards, episodes)
    if shards == 1:
        return ["python", "eval.py", *overrides]
    served = [o for o in overrides if o.split("=", 1)[0] in ("policy", "device") or o.startswith("policy.")]
    shard = [o for o in overrides if o not in served and not o.startswith("eval.batch_size=")]
    policy = next((o.split("=", 1)[1] for o in served if o.startswith("policy=")), "metaworld_expert")
    server = [o.replace("=", ": ", 1) for o in served if not o.startswith("policy=")]
    server.append(f"serve.max_batch_size: {rec.max_batch_size}")
    ids = ",".join(str(k) for k in range(shards))
    return [
        "python", "eval.py", "-m", *shard, "policy=remote", f"eval.batch_size={rec.env_batch_size}",
        f"eval.shard_id={ids}", "+policy_server=slurm_gpu",
        f"policy_server.policy={policy}", f"policy_server.overrides={{{', '.join(server)}}}",
    ]  # fmt: skip


def run(overrides: list[str], max_batch: int = DEFAULT_MAX_BATCH) -> ServerRecommendation:
    from lerobot_hydra.app.probing import compose
    from lerobot_hydra.core.gl import resolve_device
    from lerobot_hydra.rollout.build import build_run
    from lerobot_hydra.schemas.schema import available_cpus, validate
    from lerobot_hydra.serving.chunks import ChunkPolicy

    if max_batch < 1:
        raise UserError(f"--max-batch must be 1 or more, got {max_batch}")
    started = time.perf_counter()
    cfg = compose(overrides)
    eval_cfg = validate(cfg)
    device = resolve_device(cfg.device)
    parts = build_run(cfg, device)  # the env, policy and processors eval.py runs
    policy, env_cfg, env_pre, tasks = parts.build_policy(), parts.run_env, parts.env_pre, parts.tasks
    env_batch = eval_cfg.batch_size or min(available_cpus(), eval_cfg.n_episodes)
    obs_per_s, first, task = env_obs_per_s(env_cfg, env_pre, env_batch)
    chunks = ChunkPolicy(policy, {}, "autotune")  # what the server runs; refuses a policy it cannot serve
    print(f"  shard: {obs_per_s:,.1f} observations/s at eval.batch_size={env_batch} (no inference)", flush=True)
    throughput: dict[int, float] = {}
    for b in batch_sizes(max_batch):
        throughput[b] = server_obs_per_s(chunks, first, task, b)
        print(f"  server batch {b:>3}: {1000 * b / throughput[b]:8.2f} ms a pass, {throughput[b]:9,.1f}/s", flush=True)
    rec = recommend_server(obs_per_s, chunks.queue_length, env_batch, throughput)
    print(f"  policy on {device}")
    print("\nRecommendation:")
    for reason in rec.reasons:
        print(f"  - {reason}")
    print(f"\n{shlex.join(sweep_command(overrides, rec, len(tasks) * eval_cfg.n_episodes))}")
    print(f"(measured in {time.perf_counter() - started:.0f} s)")
    return rec


def server_main(args: list[str]) -> None:
    """`--max-batch N` (default DEFAULT_MAX_BATCH) and the eval.py overrides."""
    max_batch = DEFAULT_MAX_BATCH
    if "--max-batch" in args:
        at = args.index("--max-batch")
        try:
            max_batch = int(args[at + 1])
        except (IndexError, ValueError):
            raise UserError("--max-batch needs a whole number, e.g. --max-batch 32") from None
        args = args[:at] + args[at + 2 :]
    run(args, max_batch)
