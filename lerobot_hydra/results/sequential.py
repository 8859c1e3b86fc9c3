"""Sequential stopping: decisions taken after each round of episodes, with error rates that hold however many rounds
are looked at (anytime-valid), from scipy.

The one tool is Robbins's beta-binomial mixture confidence sequence for a success probability q: after n Bernoulli
outcomes with s successes, CS = {q : B(a + s, b + n - s) / B(a, b) < (1 / alpha) q^s (1 - q)^(n - s)}, with a = b =
1/2. By Ville's inequality the true q leaves it at any round with chance at most alpha, whenever one stops (Robbins
1970; Howard et al. 2021, "Time-uniform, nonparametric, nonasymptotic confidence sequences"). So:

- One policy, `precision`: stop a task once its confidence sequence is at most 2 x precision wide;
  `threshold`: stop once it lies wholly above or below the threshold (decided: above / below; wrong with chance
  at most alpha).
- Two policies on the same episodes (`paired`): Wald's sequential probability ratio test on the discordant pairs
  (one policy succeeds, the other fails). Under no difference each goes the candidate's way with chance 1/2; under
  a difference d at discordance psi with chance (psi + d) / (2 psi). The mean of the ratios for "better by d" and
  "worse by d" is a test martingale under no difference, so stopping as `better` / `worse` once it reaches 1/alpha
  is wrong with chance at most alpha (Ville), whatever the true discordance; it stops as `no difference` once both
  ratios fall to beta (a false "no difference" at about beta when psi is as assumed). d and psi are the planner's
  (lerobot-hydra-plan); a task that reaches the maximum undecided is `undecided`.

A decision is a function of the outcomes in episode order at round ends only, so the stopping point never depends on
batch size, shards, lanes or timing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lerobot_hydra.core.records import TaskKey

if TYPE_CHECKING:
    from lerobot_hydra.schemas.schema import SequentialConfig

PRIOR = 0.5  # the mixture's Beta(1/2, 1/2)
CONTINUE = "continue"


@dataclass(frozen=True)
class Decision:
    stop: bool
    outcome: str  # continue, precise, above, below, better, worse, no difference, undecided (at the maximum)
    why: str


def confidence_sequence(successes: int, n: int, alpha: float) -> tuple[float, float]:
    """The anytime-valid interval of a success probability after `n` outcomes, as fractions."""
    if n == 0:
        return (0.0, 1.0)
    from scipy.optimize import brentq
    from scipy.special import betaln

    log_mixture = betaln(PRIOR + successes, PRIOR + n - successes) - betaln(PRIOR, PRIOR)
    bound = math.log(1 / alpha)

    def outside(q: float) -> float:  # > 0 where q is excluded
        log_lik = (successes * math.log(q) if successes else 0.0) + (
            (n - successes) * math.log1p(-q) if n - successes else 0.0
        )
        return log_mixture - log_lik - bound

    eps = 1e-12
    mle = min(max(successes / n, eps), 1 - eps)
    low = 0.0 if outside(eps) <= 0 else brentq(outside, eps, mle) if outside(mle) < 0 else mle
    high = 1.0 if outside(1 - eps) <= 0 else brentq(outside, mle, 1 - eps) if outside(mle) < 0 else mle
    return (low, high)


def one_policy(outcomes: Sequence[bool], alpha: float, precision: float | None, threshold: float | None) -> Decision:
    """Whether one policy's task can stop after `outcomes` (in episode order); precision and threshold as fractions."""
    n, s = len(outcomes), sum(outcomes)
    low, high = confidence_sequence(s, n, alpha)
    interval = f"{s}/{n} successes, {100 * (1 - alpha):g}% confidence sequence [{100 * low:.1f}, {100 * high:.1f}]%"
    if threshold is not None and low > threshold:
        return Decision(True, "above", f"{interval} lies above the threshold {100 * threshold:g}%")
    if threshold is not None and high < threshold:
        return Decision(True, "below", f"{interval} lies below the threshold {100 * threshold:g}%")
    if precision is not None and (high - low) / 2 <= precision:
        return Decision(True, "precise", f"{interval}: known to +-{100 * precision:g} points")
    return Decision(False, CONTINUE, interval)


