"""Whether a SLURM sweep's jobs fit the partition's nodes, checked before they are submitted.

A job asking more CPUs or memory than any node of its partition has stays pending for ever (reason
`PartitionConfig`), and the sweep, waiting on it, prints nothing. `sinfo` tells each node's CPUs and memory, so the
submitit launchers (cluster.py) refuse such a sweep in one line instead. Without `sinfo` (or when it fails) nothing
is checked: the cluster decides, as before.
"""

from __future__ import annotations

import logging
import subprocess
from dataclasses import dataclass
from typing import Any

from lerobot_hydra.core.errors import UserError

log = logging.getLogger(__name__)
SINFO_TIMEOUT_S = 30


@dataclass(frozen=True)
class Node:
    partition: str
    default: bool  # the cluster's default partition (sinfo marks it with `*`)
    cpus: int
    memory_mb: int


def parse_sinfo(text: str) -> list[Node]:
    """`sinfo -h -N -o %P|%c|%m` lines: one per node and partition."""
    nodes = []
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 3:
            continue
        name, cpus, memory = fields
        try:
            nodes.append(Node(name.rstrip("*"), name.endswith("*"), int(cpus), int(memory.rstrip("+"))))
        except ValueError:
            continue
    return nodes


def check_fits(params: dict[str, Any], asker: str, prefix: str, nodes: list[Node]) -> None:
    """One line when a job of these launcher settings (`prefix`.<key>, asked for by `asker`) fits no node of its
    partition (the default one when `partition` is unset)."""
    partition = params.get("partition")
    wanted = str(partition).split(",") if partition else []  # sbatch takes a list: the job runs in any of them
    mine = [n for n in nodes if (n.partition in wanted if wanted else n.default)]
    if not mine:
        if partition:
            known = ", ".join(sorted({n.partition for n in nodes}))
            raise UserError(f"no SLURM partition '{partition}' ({prefix}.partition); partitions: {known}")
        return
    name = ",".join(dict.fromkeys(n.partition for n in mine))
    tasks = int(params.get("tasks_per_node") or 1)
    cpus = int(params.get("cpus_per_task") or 1) * tasks
    most_cpus = max(n.cpus for n in mine)
    if cpus > most_cpus:
        per_task = max(1, most_cpus // tasks)
        raise UserError(
            f"{asker} asks {cpus} CPUs a job ({prefix}.cpus_per_task x tasks_per_node), but the nodes of SLURM "
            f"partition '{name}' have at most {most_cpus}: its jobs would stay pending (PartitionConfig); set "
            f"{prefix}.cpus_per_task={per_task} or choose another partition with {prefix}.partition=<name>"
        )
    mem_gb = params.get("mem_gb")
    most_mb = max(n.memory_mb for n in mine)
    if mem_gb is not None and mem_gb * 1024 > most_mb:
        raise UserError(
            f"{asker} asks {mem_gb:g} GB a job ({prefix}.mem_gb), but the nodes of SLURM partition '{name}' have at "
            f"most {most_mb / 1024:.1f} GB: its jobs would stay pending (PartitionConfig); set "
            f"{prefix}.mem_gb={int(most_mb // 1024)} or choose another partition"
        )


def check_partition(params: dict[str, Any], asker: str, prefix: str) -> None:
    """`check_fits` against what `sinfo` says of this cluster's nodes."""
    try:
        listed = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%P|%c|%m"], capture_output=True, text=True, timeout=SINFO_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        log.debug(f"sinfo did not answer ({err}); the partition's limits are not checked")
        return
    if listed.returncode != 0:
        log.debug(f"sinfo failed ({listed.stderr.strip()}); the partition's limits are not checked")
        return
    check_fits(params, asker, prefix, parse_sinfo(listed.stdout))
