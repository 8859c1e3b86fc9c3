"""One-row LeRobot families (their noise drawn from torch's global generators: X-VLA, GR00T N1.7, multi_task_dit,
VQ-BeT) through the policy server, from tiny offline builds on PushT: each request row runs alone on the server
with the global generators set to the state it carries, so the episodes are those of in-process evaluation at
another batch size, and the rows of two clients batched together get the actions in-process gives them. A family
whose chunks depend on state a request does not carry is refused in one line."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from devkit.lerobot_checkpoints import (
    METAWORLD_ACTION,
    METAWORLD_STATE,
    PUSHT_ACTION,
    PUSHT_PIXELS,
    save_checkpoint,
    tiny_multi_task_dit_config,
)
from lerobot_hydra.core.errors import UserError
from tests.conftest import evaluate_here, outcome, read_episodes

pytest.importorskip("lerobot")
pytestmark = [pytest.mark.lerobot, pytest.mark.usefixtures("one_torch_thread")]

PUSHT = ["env=pusht", "device=cpu"]
RUN = [*PUSHT, "eval.use_async_envs=false", "eval.max_episodes_rendered=0"]


class Checkpoints(dict):
    """Each family's policy overrides, its tiny checkpoint built at first use (then kept for the module)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, kind: str) -> list[str]:
        import lerobot.policies  # noqa: F401  registers the families
        from lerobot.configs.policies import PreTrainedConfig

        from tests.helpers.tiny_pi import LEROBOT_06_ONLY, lerobot_06

        if kind not in PreTrainedConfig.get_known_choices():
            pytest.skip(f"this LeRobot line has no {kind} family")
        if kind != "vqbet" and not lerobot_06():
            pytest.skip(LEROBOT_06_ONLY)
        yaml = "act" if kind == "vqbet" else kind  # no vqbet YAML: any LeRobot YAML loads any family
        self[kind] = [f"policy={yaml}", f"policy.path={self._build(kind)}", "policy.overrides=null"]
        return self[kind]

    def _build(self, kind: str) -> Path:
        """Chunks of 4 actions (VQ-BeT: 5); multi_task_dit with 2 observations of history, VQ-BeT with 5."""
        from tests.helpers.tiny_groot import tiny_groot
        from tests.helpers.tiny_xvla import tiny_xvla

        directory = self.root / kind
        if kind == "xvla":
            return tiny_xvla(directory, PUSHT_PIXELS, PUSHT_ACTION)
        if kind == "groot":
            return tiny_groot(directory, PUSHT_PIXELS, PUSHT_ACTION)
        config = tiny_multi_task_dit_config(self.root) if kind == "multi_task_dit" else {}
        config = {"pretrained_backbone_weights": None} if kind == "vqbet" else config
        return save_checkpoint(directory, kind, PUSHT_PIXELS, PUSHT_ACTION, **config)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Checkpoints:
    return Checkpoints(tmp_path_factory.mktemp("one_row"))


def outcomes(run_dir: Path) -> list[tuple]:
    return sorted(outcome(r) for r in read_episodes(run_dir))


HISTORY = {"multi_task_dit": 2, "vqbet": 5}


@pytest.mark.parametrize("kind", ["xvla", "groot", "multi_task_dit", "vqbet"])
def test_a_one_row_family_through_the_server_records_as_in_process(
    checkpoints: Checkpoints, tmp_path: Path, kind: str
) -> None:
    """Episodes of 6 steps, 2 chunks each: the second chunk's noise continues from the state the first one's reply
    carried (and multi_task_dit's history holds two frames); 2 sub-envs here, 3 in process, and a finished row
    starts the next episode at once."""
    from tests.serving.test_policy_server import served

    policy = checkpoints[kind]
    common = [*RUN, "env.episode_length=6", "eval.n_episodes=3"]
    evaluate_here(tmp_path / "here", *policy, *common, "eval.batch_size=3")
    here = outcomes(tmp_path / "here")
    assert len(here) == 3 and len({o[5] for o in here}) == 3  # every episode its own rewards
    with served(tmp_path, *policy, "serve.max_batch_size=2", env=PUSHT) as (server, announce):
        remote = ["policy=remote", f"policy.url={announce}"]
        evaluate_here(tmp_path / "remote", *common, *remote, "eval.batch_size=2")
        stats = server.stats.snapshot()
        history = server.metadata["lerobot_hydra"]["history"]
    assert outcomes(tmp_path / "remote") == here
    assert stats["rows"] == 6 and stats["requests"] == 4  # 2 chunks for each of 3 episodes on 2 sub-envs
    assert history == HISTORY.get(kind, 1)


