"""A loaded LeRobot policy behind the runner's Policy protocol, with one policy state per parallel-task lane.

`fork()` gives a lane its own copy of everything that changes during an episode (action queues, observation
queues, ACT's temporal ensembler, noise schedulers, the processors and their tokenizers) while the parameter and
buffer tensors stay shared, so a lane costs no extra weight memory. Noise is per batch row (noise.py):
each row draws from its own generator, seeded from its episode, so a stochastic policy (diffusion, flow
matching) gives an episode the same actions whatever its batch-mates, its lane or the other lanes do. Inference
is serialized across lanes (one lock that forks share) while their simulators step. This class runs LeRobot's
own `select_action`, whose queues span the batch (lockstep); rows.py keeps them per row.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import Any, Self

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.base import Policy
from lerobot_hydra.policies.lerobot.noise import GlobalRngState, NoiseHooks, RowNoise


def as_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """The env side's numpy arrays as CPU tensors (zero-copy); the preprocessor's device step moves them."""
    import numpy as np
    import torch

    return {
        k: torch.from_numpy(v) if isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.number) else v
        for k, v in batch.items()
    }


def shared_tensor_memo(module: Any) -> dict[int, Any]:
    """A deepcopy memo that maps every parameter and buffer to itself, so copies share them."""
    return {id(t): t for t in itertools.chain(module.parameters(), module.buffers())}


def rows_of(inputs: dict[str, Any]) -> int:
    return next(len(v) for k, v in inputs.items() if k.startswith("observation."))


def as_task_list(task: Any, batch_size: int) -> list[str]:
    """LeRobot's tokenizers want one string per sample, whatever the env pipeline produced."""
    if isinstance(task, str):
        return [task] * batch_size
    tasks = [str(t) for t in (task.tolist() if hasattr(task, "tolist") else task)]
    if len(tasks) == 1 and batch_size > 1:
        tasks = tasks * batch_size
    return tasks


class LeRobotPolicy(Policy):
    """`noise`: the hooks that give the policy's family per-row noise (see noise.py); None for a
    deterministic family, or for one run row by row (one_row.py), which draws from torch's global
    generators."""

    def __init__(
        self,
        policy: Any,
        preprocessor: Any,
        postprocessor: Any,
        device: str,
        use_amp: bool,
        observation_keys: dict[str, str],
        noise: NoiseHooks | None = None,
        lock: threading.RLock | None = None,
    ) -> None:
        self.policy = policy
        self.preprocessor = preprocessor
        self.postprocessor = postprocessor
        self.device = device
        self.use_amp = use_amp
        # env key -> policy key, for every observation the policy reads (the rest is dropped)
        self.observation_keys = observation_keys
        self.noise = noise
        self.lock = lock or threading.RLock()
        # batch row -> the noise of the episode on it (kept per row, so that rows could start episodes apart)
        self.rows: dict[int, RowNoise] = {}

    def reset(self, task: TaskSpec, episode_seeds: Sequence[int | None]) -> None:
        self._reset_policy()
        if self.noise is not None:
            for row in [r for r in self.rows if r >= len(episode_seeds)]:
                del self.rows[row]
            for row, seed in enumerate(episode_seeds):
                if row not in self.rows:
                    self.rows[row] = RowNoise()
                self.rows[row].start(seed)

    def _reset_policy(self) -> None:
        self.policy.reset()
        for step in getattr(self.preprocessor, "steps", []) + getattr(self.postprocessor, "steps", []):
            if hasattr(step, "reset"):
                step.reset()

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
        """LeRobot's own `select_action`, whose queues span the batch: every row starts and steps together."""
        inputs = self._policy_batch(batch)
        processed = self.preprocessor(inputs)
        with self._inference():
            if self.noise is None:
                action = self.policy.select_action(processed)
            else:
                size = rows_of(inputs)
                if size != len(self.rows):
                    raise ValueError(f"select_action got a batch of {size} rows after a reset of {len(self.rows)}")
                rows = [self.rows[row] for row in range(size)]
                action = self._with_row_noise(rows, lambda: self.policy.select_action(processed))
        return self._postprocess(action)

    def _inference(self) -> contextlib.AbstractContextManager[None]:
        """The lanes' shared lock, no autograd, and autocast when AMP is on."""
        import torch

        stack = contextlib.ExitStack()
        stack.enter_context(self.lock)
        stack.enter_context(self._grad_mode())
        if self.use_amp:
            stack.enter_context(torch.autocast(device_type=torch.device(self.device).type))
        return stack

    def _grad_mode(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        return torch.inference_mode()

    def _postprocess(self, action: Any) -> Any:
        """The postprocessor on one step's actions, as lerobot-eval runs it."""
        import torch

        if action.is_floating_point() and action.dtype != torch.float32:
            action = action.float()  # autocast output; the env wants float32
        return self.postprocessor(action)

    def _with_row_noise(self, rows: Sequence[RowNoise], infer: Callable[[], Any]) -> Any:
        """`infer()` with the noise of batch row i drawn from `rows[i]` alone."""
        assert self.noise is not None
        before = GlobalRngState(self.device).capture()
        with self.noise(self.policy, rows):
            action = infer()
        if not GlobalRngState(self.device).capture().same_as(before):
            # Noise drawn past the hooks would depend on the batch: better no result than a silently wrong one.
            raise UserError(
                f"the {self.policy.config.type} policy drew noise from torch's global generator under lerobot "
                f"{version('lerobot')}, past lerobot_hydra's per-row noise, so its episodes would depend on their "
                "batch-mates; install the lerobot that lerobot_hydra pins (pip install -e '.[lerobot]')"
            )
        return action

    def fork(self) -> Self:
        """Own per-episode state, processors and row generators, same weight tensors (see the module docstring)."""
        with self.lock:
            policy = copy.deepcopy(self.policy, shared_tensor_memo(self.policy))
        return type(self)(
            policy,
            copy.deepcopy(self.preprocessor),
            copy.deepcopy(self.postprocessor),
            self.device,
            self.use_amp,
            dict(self.observation_keys),
            self.noise,
            self.lock,
        )
