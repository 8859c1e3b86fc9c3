"""Our own plugin path: a pip-installed package adds env= and policy= options through a Hydra search-path plugin
in the `hydra_plugins` namespace (examples/plugin). The example is built and installed into a temporary target
(no network: its dependencies are this environment's), then evaluated through eval.py like a built-in preset."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, read_episodes, run_eval

EXAMPLE = ROOT / "examples" / "plugin"


def install_example(target: Path, build: Path) -> None:
    """`pip install` of examples/plugin into `target`, building from a copy (the source tree stays clean)."""
    import shutil

    shutil.copytree(EXAMPLE, build)
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target"]
    proc = subprocess.run([*command, str(target), str(build)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_an_installed_plugin_adds_env_and_policy_options(tmp_path: Path) -> None:
    target = tmp_path / "site"
    install_example(target, tmp_path / "build")
    assert (target / "hydra_plugins" / "lerobot_hydra_example_plugin" / "searchpath.py").is_file()
    path = os.pathsep.join(str(p) for p in (target, ROOT, os.environ.get("PYTHONPATH")) if p)
    run = ["env=example_line", "policy=example_pd", "eval.n_episodes=3", "eval.batch_size=2"]
    run_eval(*run, "env.targets=[0.5,-0.5,0.2]", out_dir=tmp_path / "run", env={"PYTHONPATH": path})
    records = read_episodes(tmp_path / "run")
    assert sorted((r["task_group"], r["task_name"], r["episode_index"]) for r in records) == [
        ("line", f"target{t}", k) for t in range(3) for k in range(3)
    ]
    assert all(r["success"] and r["steps"] < 50 for r in records), records
    # Without the package, the options do not exist: Hydra's one line names the missing option.
    proc = run_eval(*run, out_dir=tmp_path / "without", check=False)
    assert proc.returncode == 2 and "error: unknown policy 'example_pd'" in proc.stderr
