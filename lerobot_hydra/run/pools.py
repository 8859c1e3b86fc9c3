"""A run's env pools, kept warm from one batch of work to the next (rounds, claimed blocks, the Python API's
evaluations): each lane gets one pool per (observation, action) spaces, and keeps it, with the simulators its
sub-envs hold, while later batches fit in it. A pool is replaced only when a batch needs more sub-envs than it has,
or frames for videos from a pool built without rendering. While it may hold workers it holds the worker servers
(vector/worker_servers.py), shared with any other run of this process: the last holder to close stops them."""

from __future__ import annotations

from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.rollout.lanes import Pools
from lerobot_hydra.vector.task_envs import EnvPool, has_workers
from lerobot_hydra.vector.worker_servers import ServerLease


class KeptPools:
    """A `MakePools` for `rollout.lanes.evaluate`; its owner closes it (idempotent)."""

    def __init__(self) -> None:
        self._pools: dict[tuple[int, str], EnvPool] = {}
        self.built = 0  # pools created so far (each starts its own workers)
        self._servers = ServerLease()

    def prestart(self, config: EnvConfig) -> None:
        """Starts the worker servers now, for `config`'s workers (their imports overlap the policy's loading)."""
        self._servers.prestart(config)

    def __call__(
        self, lane: int, config: EnvConfig, tasks: list[TaskSpec], n_envs: int, use_async: bool, render: bool
    ) -> Pools:
        out: Pools = {}
        for task in tasks:
            spaces = config.spaces(task)
            key = (lane, repr(spaces))
            pool = self._pools.get(key)
            if pool is None or pool.num_envs < n_envs or (render and not pool.render):
                if pool is not None:
                    pool.close()
                if has_workers(config, n_envs, use_async):
                    self._servers.acquire()
                pool = self._pools[key] = EnvPool(config, n_envs, use_async, spaces, render)
                self.built += 1
            out[task.key] = pool
        return out

    def clear(self) -> None:
        """Closes every pool (and its workers); the worker servers stay up for the next."""
        while self._pools:
            self._pools.popitem()[1].close()

    def close(self) -> None:
        """Closes every pool, then gives back this owner's hold on the worker servers."""
        self.clear()
        self._servers.release()
