"""Recording survives SIGKILL: a shard killed outright (as SLURM, preemption or the OOM killer do) loses only the
steps of its unfinished part; the episodes whose records were kept but whose steps were lost run again for their
steps (on resume, or by the dynamic shard that takes the killed one's block over), and the merged dataset holds every
episode exactly once, step for step as an uninterrupted run recorded it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.publish.recording_parts import merge_recordings, stepped_units
from lerobot_hydra.rollout.plan import claim_blocks
from tests.conftest import ROOT, read_json, run_eval
from tests.store.test_store import kill_group, start_eval, wait_for

# Random actions (every episode runs its 20 steps), state observations; every step sleeps 50 ms so that the test
# can kill a shard in the middle of its work.
TASKS = ["reach-v3", "push-v3"]
WORKLOAD = (
    "env._target_=tests.helpers.slow_shard_env.SlowShardMetaWorldConfig",
    "+env.step_sleep_s=0.05",
    f"env.task=[{','.join(TASKS)}]",
    "policy=random",
    "env.obs_type=state",
    "eval.n_episodes=16",
    "env.episode_length=20",
    "eval.recording=all",
)


def load(root: Path) -> Any:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(f"local/{root.parent.name}", root=root)


def steps_of(root: Path) -> dict[tuple[int, int, int], dict[str, Any]]:
    """Per (task index, task id, episode index), every recorded step's action and reward; an episode found twice
    in the dataset fails."""
    dataset = load(root)
    out: dict[tuple[int, int, int], dict[str, Any]] = {}
    episode_of: dict[tuple[int, int, int], int] = {}
    for i in range(len(dataset)):
        frame = dataset[i]
        key = (int(frame["eval.task_index"]), int(frame["eval.task_id"]), int(frame["eval.episode_index"]))
        assert episode_of.setdefault(key, int(frame["episode_index"])) == int(frame["episode_index"]), key
        ep = out.setdefault(key, {"seed": int(frame["eval.seed"]), "actions": [], "rewards": []})
        ep["actions"].append(np.asarray(frame["action"]))
        ep["rewards"].append(float(frame["next.reward"]))
    assert dataset.num_episodes == len(out)
    return out


def assert_same_steps(got: dict[tuple[int, int, int], Any], want: dict[tuple[int, int, int], Any]) -> None:
    assert sorted(got) == sorted(want)
    for key, ep in want.items():
        assert got[key]["seed"] == ep["seed"]
        assert len(got[key]["rewards"]) == len(ep["rewards"]) == 20
        np.testing.assert_allclose(got[key]["rewards"], ep["rewards"], rtol=1e-6)
        np.testing.assert_allclose(np.stack(got[key]["actions"]), np.stack(ep["actions"]), rtol=1e-6)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, int, int], Any]:
    """The steps of the same episodes recorded by one run that nobody killed (its parts joined)."""
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    run_eval(*WORKLOAD, "eval.batch_size=2", out_dir=run_dir / "run")
    assert len(list((run_dir / "run" / "recording").glob("part-*.units.json"))) == 4  # 32 episodes, 10 a part
    merge_recordings([run_dir / "run"], run_dir / "joined")
    return steps_of(run_dir / "joined" / "recording")


def records(run_dir: Path) -> set[tuple[str, int, int]]:
    path = run_dir / "episodes.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return {(r["task_group"], r["task_id"], r["episode_index"]) for r in map(json.loads, lines)}


def merge(sweep: Path) -> None:
    merged = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.shards", str(sweep)], cwd=ROOT, capture_output=True, text=True
    )
    assert merged.returncode == 0, merged.stdout + merged.stderr


def test_a_static_shard_killed_and_resumed_records_every_episode_once(
    tmp_path: Path, uninterrupted: dict[tuple[int, int, int], Any]
) -> None:
    shard = ("eval.num_shards=2", "eval.batch_size=2")
    killed = start_eval(tmp_path / "s0", *WORKLOAD, *shard, "eval.shard_id=0")
    # Killed once a part is finished and the next holds recorded episodes: their steps are lost with it.
    wait_for(lambda: len(records(tmp_path / "s0")) >= 12, killed)
    kill_group(killed)
    lost = records(tmp_path / "s0") - stepped_units(tmp_path / "s0")
    assert lost, "the kill should have left recorded episodes without steps"
    run_eval(*WORKLOAD, *shard, "eval.shard_id=0", out_dir=tmp_path / "s0")  # the resume runs them again
    assert lost <= stepped_units(tmp_path / "s0")
    assert records(tmp_path / "s0") == stepped_units(tmp_path / "s0")
    run_eval(*WORKLOAD, *shard, "eval.shard_id=1", out_dir=tmp_path / "s1")
    merge(tmp_path)
    assert len(read_json(tmp_path / "eval_info.json")["episodes"]) == 32
    assert_same_steps(steps_of(tmp_path / "recording"), uninterrupted)


def _half_done_block(sweep: Path, shard_dir: Path) -> bool:
    """Whether shard 0 holds a claim on a block not marked done of which it recorded an episode."""
    queues = list(sweep.glob(".queue_*"))
    if not queues:
        return False
    blocks = [b for region in claim_blocks([(t, 0) for t in TASKS], 16, 2) for b in region]
    done = {p.name for p in (queues[0] / "finished").iterdir()}
    mine = records(shard_dir)
    for claim in (queues[0] / "claimed").iterdir():
        index = claim.name.partition(".")[0]
        if index not in done and claim.read_text().startswith("0-"):
            block = blocks[int(index)]
            if any((*block.key, k) in mine for k in block.episodes):
                return True
    return False


def test_a_killed_dynamic_shards_lost_steps_are_recorded_by_the_shard_that_takes_its_block(
    tmp_path: Path, uninterrupted: dict[tuple[int, int, int], Any]
) -> None:
    shard = ("eval.num_shards=2", "eval.batch_size=1", "eval.claims=dynamic")
    killed = start_eval(tmp_path / "s0", *WORKLOAD, *shard, "eval.shard_id=0")
    wait_for(lambda: _half_done_block(tmp_path, tmp_path / "s0"), killed)
    kill_group(killed)
    lost = records(tmp_path / "s0") - stepped_units(tmp_path / "s0")
    assert lost, "the kill should have left recorded episodes without steps"
    run_eval(*WORKLOAD, *shard, "eval.shard_id=1", out_dir=tmp_path / "s1")  # takes the rest, and the lost steps
    assert lost <= stepped_units(tmp_path / "s1")
    assert not lost & records(tmp_path / "s1")  # their records stay shard 0's
    # Shard 0's records are in its episodes.jsonl only: its rerun (the queue is drained) writes its shard file.
    run_eval(*WORKLOAD, *shard, "eval.shard_id=0", out_dir=tmp_path / "s0")
    assert stepped_units(tmp_path / "s0") == set()  # nothing ran again: shard 1 recorded the lost steps
    merge(tmp_path)
    assert len(read_json(tmp_path / "eval_info.json")["episodes"]) == 32
    assert_same_steps(steps_of(tmp_path / "recording"), uninterrupted)
