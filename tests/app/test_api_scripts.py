"""The Python API called from a user's script: under `if __name__ == "__main__":` it runs with its env workers; at
the script's top level (which the workers import again) it is refused in one line before any worker starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

POLICY = """
import numpy as np
import lerobot_hydra

class Still:
    def reset(self, task, episode_seeds):
        self.rows = len(episode_seeds)
    def select_action(self, batch):
        return np.zeros((self.rows, 4), np.float32)
    def fork(self):
        return Still()
    def finish(self):
        pass

OVERRIDES = ["env=metaworld", "env.task=reach-v3", "env.obs_type=state", "env.episode_length=5",
             "eval.n_episodes=2", "eval.batch_size=2", "eval.use_async_envs=true"]
"""
CALL = "print('episodes:', lerobot_hydra.evaluate(Still(), OVERRIDES).tasks[0].n_episodes)"
SCRIPTS = {
    "guarded": f"{POLICY}\nif __name__ == '__main__':\n    {CALL}\n",
    "top level": f"{POLICY}\n{CALL}\n",
    "a function called at the top level": f"{POLICY}\ndef main():\n    {CALL}\n\nmain()\n",
    "an Evaluator at the top level": POLICY
    + "\nwith lerobot_hydra.Evaluator(OVERRIDES) as ev:\n    ev.evaluate(Still())",
}
# The top-level line each unguarded script is executing when the API is called.
CALLING = {"top level": CALL, "a function called at the top level": "main()", "an Evaluator at the top level": "with "}


def run_script(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "my_eval.py"
    script.write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_guarded_script_runs_with_its_workers(tmp_path: Path) -> None:
    proc = run_script(tmp_path, SCRIPTS["guarded"])
    assert proc.returncode == 0, proc.stderr
    assert "episodes: 2" in proc.stdout


@pytest.mark.parametrize("case", ["top level", "a function called at the top level", "an Evaluator at the top level"])
def test_an_unguarded_call_is_one_line(tmp_path: Path, case: str) -> None:
    proc = run_script(tmp_path, SCRIPTS[case])
    line = next(n for n, text in enumerate(SCRIPTS[case].splitlines(), 1) if text.startswith(CALLING[case]))
    api = "lerobot_hydra.Evaluator" if "Evaluator" in case else "lerobot_hydra.evaluate"
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"error: {api} was called at the top level of my_eval.py (line {line}), which the env workers import "
        'again: put the call under `if __name__ == "__main__":`'
    ]
