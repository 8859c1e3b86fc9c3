"""pi0-FAST (LeRobot 0.6) from a tiny offline build (tests/helpers/tiny_pi_fast.py): its FAST action tokenizer of
our own, loaded by LeRobot's `AutoProcessor` call from the checkpoint's folder without remote code; the whole eval
path on PushT, greedy (batched, per row) and sampling at a temperature (one row at a time); both through the
policy server; RTC refused. Its episodes across batch sizes, shards and resume: test_lerobot_noise.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from devkit.lerobot_checkpoints import METAWORLD_ACTION, PUSHT_ACTION, PUSHT_PIXELS
from lerobot_hydra.core.errors import UserError
from tests.conftest import evaluate_here, outcome, read_episodes
from tests.helpers.tiny_pi_fast import FastActionProcessor, synthetic_chunks

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

RUN = ["eval.use_async_envs=false", "eval.max_episodes_rendered=0", "device=cpu"]
METAWORLD_PIXELS = {"observation.image": ("VISUAL", (3, 32, 32)), "observation.state": ("STATE", (4,))}
SAMPLED = "policy.overrides={temperature: 1.0}"
RTC = "+policy.rtc={execution_horizon: 4}"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    import lerobot.policies  # noqa: F401  registers the families
    from lerobot.configs.policies import PreTrainedConfig

    from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06, tiny_gemma
    from tests.helpers.tiny_pi_fast import tiny_pi_fast

    if "pi0_fast" not in PreTrainedConfig.get_known_choices() or not lerobot_06():
        pytest.skip(LEROBOT_06_ONLY)
    root = tmp_path_factory.mktemp("pi_fast")
    with tiny_gemma():  # the tiny size while the module's tests load them
        yield {
            "pusht": tiny_pi_fast(root / "pusht", PUSHT_PIXELS, PUSHT_ACTION),
            "metaworld": tiny_pi_fast(root / "metaworld", METAWORLD_PIXELS, METAWORLD_ACTION),
        }


def outcomes(run_dir: Path) -> list[tuple]:
    return sorted(outcome(r) for r in read_episodes(run_dir))


def test_our_fast_tokenizer_is_what_lerobots_decoder_reads(tmp_path: Path) -> None:
    """Encoded chunks come back through LeRobot's own `decode_actions_with_fast` (to the rounding of `scale`),
    and `AutoProcessor` loads the saved tokenizer as LeRobot does, from its folder, with no code in it."""
    from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06
    from tests.helpers.tiny_pi_fast import register_fast_processor

    if not lerobot_06():
        pytest.skip(LEROBOT_06_ONLY)
    from lerobot.policies.pi0_fast import modeling_pi0_fast as pi0_fast
    from transformers import AutoProcessor

    chunks = synthetic_chunks(300, 4, 2)
    fast = FastActionProcessor.fit(chunks)
    held_out = synthetic_chunks(5, 4, 2, seed=1)
    ids = fast(held_out)
    assert max(map(len, ids)) < 8  # the BPE merged runs of the 8 coefficients
    decoded = pi0_fast.PI0FastPolicy.decode_actions_with_fast(SimpleNamespace(action_tokenizer=fast), ids, 4, 2)
    assert np.abs(decoded - held_out).max() < 0.1  # coefficients rounded to 1 / scale
    assert np.array_equal(decoded, fast.decode(ids))

    register_fast_processor()
    fast.save_pretrained(tmp_path / "fast")
    assert not list((tmp_path / "fast").glob("*.py"))
    assert "auto_map" not in json.loads((tmp_path / "fast" / "processor_config.json").read_text())
    loaded = AutoProcessor.from_pretrained(str(tmp_path / "fast"), trust_remote_code=True)
    assert isinstance(loaded, FastActionProcessor) and loaded(held_out) == ids


def test_pi0_fast_evaluates_end_to_end_offline(compose: Callable, checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Greedy decoding (LeRobot's default temperature 0) draws no noise: the rows run batched, per row."""
    from lerobot_hydra.policies.lerobot.rows import PerRowLeRobotPolicy
    from tests.lerobot.test_lerobot_policies import build, first_batch

    checkpoint = checkpoints["pusht"]
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["action_tokenizer_name"] == str((checkpoint / "action_tokenizer").resolve())
    assert config["text_tokenizer_name"] == str((checkpoint / "tokenizer").resolve())
    policy = ["env=pusht", "policy=pi0_fast", f"policy.path={checkpoint}", "policy.overrides=null"]
    env, runtime = build(compose, *policy)
    assert isinstance(runtime, PerRowLeRobotPolicy) and runtime.noise is None
    assert isinstance(runtime.policy.action_tokenizer, FastActionProcessor)
    runtime.reset(env.tasks()[0], [1000])
    chunk = runtime.policy.predict_action_chunk(runtime.preprocessor(runtime._policy_batch(first_batch(env))))
    assert chunk.shape == (1, 4, 2) and chunk.abs().sum() > 0  # FAST tokens decoded, not a failed (zero) chunk

    length, episodes = 6, 3
    common = [*policy, *RUN, f"env.episode_length={length}", f"eval.n_episodes={episodes}"]
    evaluate_here(tmp_path / "batch3", *common, "eval.batch_size=3")
    records = sorted(read_episodes(tmp_path / "batch3"), key=lambda r: r["episode_index"])
    assert [(r["episode_index"], r["steps"]) for r in records] == [(k, length) for k in range(episodes)]
    assert len({r["sum_reward"] for r in records}) > 1  # three seeds, not one episode thrice
    evaluate_here(tmp_path / "batch1", *common, "eval.batch_size=1")
    assert outcomes(tmp_path / "batch1") == outcomes(tmp_path / "batch3")


