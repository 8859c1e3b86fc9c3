"""pi0 and pi0.5 (LeRobot 0.6) from tiny offline builds (tests/helpers/tiny_pi.py): the whole eval path on PushT
with the checkpoint's own tokenizer on disk, through the policy server, and episode for episode as LeRobot's own
lerobot-eval runs them. Their per-row noise across batch sizes, shards and resume: test_lerobot_noise.py; RTC:
test_lerobot_rtc.py."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devkit.lerobot_checkpoints import METAWORLD_ACTION, PUSHT_ACTION, PUSHT_PIXELS
from tests.conftest import evaluate_here, outcome, read_episodes
from tests.helpers.lerobot_cli import run_lerobot_eval

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

FAMILIES = ("pi0", "pi05")
RUN = ["eval.use_async_envs=false", "eval.max_episodes_rendered=0", "device=cpu"]
METAWORLD_PIXELS = {"observation.image": ("VISUAL", (3, 32, 32)), "observation.state": ("STATE", (4,))}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    import lerobot.policies  # noqa: F401  registers the families
    from lerobot.configs.policies import PreTrainedConfig

    from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06, tiny_gemma, tiny_pi

    if not set(FAMILIES) <= set(PreTrainedConfig.get_known_choices()) or not lerobot_06():
        pytest.skip(LEROBOT_06_ONLY)

    root = tmp_path_factory.mktemp("pi")
    with tiny_gemma():  # the tiny size while the module's tests load them
        built = {kind: tiny_pi(root / kind, kind, PUSHT_PIXELS, PUSHT_ACTION) for kind in FAMILIES}
        built["pi05_metaworld"] = tiny_pi(root / "pi05_metaworld", "pi05", METAWORLD_PIXELS, METAWORLD_ACTION)
        yield built


def outcomes(run_dir: Path) -> list[tuple]:
    return sorted(outcome(r) for r in read_episodes(run_dir))


@pytest.mark.parametrize("kind", FAMILIES)
def test_pi_family_evaluates_end_to_end_offline(
    compose: Callable, checkpoints: dict[str, Path], tmp_path: Path, kind: str
) -> None:
    """The checkpoint's preprocessor tokenizes the prompt with the tokenizer saved beside it, not the Hub's."""
    from lerobot_hydra.policies.lerobot.runtime import LeRobotPolicy
    from tests.lerobot.test_lerobot_policies import build

    checkpoint = checkpoints[kind]
    steps = json.loads((checkpoint / "policy_preprocessor.json").read_text())["steps"]
    tokenizers = [s["config"]["tokenizer_name"] for s in steps if "tokenizer_name" in s.get("config", {})]
    assert tokenizers == [str((checkpoint / "tokenizer").resolve())]
    _, runtime = build(compose, "env=pusht", f"policy={kind}", f"policy.path={checkpoint}", "policy.overrides=null")
    assert isinstance(runtime, LeRobotPolicy) and runtime.policy.config.type == kind
    assert runtime.noise is not None  # per-row noise hooks: rows run batched, not one at a time

    length, episodes = 6, 2
    overrides = ["env=pusht", f"policy={kind}", f"policy.path={checkpoint}", "policy.overrides=null", *RUN]
    evaluate_here(tmp_path / "run", *overrides, f"env.episode_length={length}", f"eval.n_episodes={episodes}")
    records = sorted(read_episodes(tmp_path / "run"), key=lambda r: r["episode_index"])
    assert [(r["episode_index"], r["steps"]) for r in records] == [(k, length) for k in range(episodes)]
    assert records[0]["sum_reward"] != records[1]["sum_reward"]  # two seeds, two episodes
    # PushT drew its image only on the steps the chunk was computed (eval.render=read); drawn every step, the same.
    evaluate_here(
        tmp_path / "every", *overrides, f"env.episode_length={length}", f"eval.n_episodes={episodes}",
        "eval.render=every_step",
    )  # fmt: skip
    assert outcomes(tmp_path / "every") == outcomes(tmp_path / "run")


def test_pi05_through_the_server_records_as_in_process(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Flow matching with per-row noise, a camera and a prompt with the discretized state, tokenized on the
    server: the same episodes as in process, at another batch size."""
    from tests.serving.test_policy_server import served

    pi05 = ["policy=pi05", f"policy.path={checkpoints['pi05_metaworld']}", "policy.overrides={n_action_steps: 2}"]
    pixels = ["env.obs_type=pixels_agent_pos", "env.observation_height=32", "env.observation_width=32"]
    common = ["env.task=reach-v3", *RUN, *pixels, "env.episode_length=4", "eval.n_episodes=3"]
    evaluate_here(tmp_path / "here", *pi05, *common, "eval.batch_size=3")
    with served(tmp_path, *pi05, *pixels) as (_, announce):
        evaluate_here(tmp_path / "remote", *common, "policy=remote", f"policy.url={announce}", "eval.batch_size=2")
    assert len({o[5] for o in outcomes(tmp_path / "here")}) == 3
    assert outcomes(tmp_path / "remote") == outcomes(tmp_path / "here")
    # Both ran with cameras drawn only on the steps pi0.5 reads (eval.render=read); drawn at every step, the same.
    evaluate_here(tmp_path / "every", *pi05, *common, "eval.batch_size=3", "eval.render=every_step")
    assert outcomes(tmp_path / "every") == outcomes(tmp_path / "here")


@pytest.mark.slow
def test_pi05_on_pusht_matches_lerobot_eval_episode_by_episode(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """The same checkpoint, seeds and episodes through LeRobot's own lerobot-eval (0.6), its noise drawn per
    episode as ours (tests/helpers/lerobot_eval_rows.py), give the same rewards, episode by episode."""
    length, episodes, checkpoint = 12, 4, checkpoints["pi05"]
    common = [f"eval.n_episodes={episodes}", "eval.batch_size=2"]
    one_thread = {"OMP_NUM_THREADS": "1"}
    # lerobot-eval hands a PushT policy an empty task; a blank one here: pi0.5's prompt strips it to the same.
    evaluate_here(
        tmp_path / "ours", "env=pusht", "env.task=' '", "policy=pi05", f"policy.path={checkpoint}",
        "policy.overrides=null", f"env.episode_length={length}", *common, *RUN,
    )  # fmt: skip
    theirs = run_lerobot_eval(
        f"--policy.path={checkpoint}",
        "--policy.device=cpu",
        "--env.type=pusht",
        f"--env.episode_length={length}",
        *(f"--{c}" for c in common),
        "--eval.use_async_envs=false",
        "--seed=1000",
        output_dir=tmp_path / "theirs",
        env=one_thread,
        command=[sys.executable, "-m", "tests.helpers.lerobot_eval_rows"],
    )
    records = sorted(read_episodes(tmp_path / "ours"), key=lambda r: r["episode_index"])
    assert [r["episode_index"] for r in records] == list(range(episodes))
    assert [r["sum_reward"] for r in records] == pytest.approx(theirs, rel=1e-6, abs=1e-9)
    assert len({round(r["sum_reward"], 6) for r in records}) > 1  # the episodes differ
