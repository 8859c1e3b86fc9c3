"""Policy noise that is a function of its episode alone.

Each batch row owns a CPU torch generator (`RowNoise`), seeded from its episode's seed when the episode starts,
and every noise tensor of that row is drawn from it, row by row: the noise an episode sees depends neither on its
batch-mates nor on the batch size, shard, lane or a resume, and is the same on every device.

How the rows' generators reach a LeRobot family, for the duration of one inference call (`ROW_NOISE_HOOKS`):
- flow matching (SmolVLA, pi0, pi0.5, EO1): every chunk's initial noise comes from `model.sample_noise(shape,
  device)` (pi0's, pi0.5's and EO1's `select_action` take no `noise=`), replaced by per-row draws;
- diffusion: the initial sample goes in as `generate_actions(noise=...)`, and the DDPM/DDIM scheduler's variance
  noise comes from `step(generator=[one generator per row])`, which diffusers draws row by row.
ACT, and pi0-FAST decoding greedily (its default `temperature` 0), are deterministic (`deterministic`) and get
nothing. A family with neither runs row by row with torch's global generators swapped to each row's own state
(one_row.py), using `GlobalRngState`: so does pi0-FAST sampling at a temperature, whose decoding loop draws each
token with `torch.multinomial` from the global generator.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

# Keeps the policy's noise apart from the simulator's, which is seeded with the same episode seed.
SEED_OFFSET = 104729
# A row without an episode draws from a generator that no episode uses (its actions are never applied).
IDLE_SEED = 2**63 - 1

DETERMINISTIC_FAMILIES = frozenset({"act"})
# Families that draw no noise at a temperature of 0 (greedy decoding of their action tokens).
GREEDY_AT_ZERO_TEMPERATURE = frozenset({"pi0_fast"})


def deterministic(config: Any) -> bool:
    """Whether a policy of this config draws no noise at all."""
    if config.type in GREEDY_AT_ZERO_TEMPERATURE:
        return getattr(config, "temperature", None) == 0
    return config.type in DETERMINISTIC_FAMILIES


def row_seed(episode_seed: int | None) -> int:
    return IDLE_SEED if episode_seed is None else episode_seed + SEED_OFFSET


class RowNoise:
    """The noise generator of the episode running on one batch row."""

    def __init__(self) -> None:
        import torch

        self.generator = torch.Generator()

    def start(self, episode_seed: int | None) -> None:
        self.generator.manual_seed(row_seed(episode_seed))


def randn_rows(rows: Sequence[RowNoise], shape: Sequence[int], device: Any, dtype: Any) -> Any:
    """Standard normal noise of `shape` (rows first), row i drawn from `rows[i]` alone."""
    import torch

    if shape[0] != len(rows):
        raise ValueError(f"noise for a batch of {shape[0]} rows was asked of {len(rows)} row generators")
    draws = [torch.randn((1, *shape[1:]), generator=row.generator) for row in rows]
    return torch.cat(draws).to(device=device, dtype=dtype)


@contextlib.contextmanager
def patched(obj: Any, name: str, value: Callable[..., Any]) -> Iterator[None]:
    """`obj.name` is `value` inside the block (an instance attribute over the class's method)."""
    assert name not in vars(obj), f"{type(obj).__name__}.{name} is already patched"
    setattr(obj, name, value)
    try:
        yield
    finally:
        delattr(obj, name)


def flow_matching_noise(policy: Any, rows: Sequence[RowNoise]) -> contextlib.AbstractContextManager[None]:
    import torch

    def sample_noise(shape: Sequence[int], device: Any) -> Any:
        return randn_rows(rows, shape, device, torch.float32)

    return patched(policy.model, "sample_noise", sample_noise)


@contextlib.contextmanager
def diffusion_noise(policy: Any, rows: Sequence[RowNoise]) -> Iterator[None]:
    model = policy.diffusion
    generate, step = model.generate_actions, model.noise_scheduler.step

    def generate_actions(batch: dict[str, Any], noise: Any = None) -> Any:
        if noise is None:
            weights = next(model.parameters())
            shape = (len(rows), model.config.horizon, model.config.action_feature.shape[0])
            noise = randn_rows(rows, shape, weights.device, weights.dtype)
        return generate(batch, noise=noise)

    def step_with_row_generators(*args: Any, generator: Any = None, **kwargs: Any) -> Any:
        generators = [row.generator for row in rows] if generator is None else generator
        return step(*args, generator=generators, **kwargs)

    with patched(model, "generate_actions", generate_actions):
        with patched(model.noise_scheduler, "step", step_with_row_generators):
            yield


NoiseHooks = Callable[[Any, Sequence[RowNoise]], contextlib.AbstractContextManager[None]]
# family -> (its hooks, the attribute paths they replace: a LeRobot without them gets no hooks)
ROW_NOISE_HOOKS: dict[str, tuple[NoiseHooks, tuple[str, ...]]] = {
    "smolvla": (flow_matching_noise, ("model.sample_noise",)),
    "pi0": (flow_matching_noise, ("model.sample_noise",)),
    "pi05": (flow_matching_noise, ("model.sample_noise",)),
    "eo1": (flow_matching_noise, ("model.sample_noise",)),
    "diffusion": (diffusion_noise, ("diffusion.generate_actions", "diffusion.noise_scheduler.step")),
}


def noise_hooks(policy: Any) -> NoiseHooks | None:
    """The hooks that give `policy`'s family per-row noise, if this LeRobot has what they replace."""
    hooks, paths = ROW_NOISE_HOOKS.get(policy.config.type, (None, ()))
    if hooks is None:
        return None
    for path in paths:
        obj = policy
        for name in path.split("."):
            obj = getattr(obj, name, None)
        if not callable(obj):
            return None
    return hooks


class GlobalRngState:
    """A saved state of torch's global generators (CPU and the inference device's)."""

    def __init__(self, device: str) -> None:
        import torch

        self.device = torch.device(device)
        self.cpu: Any = None
        self.accelerator: Any = None

    def _accelerator(self) -> Any:
        import torch

        return {"cuda": torch.cuda, "mps": getattr(torch, "mps", None)}.get(self.device.type)

    def capture(self) -> GlobalRngState:
        import torch

        self.cpu = torch.get_rng_state()
        module = self._accelerator()
        if module is torch.cuda:
            self.accelerator = torch.cuda.get_rng_state(self.device)
        elif module is not None:
            self.accelerator = module.get_rng_state()
        return self

    def restore(self) -> None:
        import torch

        torch.set_rng_state(self.cpu)
        module = self._accelerator()
        if module is torch.cuda:
            torch.cuda.set_rng_state(self.accelerator, self.device)
        elif module is not None:
            module.set_rng_state(self.accelerator)

    def to_bytes(self) -> bytes:
        """The captured state as bytes, the CPU generator's then the device's: what a served row carries."""
        parts = [self.cpu] if self.accelerator is None else [self.cpu, self.accelerator]
        return b"".join(part.numpy().tobytes() for part in parts)

    def load(self, data: bytes) -> GlobalRngState:
        """The state `to_bytes` gave (of a state on the same kind of device)."""
        import torch

        state = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        size = torch.get_rng_state().numel()
        self.cpu = state[:size].clone()
        self.accelerator = state[size:].clone() if self._accelerator() is not None else None
        return self

    def seed(self, seed: int) -> None:
        """Seeds torch's global generators and keeps their state."""
        import torch

        torch.manual_seed(seed)
        self.capture()

    def same_as(self, other: GlobalRngState) -> bool:
        import torch

        return torch.equal(self.cpu, other.cpu) and (
            self.accelerator is None or torch.equal(self.accelerator, other.accelerator)
        )

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Torch's global generators are this state inside the block, which then advances this state."""
        self.restore()
        try:
            yield
        finally:
            self.capture()
