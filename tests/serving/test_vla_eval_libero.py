"""`policy=vla_eval` against vla-eval 0.8.0 itself, on real LIBERO simulators: the observation sent equals
`LIBEROBenchmark.make_obs` for the same simulator state and an action moves the simulator as its `step` does; a
model server built on vla-eval's `PredictModelServer` and served by vla-eval's own loop, in a process of its own,
evaluated through eval.py, gives the episodes of the same model run in process, unsharded, as a 2-shard sweep and
in sequential rounds; its refusals are one line. vla-eval installs on the Python 3.12 line (the `vlaeval` extra)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.core.errors import UserError
from tests.conftest import evaluate_here, outcome, read_episodes, run_eval
from tests.helpers.vla_eval_server import canonical, lines, served, start_server, traces_since

pytest.importorskip("vla_eval", reason="vla-eval 0.8.0 (the vlaeval extra) is installed on the Python 3.12 line")
pytest.importorskip("libero", reason="needs the libero extra")
pytestmark = [pytest.mark.libero]

TASKS = ["env=libero", "env.task=libero_spatial", "env.task_ids=[0,1]", "device=cpu"]
RUN = [*TASKS, "env.episode_length=7", "env.observation_height=64", "env.observation_width=64", "eval.n_episodes=2"]
BATCHED = ["eval.batch_size=2"]  # two sessions at once, their observations sent before either answer is read
IN_PROCESS = ["eval.batch_size=1", "eval.use_async_envs=false"]  # no workers to start: the cheapest LIBERO run
CHUNK = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("vla_eval")
    log = tmp / "observations.jsonl"
    process, url = start_server(tmp, log=log)
    yield url, log
    process.terminate()
    process.wait(30)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], list[str]]:
    """The same model in process (no server), on the same episodes (one at a time: an episode does not depend on its
    batch)."""
    import lerobot_hydra
    from lerobot_hydra.envs.libero import LiberoEnvConfig
    from lerobot_hydra.serving.vla_eval.conventions import libero
    from tests.helpers.vla_eval_server import PARAMS, InProcess

    env = LiberoEnvConfig(task="libero_spatial", task_ids=[0, 1], observation_height=64, observation_width=64)
    policy = InProcess(libero(env, PARAMS), CHUNK)
    out = tmp_path_factory.mktemp("in_process")
    overrides = [*RUN, *IN_PROCESS, "env.processors.pre=[]", "eval.max_episodes_rendered=0"]
    lerobot_hydra.evaluate(policy, overrides, out_dir=out)
    return read_episodes(next(out.iterdir())), canonical(policy.traces)


@pytest.mark.slow
def test_observation_and_action_parity_with_vla_eval_libero() -> None:
    """Same LIBERO state: our observation is make_obs's (less controller_states, which LIBERO here does not
    report); the same actions, applied by us and by vla-eval's step, leave both simulators in the same state."""
    import anyio
    from vla_eval.benchmarks.libero.benchmark import LIBEROBenchmark

    from lerobot_hydra.envs.libero import LiberoEnvConfig
    from lerobot_hydra.envs.libero_setup import prepare_libero
    from lerobot_hydra.serving.vla_eval.conventions import libero
    from tests.envs.test_libero import batched

    prepare_libero()
    config = LiberoEnvConfig(task="libero_spatial", task_ids=[1])
    convention = libero(config, {"send_state": True, "send_wrist_image": True})
    ours = config.build(config.tasks()[0], render=False)
    theirs = LIBEROBenchmark(suite="libero_spatial", send_wrist_image=True, send_state=True)
    task = {**theirs.get_tasks()[1], "episode_idx": 3}
    try:
        # vla-eval seeds its simulator once, with env_seed (7), and its first reset places LIBERO's fixtures from
        # that generator: the same simulator state as our episode seeded 7 (stored init state 3 places the rest).
        raw, _ = ours.reset(seed=7, options={"episode_index": 3})
        anyio.run(theirs.start_episode, task)  # its reset, with its (null) recorder
        raw_theirs = theirs._last_result.obs
        actions = [[0.4, -0.3, 0.2, 0.05, -0.1, 0.02, 0.3], [0.1, 0.5, -0.4, 0.0, 0.1, -0.05, -0.2], [0.0] * 7]
        for step in range(len(actions) + 1):
            sent, expected = (
                convention.observation(batched(raw), 0, config.tasks()[0].description),
                theirs.make_obs(raw_theirs, task),
            )
            assert set(expected) - set(sent) == {"controller_states"} and set(sent) <= set(expected)
            assert sent["task_description"] == expected["task_description"]
            assert sent["images"].keys() == expected["images"].keys() == {"agentview", "wrist"}
            for name, image in expected["images"].items():
                assert sent["images"][name].dtype == image.dtype and np.array_equal(sent["images"][name], image)
            assert sent["states"].dtype == expected["states"].dtype and np.array_equal(
                sent["states"], expected["states"]
            )
            if step == len(actions):
                break
            action = np.asarray(actions[step], dtype=np.float32)  # as a server sends it
            raw, *_ = ours.step(convention.action(action))
            raw_theirs = theirs.step({"actions": action}).obs
            assert np.array_equal(ours._env.sim.get_state().flatten(), theirs._env.sim.get_state().flatten())
    finally:
        ours.close()
        theirs.cleanup()


