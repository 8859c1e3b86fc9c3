"""The Hydra callback that merges a sweep's shards when the multirun ends (conf/config.yaml registers it).

Hydra calls `on_multirun_end` only when every job succeeded, and turns an exception raised in a callback into
a warning with exit status 0 (tests/sweeps/test_launchers.py pins both). So: checks that must stop a sweep before
anything is submitted (the shard ids, the baseline, sbatch) run in `on_multirun_start` and exit (SystemExit is not
caught); a failed merge prints one line per problem and exits non-zero; and when a job fails (or the sweep is
interrupted) an exit hook reports which shards are missing or incomplete and how to finish by hand.
"""

from __future__ import annotations

import atexit
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.commands import shell_command
from lerobot_hydra.core.errors import EPISODE_ERRORS_EXIT, UserError, episode_errors_line
from lerobot_hydra.core.layout import parse_shard_file_name

MERGE_COMMAND = "lerobot-hydra-merge"


class MergeShards(Callback):
    def __init__(self, baseline: str | None = None, accept_version_mismatch: bool = False) -> None:
        # The configuration the sweep summary compares the others with (summary.pick_baseline); None: the first.
        self.baseline = str(baseline) if baseline is not None else None
        # Merge shards whose outcome-relevant versions differ (the merged provenance lists the differences).
        self.accept_version_mismatch = bool(accept_version_mismatch)
        self._sweep_dir: Path | None = None
        # True when this multirun runs only some shards of its split (eval.num_shards given, ids left out):
        # shards it did not run are expected to be missing, and are reported without failing the sweep.
        self._some_shards = False

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if self.baseline:
            print(
                "error: hydra.callbacks.merge_shards.baseline names the baseline of a sweep's comparisons; add -m and "
                "sweep over the configurations to compare",
                file=sys.stderr,
            )
            sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from lerobot_hydra.sweeps.baseline import check_baseline

        launcher = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
        if launcher.endswith("SlurmLauncher") and shutil.which("sbatch") is None:
            choice = OmegaConf.select(config, "hydra.runtime.choices.hydra/launcher", default="submitit_slurm")
            print(
                f"error: hydra/launcher={choice} needs SLURM's sbatch, which is not on PATH here; run the sweep on a "
                "cluster login node, start a local cluster (bash scripts/slurm_local.sh start), or use "
                "hydra/launcher=local_shards",
                file=sys.stderr,
            )
            sys.exit(2)
        from lerobot_hydra.launch.shards import shard_sweep_total

        self._sweep_dir = Path(str(config.hydra.sweep.dir))
        self._some_shards = runs_some_shards(list(config.hydra.overrides.task))
        try:
            # Before any job (or the policy server's callback after this one) is submitted; our launchers fill in
            # eval.num_shards with the same function.
            shard_sweep_total(list(config.hydra.overrides.task))
            check_baseline(self.baseline, sweep_values(list(config.hydra.overrides.task)))
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        atexit.register(self._report_unfinished)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from lerobot_hydra.sweeps.sequential_state import sweep_baseline
        from lerobot_hydra.sweeps.shards import merge_sweep

        atexit.unregister(self._report_unfinished)
        sweep_dir = self._sweep_dir or Path(str(config.hydra.sweep.dir))
        try:
            accept = self.accept_version_mismatch
            # A sequential sweep's baseline (hydra.sweeper.baseline) is its summary's too, unless named here.
            baseline = self.baseline or sweep_baseline(sweep_dir)
            result = merge_sweep(sweep_dir, baseline=baseline, accept_version_mismatch=accept)
        except Exception as err:  # noqa: BLE001 - Hydra would turn it into a warning and exit 0
            print(
                f"error: merging {sweep_dir} failed ({err!r}); retry with: {merge_command(sweep_dir)}", file=sys.stderr
            )
            sys.exit(1)
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr)
        for warning in result.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        if result.ok and result.n_errors:
            print(f"lerobot_hydra: {episode_errors_line(result.n_errors)}", file=sys.stderr)
            sys.exit(EPISODE_ERRORS_EXIT)
        if result.ok:
            return
        if self._some_shards and result.missing == len(result.problems):
            for problem in result.problems:
                print(f"note: {problem}", file=sys.stderr)
            print(f"note: once every shard has run, merge with: {merge_command(sweep_dir)}", file=sys.stderr)
            return
        for problem in result.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(
            f"error: the sweep's results were not merged; fix the above, then run: {merge_command(sweep_dir)}",
            file=sys.stderr,
        )
        sys.exit(1)

    def _report_unfinished(self) -> None:
        """At exit after a failed or interrupted sweep: what the merge would say now, and how to finish."""
        from lerobot_hydra.store.shard_file import find_shard_files
        from lerobot_hydra.sweeps.sequential_state import read_state
        from lerobot_hydra.sweeps.shards import merge_sweep

        sweep_dir = self._sweep_dir
        if sweep_dir is not None and read_state(sweep_dir) is not None:
            print(
                "lerobot_hydra: the sequential sweep ended before its last round; run the same command with "
                f"hydra.sweep.dir={sweep_dir} to resume it (recorded episodes are kept, the same rounds follow)",
                file=sys.stderr,
                flush=True,
            )
            return
        if sweep_dir is None or not any(_is_sharded(p) for p in find_shard_files(sweep_dir)):
            return
        result = merge_sweep(sweep_dir, write=False, accept_version_mismatch=self.accept_version_mismatch)
        lines = [
            "lerobot_hydra: the sweep ended before all its jobs succeeded, so its shards were not merged. "
            "Shards now (jobs still queued or running on a cluster show as missing or incomplete):"
        ]
        lines += [f"  {problem}" for problem in result.problems] or ["  every shard is complete"]
        lines.append(
            f"Re-run the shards listed (same overrides and hydra.sweep.dir: recorded episodes are kept), then merge "
            f"with: {merge_command(sweep_dir)}"
        )
        print("\n".join(lines), file=sys.stderr, flush=True)


def merge_command(sweep_dir: Path) -> str:
    return shell_command([MERGE_COMMAND, str(sweep_dir)])


def sweep_values(overrides: list[str]) -> dict[str, list[str]]:
    """Each override's key and its values (several for a swept key)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from lerobot_hydra.core.labels import override_values

    parsed = OverridesParser.create().parse_overrides([str(o) for o in overrides])
    return {o.key_or_group: override_values(o) for o in parsed}


def runs_some_shards(overrides: list[str]) -> bool:
    """Whether a sweep's overrides run fewer shard ids than its eval.num_shards."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from lerobot_hydra.core.labels import override_values

    by_key = {o.key_or_group: o for o in OverridesParser.create().parse_overrides([str(o) for o in overrides])}
    num, shard = by_key.get("eval.num_shards"), by_key.get("eval.shard_id")
    if num is None:
        return False
    ids = set(override_values(shard)) if shard is not None else {"0"}
    return len(ids) < int(override_values(num)[0])


def _is_sharded(shard_file: Path) -> bool:
    ids = parse_shard_file_name(shard_file.name)
    return ids is not None and ids[1] > 1
