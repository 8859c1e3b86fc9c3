"""What made a result: this package (version, git revision), Python, the packages that simulate the benchmark and
compute the actions, the checkpoint, the device and MUJOCO_GL.

Recorded in every eval_info.json, shard file and W&B run; with `env.python`, the simulator side's versions too
(`simulator`: its command, Python and packages, which also stand in `packages`). `outcome_relevant` names the
packages whose version can change an episode (torch, mujoco, the env's and the policy's distributions): a resume and
the merge compare those, and the merge refuses shards that differ in them unless told to accept the difference.
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.errors import UserError

if TYPE_CHECKING:
    from lerobot_hydra.envs.base import EnvConfig
    from lerobot_hydra.policies.base import PolicyConfig

log = logging.getLogger("lerobot_hydra")

# Recorded for every run; the first two can change outcomes whatever the benchmark.
CORE_PACKAGES = ("torch", "mujoco", "gymnasium", "numpy")
OUTCOME_CORE = ("torch", "mujoco")
CHECKOUT = Path(__file__).resolve().parents[2]
GIT_TIMEOUT_S = 5.0

KeyPath = tuple[str, ...]


def collect(env: EnvConfig, policy: PolicyConfig, checkpoint: dict[str, Any] | None, device: str) -> dict[str, Any]:
    """The provenance of a run of `policy` (top-level `device` setting) on `env`. With `env.python`, the simulator
    side's versions (its probe's: mujoco, gymnasium, numpy, the env's distributions) stand in `packages` for this
    side's, and `simulator` records that side whole."""
    from lerobot_hydra.vector.interpreter import simulator_side

    used = list(dict.fromkeys([*env.distributions(), *policy.distributions()]))
    resolved = policy.resolved_device(device)
    packages = {name: package_version(name) for name in dict.fromkeys([*CORE_PACKAGES, *used])}
    side = simulator_side(env)
    if side is None:
        env.check_simulator(packages, "this interpreter has")
    else:
        packages.update(side.packages)
    out = {
        "lerobot_hydra": {"version": package_version("lerobot_hydra"), "git_revision": git_revision(CHECKOUT)},
        "python": platform.python_version(),
        "packages": packages,
        "outcome_relevant": list(dict.fromkeys([*OUTCOME_CORE, *used])),
        "checkpoint": checkpoint,
        "device": resolved,
        "gpu": gpu_name(resolved),
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
    }
    if side is not None:
        out["simulator"] = {"command": " ".join(side.command), "lerobot_hydra": side.lerobot_hydra, **side.versions()}
    return out


def simulator_text(identity: dict[str, Any]) -> str | None:
    """The simulator side an env.python run's fingerprint records (run/identity.py), as a merge and a comparison
    name it: 'mujoco 3.5.0, metaworld 3.1.1, ... on Python 3.11.7'; None for a run in this interpreter."""
    side = identity.get("simulator")
    if not isinstance(side, dict):
        return None
    packages = ", ".join(f"{name} {value}" for name, value in (side.get("packages") or {}).items())
    return f"{packages} on Python {side.get('python')}"


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def git_revision(checkout: Path) -> str | None:
    """The commit of `checkout` (suffixed `+dirty` with uncommitted changes to tracked files); None when this
    package does not run from a git checkout or git is absent."""
    if not (checkout / ".git").exists():
        return None
    try:
        head = _git(checkout, "rev-parse", "HEAD")
        dirty = _git(checkout, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def _git(checkout: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=True
    )
    return done.stdout.strip()


def gpu_name(device: str) -> str | None:
    if not device.startswith("cuda"):
        return None
    try:
        import torch

        return str(torch.cuda.get_device_name(device))
    except Exception:  # noqa: BLE001 - a name we cannot read is recorded as unknown
        return None


def outcome_differences(provenances: Sequence[tuple[str, dict[str, Any] | None]]) -> list[str]:
    """For each outcome-relevant package whose version differs between the (who, provenance) pairs, e.g.
    'mujoco 3.3.0 in shard 0 of 2, 3.3.1 in shard 1 of 2'. A missing provenance counts as unrecorded versions."""
    names = dict.fromkeys(n for _, p in provenances for n in (p or {}).get("outcome_relevant", []))
    out = []
    for name in names:
        holders: dict[str | None, list[str]] = {}
        for who, p in provenances:
            holders.setdefault(((p or {}).get("packages") or {}).get(name), []).append(who)
        if len(holders) > 1:
            parts = [f"{v if v is not None else 'none'} in {', '.join(whos)}" for v, whos in holders.items()]
            out.append(f"{name} {', '.join(parts)}")
    return out


def check_resumed_versions(out_dir: Path, recorded: dict[str, Any] | None, now: dict[str, Any] | None) -> None:
    """Refuse to resume, with other outcome-relevant versions, a run dir whose episodes were `recorded` with."""
    changed = outcome_differences([("its recorded episodes", recorded), ("this run", now)])
    if isinstance(recorded, dict) and now and changed:
        raise UserError(
            f"{out_dir} holds episodes made with other software ({'; '.join(changed)}); resume with the same "
            "versions or choose a new output directory"
        )


def mismatch_problems(
    title: str, provenances: Sequence[tuple[str, dict[str, Any] | None]], accept_command: str, accept: bool
) -> list[str]:
    """The merge's version check: one line when the shards (name, provenance) ran outcome-relevant software of
    different versions; with `accept`, a warning instead (the merged provenance lists the differences)."""
    changed = outcome_differences(provenances)
    if not changed:
        return []
    if accept:
        log.warning("%s: merging shards run with different software, as asked: %s", title, "; ".join(changed))
        return []
    return [
        f"{title}: its shards ran different software that can change outcomes ({'; '.join(changed)}); re-run the "
        f"odd shards with the same versions, or accept the difference: {accept_command} (in a sweep: "
        "hydra.callbacks.merge_shards.accept_version_mismatch=true)"
    ]


def merged(provenances: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """The provenance every shard shares; each value that differs is left out of it and listed under
    `differences` (dotted key -> the value of each shard, in shard order)."""
    flat = [_flatten(p or {}) for p in provenances]
    paths = list(dict.fromkeys(path for f in flat for path in f))
    differing = [path for path in paths if len({repr(f.get(path)) for f in flat}) > 1]
    out = _unflatten({path: value for path, value in flat[0].items() if path not in differing}) if flat else {}
    if differing:
        out["differences"] = {".".join(path): [f.get(path) for f in flat] for path in differing}
    return out


def _flatten(tree: dict[str, Any], prefix: KeyPath = ()) -> dict[KeyPath, Any]:
    out: dict[KeyPath, Any] = {}
    for key, value in tree.items():
        path = (*prefix, str(key))
        if isinstance(value, dict) and value:
            out.update(_flatten(value, path))
        else:
            out[path] = value
    return out


def _unflatten(flat: dict[KeyPath, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out
