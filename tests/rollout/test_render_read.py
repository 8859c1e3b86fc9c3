"""Cameras drawn only on the steps whose observation the policy reads (`eval.render=read`, the default): the same
episodes and filmed videos as drawing every step (`eval.render=every_step`), on MetaWorld pixels and LIBERO, in
process, in workers and through the policy server.

Each checkpoint's first preprocessor step records what reached the policy (tests/helpers/lerobot_tap.py): an
undrawn camera's image is zeros, so the tests see which steps were drawn, and that exactly the read ones were."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import PUSHT_ACTION, PUSHT_PIXELS, tiny_act, tiny_diffusion
from lerobot_hydra.core.errors import UserError
from tests.conftest import evaluate_here, read_episodes
from tests.helpers.metaworld_frames import count_frames
from tests.results.test_video import decode

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.usefixtures("one_torch_thread")]

SIZE = 64
METAWORLD_IMAGE = "observation.image"
METAWORLD = (
    "env=metaworld",
    "env.task=[reach-v3]",
    f"env.observation_height={SIZE}",
    f"env.observation_width={SIZE}",
    "env.episode_length=17",
    "eval.n_episodes=2",
    "eval.batch_size=2",
    "eval.max_episodes_rendered=1",
    "device=cpu",
)
LIBERO_IMAGES = ("observation.images.image", "observation.images.image2")
LIBERO = (
    "env=libero",
    "env.task=libero_spatial",
    "env.task_ids=[0]",
    f"env.observation_height={SIZE}",
    f"env.observation_width={SIZE}",
    "env.episode_length=10",
    "eval.n_episodes=2",
    "eval.batch_size=2",
    "eval.max_episodes_rendered=1",
    "device=cpu",
)
# Wide actions: the arm moves, so an image that differed at a read step would change every later reward.
ACTION = {"metaworld": (4, 0.0, 0.5), "libero": (7, 0.0, 0.5)}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests.helpers.lerobot_tap import ObservationTap

    root = tmp_path_factory.mktemp("render_read")
    camera = ("VISUAL", (3, SIZE, SIZE))
    metaworld = {METAWORLD_IMAGE: camera, "observation.state": ("STATE", (4,))}
    libero = {**dict.fromkeys(LIBERO_IMAGES, camera), "observation.state": ("STATE", (8,))}
    tap = (ObservationTap(),)
    return {
        # chunks of 8; Diffusion: 2 observations of history, chunks of 4
        "metaworld_act": tiny_act(root / "mw_act", metaworld, ACTION["metaworld"], first_steps=tap),
        "metaworld_diffusion": tiny_diffusion(root / "mw_diff", metaworld, ACTION["metaworld"], first_steps=tap),
        "libero_act": tiny_act(root / "lb_act", libero, ACTION["libero"], first_steps=tap),
        "libero_diffusion": tiny_diffusion(root / "lb_diff", libero, ACTION["libero"], first_steps=tap),
        "pusht_act": tiny_act(root / "pusht_act", PUSHT_PIXELS, PUSHT_ACTION, first_steps=tap),
    }


def evaluated(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch, *overrides: str
) -> tuple[list[dict[str, Any]], list[dict[str, np.ndarray]]]:
    """The run's records (by task and episode) and what reached the policy at each call."""
    from tests.helpers.lerobot_tap import TAP_ENV, tapped_calls

    monkeypatch.setenv(TAP_ENV, str(tmp_path / f"tap_{name}"))
    evaluate_here(tmp_path / name, *overrides)
    records = sorted(read_episodes(tmp_path / name), key=lambda r: (r["task_id"], r["episode_index"]))
    return records, tapped_calls(tmp_path / f"tap_{name}")


def drawn(calls: list[dict[str, np.ndarray]], key: str) -> list[list[bool]]:
    """Per call, per batch row: whether the camera `key` was drawn (an undrawn camera is zeros)."""
    return [[bool(row.any()) for row in call[key]] for call in calls]


def read_steps(steps: int, chunk: int, history: int) -> list[bool]:
    """The steps whose observation a chunked policy reads: those of its chunks and the `history - 1` before."""
    return [(step % chunk == 0) or (chunk - step % chunk < history) for step in range(steps)]


def films(run_dir: Path) -> dict[str, list[np.ndarray]]:
    return {str(p.relative_to(run_dir)): decode(p) for p in sorted(run_dir.glob("videos/**/*.mp4"))}


