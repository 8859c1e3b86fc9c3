"""What a run is made of, built from the composed config: the GL backend, the env and policy configs, the tasks,
the env as the policy needs it and its processors. Shared by the evaluation (app/evaluation.py) and autotune, so
that autotune measures exactly what eval.py runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.gl import configure_mujoco_gl
from lerobot_hydra.envs.base import EnvConfig, TaskSpec, unique_tasks
from lerobot_hydra.policies.base import Policy, PolicyConfig, RunsOnClock, runs_on_clock
from lerobot_hydra.processors.pipeline import Pipeline
from lerobot_hydra.schemas.clock import ClockConfig
from lerobot_hydra.schemas.schema import instantiate_node
from lerobot_hydra.schemas.validation import require_tasks


@dataclass
class RunParts:
    gl: str  # the MUJOCO_GL backend this process renders with
    env: EnvConfig  # as configured: the fingerprint, the provenance and the policy's checks see this one
    policy: PolicyConfig
    tasks: list[TaskSpec]  # each (group, task id) once, in order
    run_env: EnvConfig  # computing only the observations the policy reads (see `EnvConfig.observing`)
    env_pre: Pipeline
    env_post: Pipeline
    device: str  # what `build_policy` hands to `PolicyConfig.build`
    clock: ClockConfig  # eval.clock (docs/timing.md)

    def build_policy(self) -> Policy:
        """The policy, checked against the whole env (slow for a checkpoint: call it while the workers start), on
        the run's clock when it is chunked."""
        policy = self.policy.build(self.env, self.device)
        if runs_on_clock(policy):
            from lerobot_hydra.policies.clock import Clock

            cast(RunsOnClock, policy).use_clock(Clock(self.clock, float(self.env.fps)))
        elif self.clock.real_time:
            raise UserError(
                f"eval.clock.mode={self.clock.mode}: the policy built ({type(policy).__name__}) does not run on a "
                "real-time clock; use eval.clock.mode=lockstep"
            )
        return policy


def build_run(
    cfg: DictConfig, device: str | None = None, policy: PolicyConfig | None = None, env: EnvConfig | None = None
) -> RunParts:
    """The parts of a validated config's run; nothing is simulated and no policy is built yet. `device`: what the
    policy is built for; None: the top-level `device` setting as configured (`auto` included). `policy`, `env`:
    configs already made from `cfg` (the Python API's, kept across its evaluations)."""
    gl = configure_mujoco_gl()
    env = instantiate_node(cfg.env) if env is None else env
    if not isinstance(env, EnvConfig):
        raise UserError(f"env._target_ must name an EnvConfig subclass, got {type(env).__name__}")
    policy = instantiate_node(cfg.policy) if policy is None else policy
    if not isinstance(policy, PolicyConfig):
        raise UserError(f"policy._target_ must name a PolicyConfig subclass, got {type(policy).__name__}")
    env = env.for_policy(policy)  # the env processors lerobot-eval gives this policy
    clock = run_clock(cfg, policy, env)
    tasks = unique_tasks(env.tasks())
    require_tasks(tasks)
    run_env = env.observing(policy.reads(env))
    env_pre, env_post = run_env.build_processors()
    device = str(cfg.device) if device is None else device
    return RunParts(gl, env, policy, tasks, run_env, env_pre, env_post, device, clock)


def run_clock(cfg: DictConfig, policy: PolicyConfig, env: EnvConfig) -> ClockConfig:
    """`eval.clock` (checked by `validate`), refused in one line for a policy or env that cannot run on it."""
    node = cfg.get("eval", {}).get("clock") if isinstance(cfg.get("eval"), DictConfig) else None
    clock = ClockConfig(**OmegaConf.to_container(node)) if node is not None else ClockConfig()  # type: ignore[arg-type]
    if (reason := policy.clock_refusal(clock)) is not None:
        raise UserError(reason)
    if clock.real_time and clock.hold == "noop" and not env.zero_action_holds():
        raise UserError(
            f"eval.clock.hold=noop: {env.display_name()} has no action that leaves the robot as it is (a zero "
            "action moves it or its gripper); use eval.clock.hold=repeat"
        )
    return clock
