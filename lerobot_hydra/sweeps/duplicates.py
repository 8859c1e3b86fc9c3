"""Two records of one episode. An episode is a function of (seed, task, episode index), so two records of it that
agree (seed, initial state, success and steps exactly, rewards to 1e-5 relative: a batch with other batch-mates
rounds the policy's floats differently) are the same episode, recorded twice; with dynamic claims that happens to an
episode that slips between a lease check and its record. The merge keeps the first and says so. Records that
disagree stay for the checks (checks.py), which refuse them naming both files.
"""

from __future__ import annotations

import math

from lerobot_hydra.core.records import EpisodeKey, EpisodeRecord
from lerobot_hydra.store.shard_file import Shard
from lerobot_hydra.sweeps.checks import Combination


def same_episode(a: EpisodeRecord, b: EpisodeRecord) -> bool:
    exact = ("unit", "seed", "init_state_id", "success", "steps")
    if any(getattr(a, name) != getattr(b, name) for name in exact):
        return False
    return all(
        math.isclose(getattr(a, name), getattr(b, name), rel_tol=1e-5, abs_tol=1e-6)
        for name in ("sum_reward", "max_reward")
    )


def drop_identical_copies(combo: Combination) -> list[str]:
    """Drops, from each of `combo`'s shards, every later copy of an episode recorded before with the same outcome
    (in that shard or an earlier one); one line for each episode kept once."""
    first: dict[EpisodeKey, tuple[EpisodeRecord, Shard]] = {}
    notes = []
    for shard in combo.shards:
        kept = []
        for record in shard.records:
            earlier = first.get(record.unit)
            if earlier is not None and same_episode(earlier[0], record):
                where = shard.path if earlier[1] is shard else f"{earlier[1].path} and {shard.path}"
                task, task_id, index = record.unit
                notes.append(
                    f"{combo.title}: episode {index} of task {task}/{task_id} was recorded twice, identically, in "
                    f"{where}; merged once"
                )
                continue
            first.setdefault(record.unit, (record, shard))
            kept.append(record)
        shard.records = kept
    return notes
