"""Sequential stopping of one run (eval.sequential.stop): the episodes of each task run in rounds of
eval.sequential.round; after each round every undecided task is judged on its episodes so far, in episode order
(results/sequential.py), and a decided task runs no more. eval.n_episodes is the maximum.

The decision after round r reads episodes 0..r*round-1 of the task only, so the stopping point and the records are
the same whatever the batch size, lanes or timing, and a resumed run re-reads its recorded rounds and goes on with
the same sequence.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from lerobot_hydra.config.schema import EvalConfig, SequentialConfig
from lerobot_hydra.results.sequential import Decision, one_policy_of, rounds
from lerobot_hydra.results.table import task_label
from lerobot_hydra.rollout.runner import TaskWork
from lerobot_hydra.rollout.stopping import RunInterrupted
from lerobot_hydra.rundir.store import RunStore

log = logging.getLogger("lerobot_hydra")

TaskKey = tuple[str, int]


def run_rounds(
    eval_cfg: EvalConfig,
    store: RunStore,
    plan_work: Callable[[], list[TaskWork]],
    run: Callable[[list[TaskWork]], RunInterrupted | None],
) -> tuple[RunInterrupted | None, dict[str, Any]]:
    """Runs the rounds; returns the interruption that stopped them, if any, and what results.sequential holds."""
    seq = eval_cfg.sequential
    stopped: dict[TaskKey, tuple[int, Decision]] = {}
    names: dict[TaskKey, str] = {}
    for end in rounds(eval_cfg.n_episodes, seq.round):
        work = [
            TaskWork(w.task, [k for k in w.episodes if k < end], w.done, w.successes)
            for w in plan_work()
            if w.task.key not in stopped
        ]
        for w in work:
            names[w.task.key] = task_label(w.task.key[0], w.task.key[1], w.task.name)
        if any(w.episodes for w in work):
            interrupted = run(work)
            if interrupted is not None:
                store.write()  # the tasks stopped so far go into the shard file too
                return interrupted, _summary(seq, eval_cfg.n_episodes, stopped, names, end)
        for w in work:
            outcomes = _outcomes(store, w.task.key, end)
            decision = one_policy_of(seq, outcomes)
            if decision.stop or end == eval_cfg.n_episodes:
                if not decision.stop:
                    decision = Decision(True, "undecided", f"the maximum of {end} episodes: {decision.why}")
                stopped[w.task.key] = (end, decision)
                store.stop_task(w.task.key, end)
                name = names[w.task.key]
                log.info("%s: stopped after %d episodes, %s: %s", name, end, decision.outcome, decision.why)
        if len(stopped) == len(names):
            break
    store.write()  # the shard file, written after each round's episodes, gets the last round's stops
    return None, _summary(seq, eval_cfg.n_episodes, stopped, names, None)


def _outcomes(store: RunStore, key: TaskKey, end: int) -> list[bool]:
    by_index = {r.episode_index: r.success for r in store.records if (r.task_group, r.task_id) == key}
    return [by_index[k] for k in range(end) if k in by_index]


def _summary(
    seq: SequentialConfig,
    n_max: int,
    stopped: dict[TaskKey, tuple[int, Decision]],
    names: dict[TaskKey, str],
    interrupted_in: int | None,
) -> dict[str, Any]:
    tasks = {names[key]: {"n_episodes": n, "outcome": d.outcome, "why": d.why} for key, (n, d) in stopped.items()}
    out: dict[str, Any] = {"settings": asdict(seq), "n_episodes_max": n_max, "per_task": tasks}
    if interrupted_in is not None:
        out["interrupted_in_round_ending"] = interrupted_in
    return out
