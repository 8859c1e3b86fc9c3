"""LeRobot's own `lerobot-eval`, with pi0 and pi0.5 at the tiny test size (tests/helpers/tiny_pi.py) and policy
noise drawn as lerobot_hydra draws it (lerobot_hydra/policies/lerobot/noise.py), where lerobot-eval draws a batch's
noise from torch's global generator, seeded once per run:
- pi0/pi0.5 (per-row hooks): each env of a rollout from a generator seeded from that env's episode seed;
- a family without hooks, which lerobot_hydra runs one row at a time: torch's global generator seeded from the
  episode's seed when its rollout starts (run lerobot-eval with --eval.batch_size=1).
Everything else (envs, seeds, processors, action queue, stepping, metrics) is lerobot-eval's, so a parity run
compares the evaluation loops on the same noise.

    PYTHONPATH=<checkout> python -m tests.helpers.lerobot_eval_rows --policy.path=... (lerobot-eval's arguments)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

from tests.helpers.tiny_pi import MODULES, tiny_gemma


@contextlib.contextmanager
def row_noise() -> Iterator[None]:
    """Inside the block, every lerobot-eval rollout gives its envs' rows the generators of their episode seeds."""
    import importlib

    import torch
    from lerobot.scripts import lerobot_eval

    from lerobot_hydra.policies.lerobot.noise import RowNoise, randn_rows, row_seed

    rows: list[RowNoise] = []
    rollout = lerobot_eval.rollout

    def seeded_rollout(*args: Any, seeds: list[int] | None = None, **kwargs: Any) -> Any:
        assert seeds is not None, "row noise needs seeded episodes: give lerobot-eval --seed"
        rows[:] = [RowNoise() for _ in seeds]
        for row, seed in zip(rows, seeds, strict=True):
            row.start(seed)
        torch.manual_seed(row_seed(seeds[0]))  # one env per rollout: the one-row families' noise
        return rollout(*args, seeds=seeds, **kwargs)

    def sample_noise(_model: Any, shape: Any, device: Any) -> Any:
        return randn_rows(rows, shape, device, torch.float32)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(lerobot_eval, "rollout", seeded_rollout))
        for name in MODULES:
            module = importlib.import_module(name)
            model = getattr(module, "PI0Pytorch", None) or getattr(module, "PI05Pytorch", None)
            if model is not None:  # pi0_fast draws no flow noise
                stack.enter_context(mock.patch.object(model, "sample_noise", sample_noise))
        yield


def main() -> int:
    from lerobot.scripts.lerobot_eval import main as lerobot_eval_main

    with tiny_gemma(), row_noise():
        lerobot_eval_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
