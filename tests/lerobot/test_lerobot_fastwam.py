"""FastWAM (LeRobot 0.6) from a tiny offline build (tests/helpers/tiny_fastwam.py). Its Wan2.2 VAE is always loaded
from one Hub id, so the build and the runs are processes of their own, with a Hugging Face cache of the test's that
holds a tiny VAE under that id (`hub_env`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, outcome, read_episodes, run_eval
from tests.helpers.tiny_fastwam import PUSHT_RENAME

pytest.importorskip("lerobot")
pytestmark = pytest.mark.lerobot


@pytest.fixture(scope="module")
def fastwam(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    import os

    import lerobot.policies  # noqa: F401  registers the families
    from lerobot.configs.policies import PreTrainedConfig

    from tests.helpers.tiny_fastwam import hub_env

    if "fastwam" not in PreTrainedConfig.get_known_choices():
        pytest.skip("fastwam is a LeRobot 0.6 family; this LeRobot line has none")
    root = tmp_path_factory.mktemp("fastwam")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **hub_env(root)}
    command = [sys.executable, "-m", "tests.helpers.tiny_fastwam", str(root), str(root / "checkpoint")]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "checkpoint", hub_env(root)


@pytest.mark.slow
def test_fastwam_evaluates_pusht_end_to_end_at_any_batch_size(fastwam: tuple[Path, dict[str, str]], tmp_path: Path):
    """The whole eval path on PushT (one-row: FastWAM draws its noise from a generator of its own, seeded with
    `inference_seed`, or torch's global one): batch 1 and 2 give the same episodes."""
    checkpoint, env = fastwam
    steps, episodes = 6, 3
    common = ["env=pusht", "policy=act", f"policy.path={checkpoint}", "policy.overrides=null", PUSHT_RENAME]
    common += ["device=cpu"]
    common += [f"env.episode_length={steps}", f"eval.n_episodes={episodes}", "eval.use_async_envs=false"]
    runs = []
    for batch in (1, 2):
        run_eval(*common, f"eval.batch_size={batch}", out_dir=tmp_path / f"batch{batch}", env=env)
        runs.append(sorted(outcome(r) for r in read_episodes(tmp_path / f"batch{batch}")))
    assert [(o[2], o[7]) for o in runs[0]] == [(k, steps) for k in range(episodes)]
    assert len({o[5] for o in runs[0]}) == episodes  # three seeds, three episodes
    assert runs[1] == runs[0]