def untimed(records: list[dict]) -> list[dict]:
    """Records without what the wall clock decides: the episode's time and its forward passes'."""
    return [{k: v for k, v in r.items() if k not in ("wall_s", "infer_ms")} for r in records]


def assert_same_runs(a: Path, b: Path, records_a: list[dict], records_b: list[dict]) -> None:
    """The same episodes (every field but the wall time) and the same filmed frames."""
    assert untimed(records_a) == untimed(records_b)
    films_a, films_b = films(a), films(b)
    assert films_a.keys() == films_b.keys() and films_a
    for name, frames in films_a.items():
        assert len(frames) == len(films_b[name]) > 1
        assert all(np.array_equal(x, y) for x, y in zip(frames, films_b[name], strict=True)), name


@pytest.mark.parametrize(("family", "chunk", "history"), [("act", 8, 1), ("diffusion", 4, 2)])
def test_metaworld_pixels_draw_only_the_steps_the_policy_reads(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, family: str, chunk: int, history: int
) -> None:
    frames = count_frames(monkeypatch)
    run = (*METAWORLD, f"policy={family}", f"policy.path={checkpoints[f'metaworld_{family}']}")
    run = (*run, "eval.use_async_envs=false")
    read, read_calls = evaluated(tmp_path, "read", monkeypatch, *run)
    read_frames = frames["drawn"]
    frames.clear()
    every, every_calls = evaluated(tmp_path, "every", monkeypatch, *run, "eval.render=every_step")
    assert_same_runs(tmp_path / "read", tmp_path / "every", read, every)
    assert [r["steps"] for r in read] == [17, 17]
    # Both rows read at their chunks' steps (and the step before, for Diffusion's history of 2), nothing else.
    wanted = read_steps(17, chunk, history)
    assert drawn(read_calls, METAWORLD_IMAGE) == [[w, w] for w in wanted]
    assert drawn(every_calls, METAWORLD_IMAGE) == [[True, True]] * 17
    # Both resets are drawn, the filmed episode's frame at each of its steps, the other episode's only when read
    # (the call after the step; the last step's observation is never read).
    assert read_frames == 2 + 17 + sum(wanted[1:]) < frames["drawn"] == 2 * (1 + 17)