@pytest.mark.parametrize("kind", ["xvla", "multi_task_dit", "vqbet"])
def test_rows_of_two_clients_batched_on_the_server_get_their_in_process_actions(
    checkpoints: Checkpoints, tmp_path: Path, kind: str
) -> None:
    """Two clients (2 rows and 1) step at once; their chunk requests meet in one server batch of 3 rows. Each row's
    actions over two chunks (the agent's position moving at every step, so the history differs from the last
    frame) are those of an in-process one-row policy whose rows hold the same episodes."""
    from lerobot_hydra.policies.lerobot.one_row import RowwisePolicy
    from lerobot_hydra.schemas.schema import instantiate_node
    from tests.lerobot.test_lerobot_policies import first_batch
    from tests.serving.test_policy_server import health, serve_config, served

    policy = checkpoints[kind]
    cfg = serve_config(*PUSHT, *policy, name="config")
    env = instantiate_node(cfg.env)
    here = instantiate_node(cfg.policy).build(env, "cpu")
    assert isinstance(here, RowwisePolicy)
    task, one = env.tasks()[0], first_batch(env)
    seeds, steps = [1000, 1001, 1002], 6  # chunks of 4 (VQ-BeT: 5): two each

    def rows(n: int, step: int) -> dict[str, Any]:
        batch = {k: np.concatenate([v] * n) if isinstance(v, np.ndarray) else list(v) * n for k, v in one.items()}
        batch["observation.state"] = batch["observation.state"] + 10.0 * step
        return batch

    here.reset(task, seeds)
    expected = np.stack([np.asarray(here.select_action(rows(3, step))) for step in range(steps)], axis=1)
    assert len({row.tobytes() for row in expected}) == 3  # the seeds drew different noise

    with served(tmp_path, *policy, "serve.max_batch_size=3", "serve.max_wait_ms=5000", env=PUSHT) as (
        server,
        announce,
    ):
        config = instantiate_node(serve_config(*PUSHT, "policy=remote", f"policy.url={announce}", name="config").policy)
        clients = [config.build(env, "cpu") for _ in range(2)]
        got: dict[int, np.ndarray] = {}

        def run(i: int, client: Any, episode_seeds: list[int]) -> None:
            client.reset(task, episode_seeds)
            n = len(episode_seeds)
            got[i] = np.stack([client.select_action(rows(n, step)) for step in range(steps)], axis=1)

        threads = [
            threading.Thread(target=run, args=(0, clients[0], seeds[:2])),
            threading.Thread(target=run, args=(1, clients[1], seeds[2:])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        stats = health(server.port)
        for client in clients:
            client.connection.close()
    assert np.array_equal(np.concatenate([got[0], got[1]]), expected)
    assert stats["batches"] == 2 and stats["mean_batch_size"] == 3.0  # both clients' rows in each forward pass


def test_a_family_with_state_across_chunks_is_refused_in_one_line(tmp_path: Path) -> None:
    """TD-MPC warm-starts its planner from the previous chunk's plan, which no request carries."""
    from tests.serving.test_policy_server import ENV, served

    tdmpc = save_checkpoint(tmp_path / "tdmpc", "tdmpc", METAWORLD_STATE, METAWORLD_ACTION)
    with pytest.raises(UserError, match=r"^the tdmpc policy cannot be served: its planner warm-starts every chunk"):
        with served(tmp_path, "policy=act", f"policy.path={tdmpc}", env=ENV):
            pass


def test_the_global_generators_state_travels_as_bytes() -> None:
    """What a one-row request row carries: the state after a chunk, loaded on the server for the next, continues
    the same stream."""
    import torch

    from lerobot_hydra.policies.lerobot.noise import GlobalRngState

    state = GlobalRngState("cpu")
    state.seed(7)
    data = state.to_bytes()
    with state.active():
        drawn = torch.randn(3)
    again = GlobalRngState("cpu").load(data)
    with again.active():
        assert torch.equal(torch.randn(3), drawn)
    assert len(data) == torch.get_rng_state().numel() and again.to_bytes() == state.to_bytes() != data
