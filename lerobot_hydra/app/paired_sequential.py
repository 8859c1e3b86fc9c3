"""`lerobot-hydra-sequential-compare`: two policies on the same tasks, seeds and episode indices, in rounds, each task
stopped once Wald's sequential test on its discordant pairs (results/sequential.paired) decides better, worse or no
difference at level alpha; eval.n_episodes is the maximum.

    lerobot-hydra-sequential-compare --baseline policy=random --candidate policy=metaworld_expert \\
        --detect 20 --discordance 30 --out runs/race -- env.task=[reach-v3,push-v3] eval.n_episodes=60

Each round runs the baseline, then the candidate, through the episodes before the round's end in their own run dirs
(OUT/baseline, OUT/candidate; resumable, as any run dir), each side's policy, workers and simulators kept from round
to round (run/sources/paired.py), then judges every undecided task on the pairs so far. The
decision reads episodes 0..end-1 in episode order only, so batch size, lanes and timing never move the stopping
point, and running the same command again resumes the same sequence. Both run dirs' eval_info.json and report.html
say when and why each task stopped; OUT/sequential.json holds the same. This runs the rounds in one process; a
sweep with hydra/sweeper=sequential runs them with any launcher (launch/sequential_sweep.py, docs/sequential.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from lerobot_hydra.app.probing import compose
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.results.sequential import TaskStops
from lerobot_hydra.rollout.signals import RunInterrupted


def run_paired(
    baseline: list[str],
    candidate: list[str],
    common: list[str],
    out: Path,
    *,
    detect: float,
    discordance: float,
    alpha: float = 0.05,
    beta: float = 0.2,
) -> dict[str, Any]:
    """Runs the rounds; returns what OUT/sequential.json holds (rates and differences as fractions)."""
    from lerobot_hydra.app.evaluation import evaluate_config
    from lerobot_hydra.run.context import open_run
    from lerobot_hydra.run.execute import conclude
    from lerobot_hydra.run.sources.paired import PairedRounds
    from lerobot_hydra.run.warm import Warm
    from lerobot_hydra.schemas.schema import validate

    sides = {"baseline": [*common, *baseline], "candidate": [*common, *candidate]}
    cfgs = {side: compose(overrides) for side, overrides in sides.items()}
    evals = {side: validate(cfg) for side, cfg in cfgs.items()}
    n_max = evals["baseline"].n_episodes
    if evals["candidate"].n_episodes != n_max or cfgs["baseline"].seed != cfgs["candidate"].seed:
        raise UserError("the baseline and the candidate must share eval.n_episodes and seed; set them in the common")
    if any(e.sequential.stop is not None for e in evals.values()):
        raise UserError(
            "eval.sequential.stop stops one policy's tasks on their own; leave it out here, where the paired test "
            "decides (eval.sequential.round sets the round)"
        )
    settings = {"test": "paired SPRT", "alpha": alpha, "beta": beta, "detect": detect, "discordance": discordance}
    decided = TaskStops(settings, n_max, "pairs")
    base_cfg, base_eval = cfgs["baseline"], evals["baseline"]
    with Warm.opened(base_cfg) as warm, open_run(base_cfg, base_eval, out / "baseline", "baseline", warm) as base:
        rounds = PairedRounds(base, decided, base_eval.sequential.round)
        try:
            evaluate_config(cfgs["candidate"], evals["candidate"], out / "candidate", "candidate", source=rounds.of)
        except RunInterrupted as stopped:
            conclude(base, rounds.side(base), stopped)
        conclude(base, rounds.side(base))
    summary = rounds.summary()
    (out / "sequential.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lerobot-hydra-sequential-compare", description=__doc__.split("\n\n")[0].replace("`", "")
    )
    parser.add_argument("--baseline", nargs="+", required=True, metavar="OVERRIDE", help="the baseline's overrides")
    parser.add_argument("--candidate", nargs="+", required=True, metavar="OVERRIDE", help="the candidate's overrides")
    parser.add_argument("--detect", type=float, required=True, metavar="POINTS", help="difference to detect, points")
    parser.add_argument("--discordance", type=float, required=True, metavar="PC", help="assumed discordant pairs, %%")
    parser.add_argument("--alpha", type=float, default=0.05, help="chance of a false better/worse (0.05)")
    parser.add_argument("--beta", type=float, default=0.2, help="chance of a false 'no difference' (0.2)")
    parser.add_argument("--out", type=Path, required=True, help="the output dir (baseline/, candidate/ in it)")
    parser.add_argument("common", nargs="*", help="overrides for both (after --)")
    args = parser.parse_args(argv)
    try:
        if not (0 < args.detect <= 100 and 0 < args.discordance <= 100 and 0 < args.alpha < 1 and 0 < args.beta < 1):
            raise UserError("give 0 < --detect, --discordance <= 100 and 0 < --alpha, --beta < 1")
        summary = run_paired(
            args.baseline,
            args.candidate,
            args.common,
            args.out,
            detect=args.detect / 100,
            discordance=args.discordance / 100,
            alpha=args.alpha,
            beta=args.beta,
        )
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for task, t in summary["per_task"].items():
        print(f"{task}: {t['outcome']} after {t['n_episodes']} pairs ({t['why']})")
    for task, n in summary["error_pairs_dropped"].items():
        print(f"{task}: {n} pair(s) with an error episode on either side left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
