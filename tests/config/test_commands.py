"""Printed commands paste as they are: override values quoted for Hydra, arguments quoted for the shell."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from lerobot_hydra.core.commands import hydra_override, shell_command
from tests.conftest import ROOT, read_json, run_eval

TRICKY = [
    "/plain/path",
    "/a b,c/d",
    "/naïve/ü=1",
    "it's",
    'say "hi"',
    "both ' and \"",
    "back\\slash",
    "trailing\\",
    "q\\'",
    "1.5",
    "true",
    "null",
    "[a,b]",
    " leading space",
    "",
]


@pytest.mark.parametrize("value", TRICKY)
def test_an_override_reads_back_exactly_through_the_shell_and_hydra(value: str) -> None:
    command = shell_command(["python", "eval.py", hydra_override("hydra.run.dir", value)])
    argv = shlex.split(command)
    assert argv[:2] == ["python", "eval.py"]
    override = OverridesParser.create().parse_override(argv[2])
    assert override.key_or_group == "hydra.run.dir" and not override.is_sweep_override()
    assert override.value() == value


def _printed(stderr: str, marker: str) -> str:
    lines = [line for line in stderr.splitlines() if marker in line]
    assert len(lines) == 1, stderr
    return lines[0].split(marker, 1)[1]


def test_printed_rerun_and_merge_commands_run_as_pasted(tmp_path: Path) -> None:
    sweep_dir = tmp_path / "my sweep, ü=1"
    overrides = ("env=gym", "policy=random", "env.task='Balance it, please = now'", "eval.n_episodes=2")
    first = run_eval(
        *overrides, f"hydra.sweep.dir='{sweep_dir}'", "eval.shard_id=0", "eval.num_shards=2", multirun=True, timeout=120
    )
    rerun = _printed(first.stderr, "is missing; run it: ")
    merge = _printed(first.stderr, "once every shard has run, merge with: ")
    # The printed commands run from the checkout with this interpreter as `python`.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-c", rerun], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    info = read_json(sweep_dir / "eval_info.json")
    assert info["overall"]["n_episodes"] == 2
    assert {t["task"] for t in info["per_task"]} == {"Balance it, please = now"}
    merged = subprocess.run(["bash", "-c", f"{merge} --check"], env=env, capture_output=True, text=True, timeout=120)
    assert merged.returncode == 0 and "every shard complete and consistent" in merged.stdout, merged.stderr
