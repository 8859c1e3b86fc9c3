"""Episode-for-episode parity with the running interpreter's own `lerobot-eval` (0.6.x on Python 3.12, 0.4.4 on
3.11): the same tiny local checkpoint, seeds and settings give the same per-episode rewards. PushT's parity test
lives in tests/test_lerobot_policies.py; this is MetaWorld's (both dense rewards)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobot_hydra.policies.lerobot_versions import lerobot_version
from tests.conftest import read_episodes, run_eval
from tests.lerobot_checkpoints import METAWORLD_ACTION, tiny_act
from tests.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.slow]

ONE_THREAD = {"OMP_NUM_THREADS": "1"}
# What LeRobot's MetaWorld env hands a policy: the 480x480 corner2 image and the 4-D agent position.
METAWORLD_PIXELS = {"observation.image": ("VISUAL", (3, 480, 480)), "observation.state": ("STATE", (4,))}


@pytest.mark.timeout(2400)
def test_act_on_metaworld_matches_lerobot_eval_episode_by_episode(tmp_path: Path) -> None:
    if int(lerobot_version().split(".")[1]) < 6:
        pytest.skip("lerobot-eval 0.4.4 does not seed MetaWorld episodes (MetaWorld 3 ignores reset(seed=...))")
    # lerobot-eval runs MetaWorld episodes to MetaWorld's 500 steps whatever --env.episode_length says, and so do
    # we by default (env.episode_length=null). Wide action noise: the arm moves and the rewards differ by episode.
    # 100-step chunks: 5 inferences of the ResNet on 480x480 images per episode.
    chunks = {"chunk_size": 100, "n_action_steps": 100}
    checkpoint = tiny_act(tmp_path / "act", METAWORLD_PIXELS, (METAWORLD_ACTION[0], 0.0, 0.5), **chunks)
    episodes, task = 2, "reach-v3"
    run_eval(
        "policy=act",
        f"policy.path={checkpoint}",
        f"env.task={task}",
        f"eval.n_episodes={episodes}",
        "eval.batch_size=2",
        "eval.max_episodes_rendered=0",
        "eval.use_async_envs=false",
        out_dir=tmp_path / "ours",
        env=ONE_THREAD,
        timeout=1200,
    )
    theirs = run_lerobot_eval(
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
    records = sorted(read_episodes(tmp_path / "ours"), key=lambda r: r["episode_index"])
    assert [r["episode_index"] for r in records] == list(range(episodes))
    assert [r["sum_reward"] for r in records] == pytest.approx(theirs, rel=1e-9, abs=1e-9)
    assert len({round(r["sum_reward"], 6) for r in records}) == episodes  # the episodes differ: seeds reached both
