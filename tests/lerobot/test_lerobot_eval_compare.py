"""`lerobot-hydra-compare` takes lerobot-eval's own eval_info.json as one side: the same tiny local checkpoint run
by lerobot-eval and by lerobot_hydra, compared. lerobot-eval records no seeds, so the comparison is unpaired and
says so; its rates are lerobot-eval's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devkit.lerobot_checkpoints import METAWORLD_ACTION, tiny_act
from lerobot_hydra.policies.lerobot.versions import lerobot_version
from lerobot_hydra.sweeps.compare import compare_dirs
from lerobot_hydra.sweeps.compare import main as compare_main
from tests.conftest import run_eval
from tests.helpers.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.slow]

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
METAWORLD_PIXELS = {"observation.image": ("VISUAL", (3, 480, 480)), "observation.state": ("STATE", (4,))}


@pytest.mark.timeout(900)
def test_compare_reads_lerobot_evals_eval_info_as_one_side(tmp_path: Path, capsys) -> None:
    if int(lerobot_version().split(".")[1]) < 6:
        pytest.skip("lerobot-eval 0.4.4 does not seed MetaWorld episodes (MetaWorld 3 ignores reset(seed=...))")
    # Driven into drawer-close-v3's open drawer: the episodes succeed within a few dozen steps.
    action = (METAWORLD_ACTION[0], (0.6, 0.6, -0.6, 0.0), 0.1)
    checkpoint = tiny_act(tmp_path / "act", METAWORLD_PIXELS, action, chunk_size=5, n_action_steps=5)
    episodes, task = 2, "drawer-close-v3"
    run_eval(
        "policy=act",
        f"policy.path={checkpoint}",
        f"env.task={task}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.use_async_envs=false",
        out_dir=tmp_path / "ours",
        env=ONE_THREAD,
        timeout=600,
    )
    run_lerobot_eval(
        f"--policy.path={checkpoint}",
        "--policy.device=cpu",
        "--env.type=metaworld",
        f"--env.task={task}",
        f"--eval.n_episodes={episodes}",
        "--eval.batch_size=2",
        "--eval.use_async_envs=false",
        "--seed=1000",
        output_dir=tmp_path / "theirs",
        env=ONE_THREAD,
    )
    theirs = json.loads((tmp_path / "theirs" / "eval_info.json").read_text())
    comparison = compare_dirs(tmp_path / "theirs", tmp_path / "ours")
    assert not comparison["paired"]
    assert comparison["unpaired_reason"] == "A is lerobot-eval's eval_info.json, which records no episode seeds"
    (row,) = comparison["per_task"]
    assert row["task_group"] == theirs["per_task"][0]["task_group"] == task
    assert row["n_baseline"] == row["n_candidate"] == episodes
    assert row["pc_baseline"] == pytest.approx(theirs["overall"]["pc_success"])
    ours = json.loads((tmp_path / "ours" / "eval_info.json").read_text())
    assert row["pc_candidate"] == pytest.approx(ours["per_task"][0]["pc_success"])
    assert row["verdict"] == "underpowered"  # two episodes detect no change of 10 points
    assert compare_main([str(tmp_path / "theirs" / "eval_info.json"), str(tmp_path / "ours")]) == 0
    assert "unpaired: A is lerobot-eval's eval_info.json" in capsys.readouterr().out
