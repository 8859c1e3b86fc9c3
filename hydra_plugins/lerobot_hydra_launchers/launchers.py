"""The launcher classes Hydra instantiates for lerobot_hydra (`_target_` in lerobot_hydra/launch/schemas.py):
`hydra/launcher=basic`, `submitit_local`, `submitit_slurm` and `ray`, and the presets in
lerobot_hydra/conf/hydra/launcher/; and the sweeper of `hydra/sweeper=sequential`.

Only names here: what they do is in lerobot_hydra/launch/ (in_process.py, cluster.py, ray_cluster.py, shards.py,
outcomes.py, sequential_sweep.py); see docs/launchers.md.
Hydra imports this module when it discovers its plugins, in any Hydra app of this Python.
"""

from __future__ import annotations

from lerobot_hydra.launch.in_process import InProcessLauncher
from lerobot_hydra.launch.sequential_sweep import SequentialSweep


class BasicLauncher(InProcessLauncher):
    """A sweep's jobs one after the other in this process."""


class SequentialSweeper(SequentialSweep):
    """A paired sequential comparison: the sweep's jobs once per round, until each task is decided."""


try:
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher
except ImportError:  # without the `slurm` extra: only the in-process launcher
    pass
else:
    from lerobot_hydra.launch.cluster import SubmititSweep

    class LocalLauncher(SubmititSweep, submitit_launcher.LocalLauncher):
        """Shards as local processes (submitit's local executor): submitit_local, local_shards."""

    class SlurmLauncher(SubmititSweep, submitit_launcher.SlurmLauncher):
        """One SLURM job per shard, as one array: submitit_slurm, slurm_cpu, slurm_gpu."""


try:
    from hydra_plugins.hydra_ray_launcher import ray_launcher
except ImportError:  # without the `ray` extra
    pass
else:
    from lerobot_hydra.launch.ray_cluster import RaySweep

    class RayLauncher(RaySweep, ray_launcher.RayLauncher):
        """One Ray task per shard on a Ray cluster: ray, ray_cpu, ray_gpu."""
