"""`sequential_state.json`: the round a sequential sweep (hydra/sweeper=sequential, launch/sequential_sweep.py) is in,
written into its sweep dir before each round's jobs are launched and read by each job (app/main.py) and the merge.

It holds the round's end (each task's episodes 0..end-1 run), and per combination (its label) the tasks already
stopped, after how many episodes, the stopping summary so far (what results.sequential holds) and whether this is
the combination's last launch (every task stopped: its jobs then end their runs, and a served policy's server
counts them complete). A job runs only what the file allows, so the records are the same whatever the launcher,
shards or timing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lerobot_hydra.core.durable import write_json_atomic
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.core.records import TaskKey
from lerobot_hydra.run.work import RoundCap

STATE_FILE = "sequential_state.json"


def write_state(
    sweep_dir: Path,
    end: int,
    n_max: int,
    baseline: str,
    stops: dict[str, dict[TaskKey, int]],
    summaries: dict[str, dict[str, Any]],
    final: set[str],
) -> None:
    combos = {
        label: {
            "stops": [{"task_group": g, "task_id": t, "n_episodes": n} for (g, t), n in stops.get(label, {}).items()],
            "sequential": summaries.get(label),
            "final": label in final,
        }
        for label in sorted(set(stops) | set(summaries))
    }
    state = {"round_end": end, "n_episodes_max": n_max, "baseline": baseline, "combinations": combos}
    write_json_atomic(sweep_dir / STATE_FILE, state)


def read_state(sweep_dir: Path) -> dict[str, Any] | None:
    path = sweep_dir / STATE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{path} cannot be read ({err}); re-run the sweep with hydra/sweeper=sequential") from err


def job_round(sweep_dir: Path, label: str) -> RoundCap:
    """The round a job of combination `label` runs."""
    state = read_state(sweep_dir)
    if state is None:
        raise UserError(
            f"{sweep_dir / STATE_FILE} is missing: a job of a sequential sweep runs from that sweep "
            "(python eval.py -m ... hydra/sweeper=sequential), not on its own"
        )
    combo = state["combinations"].get(label)
    if combo is None:
        raise UserError(f"'{label}' is not a combination of the sequential sweep in {sweep_dir}; re-run the sweep")
    stops = {(str(s["task_group"]), int(s["task_id"])): int(s["n_episodes"]) for s in combo["stops"]}
    return RoundCap(int(state["round_end"]), stops, combo.get("sequential"), bool(combo.get("final", False)))


def final_summary(sweep_dir: Path, label: str) -> dict[str, Any] | None:
    """The stopping summary of combination `label` once a sequential sweep has written its state (None: no sequential
    sweep ran there, or not this combination)."""
    state = read_state(sweep_dir)
    if state is None:
        return None
    combo = state["combinations"].get(label)
    return combo.get("sequential") if combo else None


def sweep_baseline(sweep_dir: Path) -> str | None:
    state = read_state(sweep_dir)
    return str(state["baseline"]) if state and state["baseline"] else None  # "": one-policy stopping
