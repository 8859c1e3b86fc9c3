"""The baseline of a sweep's comparisons, named by its overrides (`policy=random`) or values (`random`).

A baseline is a configuration, and neither a seed nor a shard is one: the combinations that differ only in
`seed` are one arm (its seeds pooled) and a combination's shards merge into one result. So in a
`policy x seed` sweep the baseline is a policy, compared over every seed. The spec must pick exactly one
combination of the swept values other than seeds and shards, checked before the sweep runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.labels import SHARD_KEYS, split_label

SEED_KEY = "seed"
NOT_CONFIGURATIONS = (SEED_KEY, *SHARD_KEYS)


def holds(overrides: list[str], wanted: str) -> bool:
    """Whether `overrides` hold `wanted`: an override (`key=value`) or a value of any key."""
    plain = [o.lstrip("+~") for o in overrides]
    if "=" in wanted:
        return wanted.lstrip("+~") in plain
    return any(o.split("=", 1)[1] == wanted for o in plain if "=" in o)


def _overrides(values: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"{key}={value}" for key, vs in values.items() for value in vs]


def check_baseline(spec: str | None, sweep_values: Mapping[str, Sequence[str]]) -> None:
    """Before a sweep runs: `spec` must pick exactly one combination of the swept values (`sweep_values`:
    override key -> its values), seeds and shards left out."""
    if not spec:
        return
    configs = {k: list(vs) for k, vs in sweep_values.items() if k.lstrip("+~") not in NOT_CONFIGURATIONS}
    others = {k: vs for k, vs in sweep_values.items() if k not in configs}
    swept = {k: vs for k, vs in configs.items() if len(vs) > 1}
    choices = _overrides(swept)

    def refuse(what: str) -> UserError:
        return UserError(
            f"hydra.callbacks.merge_shards.baseline='{spec}': {what}; name the baseline's overrides or values, "
            f"e.g. one of: {', '.join(choices[:8]) or '(nothing is swept)'}"
        )

    wanted = split_label(spec)
    given = _overrides(configs)
    for w in wanted:
        if holds(_overrides(others), w) and not holds(given, w):
            raise refuse(
                f"'{w}' names a seed or a shard, not a configuration (a configuration's seeds are pooled and its "
                "shards merged)"
            )
    unknown = [w for w in wanted if not holds(given, w)]
    if unknown:
        raise refuse(f"'{unknown[0]}' is none of the sweep's values")
    if not any(holds(choices, w) for w in wanted):
        raise refuse("it names no swept value")
    fixed = _overrides({k: vs for k, vs in configs.items() if len(vs) == 1})
    combos = [list(c) for c in itertools.product(*([f"{k}={v}" for v in vs] for k, vs in swept.items()))]
    matches = [c for c in combos if all(holds(c + fixed, w) for w in wanted)]
    if len(matches) > 1:
        shown = "; ".join(",".join(c) for c in matches[:3])
        raise refuse(f"it matches {len(matches)} combinations ({shown}), name one value of each swept key")