def one_policy_of(seq: SequentialConfig, outcomes: Sequence[bool]) -> Decision:
    """one_policy with eval.sequential's settings (points)."""
    precision = seq.precision / 100 if seq.precision is not None else None
    threshold = seq.threshold / 100 if seq.threshold is not None else None
    return one_policy(outcomes, seq.alpha, precision, threshold)


def paired(
    pairs: Sequence[tuple[bool, bool]], alpha: float, beta: float, detect: float, discordance: float
) -> Decision:
    """Whether two policies' paired episodes of a task, (baseline success, candidate success) in episode order, can
    stop: a sequential probability ratio test (Wald) on the discordant pairs of 'no difference' against 'a difference
    of `detect`' either way at the assumed `discordance` (fractions), at levels alpha (false difference, whatever the
    true discordance) and about beta (false 'no difference', at the assumed discordance)."""
    log_up, log_down = _log_ratios(pairs, detect, discordance)
    n = len(pairs)
    cand_only = sum(b and not a for a, b in pairs)
    base_only = sum(a and not b for a, b in pairs)
    counts = f"{n} pairs, {cand_only} won by the candidate only, {base_only} by the baseline only"
    # The mean of the two one-sided likelihood ratios is a test martingale under no difference (Ville: alpha).
    log_either = _logmeanexp(log_up, log_down)
    if log_either >= math.log(1 / alpha):
        outcome = "better" if log_up > log_down else "worse"
        return Decision(True, outcome, f"{counts}: the candidate is {outcome} (likelihood ratio >= 1/{alpha:g})")
    if max(log_up, log_down) <= math.log(beta):
        return Decision(
            True,
            "no difference",
            f"{counts}: no difference of {100 * detect:g} points either way (likelihood ratios <= {beta:g})",
        )
    return Decision(False, CONTINUE, f"{counts}: likelihood ratio {math.exp(log_either):.3g}, needs {1 / alpha:g}")


def _log_ratios(pairs: Sequence[tuple[bool, bool]], detect: float, discordance: float) -> tuple[float, float]:
    """The log likelihood ratios of 'the candidate is better by `detect`' and 'worse by `detect`' against 'no
    difference', over the discordant pairs: a difference d at discordance psi makes a discordant pair the
    candidate's with chance (psi + d) / (2 psi)."""
    psi = max(discordance, detect)  # every pair that makes the difference is discordant
    q = min((psi + detect) / (2 * psi), 1 - 1e-6)
    wins = sum(b and not a for a, b in pairs)
    losses = sum(a and not b for a, b in pairs)
    up = wins * math.log(q / 0.5) + losses * math.log((1 - q) / 0.5)
    down = wins * math.log((1 - q) / 0.5) + losses * math.log(q / 0.5)
    return up, down


def _logmeanexp(x: float, y: float) -> float:
    top = max(x, y)
    return top + math.log((math.exp(x - top) + math.exp(y - top)) / 2)


def rounds(n_max: int, round_size: int) -> list[int]:
    """The episode counts after which a decision is taken: every `round_size`, and the maximum."""
    return sorted({*range(round_size, n_max, round_size), n_max})


def round_ends(n_max: int, round_size: int, judge: Callable[[int], bool]) -> Iterator[int]:
    """The round loop, the one of every sequential mode: yields each round's end (the caller runs the episodes
    before it), then `judge(end)` decides the round's undecided tasks and says whether every task has stopped."""
    for end in rounds(n_max, round_size):
        yield end
        if judge(end):
            return


Outcomes = dict[int, bool | None]  # a task's episode index -> success; None: an error episode


