"""What must agree between a run and its resume, and between the shards of one configuration: its fingerprint's
content (store/shard_file.py hashes it)."""

from __future__ import annotations

import dataclasses
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.schemas.schema import EvalConfig, resolve_target

# Settings that never change an episode's outcome; left out of the fingerprint so that a shard can be
# resumed with another batch size or on another machine.
OUTCOME_NEUTRAL_POLICY_KEYS = {"device"}
# `python` names where the simulator runs; what runs there (its versions) is fingerprinted instead (`simulator`).
OUTCOME_NEUTRAL_ENV_KEYS = {"compute_all_observations", "python"}


def run_identity(
    cfg: DictConfig,
    eval_cfg: EvalConfig,
    checkpoint: dict[str, Any] | None = None,
    simulator: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The env, policy, episodes, seed, and the checkpoint's identity (`PolicyConfig.identity()`) for a policy that
    has one; a dynamic sweep's shards say so (their queue is the configuration's), and a real-time run its clock.
    `simulator`: the versions of the simulator side of an env.python run (its provenance's `simulator`), so that a
    resume or a shard whose simulator differs is refused."""
    container = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(container, dict)
    neutral = OUTCOME_NEUTRAL_POLICY_KEYS | getattr(
        resolve_target(str(container["policy"]["_target_"]), "policy"), "OUTCOME_NEUTRAL", frozenset()
    )
    policy = {k: v for k, v in container["policy"].items() if k not in neutral}
    env = {k: v for k, v in container["env"].items() if k not in OUTCOME_NEUTRAL_ENV_KEYS}
    identity = {"env": env, "policy": policy, "n_episodes": eval_cfg.n_episodes, "seed": cfg.seed}
    if checkpoint is not None:
        identity["checkpoint"] = checkpoint
    if simulator is not None:
        identity["simulator"] = {"python": simulator["python"], "packages": simulator["packages"]}
    if dynamic_claims(eval_cfg):
        identity["claims"] = "dynamic"
    if eval_cfg.clock.real_time:  # the latency changes the episodes (lockstep runs keep their fingerprint)
        clock = dataclasses.asdict(eval_cfg.clock)
        if clock["join"] == "aggregate":
            del clock["join"]  # the join before there was a choice: earlier runs keep their fingerprint
        identity["clock"] = clock
    return identity


def dynamic_claims(eval_cfg: EvalConfig) -> bool:
    """Whether this run is a shard that claims its work from the sweep's queue."""
    return eval_cfg.claims == "dynamic" and (eval_cfg.num_shards or 1) > 1
