"""LeRobot checkpoints (SmolVLA, pi0, pi0.5, ACT, diffusion, ...) from the Hub or a local directory.

LeRobot's own machinery does the loading: the checkpoint's config.json picks the policy class, the weights come
from its model.safetensors, and its saved pre/post processor pipelines (normalization, tokenization, ...) run
around every inference, on the chosen device.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from lerobot_hydra.core.errors import UserError, did_you_mean, missing_extra
from lerobot_hydra.core.gl import resolve_device
from lerobot_hydra.envs.base import EnvConfig
from lerobot_hydra.policies.base import PolicyConfig
from lerobot_hydra.policies.lerobot.checkpoint import (
    POSTPROCESSOR_FILE,
    PREPROCESSOR_FILE,
    Checkpoint,
    check_processor_steps,
    checkpoint_identity,
    fetch_auxiliary,
    read_json,
    resolve_checkpoint,
)
from lerobot_hydra.policies.lerobot.clocked import clock_refusal
from lerobot_hydra.policies.lerobot.features import check_action_shape, env_observation_features, match_features
from lerobot_hydra.policies.lerobot.noise import deterministic, noise_hooks
from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy
from lerobot_hydra.policies.lerobot.rows import PER_ROW_FAMILIES, PerRowLeRobotPolicy
from lerobot_hydra.policies.lerobot.rtc import RTC_FAMILIES, guidance_config
from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy
from lerobot_hydra.policies.lerobot.versions import first_line, parse_policy_config
from lerobot_hydra.schemas.clock import ClockConfig
from lerobot_hydra.schemas.validation import check_device

log = logging.getLogger("lerobot_hydra")


# Set by the loader itself; an override of these would be ignored or break the checkpoint.
RESERVED_OVERRIDES = {
    "device",
    "use_amp",
    "pretrained_path",
    "pretrained_revision",
    "input_features",
    "output_features",
    "type",
}
# The policy keys that set some of them.
OVERRIDE_KEYS = {"device": "device", "use_amp": "use_amp", "pretrained_revision": "revision"}
# Construction-time downloads that the checkpoint's own weights replace anyway: ImageNet backbones (ACT,
# diffusion) and the VLM's original weights (SmolVLA). Skipping them saves time and works offline.
SUPERSEDED_BY_CHECKPOINT = {"pretrained_backbone_weights": None, "load_vlm_weights": False}
DEVICE_STEP_KEYS = ("device_processor", "DeviceProcessorStep")


@dataclass
class LeRobotPolicyConfig(PolicyConfig):
    # A Hub repo id (lerobot/diffusion_pusht) or a local checkpoint directory.
    path: str = ""
    # Hub revision (branch, tag or commit) to pin; None: the repo's default branch.
    revision: str | None = None
    # auto: cuda when a GPU is visible, else cpu. The YAMLs default it to the top-level `device`.
    device: str = "auto"
    # Run inference under torch.autocast (bfloat16/float16 kernels where the device supports them).
    use_amp: bool = False
    # Fields of the checkpoint's config.json to change for this evaluation, e.g. {n_action_steps: 10}.
    overrides: dict[str, Any] | None = None
    # Env observation key -> the key the policy reads, e.g. {observation.image: observation.images.top}.
    rename_map: dict[str, str] | None = None
    # Policy cameras the env does not have, shown as blank images (pi0, pi0.5 and SmolVLA pad missing cameras).
    blank_cameras: list[str] = field(default_factory=list)
    # LeRobot's RTC guidance settings (execution_horizon, max_guidance_weight, prefix_attention_schedule) for
    # real-time chunking on the clock, eval.clock.join=rtc (SmolVLA, pi0, pi0.5). See rtc.py.
    rtc: dict[str, Any] | None = None

    def reads(self, env: EnvConfig) -> set[str] | None:
        """The env keys that reach one of config.json's `input_features` through the rename map (as `build`
        keeps them), read without building the model. None when the checkpoint cannot be looked at yet:
        `build` then reports why."""
        if not self.path or importlib.util.find_spec("lerobot") is None:
            return None
        inputs = read_json(self.checkpoint.directory / "config.json").get("input_features")
        if not isinstance(inputs, dict):
            return None
        rename = self.rename_map or {}
        source_of = {rename.get(key, key): key for key in env_observation_features(env)}
        return {source_of[key] for key in inputs if key in source_of}

    def family(self) -> str | None:
        if not self.path or importlib.util.find_spec("lerobot") is None:
            return None  # `build` reports why
        kind = read_json(self.checkpoint.directory / "config.json").get("type")
        return kind if isinstance(kind, str) else None

    def resets_rows(self) -> bool:
        return self.family() in PER_ROW_FAMILIES

    def clock_refusal(self, clock: ClockConfig) -> str | None:
        config_json = read_json(self.checkpoint.directory / "config.json")
        return clock_refusal(config_json, self.overrides, self.rtc, clock)

    def lerobot_config(self) -> Any:
        if not self.path or importlib.util.find_spec("lerobot") is None:
            return None  # `build` reports why
        return parse_policy_config(self.checkpoint)

    @cached_property
    def checkpoint(self) -> Checkpoint:
        """Resolved once, so that the policy is built from the very files `identity()` describes."""
        try:
            import lerobot  # noqa: F401
        except ImportError as err:
            raise missing_extra("lerobot", "lerobot") from err
        if not self.path:
            raise UserError("policy.path is empty; give a Hub repo id (lerobot/diffusion_pusht) or a local directory")
        return resolve_checkpoint(self.path, self.revision)

    def identity(self) -> dict[str, Any]:
        return checkpoint_identity(self.checkpoint)

    def distributions(self) -> list[str]:
        return ["lerobot"]

    def resolved_device(self, device: str) -> str:
        return resolve_device(self.device)

    def build(self, env: EnvConfig, device: str) -> LeRobotPolicy | RowwisePolicy:
        checkpoint = self.checkpoint
        device = check_device(resolve_device(self.device), "policy.device")
        config, guidance = self.policy_config(checkpoint, device)
        name = checkpoint.name
        if self.blank_cameras and config.type == "smolvla" and config.empty_cameras < len(self.blank_cameras):
            # SmolVLA pads at most `empty_cameras` missing cameras and silently drops the others.
            trained = int(read_json(checkpoint.directory / "config.json").get("empty_cameras", 0))
            raise UserError(
                f"SmolVLA shows at most empty_cameras={config.empty_cameras} missing cameras as blank, fewer than "
                f"the {len(self.blank_cameras)} in policy.blank_cameras; add "
                f"policy.overrides={{empty_cameras: {trained + len(self.blank_cameras)}}}"
            )
        observation_keys = match_observations(name, config, env, self.rename_map or {}, self.blank_cameras)
        fetch_auxiliary(checkpoint, config)
        preprocessor, postprocessor = load_processors(checkpoint, config, device)
        policy = load_weights(checkpoint, config)
        log.info("loaded the %s policy %s on %s%s", config.type, name, device, " with AMP" if self.use_amp else "")
        return runtime_for(policy, preprocessor, postprocessor, device, self.use_amp, observation_keys, guidance)

    def policy_config(self, checkpoint: Checkpoint, device: str) -> tuple[Any, Any]:
        """The checkpoint's config.json as LeRobot's config class, with the evaluation's changes applied, and
        for a family with real-time chunking, the RTCConfig that `eval.clock.join=rtc` switches on (`policy.rtc`'s
        guidance settings applied); else None."""
        config = self._overridden(parse_policy_config(checkpoint), checkpoint, device)
        if config.type not in RTC_FAMILIES:
            if self.rtc is not None:
                raise UserError(
                    f"policy.rtc: the {config.type} policy has no real-time chunking (RTC exists for "
                    f"{', '.join(sorted(RTC_FAMILIES))}); remove policy.rtc"
                )
            return config, None
        return config, guidance_config(config, self.rtc)

    def _overridden(self, config: Any, checkpoint: Checkpoint, device: str) -> Any:
        fields = {f.name for f in dataclasses.fields(config)}
        overrides = self.overrides or {}
        for key in overrides:
            if key in RESERVED_OVERRIDES:
                fix = "remove it (the checkpoint defines it)"
                fix = f"use policy.{OVERRIDE_KEYS[key]}" if key in OVERRIDE_KEYS else fix
                raise UserError(f"policy.overrides.{key} is set by the loader; {fix}")
            if key == "rtc_config" and overrides[key] is not None:
                raise UserError(
                    "policy.overrides.rtc_config takes only null (RTC off); real-time chunking runs on the clock, "
                    "eval.clock.join=rtc, its guidance set by policy.rtc"
                )
            if key not in fields:
                valid = sorted(fields - RESERVED_OVERRIDES)
                raise UserError(
                    f"policy.overrides.{key} is not a field of the {config.type} config"
                    f"{did_you_mean(key, valid)}; valid: {', '.join(valid)}"
                )
        # YAML has no tuples: a list given for a tuple field (image sizes, ...) becomes one.
        overrides = {
            key: tuple(value) if isinstance(value, list) and isinstance(getattr(config, key), tuple) else value
            for key, value in overrides.items()
        }
        superseded = {k: v for k, v in SUPERSEDED_BY_CHECKPOINT.items() if k in fields}
        if "pretrained_revision" in fields:  # LeRobot >= 0.6 records the Hub pin in the config
            superseded["pretrained_revision"] = self.revision
        try:
            return dataclasses.replace(
                config,
                **{**superseded, **overrides},
                device=device,
                use_amp=self.use_amp,
                pretrained_path=checkpoint.directory,
            )
        except (ValueError, TypeError, NotImplementedError) as err:
            raise UserError(f"policy.overrides rejected by the {config.type} config: {first_line(err)}") from err


def load_processors(checkpoint: Checkpoint, config: Any, device: str) -> tuple[Any, Any]:
    """The checkpoint's saved pipelines, with the preprocessor's device step moved to `device`."""
    from lerobot.policies.factory import make_pre_post_processors

    try:
        # Registers the policy family's own steps (e.g. SmolVLA's newline step) before the pipeline names them.
        importlib.import_module(f"lerobot.policies.{config.type}.processor_{config.type}")
    except ImportError:
        pass
    for filename in (PREPROCESSOR_FILE, POSTPROCESSOR_FILE):
        check_processor_steps(checkpoint, filename)
    steps = read_json(checkpoint.directory / PREPROCESSOR_FILE).get("steps", [])
    step_keys = {s.get("registry_name") or str(s.get("class", "")).rpartition(".")[2] for s in steps}
    overrides = {key: {"device": device} for key in DEVICE_STEP_KEYS if key in step_keys}
    try:
        return make_pre_post_processors(
            config, pretrained_path=str(checkpoint.directory), preprocessor_overrides=overrides
        )
    except OSError as err:
        raise UserError(
            f"cannot load the processors of '{checkpoint.name}': {first_line(err)}; if it names a tokenizer, "
            "make it reachable or cached (huggingface-cli download <tokenizer repo>)"
        ) from err
    except (ValueError, KeyError, ImportError, TypeError) as err:
        raise UserError(f"cannot load the processors of '{checkpoint.name}': {first_line(err)}") from err


def load_weights(checkpoint: Checkpoint, config: Any) -> Any:
    from lerobot.policies.factory import get_policy_class

    policy_class = get_policy_class(config.type)
    try:
        policy = policy_class.from_pretrained(str(checkpoint.directory), config=config)
    except OSError as err:
        raise UserError(f"cannot build the {config.type} policy of '{checkpoint.name}': {first_line(err)}") from err
    policy.eval()
    return policy


def match_observations(
    name: str, config: Any, env: EnvConfig, rename_map: dict[str, str], blank_cameras: list[str]
) -> dict[str, str]:
    """Env observation key -> policy key for every input of the policy `config` describes, checked against `env`
    (its action size too) before anything is loaded."""
    action_space = env.policy_action_space(env.tasks()[0])
    if action_space is not None:
        check_action_shape(name, config.output_features or {}, action_space)
    resizes = any(getattr(config, a, None) is not None for a in ("resize_imgs_with_padding", "image_resolution"))
    resizes = resizes or getattr(config, "resize_shape", None) is not None
    pads_cameras = hasattr(config, "empty_cameras")
    if blank_cameras and not pads_cameras:
        raise UserError(f"policy.blank_cameras: a {config.type} policy cannot run with a camera left out")
    features = env_observation_features(env)
    return match_features(name, config.input_features or {}, features, rename_map, blank_cameras, resizes, pads_cameras)


def runtime_for(
    policy: Any,
    preprocessor: Any,
    postprocessor: Any,
    device: str,
    use_amp: bool,
    observation_keys: dict[str, str],
    guidance: Any = None,
) -> LeRobotPolicy | RowwisePolicy:
    """A loaded (or live, in-memory) LeRobot policy and its processors as the runner drives them: per-row state
    and noise where its family has them, else its rows one at a time."""
    config = policy.config
    hooks = noise_hooks(policy)
    arguments = (policy, preprocessor, postprocessor, device, use_amp, observation_keys, hooks)
    if config.type in PER_ROW_FAMILIES:
        runtime: LeRobotPolicy = PerRowLeRobotPolicy(*arguments, guidance=guidance)
    else:
        runtime = LeRobotPolicy(*arguments)
    if hooks is not None or deterministic(config):
        return runtime
    log.info("the %s policy's noise has no per-row hook here: its batch rows run one at a time", config.type)
    return RowwisePolicy(runtime)
