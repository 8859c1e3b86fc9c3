"""How a sweep's jobs are named: shard overrides, combination labels, and the dir of each job (the shard dir and
file names themselves: core/layout.py).

In a multirun, jobs that differ only in their shard form one combination; its label is the job's other
overrides. A shard job's directory is `<label dir>/shard_<k>_of_<N>` under the sweep dir, a function of its
overrides alone, so re-running a shard with the same overrides and `hydra.sweep.dir` resumes it in place; it
holds `shard_<k>_of_<N>.json` (store/shard_file.py) and `episodes.jsonl`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

from lerobot_hydra.core.layout import shard_dir_name

SHARD_KEYS = ("eval.shard_id", "eval.num_shards")
# Where a sweep's policy is served (+policy_server=<preset>, policy_server.*), not what it evaluates: like the
# launcher, left out of labels and so of dir names (a sweep rerun with other server settings resumes in place).
SERVER_KEY = "policy_server"
# Longer labels are cut and suffixed with a hash to keep directory names well under filesystem limits.
MAX_LABEL_DIR_CHARS = 120


def is_shard_override(override: str) -> bool:
    return override.lstrip("+~").split("=", 1)[0] in SHARD_KEYS


def is_server_override(override: str) -> bool:
    key = override.lstrip("+~").split("=", 1)[0]
    return key == SERVER_KEY or key.startswith(f"{SERVER_KEY}.")


def combination_label(overrides: Iterable[str]) -> str:
    """A job's overrides other than the shard and server ones, sorted: names its combination in a sweep."""
    return ",".join(sorted(o for o in overrides if not is_shard_override(o) and not is_server_override(o)))


def split_label(label: str) -> list[str]:
    """The overrides of a label: split at the commas that are not inside brackets, braces or quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(label):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(label[start:i])
            start = i + 1
    parts.append(label[start:])
    return [p for p in parts if p]


def distinguishing_labels(labels: Sequence[str]) -> list[str]:
    """Each label without the overrides every label shares: what tells the combinations of a sweep apart."""
    split = [split_label(label) for label in labels]
    common = set.intersection(*(set(s) for s in split)) if split else set()
    return [",".join(o for o in s if o not in common) for s in split]


def label_dir_name(label: str) -> str:
    """A directory name for a combination label: '/' and '%' escaped, long labels cut and hashed."""
    name = label.replace("%", "%25").replace("/", "%2F")
    if len(name) > MAX_LABEL_DIR_CHARS:
        digest = hashlib.sha256(label.encode()).hexdigest()[:10]
        name = f"{name[: MAX_LABEL_DIR_CHARS - 11]}-{digest}"
    return name


def job_subdir(job_num: int, shard_id: int, num_shards: int | None, overrides: Sequence[str]) -> str:
    """`hydra.sweep.subdir`: `[<label dir>/]shard_<k>_of_<N>` for a shard job, Hydra's job number otherwise."""
    if not num_shards or num_shards <= 1:
        return str(job_num)
    shard_dir = shard_dir_name(shard_id, num_shards)
    label = combination_label(overrides)
    return f"{label_dir_name(label)}/{shard_dir}" if label else shard_dir


def override_values(override: Any) -> list[str]:
    """The values of an override: every value of a sweep, or its one value."""
    if override.is_sweep_override():
        return [str(v) for v in override.sweep_iterator()]
    return [str(override.value())]
