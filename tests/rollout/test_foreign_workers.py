"""Simulator workers in another interpreter (env.python, docs/simulator-envs.md): the same episodes as in-family
workers, the policy on one Python and the simulator on another, a killed foreign worker respawned, the refusals, and
a sweep over two MuJoCo versions merged and compared per task."""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import re
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import psutil
import pytest

from devkit.lerobot_checkpoints import tiny_act
from devkit.worker_kills import kill_a_worker, outcomes, start_eval, wait_for_records, worker_pids
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.vector import interpreter
from tests.conftest import outcome, read_episodes, read_json, run_eval, run_here
from tests.helpers.sim_envs import base_python, metaworld_python, sim_python
from tests.rollout.test_render_read import assert_same_runs

# The scripted experts on two tasks, two workers, the first episode of each task filmed.
EXPERTS = [
    "env.task=[reach-v3,push-v3]",
    "policy=metaworld_expert",
    "env.obs_type=state",
    "eval.n_episodes=2",
    "eval.batch_size=2",
    "env.episode_length=120",
    "eval.max_episodes_rendered=1",
]


def test_metaworld_in_another_environment_equals_in_family_workers(tmp_path: Path) -> None:
    python = metaworld_python("3.3.0")
    run_here(*EXPERTS, out_dir=tmp_path / "here")
    run_here(*EXPERTS, f"env.python={python}", out_dir=tmp_path / "there")
    assert_same_runs(
        tmp_path / "here", tmp_path / "there", read_episodes(tmp_path / "here"), read_episodes(tmp_path / "there")
    )
    provenance = read_json(tmp_path / "there" / "eval_info.json")["provenance"]
    assert provenance["simulator"]["command"] == python
    assert provenance["simulator"]["python"].startswith("3.11.")  # the policy's is this test's Python (3.12 in CI)
    assert provenance["packages"]["mujoco"] == provenance["simulator"]["packages"]["mujoco"] == "3.3.0"


@pytest.mark.slow
@pytest.mark.libero
def test_libero_in_another_environment_equals_in_family_workers(tmp_path: Path) -> None:
    """Two tasks, both cameras computed (and passed through the shared mapping), the first episode filmed."""
    overrides = ["env=libero", "policy=random", "env.task=libero_spatial", "env.task_ids=[0,1]"]
    overrides += ["env.episode_length=8", "env.observation_height=64", "env.observation_width=64"]
    overrides += ["eval.n_episodes=1", "eval.batch_size=2", "eval.max_episodes_rendered=1"]
    overrides += ["env.compute_all_observations=true"]
    run_here(*overrides, out_dir=tmp_path / "here")
    run_here(*overrides, f"env.python={metaworld_python('3.3.0')}", out_dir=tmp_path / "there")
    here, there = read_episodes(tmp_path / "here"), read_episodes(tmp_path / "there")
    assert_same_runs(tmp_path / "here", tmp_path / "there", here, there)
    assert [r["task_id"] for r in there] == [0, 1]
    provenance = read_json(tmp_path / "there" / "eval_info.json")["provenance"]
    assert provenance["simulator"]["packages"]["robosuite"] == provenance["packages"]["robosuite"] == "1.4.0"


def test_a_killed_foreign_worker_is_respawned_and_the_run_equals_an_undisturbed_one(tmp_path: Path) -> None:
    overrides = ["env.task=[reach-v3,push-v3]", "policy=random", "env.obs_type=state", "eval.n_episodes=4"]
    overrides += ["env.episode_length=100", "eval.batch_size=2", f"env.python={metaworld_python('3.3.0')}"]
    disturbed = tmp_path / "killed"
    proc = start_eval(disturbed, overrides)
    wait_for_records(proc, disturbed, 1)
    killed = kill_a_worker(proc.pid, random.Random(0))
    stdout, stderr = proc.communicate(timeout=600)
    out = stdout + stderr
    assert killed is not None and proc.returncode == 0, out
    assert re.search(r"the MetaWorld worker of sub-env \d was killed by SIGKILL .* replaced it", out), out
    run_eval(*overrides, out_dir=tmp_path / "clean")
    assert outcomes(disturbed) == outcomes(tmp_path / "clean")
    assert len(outcomes(disturbed)) == 8


def test_a_killed_forkserver_is_started_again_for_the_next_worker(tmp_path: Path) -> None:
    """The interpreter's forkserver SIGKILLed mid-run: its workers run on; a worker killed after it is replaced by
    one forked from a fresh server, and the run equals an undisturbed one. Steps of 20 ms: a run of ~8 s."""
    overrides = ["env.task=[reach-v3,push-v3]", "policy=random", "env.obs_type=state", "eval.n_episodes=4"]
    overrides += ["env.episode_length=100", "eval.batch_size=2", f"env.python={metaworld_python('3.3.0')}"]
    overrides += ["env._target_=tests.helpers.slow_shard_env.SlowShardMetaWorldConfig", "+env.step_sleep_s=0.02"]
    disturbed = tmp_path / "killed"
    proc = start_eval(disturbed, overrides)
    wait_for_records(proc, disturbed, 1)
    workers = worker_pids(proc.pid)
    (server,) = [p for p in psutil.Process(proc.pid).children() if "foreign_worker --server" in " ".join(p.cmdline())]
    server.kill()  # a zombie until the run polls it: not waited for here
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=600)
    out = stdout + stderr
    assert proc.returncode == 0 and "replaced it" in out, out
    run_eval(*overrides, out_dir=tmp_path / "clean")
    assert outcomes(disturbed) == outcomes(tmp_path / "clean")
    assert len(outcomes(disturbed)) == 8


