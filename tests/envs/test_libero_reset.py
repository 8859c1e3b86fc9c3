"""LIBERO's soft resets (envs/libero_reset.py) give the episodes of robosuite's hard resets, bit for bit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.libero


# libero_object: many resting objects in contact, where the solver's warm start shows first; a LIBERO-PRO suite
# (its own LIBERO, so a process of its own) whose fixtures move between episodes.
@pytest.mark.parametrize(("suite", "task_id"), [("libero_object", 2), ("libero_spatial_swap", 1)])
def test_soft_resets_keep_the_simulator_and_give_the_hard_resets_episodes(suite: str, task_id: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.libero_resets", suite, str(task_id)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    compared = json.loads(proc.stdout.strip().splitlines()[-1])
    assert compared["soft_kept_sim"] and not compared["hard_kept_sim"]
    assert compared["arrays"] == 3 * (5 + 25 * 7)
    assert compared["differ"] == 0
