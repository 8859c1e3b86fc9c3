"""Structured-config schemas and the checks that run before anything is built.

`RunConfig` and `EvalConfig` live in Hydra's ConfigStore, so wrong types are rejected while the config is
composed. Env and policy nodes are validated against the dataclass named by their `_target_`: a new
benchmark or policy family brings its own schema with its module, with nothing to register centrally.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lerobot_hydra.core.errors import UserError, did_you_mean
from lerobot_hydra.schemas.clock import ClockConfig, check_clock
from lerobot_hydra.schemas.validation import (
    check_devices,
    check_env_values,
    check_finite,
    check_policy_fits_env,
    check_seeds,
    check_sequential,
)


@dataclass
class SequentialConfig:
    """Sequential stopping (results/sequential.py): eval.n_episodes becomes each task's maximum, and a task stops
    at the end of a round once decided, with error rate at most `alpha` however many rounds are looked at."""

    # null: off. precision: stop a task once its success rate is known to +-`precision` points. threshold: stop it
    # once its rate is known to lie above or below `threshold` percent (with `precision` also set, whichever first).
    stop: str | None = None
    # Episodes per task per round; a decision is taken only at round ends (and at the maximum).
    round: int = 10
    alpha: float = 0.05
    precision: float | None = None  # points
    threshold: float | None = None  # percent


@dataclass
class EvalConfig:
    # Episodes per task.
    n_episodes: int = 10
    # Sub-environments stepped together in one vector env (one policy batch).
    # None: one per available CPU core (as many as the episodes per task at most).
    batch_size: int | None = None
    # Worker processes for batch_size > 1; a batch of 1 always runs in-process.
    use_async_envs: bool = True
    # Tasks evaluated concurrently, each with its own envs and its own policy state.
    max_parallel_tasks: int = 1
    # Episodes per task written as mp4 (the first ones by episode index; 0 disables video).
    max_episodes_rendered: int = 10
    shard_id: int = 0
    # None: 1 for a single run; in a multirun sweep over eval.shard_id, the number of shard ids.
    num_shards: int | None = None
    # Seconds between progress lines when stderr is not a terminal (SLURM logs).
    progress_interval_s: float = 30.0
    # How a sharded run's shards share the work: static (shard k runs the k-th contiguous block) or dynamic
    # (shards claim blocks from a queue beside their run dirs and take over the work of shards that died).
    claims: str = "static"
    # dynamic: seconds without a heartbeat after which a job's claims may be taken over.
    lease_s: float = 60.0
    # The longest a worker may take for one step, reset or simulator build before it counts as wedged: it is then
    # killed and replaced, and its episodes start again (docs/faults.md).
    step_timeout_s: float = 300.0
    # How often a lost worker (killed, crashed or wedged) is replaced on the same episode before the run ends.
    worker_retries: int = 2
    # A simulator that raises or returns a non-finite reward or observation: record (the episode runs once more in a
    # fresh worker, then is recorded as an error episode; the run goes on and exits 3) or stop (the run ends).
    on_error: str = "record"
    sequential: SequentialConfig = field(default_factory=SequentialConfig)
    # Every step recorded as a LeRobotDataset in <run dir>/recording (docs/recording.md): null: off; all: every raw
    # observation key; or a comma-separated list of them (e.g. agent_pos). Actions, rewards, done and success always.
    recording: str | None = None
    # How recorded images are stored: video (mp4, LeRobot's encoder) or png (one image per frame).
    recording_images: str = "video"
    # Which steps draw the policy's cameras: read (only those whose observation the policy will read, when it says;
    # the episodes are identical) or every_step (as lerobot-eval; for a policy whose reads cannot be declared).
    render: str = "read"
    # Whether time passes while the policy computes (docs/timing.md): lockstep, modeled or measured latency.
    clock: ClockConfig = field(default_factory=ClockConfig)


@dataclass
class RunConfig:
    # env, policy and logger stay untyped at composition: the node's `_target_` chooses its dataclass (a benchmark's
    # or policy family's own, or a user's subclass given as `policy._target_=...` or from their own config dir), which
    # one schema in the ConfigStore cannot express (OmegaConf has no unions of structured configs, and a typed node
    # would reject a subclass's extra fields). `validate` checks each against its `_target_`'s dataclass right after
    # composition, before anything is built, with a did-you-mean for unknown keys.
    env: Any = MISSING
    policy: Any = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    logger: Any = None
    seed: int = 1000
    # auto: cuda when a GPU is visible, else cpu.
    device: str = "auto"
    # A sweep's policy server (+policy_server=<preset>; schema lerobot_hydra.serving.sweep_job.PolicyServerConfig).
    policy_server: Any = None


def open_node() -> DictConfig:
    """An empty node that stays open in Hydra's struct mode: a config that defaults to it (`/schema/open@_here_`)
    takes keys its YAML does not list as plain `key=value` overrides (env=lerobot: the fields of env.type)."""
    node = OmegaConf.create({})
    OmegaConf.set_struct(node, False)
    return node


def _check_record(ev: EvalConfig) -> None:
    if ev.recording_images not in ("video", "png"):
        raise UserError(f"eval.recording_images={ev.recording_images!r} is not one of video, png")
    if ev.recording is not None and not ev.recording.strip():
        raise UserError("eval.recording is empty; give 'all', a comma-separated list of observation keys, or null")


def register_schemas() -> None:
    """The run's and eval's schemas in Hydra's ConfigStore (app/probing.py `register` calls it)."""
    cs = ConfigStore.instance()
    cs.store(name="run_schema", node=RunConfig)
    cs.store(group="eval", name="schema", node=EvalConfig)
    cs.store(group="schema", name="open", node=open_node())