def refusal(tmp_path: Path, *overrides: str) -> str:
    with pytest.raises(UserError) as err:
        run_here("env.task=[reach-v3]", "policy=random", "eval.n_episodes=1", *overrides, out_dir=tmp_path / "run")
    message = str(err.value)
    assert "\n" not in message
    assert not (tmp_path / "run" / "episodes.jsonl").exists()
    return message


def test_each_unusable_interpreter_is_refused_in_one_line_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert refusal(tmp_path, "env.python=/nowhere/bin/python").startswith("env.python=/nowhere/bin/python cannot be")
    broken = tmp_path / "broken-python"
    broken.write_text(
        "#!/bin/sh\necho 'Fatal Python error: init_fs_encoding: failed to get the Python codec' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    assert refusal(tmp_path, f"env.python={broken}") == (
        f"env.python={broken} is broken: Fatal Python error: init_fs_encoding: failed to get the Python codec"
    )
    bare = tmp_path / "bare"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(bare)], check=True)
    with monkeypatch.context() as patch:
        patch.setenv("PYTHONPATH", "")  # the worker side sees only its own site-packages (and its working dir)
        patch.chdir(tmp_path)
        assert f"env.python={bare}/bin/python has no lerobot_hydra; install" in refusal(
            tmp_path, f"env.python={bare}/bin/python"
        )
    without = sim_python("no-benchmark", "none", system_site=False)  # this package, gymnasium and numpy: no MetaWorld
    assert refusal(tmp_path, f"env.python={without}").startswith(f"env.python={without} cannot import metaworld (")
    mujoco4 = metaworld_python("4.0.1")
    assert refusal(tmp_path, f"env.python={mujoco4}") == (
        f"env.python={mujoco4} has mujoco 4.0.1, under which MetaWorld 3.1.1 fails to reset (reset_mocap_welds: "
        "the shape of MuJoCo 4's eq_data changed); use mujoco<4, e.g. mujoco==3.5.0"
    )
    python = metaworld_python("3.3.0")
    monkeypatch.setattr(interpreter, "version", lambda name: "0.0.1")  # this side's lerobot_hydra, as if older
    assert refusal(tmp_path, f"env.python={python}") == (
        f"env.python={python} runs lerobot_hydra {version('lerobot_hydra')} (protocol 1), this side lerobot_hydra "
        "0.0.1 (protocol 1); install the same version on both sides"
    )
    monkeypatch.undo()
    message = refusal(tmp_path, f"env.python={python}", "eval.use_async_envs=false")
    assert message.startswith("eval.use_async_envs=false runs the simulators in this process")
    assert refusal(tmp_path, "env=lerobot", f"env.python={python}").startswith(
        "env.python is not offered for env=lerobot"
    )


def test_a_shard_or_a_resume_under_another_simulator_is_refused(tmp_path: Path) -> None:
    """The same env.python path, first an environment on MuJoCo 3.3.0, then one on 3.5.0 (a venv rebuilt between
    two shards): the merge and the resume name the difference in one line."""
    link = tmp_path / "simulator"
    link.symlink_to(Path(metaworld_python("3.3.0")).parents[1])
    shard = ["env.task=[reach-v3,push-v3]", "policy=random", "env.obs_type=state", "env.episode_length=20"]
    shard += ["eval.n_episodes=2", "eval.batch_size=2", "eval.num_shards=2", f"env.python={link}/bin/python"]
    run_eval(*shard, "eval.shard_id=0", out_dir=tmp_path / "sweep" / "s0")
    link.unlink()
    link.symlink_to(Path(metaworld_python("3.5.0")).parents[1])
    run_eval(*shard, "eval.shard_id=1", out_dir=tmp_path / "sweep" / "s1")
    merge = subprocess.run(
        [sys.executable, "-m", "lerobot_hydra.sweeps.shards", str(tmp_path / "sweep")], capture_output=True, text=True
    )
    assert merge.returncode != 0 and "differ in: simulator.packages.mujoco" in merge.stderr, merge.stderr
    resumed = run_eval(*shard, "eval.shard_id=0", out_dir=tmp_path / "sweep" / "s0", check=False)
    assert resumed.returncode != 0
    assert (
        resumed.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "holds results of a different configuration (differs in: simulator.packages.mujoco); resume with the same "
            "config or choose a new output directory"
        )
    ), resumed.stderr


