"""Simulator environments for the env.python tests, made once per CI run by scripts/sim_env.sh under .venvs/.

They are made from the Python 3.11 base interpreter with `--system-site-packages` (SIM_ENV_SYSTEM_SITE=1): the base
has every benchmark installed, so an environment builds in seconds and what is installed into it (mujoco==3.5.0)
shadows the base's. On the 3.12 line the 3.11 base is `LEROBOT_HYDRA_OTHER_PYTHON` (scripts/test.sh sets it);
tests skip, saying so, where no 3.11 base interpreter is at hand. A file lock keeps two pytest workers from
making the same environment at once; an existing one is reused (delete .venvs/ to rebuild).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".venvs"


def base_python() -> str:
    """The 3.11 base interpreter (not a virtual environment: its site-packages are the ones a venv can see)."""
    if sys.version_info[:2] == (3, 11) and sys.prefix == sys.base_prefix:
        return sys.executable
    other = os.environ.get("LEROBOT_HYDRA_OTHER_PYTHON")
    if other and subprocess.run([other, "-c", "import sys; sys.exit(sys.version_info[:2] != (3, 11))"]).returncode == 0:
        return other
    pytest.skip("needs the Python 3.11 base interpreter (LEROBOT_HYDRA_OTHER_PYTHON on the 3.12 line, as CI sets it)")


def sim_python(name: str, benchmark: str, *specs: str, system_site: bool = True) -> str:
    """The python of the environment `.venvs/<name>` for `benchmark` with `specs`, made if absent; without
    `system_site`, it holds only what the script installs (downloads, slower)."""
    VENVS.mkdir(exist_ok=True)
    directory = VENVS / name
    with open(VENVS / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / "bin" / "python").exists():
            env = {**os.environ, "PYTHON": base_python(), "SIM_ENV_SYSTEM_SITE": "1" if system_site else "0"}
            script = [str(ROOT / "scripts" / "sim_env.sh"), benchmark, str(directory), *specs]
            done = subprocess.run(["bash", *script], cwd=ROOT, env=env, capture_output=True, text=True)
            assert done.returncode == 0, done.stdout + done.stderr
    return str(directory / "bin" / "python")


def metaworld_python(mujoco: str) -> str:
    """A MetaWorld 3.1.1 environment on MuJoCo `mujoco` (3.3.0: the base's own versions)."""
    return sim_python(f"metaworld-mujoco-{mujoco}", "metaworld", f"mujoco=={mujoco}")


def robosuite_python() -> str:
    """robosuite 1.5.2 on MuJoCo 3.5.0 (the base holds LIBERO's robosuite 1.4)."""
    return sim_python("robosuite-1.5.2", "robosuite")
