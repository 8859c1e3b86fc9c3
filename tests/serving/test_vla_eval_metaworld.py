"""`policy=vla_eval` on MetaWorld, whose convention is defined here (docs/vla-eval.md): a model server built on
vla-eval's `PredictModelServer`, served by vla-eval's own loop in a process of its own, evaluated through eval.py,
gives the episodes of the same model run in process, observation for observation. Python 3.12 line (vla-eval)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import outcome, read_episodes, read_json, run_eval
from tests.helpers.vla_eval_server import canonical, served, start_server, traces_since

pytest.importorskip("vla_eval", reason="vla-eval 0.8.0 (the vlaeval extra) is installed on the Python 3.12 line")

RUN = [
    "env=metaworld",
    "env.task=[reach-v3,push-v3]",
    "env.obs_type=pixels_agent_pos",
    "env.observation_height=32",
    "env.observation_width=32",
    "env.episode_length=15",
    "eval.n_episodes=2",
    "eval.batch_size=2",
    "device=cpu",
]


def test_served_metaworld_equals_in_process(tmp_path: Path) -> None:
    import lerobot_hydra
    from lerobot_hydra.envs.metaworld import MetaWorldEnvConfig
    from lerobot_hydra.serving.vla_eval.conventions import metaworld
    from tests.helpers.vla_eval_server import METAWORLD_PARAMS, InProcess

    env = MetaWorldEnvConfig(task="reach-v3", obs_type="pixels_agent_pos")
    policy = InProcess(metaworld(env, METAWORLD_PARAMS), 4)
    lerobot_hydra.evaluate(policy, [*RUN, "env.processors.pre=[]"], out_dir=tmp_path / "in_process")
    want = read_episodes(tmp_path / "in_process" / "eval_001")

    log = tmp_path / "observations.jsonl"
    process, url = start_server(tmp_path, "metaworld", log=log, chunk=4)
    try:
        run_eval(*RUN, *served(url), out_dir=tmp_path / "served")
        seen = traces_since(log, 0)
        # The same server behind a dynamic sweep: two shards claim the episodes, and the merge equals the plain run.
        dynamic = ["eval.shard_id=0,1", "eval.claims=dynamic"]
        run_eval(*RUN, *served(url), *dynamic, out_dir=tmp_path / "dynamic", multirun=True)
    finally:
        process.terminate()
        process.wait(30)
    assert sorted(map(outcome, read_episodes(tmp_path / "served"))) == sorted(map(outcome, want))
    assert canonical(seen) == canonical(policy.traces) and len(policy.traces) == 4
    merged = read_json(tmp_path / "dynamic" / "eval_info.json")["episodes"]
    assert sorted(map(outcome, merged)) == sorted(map(outcome, want))


def test_a_server_error_is_an_error_episode(tmp_path: Path) -> None:
    """The server's ERROR on push-v3's observations: each of its episodes runs once more, then is recorded as an
    error episode (exit code 3); reach-v3's episodes are evaluated as usual."""
    from lerobot_hydra.core.errors import EPISODE_ERRORS_EXIT

    process, url = start_server(tmp_path, "metaworld,error", chunk=4)
    try:
        proc = run_eval(*RUN, *served(url), out_dir=tmp_path / "run", check=False)
    finally:
        process.terminate()
        process.wait(30)
    assert proc.returncode == EPISODE_ERRORS_EXIT, proc.stderr
    records = read_episodes(tmp_path / "run")
    assert sorted((r["task_group"], r["episode_index"], bool(r.get("error"))) for r in records) == [
        ("push-v3", 0, True),
        ("push-v3", 1, True),
        ("reach-v3", 0, False),
        ("reach-v3", 1, False),
    ]
    errors = {r["error"] for r in records if r.get("error")}
    failure = "observation_failed: RuntimeError: this model fails on this task"
    assert errors == {f"the vla-eval model server at {url} answered ERROR: {failure}"}
    assert all(r["error_step"] == 1 for r in records if r.get("error"))