def test_a_sweep_over_two_mujoco_versions_is_merged_and_compared_per_task(tmp_path: Path) -> None:
    pythons = [metaworld_python("3.3.0"), metaworld_python("3.5.0")]
    sweep = tmp_path / "sweep"
    small = ["env.task=[reach-v3,pick-place-v3]", "policy=metaworld_expert", "env.obs_type=state", "eval.n_episodes=2"]
    proc = run_eval(*small, "eval.batch_size=2", f"env.python={','.join(pythons)}", out_dir=sweep, multirun=True)
    summary = read_json(sweep / "sweep_summary.json")
    assert [row["simulator"].split(",")[0] for row in summary["combinations"]] == ["mujoco 3.3.0", "mujoco 3.5.0"]
    (comparison,) = summary["comparisons"]
    assert comparison["paired"] and [t["task_name"] for t in comparison["per_task"]] == ["reach-v3", "pick-place-v3"]
    assert comparison["simulators"]["candidate"].startswith("mujoco 3.5.0, ")
    assert "simulators: baseline mujoco 3.3.0" in proc.stdout


@pytest.mark.slow
@pytest.mark.libero
def test_libero_under_two_mujoco_versions_is_one_sweep_merged_and_compared_per_task(tmp_path: Path) -> None:
    """hf-libero (robosuite 1.4) under MuJoCo 3.3.0 and 3.5.0, the environments of the MetaWorld sweep (the 3.11
    base holds LIBERO too). A random policy never succeeds; a trained one's table takes this path."""
    pythons = [metaworld_python("3.3.0"), metaworld_python("3.5.0")]
    sweep = tmp_path / "sweep"
    overrides = ["env=libero", "policy=random", "env.task=libero_spatial", "env.task_ids=[0,1]"]
    overrides += ["env.episode_length=10", "eval.n_episodes=2", "eval.batch_size=2"]
    proc = run_eval(*overrides, f"env.python={','.join(pythons)}", out_dir=sweep, multirun=True)
    summary = read_json(sweep / "sweep_summary.json")
    simulators = [row["simulator"] for row in summary["combinations"]]
    assert [s.split(",")[0] for s in simulators] == ["mujoco 3.3.0", "mujoco 3.5.0"]
    assert all("robosuite 1.4.0" in s for s in simulators), simulators
    (comparison,) = summary["comparisons"]
    assert comparison["paired"] and [t["task_id"] for t in comparison["per_task"]] == [0, 1]
    assert "simulators: baseline mujoco 3.3.0" in proc.stdout
    for job in ("0", "1"):
        records = read_episodes(sweep / job)
        assert sorted(r["task_id"] for r in records) == [0, 0, 1, 1] and all(r["steps"] == 10 for r in records)


@pytest.mark.lerobot
def test_a_lerobot_policy_on_one_python_line_drives_simulators_on_the_other(tmp_path: Path) -> None:
    """On the 3.12 line (LeRobot 0.6.1) the simulators run on 3.11, on the 3.11 line (LeRobot 0.4.4) on 3.12."""
    other = os.environ.get("LEROBOT_HYDRA_OTHER_PYTHON")
    if not other:
        pytest.skip("set LEROBOT_HYDRA_OTHER_PYTHON to the other LeRobot line's python (CI does)")
    overrides = ["policy=act", f"policy.path={tiny_act(tmp_path / 'act')}", "env.obs_type=state"]
    overrides += ["env.task=[reach-v3,push-v3]", "eval.n_episodes=2", "eval.batch_size=2", "env.episode_length=30"]
    run_here(*overrides, out_dir=tmp_path / "here")
    run_here(*overrides, f"env.python={other}", out_dir=tmp_path / "there")
    here, there = read_episodes(tmp_path / "here"), read_episodes(tmp_path / "there")
    assert [outcome(r) for r in here] == [outcome(r) for r in there] and len(here) == 4
    provenance = read_json(tmp_path / "there" / "eval_info.json")["provenance"]
    assert provenance["simulator"]["python"][:4] != platform.python_version()[:4]
    assert provenance["packages"]["lerobot"] == version("lerobot")


def test_the_python_api_runs_simulators_in_another_environment() -> None:
    import lerobot_hydra
    from tests.app.test_api import METAWORLD, Constant

    overrides = [*METAWORLD, "eval.n_episodes=2", "eval.batch_size=2"]
    here = lerobot_hydra.evaluate(Constant(), overrides)
    there = lerobot_hydra.evaluate(Constant(), [*overrides, f"env.python={metaworld_python('3.3.0')}"])
    records = [[dataclasses.asdict(r) for t in results.tasks for r in t.records] for results in (here, there)]
    assert [outcome(r) for r in records[0]] == [outcome(r) for r in records[1]]
    servers = [p for p in psutil.Process().children(recursive=True) if "foreign_worker" in " ".join(p.cmdline())]
    assert servers == []  # the interpreter's forkserver stopped with the evaluation's last pool
    assert len(records[1]) == 4
