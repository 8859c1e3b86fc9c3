"""A processor pipeline: steps applied in order to a dict batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Batch = dict[str, Any]
Step = Callable[[Batch], Batch]


class Pipeline:
    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = list(steps)

    def __call__(self, batch: Batch) -> Batch:
        for step in self.steps:
            batch = step(batch)
        return batch

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return f"Pipeline({', '.join(type(s).__name__ for s in self.steps)})"