def successes_before(by_index: Outcomes, end: int) -> list[bool]:
    """The successes of episodes 0..end-1, in episode order; error episodes (and those not recorded) left out."""
    return [success for k in range(end) if (success := by_index.get(k)) is not None]


def pairs_before(base: Outcomes, cand: Outcomes, end: int) -> tuple[list[tuple[bool, bool]], int]:
    """(baseline, candidate) successes of episodes 0..end-1 recorded on both sides, in episode order, and how many
    pairs were left out for an error episode on either side (the paired-drop rule)."""
    both = [(base[k], cand[k]) for k in range(end) if k in base and k in cand]
    pairs = [(a, b) for a, b in both if a is not None and b is not None]
    return pairs, len(both) - len(pairs)


def _silent(line: str) -> None:
    """A `said` that says nothing."""


def stopping_point(decide, n_max: int, round_size: int) -> tuple[int, Decision]:  # type: ignore[no-untyped-def]
    """The first round end n at which decide(n) stops, else the maximum (`undecided` unless decided there)."""
    stops = TaskStops({}, n_max)
    key = ("", 0)
    for _ in round_ends(n_max, round_size, lambda n: stops.judge_round([key], n, lambda _: decide(n), _silent)):
        pass
    return stops.stops[key]


@dataclass
class TaskStops:
    """When and why each task of one configuration stopped: the one place where a round's decision becomes a stop
    (a task still undecided at the maximum stops as `undecided`) and where the stopping summary (what
    `Results.sequential` holds) is written. `settings` are shown in the summary; `counted` names what a decision
    counts (episodes, or pairs for a paired test)."""

    settings: dict[str, Any]
    n_max: int
    counted: str = "episodes"
    stops: dict[TaskKey, tuple[int, Decision]] = field(default_factory=dict)
    names: dict[TaskKey, str] = field(default_factory=dict)

    def judge(self, key: TaskKey, decision: Decision, end: int) -> Decision | None:
        """Takes `decision`, made on `key`'s first `end` outcomes; returns it when the task stops there."""
        if key in self.stops or (not decision.stop and end < self.n_max):
            return None
        if not decision.stop:
            decision = Decision(True, "undecided", f"the maximum of {end} {self.counted}: {decision.why}")
        self.stops[key] = (end, decision)
        return decision

    def judge_round(
        self, keys: Iterable[TaskKey], end: int, decide: Callable[[TaskKey], Decision], said: Callable[[str], None]
    ) -> bool:
        """Judges each undecided task of `keys` on `decide(key)` (made on its first `end` outcomes), `said` the line
        of each new stop; returns whether every task of `keys` has stopped."""
        keys = list(keys)
        for key in keys:
            if key not in self.stops and self.judge(key, decide(key), end) is not None:
                said(self.said(key))
        return all(key in self.stops for key in keys)

    def stopped_after(self) -> dict[TaskKey, int]:
        return {key: n for key, (n, _) in self.stops.items()}

    def said(self, key: TaskKey) -> str:
        """The line that says when and why `key` stopped."""
        n, decision = self.stops[key]
        return f"{self.names.get(key, key)}: stopped after {n} {self.counted}, {decision.outcome}: {decision.why}"

    def summary(self, tasks: Iterable[TaskKey] | None = None, interrupted_in: int | None = None) -> dict[str, Any]:
        """The stopping summary: the settings, the maximum and, per task stopped (of `tasks`, in their order),
        after how many episodes, as what and why."""
        keys = [k for k in tasks if k in self.stops] if tasks is not None else list(self.stops)
        per_task = {
            self.names.get(k, str(k)): {"n_episodes": n, "outcome": d.outcome, "why": d.why}
            for k in keys
            for n, d in [self.stops[k]]
        }
        out: dict[str, Any] = {"settings": self.settings, "n_episodes_max": self.n_max, "per_task": per_task}
        if interrupted_in is not None:
            out["interrupted_in_round_ending"] = interrupted_in
        return out
