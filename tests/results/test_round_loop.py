"""The one round loop of every sequential mode (results/sequential.py `round_ends`, `TaskStops.judge_round`) and the
one paired-drop rule (`pairs_before`)."""

from __future__ import annotations

import re
from pathlib import Path

from lerobot_hydra.results.sequential import Decision, TaskStops, pairs_before, round_ends, successes_before

ROOT = Path(__file__).resolve().parents[2]
GO_ON = Decision(False, "continue", "")
STOP = Decision(True, "precise", "enough")


def test_the_rounds_end_once_every_task_stopped() -> None:
    stops = TaskStops({}, n_max=10)
    keys = [("a", 0), ("a", 1)]
    said: list[str] = []

    def decide(key: tuple[str, int], end: int) -> Decision:
        return STOP if end >= (4 if key[1] == 0 else 6) else GO_ON

    def judge(end: int) -> bool:
        return stops.judge_round(keys, end, lambda key: decide(key, end), said.append)

    assert list(round_ends(10, 2, judge)) == [2, 4, 6]
    assert stops.stopped_after() == {("a", 0): 4, ("a", 1): 6}
    assert said == [
        "('a', 0): stopped after 4 episodes, precise: enough",
        "('a', 1): stopped after 6 episodes, precise: enough",
    ]


def test_a_task_undecided_at_the_maximum_stops_there_as_undecided() -> None:
    stops = TaskStops({}, n_max=5)
    ends = list(round_ends(5, 2, lambda end: stops.judge_round([("b", 0)], end, lambda key: GO_ON, print)))
    assert ends == [2, 4, 5]
    assert stops.stops[("b", 0)][0] == 5 and stops.stops[("b", 0)][1].outcome == "undecided"


def test_error_episodes_leave_their_pairs_out_and_are_counted() -> None:
    base = {0: True, 1: None, 2: False, 3: True}
    cand = {0: False, 1: True, 2: None, 3: True, 4: True}
    assert pairs_before(base, cand, 5) == ([(True, False), (True, True)], 2)
    assert successes_before(cand, 3) == [False, True]


def test_the_round_loop_is_written_once() -> None:
    loops = [
        str(path.relative_to(ROOT))
        for folder in ("lerobot_hydra", "speed")
        for path in (ROOT / folder).rglob("*.py")
        if re.search(r"^\s*for \w+ in rounds\(", path.read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert loops == ["lerobot_hydra/results/sequential.py"]