def test_pi0_fast_sampling_at_a_temperature_runs_one_row_at_a_time(
    compose: Callable, checkpoints: dict[str, Path]
) -> None:
    """At a temperature, LeRobot samples each token from torch's global generator: each row runs alone with the
    generator set to its episode's own, so on one observation the rows' actions differ by their seeds, and a row's
    action is that of its seed alone in a batch of one. Greedy decoding gives every row the same."""
    import torch

    from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy
    from tests.lerobot.test_lerobot_policies import build, first_batch

    policy = ["env=pusht", "policy=pi0_fast", f"policy.path={checkpoints['pusht']}"]
    env, sampled = build(compose, *policy, SAMPLED)
    _, greedy = build(compose, *policy, "policy.overrides=null")
    assert isinstance(sampled, RowwisePolicy) and not isinstance(greedy, RowwisePolicy)
    task, one = env.tasks()[0], first_batch(env)
    seeds = list(range(1000, 1006))
    rows = {
        k: np.concatenate([v] * len(seeds)) if isinstance(v, np.ndarray) else list(v) * len(seeds)
        for k, v in one.items()
    }

    def actions(runtime: object, episode_seeds: list[int], batch: dict) -> torch.Tensor:
        runtime.reset(task, episode_seeds)
        return torch.as_tensor(runtime.select_action(batch))

    drawn = actions(sampled, seeds, rows)
    assert len({tuple(a.tolist()) for a in drawn}) > 1  # the seeds drew different tokens
    assert torch.equal(actions(sampled, seeds[2:3], one)[0], drawn[2])
    assert len({tuple(a.tolist()) for a in actions(greedy, seeds, rows)}) == 1


@pytest.mark.parametrize("decoding", ["policy.overrides=null", SAMPLED])
def test_pi0_fast_on_the_clock_with_no_latency_is_lockstep(
    checkpoints: dict[str, Path], tmp_path: Path, decoding: str
) -> None:
    """Greedy (per row) and sampling (one row at a time, each chunk what one `select_action` computes) on a real-time
    eval.clock at 0 ms and threshold 0: the episodes of lockstep, chunk for chunk."""
    from tests.rollout.test_clock_runs import ZERO

    common = ["env=pusht", "policy=pi0_fast", f"policy.path={checkpoints['pusht']}", decoding, *RUN]
    common += ["env.episode_length=10", "eval.n_episodes=3", "eval.batch_size=2"]
    evaluate_here(tmp_path / "lockstep", *common)
    evaluate_here(tmp_path / "clock", *common, *ZERO)
    assert outcomes(tmp_path / "clock") == outcomes(tmp_path / "lockstep")
    inferences = [[r["inferences"] for r in read_episodes(tmp_path / run)] for run in ("lockstep", "clock")]
    assert inferences[0] == inferences[1] and min(inferences[0]) >= 2


def test_pi0_fast_through_the_server_records_as_in_process(checkpoints: dict[str, Path], tmp_path: Path) -> None:
    """Greedy pi0-FAST is served as the per-row families: its prompt tokenized and its FAST tokens decoded on the
    server, the same episodes as in process at another batch size. Sampling at a temperature is served one row at
    a time, each with torch's global generator set to the state its request carries: the same episodes too."""
    from tests.serving.test_policy_server import served

    fast = ["policy=pi0_fast", f"policy.path={checkpoints['metaworld']}", "policy.overrides={n_action_steps: 2}"]
    pixels = ["env.obs_type=pixels_agent_pos", "env.observation_height=32", "env.observation_width=32"]
    common = ["env.task=reach-v3", *RUN, *pixels, "env.episode_length=4", "eval.n_episodes=3"]
    evaluate_here(tmp_path / "here", *fast, *common, "eval.batch_size=3")
    with served(tmp_path, *fast, *pixels) as (_, announce):
        evaluate_here(tmp_path / "remote", *common, "policy=remote", f"policy.url={announce}", "eval.batch_size=2")
    assert outcomes(tmp_path / "remote") == outcomes(tmp_path / "here")

    sampled = [*fast[:2], "policy.overrides={n_action_steps: 2, temperature: 1.0}"]
    evaluate_here(tmp_path / "sampled_here", *sampled, *common, "eval.batch_size=3")
    assert outcomes(tmp_path / "sampled_here") != outcomes(tmp_path / "here")  # the sampled tokens differ
    (tmp_path / "sampled").mkdir()
    with served(tmp_path / "sampled", *sampled, *pixels) as (_, announce):
        remote = ["policy=remote", f"policy.url={announce}", "eval.batch_size=2"]
        evaluate_here(tmp_path / "sampled_remote", *common, *remote)
    assert outcomes(tmp_path / "sampled_remote") == outcomes(tmp_path / "sampled_here")


def test_pi0_fast_refuses_real_time_chunking(compose: Callable, checkpoints: dict[str, Path]) -> None:
    """LeRobot's pi0_fast has no RTC (`supports_rtc()` is false: it decodes tokens, there is no flow to guide); its
    YAML has no `rtc` key, and one added anyway is refused in one line."""
    from lerobot.policies.pi0_fast.modeling_pi0_fast import PI0FastPolicy

    from tests.lerobot.test_lerobot_policies import build

    assert not PI0FastPolicy.supports_rtc(SimpleNamespace())
    with pytest.raises(UserError, match=r"^policy.rtc: the pi0_fast policy has no real-time chunking"):
        build(compose, "env=pusht", "policy=pi0_fast", f"policy.path={checkpoints['pusht']}", RTC)