def test_pusht_pixels_draw_only_the_steps_the_policy_reads(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = ("env=pusht", "env.episode_length=17", "eval.n_episodes=2", "eval.batch_size=2", "device=cpu")
    run = (*run, "eval.max_episodes_rendered=1", "eval.use_async_envs=false", "policy=act")
    run = (*run, f"policy.path={checkpoints['pusht_act']}")
    read, read_calls = evaluated(tmp_path, "read", monkeypatch, *run)
    every, every_calls = evaluated(tmp_path, "every", monkeypatch, *run, "eval.render=every_step")
    assert_same_runs(tmp_path / "read", tmp_path / "every", read, every)
    assert [r["steps"] for r in read] == [17, 17]
    wanted = read_steps(17, 8, 1)
    assert drawn(read_calls, "observation.image") == [[w, w] for w in wanted]
    assert drawn(every_calls, "observation.image") == [[True, True]] * 17


def test_a_recording_draws_every_step_and_sequential_rounds_only_the_read_ones(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The setting with the two modes it touches: a recording reads every step, so every step is drawn; sequential
    rounds in one process keep their pools warm between rounds, and each round draws only what is read."""
    policy = ("policy=act", f"policy.path={checkpoints['metaworld_act']}", "eval.use_async_envs=false")
    _, recorded_calls = evaluated(tmp_path, "recorded", monkeypatch, *METAWORLD, *policy, "eval.recording=all")
    assert drawn(recorded_calls, METAWORLD_IMAGE) == [[True, True]] * 17
    rounds = (*policy, "eval.n_episodes=4", "eval.sequential.stop=threshold", "eval.sequential.threshold=50")
    rounds = (*rounds, "eval.sequential.round=2", "eval.max_episodes_rendered=0")
    read, calls = evaluated(tmp_path, "rounds_read", monkeypatch, *METAWORLD, *rounds)
    every, _ = evaluated(tmp_path, "rounds_every", monkeypatch, *METAWORLD, *rounds, "eval.render=every_step")
    assert untimed(read) == untimed(every)
    assert len(read) == 4 and drawn(calls, METAWORLD_IMAGE) == [[w, w] for w in read_steps(17, 8, 1)] * 2


def test_metaworld_pixels_in_workers_and_through_the_server(
    checkpoints: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.serving.test_policy_server import served

    policy = ("policy=act", f"policy.path={checkpoints['metaworld_act']}")
    run = (*METAWORLD, "eval.use_async_envs=true")
    read, calls = evaluated(tmp_path, "read", monkeypatch, *run, *policy)
    every, _ = evaluated(tmp_path, "every", monkeypatch, *run, *policy, "eval.render=every_step")
    assert_same_runs(tmp_path / "read", tmp_path / "every", read, every)
    wanted = read_steps(17, 8, 1)
    assert drawn(calls, METAWORLD_IMAGE) == [[w, w] for w in wanted]
    # Served: the client holds each row's queue and says which steps it reads; the server sees only those.
    env = [o for o in METAWORLD if o.startswith("env.")]
    with served(tmp_path, *policy, "serve.shards=1", env=[*env, "device=cpu"]) as (_, announce):
        remote = ("policy=remote", f"policy.url={announce}")
        served_records, served_calls = evaluated(tmp_path, "served", monkeypatch, *run, *remote)
    assert_same_runs(tmp_path / "served", tmp_path / "every", served_records, every)
    # 2 rows x 3 chunks (steps 0, 8 and 16), each preprocessed once on the server, every one drawn.
    assert sum(len(call[METAWORLD_IMAGE]) for call in served_calls) == 6
    assert all(all(row.any() for row in call[METAWORLD_IMAGE]) for call in served_calls)


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.parametrize(("family", "chunk", "history", "use_async"), [("act", 8, 1, False), ("diffusion", 4, 2, True)])
def test_libero_draws_only_the_steps_the_policy_reads(
    checkpoints: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    family: str,
    chunk: int,
    history: int,
    use_async: bool,
) -> None:
    pytest.importorskip("libero")
    run = (*LIBERO, f"policy={family}", f"policy.path={checkpoints[f'libero_{family}']}")
    run = (*run, f"eval.use_async_envs={str(use_async).lower()}")
    read, read_calls = evaluated(tmp_path, "read", monkeypatch, *run)
    every, every_calls = evaluated(tmp_path, "every", monkeypatch, *run, "eval.render=every_step")
    assert_same_runs(tmp_path / "read", tmp_path / "every", read, every)
    assert [r["init_state_id"] for r in read] == [0, 1]
    wanted = read_steps(10, chunk, history)
    agentview, wrist = LIBERO_IMAGES
    # The filmed episode 0 (row 0) draws its film's camera, agentview, at every step; its wrist camera, and both
    # cameras of episode 1, only when read.
    assert drawn(read_calls, agentview) == [[True, w] for w in wanted]
    assert drawn(read_calls, wrist) == [[w, w] for w in wanted]
    for key in LIBERO_IMAGES:
        assert drawn(every_calls, key) == [[True, True]] * 10, key
    for key in LIBERO_IMAGES:  # what was read is what every_step drew
        for call, (a, b) in enumerate(zip(read_calls, every_calls, strict=True)):
            if wanted[call]:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"call {call}, {key}")


def test_a_policy_that_does_not_declare_its_reads_draws_every_step(compose: Callable) -> None:
    from lerobot_hydra.policies.base import declares_reads
    from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy
    from lerobot_hydra.policies.lerobot.rows import PerRowLeRobotPolicy
    from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy
    from lerobot_hydra.policies.random import RandomPolicy
    from lerobot_hydra.serving.client import RemotePolicy

    assert declares_reads(object.__new__(PerRowLeRobotPolicy)) and declares_reads(object.__new__(RemotePolicy))
    for undeclared in (LeRobotPolicy, RowwisePolicy, RandomPolicy):  # lockstep, one row at a time, native
        assert not declares_reads(object.__new__(undeclared))


def test_an_unknown_render_setting_is_one_line_listing_the_valid_ones(compose: Callable) -> None:
    from lerobot_hydra.schemas.schema import validate

    with pytest.raises(UserError, match=r"^eval.render must be read or every_step, got 'sometimes'$"):
        validate(compose("eval.render=sometimes"))
