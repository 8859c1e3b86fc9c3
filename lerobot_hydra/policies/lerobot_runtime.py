"""A loaded LeRobot policy behind the runner's Policy protocol, with one policy state per parallel-task lane.

`fork()` gives a lane its own copy of everything that changes during an episode (action queues, observation
queues, ACT's temporal ensembler, noise schedulers, the processors and their tokenizers) while the parameter and
buffer tensors stay shared, so a lane costs no extra weight memory. Random draws are isolated too: each lane
owns its random-generator state, seeded per batch from the episode seeds, and swaps it in around inference
under a lock shared by the lanes, so a stochastic policy (diffusion, flow matching) gives the same actions
whatever the other lanes do.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from lerobot_hydra.envs.base import TaskSpec

# Keeps the policy's noise apart from the simulator's, which is seeded with the same episode seed.
SEED_OFFSET = 104729


def as_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """The env side's numpy arrays as CPU tensors (zero-copy); the preprocessor's device step moves them."""
    import numpy as np
    import torch

    return {
        k: torch.from_numpy(v) if isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.number) else v
        for k, v in batch.items()
    }


class LaneRng:
    """One lane's state of the global torch generators (CPU and the inference device)."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = torch.device(device)
        self.cpu: Any = None
        self.accelerator: Any = None

    def _accelerator_module(self) -> Any:
        import torch

        if self.device.type == "cuda":
            return torch.cuda
        if self.device.type == "mps":
            return torch.mps
        return None

    def seed(self, seed: int) -> None:
        """Called under the lanes' lock."""
        import torch

        torch.manual_seed(seed)
        self.capture()

    def capture(self) -> None:
        import torch

        self.cpu = torch.get_rng_state()
        module = self._accelerator_module()
        if module is torch.cuda:
            self.accelerator = torch.cuda.get_rng_state(self.device)
        elif module is not None:
            self.accelerator = module.get_rng_state()

    def restore(self) -> None:
        import torch

        if self.cpu is None:
            return
        torch.set_rng_state(self.cpu)
        module = self._accelerator_module()
        if module is torch.cuda:
            torch.cuda.set_rng_state(self.accelerator, self.device)
        elif module is not None:
            module.set_rng_state(self.accelerator)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        self.restore()
        try:
            yield
        finally:
            self.capture()


def shared_tensor_memo(module: Any) -> dict[int, Any]:
    """A deepcopy memo that maps every parameter and buffer to itself, so copies share them."""
    return {id(t): t for t in itertools.chain(module.parameters(), module.buffers())}


def as_task_list(task: Any, batch_size: int) -> list[str]:
    """LeRobot's tokenizers want one string per sample, whatever the env pipeline produced."""
    if isinstance(task, str):
        return [task] * batch_size
    tasks = [str(t) for t in (task.tolist() if hasattr(task, "tolist") else task)]
    if len(tasks) == 1 and batch_size > 1:
        tasks = tasks * batch_size
    return tasks


class LeRobotPolicy:
    def __init__(
        self,
        policy: Any,
        preprocessor: Any,
        postprocessor: Any,
        device: str,
        use_amp: bool,
        observation_keys: dict[str, str],
        lock: threading.Lock | None = None,
    ) -> None:
        self.policy = policy
        self.preprocessor = preprocessor
        self.postprocessor = postprocessor
        self.device = device
        self.use_amp = use_amp
        # env key -> policy key, for every observation the policy reads (the rest is dropped)
        self.observation_keys = observation_keys
        self._lock = lock or threading.Lock()
        self._rng = LaneRng(device)

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self.policy.reset()
        for step in getattr(self.preprocessor, "steps", []) + getattr(self.postprocessor, "steps", []):
            if hasattr(step, "reset"):
                step.reset()
        first = next((s for s in episode_seeds if s is not None), 0)
        with self._lock:
            self._rng.seed(first + SEED_OFFSET)

    def _policy_batch(self, batch: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        size = 0
        for key, value in as_tensors(batch).items():
            if key.startswith("observation."):
                if key in self.observation_keys:
                    out[self.observation_keys[key]] = value
                    size = size or len(value)
            else:
                out[key] = value
        if "task" in out and out["task"] is not None:
            out["task"] = as_task_list(out["task"], size)
        return out

    def select_action(self, batch: dict[str, Any]) -> Any:
        import torch

        processed = self.preprocessor(self._policy_batch(batch))
        device_type = torch.device(self.device).type
        autocast = torch.autocast(device_type=device_type) if self.use_amp else contextlib.nullcontext()
        with self._lock, self._rng.active(), torch.inference_mode(), autocast:
            action = self.policy.select_action(processed)
        if action.is_floating_point() and action.dtype != torch.float32:
            action = action.float()  # autocast output; the env wants float32
        return self.postprocessor(action)

    def fork(self) -> LeRobotPolicy:
        """Own per-episode state and processors, same weight tensors (see the module docstring)."""
        with self._lock:
            policy = copy.deepcopy(self.policy, shared_tensor_memo(self.policy))
        return LeRobotPolicy(
            policy,
            copy.deepcopy(self.preprocessor),
            copy.deepcopy(self.postprocessor),
            self.device,
            self.use_amp,
            dict(self.observation_keys),
            self._lock,
        )