@pytest.mark.slow
def test_served_run_equals_in_process_unsharded_sharded_and_sequential(
    tmp_path: Path, server: tuple[str, Path], in_process: tuple[list[dict[str, Any]], list[str]]
) -> None:
    url, log = server
    want, want_traces = in_process
    assert len(want) == 4 and len(want_traces) == 4 and all(len(t) > 10 for t in want_traces)

    start = lines(log)
    run_eval(*RUN, *BATCHED, *served(url), out_dir=tmp_path / "plain")
    assert sorted(map(outcome, read_episodes(tmp_path / "plain"))) == sorted(map(outcome, want))
    assert canonical(traces_since(log, start)) == want_traces

    start = lines(log)
    sweep = tmp_path / "sweep"
    run_eval(*RUN, *IN_PROCESS, *served(url), "eval.num_shards=2", "eval.shard_id=0,1", out_dir=sweep, multirun=True)
    shards = [r for shard in sorted(sweep.rglob("episodes.jsonl")) for r in read_episodes(shard.parent)]
    assert sorted(map(outcome, shards)) == sorted(map(outcome, want))
    assert canonical(traces_since(log, start)) == want_traces

    start = lines(log)
    rounds = ["eval.sequential.stop=threshold", "eval.sequential.threshold=50", "eval.sequential.round=1"]
    info = evaluate_here(tmp_path / "rounds", *RUN, *IN_PROCESS, *served(url), *rounds)
    got = info["episodes"]
    assert got and set(map(outcome, got)) <= set(map(outcome, want))
    assert set(canonical(traces_since(log, start))) <= set(want_traces)


def test_a_server_whose_specs_do_not_fit_libero_is_refused_in_one_line(tmp_path: Path) -> None:
    from lerobot_hydra.envs.libero import LiberoEnvConfig
    from lerobot_hydra.serving.vla_eval.client import VlaEvalPolicyConfig

    process, url = start_server(tmp_path, "quat")
    try:
        config = VlaEvalPolicyConfig(url=url, connect_timeout_s=30)
        with pytest.raises(UserError) as err:
            config.reads(LiberoEnvConfig(task="libero_spatial"))
    finally:
        process.terminate()
        process.wait(30)
    line = str(err.value)
    assert "\n" not in line and "does not fit LIBERO" in line
    assert (
        "observation state: the env sends eef_pos3_axisangle3_gripper2(8), the server reads eef_pos3_quat4_gripper1(8)"
        in line
    )


