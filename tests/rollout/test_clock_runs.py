"""Real runs on eval.clock: no latency and a threshold of 0 is lockstep, episode for episode, for every chunked
family run here; modeled latency does not depend on batch size, workers, shards or resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from lerobot_hydra.app.evaluation import evaluate_config
from tests.conftest import outcome, read_episodes, read_json

EXPERT = ["policy=metaworld_expert", "policy.chunk=6", "env.task=[pick-place-v3,reach-v3]", "env.episode_length=60"]
ZERO = ["eval.clock.mode=modeled", "eval.clock.latency_ms=0", "eval.clock.chunk_size_threshold=0"]
# Drawn per inference, 2 to 10 steps at MetaWorld's 80 fps, overlapping chunks blended.
JITTER = ["eval.clock.mode=modeled", "eval.clock.latency_ms=60", "eval.clock.distribution=uniform"]
JITTER += ["eval.clock.spread_ms=40", "eval.clock.chunk_size_threshold=0.5", "eval.clock.aggregate=average"]
# Timing kept by every record; wall times (wall_s, infer_ms) differ from run to run.
TIMING = ("inferences", "latency_steps", "latency_ms", "held_steps")


def run_in(compose: Callable, out_dir: Path, *overrides: str) -> list[dict[str, Any]]:
    """eval.py's run, in this process (resuming from out_dir's records); its records by episode."""
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(*overrides, "device=cpu", "eval.max_episodes_rendered=0")
    evaluate_config(cfg, validate(cfg), out_dir, "")
    return sorted(read_episodes(out_dir), key=lambda r: (r["task_name"], r["episode_index"]))


def kept(records: list[dict[str, Any]], timing: tuple[str, ...] = TIMING) -> list[tuple]:
    return [(*outcome(r), *(str(r[k]) for k in timing)) for r in records]


def test_no_latency_and_threshold_0_is_lockstep_for_the_chunked_expert(compose: Callable, tmp_path: Path) -> None:
    common = [*EXPERT, "eval.n_episodes=3", "eval.batch_size=2", "eval.use_async_envs=false"]
    lockstep = run_in(compose, tmp_path / "lockstep", *common)
    modeled = run_in(compose, tmp_path / "modeled", *common, *ZERO)
    without_ms = ("inferences", "latency_steps", "held_steps")
    assert kept(modeled, without_ms) == kept(lockstep, without_ms)
    assert all(r["latency_ms"] is None for r in lockstep) and all(set(r["latency_ms"]) == {0.0} for r in modeled)
    assert all(r["held_steps"] == 0 and r["inferences"] == -(-r["steps"] // 6) for r in lockstep)
    assert all(len(r["infer_ms"]) == r["inferences"] for r in lockstep)  # lockstep measures its inferences too
    assert any(r["success"] for r in lockstep) and any(r["steps"] > 6 for r in lockstep)


def test_modeled_latency_does_not_depend_on_batch_workers_lanes_shards_or_resume(
    compose: Callable, tmp_path: Path
) -> None:
    common = [*EXPERT, *JITTER, "eval.n_episodes=4"]
    alone = kept(run_in(compose, tmp_path / "alone", *common, "eval.batch_size=1"))
    assert len(alone) == 8 and len({r[-2] for r in alone}) == 8  # every episode its own latencies
    assert any(int(r[-1]) > 0 for r in alone)  # some held a step: latency mattered
    assert kept(run_in(compose, tmp_path / "workers", *common, "eval.batch_size=3")) == alone
    lanes = ["eval.batch_size=2", "eval.max_parallel_tasks=2", "eval.use_async_envs=false"]
    assert kept(run_in(compose, tmp_path / "lanes", *common, *lanes)) == alone
    shards = []
    for shard in (0, 1):
        shard_args = [f"eval.shard_id={shard}", "eval.num_shards=2", "eval.batch_size=3"]
        shards += run_in(compose, tmp_path / f"shard{shard}", *common, *shard_args)
    assert sorted(kept(shards)) == sorted(alone)
    resumed = tmp_path / "resumed"
    run_in(compose, resumed, *common, "eval.batch_size=2", "eval.use_async_envs=false")
    episodes = resumed / "episodes.jsonl"
    episodes.write_text("".join(episodes.read_text().splitlines(keepends=True)[:3]))  # a killed run's records
    assert kept(run_in(compose, resumed, *common, "eval.batch_size=2", "eval.use_async_envs=false")) == alone


def test_results_carry_inference_latency_percentiles(compose: Callable, tmp_path: Path) -> None:
    from lerobot_hydra.schemas.schema import validate

    cfg = compose(*EXPERT, *JITTER, "eval.n_episodes=2", "eval.batch_size=1", "eval.max_episodes_rendered=0")
    results = evaluate_config(cfg, validate(cfg), tmp_path, "")
    for task in results.tasks:
        charged = sorted(ms for r in task.records for ms in r.latency_ms or [])
        assert task.inference_ms_p50 is not None and task.inference_ms_p99 is not None
        assert charged[0] <= task.inference_ms_p50 <= task.inference_ms_p99 <= charged[-1]
    assert results.not_reproducible == []  # modeled latency: the same episodes on any device


def test_measured_latency_charges_each_inference_its_wall_time(compose: Callable, tmp_path: Path) -> None:
    import math

    from lerobot_hydra.policies.clock import MEASURED

    common = [*EXPERT, "eval.clock.mode=measured", "eval.n_episodes=2", "eval.batch_size=1"]
    for record in run_in(compose, tmp_path, *common):
        assert record["latency_ms"] == record["infer_ms"] and len(record["latency_ms"]) == record["inferences"]
        later = [math.ceil(ms * 80 / 1000 - 1e-9) for ms in record["latency_ms"][1:]]  # MetaWorld: 80 fps
        assert record["latency_steps"] == [0, *later]  # an episode's first chunk is awaited
        assert record["not_reproducible"] == MEASURED  # and each record says so, as do the results
    assert read_json(tmp_path / "eval_info.json")["not_reproducible"] == [MEASURED]


def test_each_latency_of_a_sweep_is_its_own_configuration(compose: Callable) -> None:
    from lerobot_hydra.run.identity import run_identity
    from lerobot_hydra.schemas.schema import validate
    from lerobot_hydra.store.shard_file import fingerprint

    def printed(*overrides: str) -> str:
        cfg = compose(*EXPERT, *overrides)
        return fingerprint(run_identity(cfg, validate(cfg)))

    latencies = {printed("eval.clock.mode=modeled", f"eval.clock.latency_ms={ms}") for ms in (0, 50, 100)}
    assert len(latencies) == 3 and printed() not in latencies
