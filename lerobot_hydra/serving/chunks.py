"""The server side of `policy=remote`: action chunks for rows of many clients in one forward pass.

A client keeps each row's action queue and its raw observation history (the last `history` observations, the
first one repeated at its episode's start, as LeRobot's `populate_queues`), and asks for a chunk only for the
rows whose queue is empty. A request row carries that history, its task text, its episode seed and the state of
its noise generator after its previous chunk (none at its episode's first chunk: the generator is then seeded
from the episode seed, as in-process). The server preprocesses each frame of the history with the checkpoint's
pipeline, runs the rows through `PerRowLeRobotPolicy`'s own chunk pass with each row's own noise, postprocesses
the chunk, cuts it to the queue length and returns it with the generator's new state. So the server holds no
per-row state between requests, and a row's actions are those of in-process evaluation: the same observations,
history, noise stream and code; only the batch-mates of a forward pass differ, which the per-row pass makes
irrelevant up to the float rounding of kernels at another batch size. A family run one row at a time in-process
(policies/lerobot/one_row.py), whose noise comes from torch's global generators, is served one row at a time too
(one_row.py): the noise state a row carries is then that of the global generators.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.policies.lerobot.noise import RowNoise
from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy
from lerobot_hydra.policies.lerobot.rows import PerRowLeRobotPolicy, RowState
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy
from lerobot_hydra.serving.one_row import OneRowChunks
from lerobot_hydra.serving.wire import METADATA_KEY, PROTOCOL_VERSION


@dataclass
class ChunkRows:
    """Rows asking for a chunk: `frames` maps each env key to (rows, history, *shape)."""

    frames: dict[str, np.ndarray]
    tasks: list[str]
    seeds: list[int | None]
    noise: list[bytes | None]

    def __len__(self) -> int:
        return len(self.tasks)

    @classmethod
    def concatenate(cls, parts: list[ChunkRows]) -> ChunkRows:
        if len(parts) == 1:
            return parts[0]
        frames = {key: np.concatenate([p.frames[key] for p in parts]) for key in parts[0].frames}
        return cls(
            frames,
            [t for p in parts for t in p.tasks],
            [s for p in parts for s in p.seeds],
            [n for p in parts for n in p.noise],
        )


class ChunkPolicy:
    """A LeRobot policy of a per-row family (rows.py) or run one row at a time (one_row.py), serving chunks (see
    the module docstring)."""

    def __init__(
        self, runtime: Any, identity: dict[str, Any], name: str, features: dict[str, tuple[int, ...]] | None = None
    ) -> None:
        self.identity = identity
        self.name = name
        self.one_row: OneRowChunks | None = None
        if isinstance(runtime, RowwisePolicy):
            self.runtime: LeRobotPolicy = runtime.base
            self.one_row = OneRowChunks(runtime.base)
            self.queue_length, self.history = self.one_row.queue_length, self.one_row.history
        else:
            self.runtime = runtime
            self.queue_length, self.history = self._per_row(runtime)
        action = (self.runtime.policy.config.output_features or {}).get("action")
        self.action_dim = int(np.prod(action.shape)) if action is not None else None
        # The per-sample shape of every key it reads, as the env's processors give it (what requests must hold).
        self.features = {key: tuple(shape) for key, shape in (features or {}).items() if key in self.reads}

    @staticmethod
    def _per_row(runtime: Any) -> tuple[int, int]:
        """A per-row family's queue length and observation history; one line for a policy that cannot be served."""
        if not isinstance(runtime, PerRowLeRobotPolicy):
            if isinstance(runtime, LeRobotPolicy):
                why = f"the {runtime.policy.config.type} policy cannot be served yet: its batch rows run in lockstep"
            else:
                why = f"the {type(runtime).__name__} cannot be served yet: the server serves LeRobot policies"
            raise UserError(f"{why}; evaluate it in-process instead")
        runtime.reset(None, [])
        layout = runtime.layout
        assert layout is not None
        if layout.actions is None:
            raise UserError(
                "a policy with temporal ensembling (a new chunk every step) cannot be served yet; evaluate it "
                "in-process, or serve it with policy.overrides={temporal_ensemble_coeff: null}"
            )
        return layout.actions, max(layout.history.values(), default=1)

    @property
    def reads(self) -> list[str]:
        return sorted(self.runtime.observation_keys)

    @property
    def noise_state_bytes(self) -> int:
        import torch

        if self.one_row is not None:
            return self.one_row.noise_state_bytes
        return int(torch.Generator().get_state().numel())

    def metadata(self, max_batch_size: int) -> dict[str, Any]:
        """What the server sends on connect: openpi clients ignore our entry; ours reads it."""
        return {
            METADATA_KEY: {
                "version": PROTOCOL_VERSION,
                "policy": self.name,
                "reads": self.reads,
                "history": self.history,
                "chunk": self.queue_length,
                "action_dim": self.action_dim,
                "max_batch_size": max_batch_size,
                "identity": self.identity,
            }
        }

    def infer(self, rows: ChunkRows) -> tuple[np.ndarray, list[bytes]]:
        """Each row's chunk, (rows, queue length, action_dim), and its generator's state after it."""
        import torch

        if self.one_row is not None:
            return self.one_row.infer(rows.frames, rows.tasks, rows.seeds, rows.noise)
        runtime = self.runtime
        assert isinstance(runtime, PerRowLeRobotPolicy)
        layout = runtime.layout
        assert layout is not None
        n = len(rows)
        processed = []
        for i in range(self.history):
            batch: dict[str, Any] = {key: np.array(value[:, i]) for key, value in rows.frames.items()}
            batch["task"] = list(rows.tasks)
            processed.append(runtime._with_stacked_images(runtime.preprocessor(runtime._policy_batch(batch))))
        with runtime._inference():
            slots = []
            for r in range(n):
                noise = RowNoise()
                state = rows.noise[r]
                if state is None:
                    noise.start(rows.seeds[r])
                else:
                    noise.generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
                history: dict[str, deque[Any]] = {}
                for key, length in layout.history.items():
                    # As in-process: a key the batch lacks keeps an empty history, which the pass skips.
                    frames = processed[self.history - length :] if key in processed[-1] else []
                    history[key] = deque([p[key][r : r + 1] for p in frames], maxlen=length)
                slots.append(RowState(noise, history))
            runtime.slots = slots
            chunks = runtime._chunks(processed[-1], list(range(n)), n)[:, : self.queue_length]
        steps, dim = chunks.shape[1], chunks.shape[2]
        # Per element, so the same numbers as lerobot-eval's postprocessing of each step's actions.
        actions = runtime._postprocess(chunks.reshape(n * steps, dim)).reshape(n, steps, -1)
        states = [slot.noise.generator.get_state().numpy().tobytes() for slot in slots]
        return np.ascontiguousarray(actions.detach().to("cpu").numpy()), states
