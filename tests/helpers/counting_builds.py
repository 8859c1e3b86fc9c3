"""MetaWorld and the random policy, each logging every build (simulator or policy, with the building process) to
`<log_dir>/builds.jsonl`, so tests can count what a run builds."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lerobot_hydra.envs.base import EnvConfig, TaskSpec
from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
from lerobot_hydra.policies.random import RandomPolicy, RandomPolicyConfig


def log_build(log_dir: str, what: str, **extra: Any) -> None:
    with open(Path(log_dir) / "builds.jsonl", "a") as f:
        f.write(json.dumps({"built": what, "pid": os.getpid(), **extra}) + "\n")


def builds(log_dir: Path) -> list[dict[str, Any]]:
    path = log_dir / "builds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class CountedMetaWorldConfig(MetaWorldEnvConfig):
    log_dir: str = ""

    def build(self, task: TaskSpec, render: bool) -> Any:
        log_build(self.log_dir, "simulator", task=task.name)
        return super().build(task, render)


@dataclass
class CountedRandomConfig(RandomPolicyConfig):
    log_dir: str = ""

    def build(self, env: EnvConfig, device: str) -> RandomPolicy:
        log_build(self.log_dir, "policy")
        return super().build(env, device)
