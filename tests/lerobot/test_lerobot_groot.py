"""GR00T N1.7 (LeRobot 0.6) from a tiny offline build (tests/helpers/tiny_groot.py), episode for episode as LeRobot's
own lerobot-eval runs it on PushT. Acting through the factory and a short PushT run: test_lerobot_families.py; batch
size, shards and resume: test_lerobot_noise.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devkit.lerobot_checkpoints import PUSHT_ACTION, PUSHT_PIXELS
from tests.conftest import evaluate_here, read_episodes
from tests.helpers.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

DEFAULT_PROMPT = "Perform the task."  # LeRobot's GR00T prompt for an empty task (prepare_n1_7_language_batch)


@pytest.mark.slow
def test_groot_on_pusht_matches_lerobot_eval_episode_by_episode(tmp_path: Path) -> None:
    """GR00T draws its flow-matching noise inline (`torch.randn` in the action head), so lerobot_hydra runs it one
    row at a time from torch's generator seeded by the episode; lerobot-eval runs one env per rollout with the
    generator seeded the same way (tests/helpers/lerobot_eval_rows.py). Everything else is each side's own."""
    from tests.helpers.tiny_groot import GROOT_06_ONLY, tiny_groot
    from tests.helpers.tiny_pi import lerobot_06

    if not lerobot_06():
        pytest.skip(GROOT_06_ONLY)

    checkpoint = tiny_groot(tmp_path / "groot", PUSHT_PIXELS, PUSHT_ACTION)
    length, episodes = 10, 3
    # lerobot-eval hands a PushT policy an empty task, for which GR00T's preprocessor writes its default prompt.
    evaluate_here(
        tmp_path / "ours", "env=pusht", f"env.task='{DEFAULT_PROMPT}'", "policy=groot", f"policy.path={checkpoint}",
        f"env.episode_length={length}", f"eval.n_episodes={episodes}", "eval.batch_size=2",
        "eval.use_async_envs=false", "eval.max_episodes_rendered=0", "device=cpu",
    )  # fmt: skip
    theirs = run_lerobot_eval(
        f"--policy.path={checkpoint}", "--policy.device=cpu", "--env.type=pusht", f"--env.episode_length={length}",
        f"--eval.n_episodes={episodes}", "--eval.batch_size=1", "--eval.use_async_envs=false", "--seed=1000",
        output_dir=tmp_path / "theirs",
        env={"OMP_NUM_THREADS": "1"},
        command=[sys.executable, "-m", "tests.helpers.lerobot_eval_rows"],
    )  # fmt: skip
    records = sorted(read_episodes(tmp_path / "ours"), key=lambda r: r["episode_index"])
    assert [r["episode_index"] for r in records] == list(range(episodes))
    assert [r["sum_reward"] for r in records] == pytest.approx(theirs, rel=1e-6, abs=1e-9)
    assert len({round(r["sum_reward"], 6) for r in records}) > 1  # the episodes differ
