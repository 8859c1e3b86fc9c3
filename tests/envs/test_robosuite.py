"""env=robosuite: robosuite 1.5's own tasks, their simulators in an environment of their own (env.python) while this
interpreter holds LIBERO's robosuite 1.4; and both benchmarks, each in its environment, as one sweep."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from lerobot_hydra.core.errors import UserError
from tests.conftest import outcome, read_episodes, read_json, run_eval, run_here
from tests.helpers.sim_envs import metaworld_python, robosuite_python
from tests.rollout.test_render_read import assert_same_runs

ACTION = (0.4, -0.2, -0.3, 0.0, 0.0, 0.1, 1.0)  # moves the Panda's hand: the dense reward changes every step
# robosuite driven by hand in its environment: the task built as env=robosuite builds it, its generator seeded with
# the episode's seed, ACTION at every step; prints the reward summed over the steps.
BY_HAND = """
import json, sys
import numpy as np, robosuite
name, seed, steps, action = json.loads(sys.argv[1])
env = robosuite.make(name, robots="Panda", has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False,
                     reward_shaping=True, ignore_done=True, hard_reset=False, seed=0)
env.rng.bit_generator.state = np.random.default_rng(seed).bit_generator.state
env.reset()
print(sum(env.step(np.array(action))[1] for _ in range(steps)))
"""


def robosuite(*overrides: str) -> list[str]:
    return ["env=robosuite", f"env.python={robosuite_python()}", *overrides]


class Fixed:
    """A lerobot_hydra Policy: ACTION on every row."""

    def reset(self, task: Any, episode_seeds: Any) -> None:
        self.rows = len(episode_seeds)

    def select_action(self, batch: dict[str, Any]) -> Any:
        return torch.tensor([ACTION] * self.rows)

    def fork(self) -> Fixed:
        return Fixed()

    def finish(self) -> None:
        pass


def test_robosuite_tasks_in_their_environment_are_robosuites_own_episodes_seeded_per_episode() -> None:
    import dataclasses

    import lerobot_hydra

    overrides = robosuite("env.task=[Lift,Door]", "env.episode_length=15", "eval.n_episodes=2")
    batched = lerobot_hydra.evaluate(Fixed(), [*overrides, "eval.batch_size=2"])
    alone = lerobot_hydra.evaluate(Fixed(), [*overrides, "eval.batch_size=1"])
    records = [[dataclasses.asdict(r) for t in results.tasks for r in t.records] for results in (batched, alone)]
    assert [outcome(r) for r in records[0]] == [outcome(r) for r in records[1]] and len(records[0]) == 4
    for record in records[0]:
        request = json.dumps([record["task_name"], record["seed"], 15, ACTION])
        hand = subprocess.run([robosuite_python(), "-c", BY_HAND, request], capture_output=True, text=True)
        assert hand.returncode == 0, hand.stderr
        assert record["steps"] == 15 and round(record["sum_reward"], 6) == round(float(hand.stdout), 6), record
    lift = [r["sum_reward"] for r in records[0] if r["task_name"] == "Lift"]
    assert lift[0] != lift[1]  # each episode starts from its own seed's state
    assert batched.provenance["simulator"]["packages"]["robosuite"] == "1.5.2"


def test_pixels_and_videos_are_upright_and_the_same_whether_or_not_the_policy_reads_them(tmp_path: Path) -> None:
    """Unread (a random policy), the camera is drawn only for the film; computed, the film is the observation's."""
    run = robosuite("env.task=Lift", "env.obs_type=pixels_agent_pos", "env.observation_height=48")
    run += ["env.observation_width=48", "env.episode_length=6", "policy=random", "eval.n_episodes=1"]
    run += ["eval.max_episodes_rendered=1"]
    run_here(*run, out_dir=tmp_path / "read")
    run_here(*run, "env.compute_all_observations=true", out_dir=tmp_path / "all")
    read, every = read_episodes(tmp_path / "read"), read_episodes(tmp_path / "all")
    assert_same_runs(tmp_path / "read", tmp_path / "all", read, every)
    import imageio.v3 as iio

    frame = iio.imread(tmp_path / "read" / read[0]["video_path"])[0].astype(float)
    # The agentview camera looks at the table (bright, below) from behind the robot: upright, the top rows are darker.
    assert frame[: 48 // 4].mean() < frame[-48 // 4 :].mean()


def test_robosuite_refuses_liberos_robosuite_14_and_an_unknown_task_in_one_line(tmp_path: Path) -> None:
    messages = []
    for overrides in (
        ["env=robosuite"],
        robosuite("env.task=Lfit"),
        ["env=robosuite", f"env.python={metaworld_python('3.3.0')}"],
    ):
        with pytest.raises(UserError) as err:
            run_here(*overrides, "policy=random", "eval.n_episodes=1", out_dir=tmp_path / "run")
        messages.append(str(err.value))
    assert all("\n" not in m for m in messages) and not (tmp_path / "run" / "episodes.jsonl").exists()
    assert messages[0].startswith("this interpreter has robosuite 1.4.0, and env=robosuite needs robosuite 1.5")
    assert "no task 'Lfit' (did you mean 'Lift'?)" in messages[1]
    assert messages[2].startswith(f"env.python={metaworld_python('3.3.0')} has robosuite 1.4.0")


def test_a_robosuite_task_and_a_libero_task_in_one_sweep_each_in_its_own_environment(tmp_path: Path) -> None:
    """env variants, each naming its environment: LIBERO's (robosuite 1.4) and robosuite 1.5's."""
    conf = tmp_path / "conf" / "env"
    conf.mkdir(parents=True)
    (conf / "robosuite_own.yaml").write_text(
        f"defaults: [robosuite, _self_]\ntask: [Lift]\nepisode_length: 8\npython: {robosuite_python()}\n"
    )
    (conf / "libero_own.yaml").write_text(
        "defaults: [libero, _self_]\ntask: libero_spatial\ntask_ids: [0]\nepisode_length: 8\n"
        f"observation_height: 64\nobservation_width: 64\npython: {metaworld_python('3.3.0')}\n"
    )
    sweep = tmp_path / "sweep"
    args = [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "env=libero_own,robosuite_own", "policy=random"]
    proc = run_eval(*args, "eval.n_episodes=2", "eval.batch_size=2", out_dir=sweep, multirun=True)
    summary = read_json(sweep / "sweep_summary.json")
    rows = {row["combination"]: row for row in summary["combinations"]}
    assert sorted(rows) == ["env=libero_own", "env=robosuite_own"], rows
    assert "robosuite 1.4.0" in rows["env=libero_own"]["simulator"]
    assert "robosuite 1.5.2" in rows["env=robosuite_own"]["simulator"]
    assert all(row["n_episodes"] == 2 for row in rows.values())
    names = {r["task_name"] for d in ("0", "1") for r in read_episodes(sweep / d)}
    assert "Lift" in names and len(names) == 2, names
    assert "Simulators (env.python):" in proc.stdout