# Keys Hydra's instantiate understands besides a dataclass's own fields.
_INSTANTIATE_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


def resolve_target(path: str, key: str) -> Any:
    module_name, _, attr = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attr)
    except (ImportError, AttributeError) as err:
        raise UserError(f"{key}._target_ '{path}' cannot be imported ({err}); check the class path") from err


def validate_node(node: DictConfig, key: str) -> type:
    """Check a `_target_` node against the dataclass it names: unknown keys and wrong types fail here."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        raise UserError(f"'{key}' must be a config with a _target_; choose one with {key}=<name>")
    cls = resolve_target(node._target_, key)
    if not dataclasses.is_dataclass(cls):
        return cls
    own_check = getattr(cls, "check_node", None)
    if callable(own_check):
        # A schema that depends on a value (env=lerobot: the fields of env.type) checks the node itself.
        own_check(node, key)
        return cls
    fields = {f.name for f in dataclasses.fields(cls)}
    for name in node.keys():
        if name not in fields and name not in _INSTANTIATE_KEYS:
            valid = sorted(fields)
            raise UserError(
                f"unknown key '{key}.{name}'{did_you_mean(str(name), valid)}; valid keys: {', '.join(valid)}"
            )
    values = OmegaConf.masked_copy(node, [k for k in node.keys() if k not in _INSTANTIATE_KEYS])
    try:
        OmegaConf.merge(OmegaConf.structured(cls), values)
    except OmegaConfBaseException as err:
        full_key = getattr(err, "full_key", "") or ""
        raise UserError(f"bad value for '{key}.{full_key}': {_first_line(err)}") from err
    return cls


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]


def validate(cfg: DictConfig, sweep_rounds: bool = False) -> EvalConfig:
    """Reject every bad value before any simulator, policy or file is created. Returns the typed eval config.
    `sweep_rounds`: a job of hydra/sweeper=sequential, whose sweep decides each round on every shard's episodes."""
    check_finite(cfg)
    for name in cfg.eval.keys():
        if name not in {f.name for f in dataclasses.fields(EvalConfig)}:
            valid = [f.name for f in dataclasses.fields(EvalConfig)]
            raise UserError(
                f"unknown key 'eval.{name}'{did_you_mean(str(name), valid)}; valid keys: {', '.join(valid)}"
            )
    ev: EvalConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalConfig), cfg.eval))
    if ev.batch_size is None:
        ev.batch_size = available_cpus()
    for name in ("n_episodes", "batch_size", "max_parallel_tasks"):
        if getattr(ev, name) < 1:
            raise UserError(f"eval.{name} must be at least 1, got {getattr(ev, name)}")
    if ev.max_episodes_rendered < 0:
        raise UserError(f"eval.max_episodes_rendered must be 0 or more, got {ev.max_episodes_rendered}")
    if ev.progress_interval_s <= 0:
        raise UserError(f"eval.progress_interval_s must be positive, got {ev.progress_interval_s}")
    if ev.claims not in ("static", "dynamic"):
        raise UserError(f"eval.claims must be static or dynamic, got '{ev.claims}'")
    if ev.lease_s <= 0:
        raise UserError(f"eval.lease_s must be positive, got {ev.lease_s}")
    if ev.step_timeout_s <= 0:
        raise UserError(f"eval.step_timeout_s must be positive, got {ev.step_timeout_s}")
    if ev.worker_retries < 0:
        raise UserError(f"eval.worker_retries must be 0 or more, got {ev.worker_retries}")
    if ev.on_error not in ("record", "stop"):
        raise UserError(f"eval.on_error must be record or stop, got '{ev.on_error}'")
    if ev.render not in ("read", "every_step"):
        raise UserError(f"eval.render must be read or every_step, got '{ev.render}'")
    _check_record(ev)
    check_clock(ev.clock)
    if not ev.use_async_envs and isinstance(cfg.env, DictConfig) and cfg.env.get("python") is not None:
        raise UserError(
            "eval.use_async_envs=false runs the simulators in this process, env.python in workers of another "
            "interpreter; drop one of them"
        )
    if ev.num_shards is not None and ev.num_shards < 1:
        raise UserError(f"eval.num_shards must be at least 1, got {ev.num_shards}")
    if ev.shard_id < 0:
        raise UserError(f"eval.shard_id must be 0 or more, got {ev.shard_id}")
    if ev.num_shards is None and ev.shard_id > 0:
        raise UserError(
            f"eval.shard_id={ev.shard_id} needs eval.num_shards; add eval.num_shards=<total number of shards>"
        )
    if ev.num_shards is not None and ev.shard_id >= ev.num_shards:
        raise UserError(
            f"eval.shard_id={ev.shard_id} is out of range for eval.num_shards={ev.num_shards}; "
            f"shard ids run from 0 to {ev.num_shards - 1}"
        )
    if not isinstance(cfg.device, str) or not _valid_device(cfg.device):
        raise UserError(f"device must be auto, cpu, cuda, cuda:<index> or mps, got '{cfg.device}'")
    check_seeds(cfg.seed, ev.n_episodes)
    check_sequential(ev.sequential, None if sweep_rounds else ev.num_shards)
    validate_policy_and_env(cfg)
    return ev


def validate_policy_and_env(cfg: DictConfig) -> type:
    """The policy and env nodes, the policy's fit to the env and the devices; returns the policy config class."""
    policy_cls = validate_node(cfg.policy, "policy")
    # Before the env's keys: a policy YAML may set env keys (metaworld_expert: env.obs_type) that only its env has.
    if isinstance(cfg.env, DictConfig) and "_target_" in cfg.env:
        check_policy_fits_env(policy_cls, resolve_target(cfg.env._target_, "env"))
    validate_node(cfg.env, "env")
    check_env_values(cfg.env)
    check_devices(cfg)
    return policy_cls


def available_cpus() -> int:
    """CPU cores this process may run on (a SLURM allocation or taskset, not the whole node)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _valid_device(device: str) -> bool:
    if device in ("auto", "cpu", "cuda", "mps"):
        return True
    return device.startswith("cuda:") and device[5:].isdigit()


def instantiate_node(node: DictConfig) -> Any:
    """The object a `_target_` node names; a UserError raised while building it reaches the user as it is."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as err:
        cause = err.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        raise
