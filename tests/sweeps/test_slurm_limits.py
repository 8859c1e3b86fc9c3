"""A SLURM sweep whose jobs no node of the partition can hold (the slurm_cpu preset's 4 CPUs on this machine's
2-CPU node) is refused in one line before anything is submitted, instead of waiting silently on jobs pending for
ever (reason PartitionConfig)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.launch.slurm_limits import check_fits, parse_sinfo
from tests.conftest import run_eval
from tests.sweeps.test_sharding import slurm  # noqa: F401  the session fixture that starts the local cluster

# `sinfo -h -N -o %P|%c|%m` on a cluster of a 2-CPU default partition and a 64-CPU one.
SINFO = "local*|2|24105\nlocal*|2|24105\nbig|64|512000\n"


def test_a_job_larger_than_every_node_of_its_partition_is_one_line() -> None:
    nodes = parse_sinfo(SINFO)
    slurm_cpu = {"cpus_per_task": 4, "tasks_per_node": 1, "mem_gb": 16, "partition": None}
    with pytest.raises(UserError, match=r"^hydra/launcher=slurm_cpu asks 4 CPUs a job .* at most 2: .* pending"):
        check_fits(slurm_cpu, "hydra/launcher=slurm_cpu", "hydra.launcher", nodes)
    check_fits({**slurm_cpu, "partition": "big"}, "hydra/launcher=slurm_cpu", "hydra.launcher", nodes)
    check_fits({**slurm_cpu, "partition": "local,big"}, "hydra/launcher=slurm_cpu", "hydra.launcher", nodes)
    check_fits({**slurm_cpu, "cpus_per_task": 2}, "hydra/launcher=slurm_cpu", "hydra.launcher", nodes)
    with pytest.raises(UserError, match=r"asks 600 GB a job \(hydra.launcher.mem_gb\)"):
        check_fits({**slurm_cpu, "partition": "big", "mem_gb": 600}, "x", "hydra.launcher", nodes)
    with pytest.raises(UserError, match=r"^no SLURM partition 'gpu' \(hydra.launcher.partition\); partitions: big"):
        check_fits({**slurm_cpu, "partition": "gpu"}, "x", "hydra.launcher", nodes)


def _queued() -> set[str]:
    listed = subprocess.run(["squeue", "-h", "-o", "%F"], capture_output=True, text=True, check=True, timeout=30)
    return set(listed.stdout.split())


@pytest.mark.slurm
def test_the_slurm_cpu_preset_on_a_2_cpu_node_is_refused_before_submitting(
    tmp_path: Path,
    slurm: None,  # noqa: F811
) -> None:
    sweep = tmp_path / "sweep"
    before = _queued()
    try:
        proc = run_eval(
            "env.task=reach-v3", "eval.n_episodes=2", "eval.shard_id=0,1", "hydra/launcher=slurm_cpu",
            out_dir=sweep, multirun=True, check=False, timeout=90,
        )  # fmt: skip
    finally:
        submitted = _queued() - before  # none, unless the refusal is missing (then they would pend for ever)
        if submitted:
            subprocess.run(["scancel", *submitted], check=False, timeout=30)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: hydra/launcher=slurm_cpu asks 4 CPUs a job"), line
    assert "hydra.launcher.cpus_per_task=2" in line and not submitted and not sweep.exists()