def test_a_server_that_answers_error_or_hangs(tmp_path: Path) -> None:
    """ERROR fails the row's episode as a simulator fault (run once more, then an error episode); a server that
    does not answer ends the run in one line after policy.timeout_s."""
    from lerobot_hydra.envs.base import TaskSpec
    from lerobot_hydra.envs.libero import LiberoEnvConfig
    from lerobot_hydra.serving.vla_eval.client import VlaEvalPolicyConfig
    from lerobot_hydra.vector.faults import SubEnvFailed

    env = LiberoEnvConfig(task="libero_spatial", observation_height=8, observation_width=8)
    robot = {
        "eef_pos": np.zeros((2, 3)),
        "eef_quat": np.tile([0.0, 0.0, 0.0, 1.0], (2, 1)),
        "gripper_qpos": np.zeros((2, 2)),
    }
    batch = {
        "raw": {
            "agentview": np.zeros((2, 8, 8, 3), np.uint8),
            "robot0_eye_in_hand": np.zeros((2, 8, 8, 3), np.uint8),
            "robot_state": robot,
        },
        "task": ["pick", "place"],
    }
    for mode in ("error", "hang"):
        process, url = start_server(tmp_path, mode)
        try:
            policy = VlaEvalPolicyConfig(url=url, connect_timeout_s=30, timeout_s=2).build(env, "cpu")
            policy.reset(TaskSpec("libero_spatial", 0, "t0", "pick", 5), [0, None])
            policy.reset_slots(TaskSpec("libero_spatial", 1, "t1", "place", 5), {1: 1})
            with pytest.raises(SubEnvFailed if mode == "error" else UserError) as err:
                policy.select_action(batch)
            policy.close()
        finally:
            process.terminate()
            process.wait(30)
        if mode == "error":
            assert (
                err.value.slot == 1
                and "answered ERROR: observation_failed: RuntimeError: this model fails on this task" in str(err.value)
            )
        else:
            assert str(err.value).startswith(
                f"the vla-eval model server at {url} sent no action within policy.timeout_s=2 s"
            )


@pytest.mark.slow
@pytest.mark.lerobot
def test_vla_eval_lerobot_server_serving_a_tiny_act(tmp_path: Path) -> None:
    """vla-eval's own LeRobot model server (`python -m vla_eval.model_servers.lerobot`) serving a tiny ACT built
    offline: its HELLO asks for the wrist image and the state, which LIBERO here sends, and eval.py runs its episodes.
    (The episodes differ from `policy=act` in process by design: vla-eval's LIBERO state folds the quaternion and its
    gripper is made +-1, see docs/vla-eval.md; the deterministic server above shows the transport exact.)"""
    pytest.importorskip("lerobot")
    from devkit.lerobot_checkpoints import tiny_act
    from lerobot_hydra.envs.libero import LiberoEnvConfig
    from lerobot_hydra.serving.vla_eval.client import VlaEvalPolicyConfig

    features = {
        "observation.images.image": ("VISUAL", (3, 64, 64)),
        "observation.images.image2": ("VISUAL", (3, 64, 64)),
        "observation.state": ("STATE", (8,)),
    }
    checkpoint = tiny_act(tmp_path / "act", features, (7, 0.0, 0.5))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    keys = '{"agentview": "observation.images.image", "wrist": "observation.images.image2"}'
    args = ["--address", f"127.0.0.1:{port}", "--args.policy_type=act", f"--args.checkpoint={checkpoint}"]
    args += ["--args.device=cpu", f"--args.image_keys={keys}"]
    process = subprocess.Popen([sys.executable, "-m", "vla_eval.model_servers.lerobot", *args])
    url = f"ws://127.0.0.1:{port}"
    try:
        config = VlaEvalPolicyConfig(url=url, connect_timeout_s=120)
        env = LiberoEnvConfig(task="libero_spatial", observation_height=64, observation_width=64)
        assert config.server["model_server"] == "LeRobotModelServer"
        assert set(config.convention(env).cameras) == {"agentview", "wrist"} and config.reads(env) == {
            "observation.images.image",
            "observation.images.image2",
            "observation.state",
        }
        overrides = [
            *TASKS[:2],
            "env.task_ids=[0]",
            "device=cpu",
            "env.episode_length=5",
            "eval.n_episodes=1",
            *IN_PROCESS,
        ]
        run_eval(
            *overrides, "env.observation_height=64", "env.observation_width=64", *served(url), out_dir=tmp_path / "run"
        )
    finally:
        process.terminate()
        process.wait(30)
    [record] = read_episodes(tmp_path / "run")
    assert record["steps"] == 5 and not record.get("error")
