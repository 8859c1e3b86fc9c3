"""The Hydra callback that starts a sweep's policy server (conf/config.yaml registers it; `+policy_server=<preset>`
turns it on): one job loads the policy and batches the inference of every shard job, which run `policy=remote`.

When the multirun starts it submits the server job (sweep_job.py), waits until the server listens (a server that
fails to start is one line, and no shard is submitted), then lets the launcher submit the shards, whose
`policy.url` is the announce file in the sweep dir (the preset sets it). The server is told how many shard jobs
the sweep has (`serve.shards`) and exits once each said it is done; at the sweep's end, a server still up while
every shard job has ended is cancelled. Hydra turns an exception raised here into a warning, so errors exit.
"""

from __future__ import annotations

import atexit
import math
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.serving.sweep_job import (
    announce_path,
    read_settings,
    stop_if_outliving,
    submit,
    wait_until_listening,
)

REMOTE_POLICY = "remote"
# The shards' policy.url as the presets (conf/policy_server/) set it: their sweep's announce file.
URL = "${hydra:sweep.dir}/policy_server/server.json"


class StartPolicyServer(Callback):
    def __init__(self) -> None:
        self._job: Any = None
        self._sweep_dir = Path()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if OmegaConf.select(config, "policy_server") is not None:
            print(
                "error: +policy_server starts a policy server for a sweep's shard jobs; add -m (e.g. -m "
                "eval.shard_id=0,1), or start the server yourself (lerobot-hydra-serve) and give policy.url",
                file=sys.stderr,
            )
            sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        node = OmegaConf.select(config, "policy_server")
        if node is None:
            return
        sweep_dir = Path(str(config.hydra.sweep.dir))
        overrides = [str(o) for o in config.hydra.overrides.task]
        try:
            settings = read_settings(node)
            check_clients(config, overrides, sweep_dir)
            shards = count_jobs(overrides)
            ray_init = OmegaConf.select(config, "hydra.launcher.ray.init", default=None)
            job = submit(settings, sweep_dir, shards, env_overrides(overrides), ray_init)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        self._job, self._sweep_dir = job, sweep_dir
        print(
            f"lerobot_hydra: policy server job {job.job_id} submitted (policy={settings.policy}, for {shards} shard "
            f"jobs; log: {job.paths.stderr}); waiting for it to listen",
            file=sys.stderr,
            flush=True,
        )
        try:
            announce = wait_until_listening(job, sweep_dir, settings.ready_timeout_s)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        print(
            f"lerobot_hydra: the policy server listens at {announce['url']} (job {job.job_id}, announced in "
            f"{announce_path(sweep_dir)})",
            file=sys.stderr,
            flush=True,
        )
        atexit.register(self._stop)

    def _stop(self) -> None:
        from lerobot_hydra.launch.outcomes import SUBMITTED

        if self._job is not None:
            stop_if_outliving(self._job, list(SUBMITTED), self._sweep_dir)


def check_clients(config: DictConfig, overrides: list[str], sweep_dir: Path) -> None:
    """The shard jobs must be clients of this sweep's server: policy=remote, reading its announce file."""
    from lerobot_hydra.launch.callbacks import sweep_values

    values = sweep_values(overrides)
    choice = OmegaConf.select(config, "hydra.runtime.choices.policy", default=None)
    if choice != REMOTE_POLICY or values.get("policy", [REMOTE_POLICY]) != [REMOTE_POLICY]:
        raise UserError(
            f"+policy_server serves the policy of the sweep's shard jobs, which must be its clients: use "
            f"policy={REMOTE_POLICY} (not policy={','.join(values.get('policy', [str(choice)]))}) and choose the "
            "served policy with policy_server.policy"
        )
    # Unresolved: ${hydra:...} resolves in the jobs, not in the process that launches them.
    url = (OmegaConf.to_container(config.policy, resolve=False) or {}).get("url")  # type: ignore[union-attr]
    expected = announce_path(sweep_dir)
    if url != URL and (url is None or Path(str(url)) != expected):
        raise UserError(
            f"with +policy_server the shards find their server through {expected}; leave policy.url out (it is {url})"
        )


def count_jobs(overrides: list[str]) -> int:
    """How many jobs the sweep's overrides make (the product of every swept key's values): the server's clients."""
    from lerobot_hydra.launch.callbacks import sweep_values

    return math.prod(len(v) for v in sweep_values(overrides).values())


def env_overrides(overrides: list[str]) -> list[str]:
    """The sweep's env overrides for its server, which checks the policy against the env (a swept key: its first
    value; the values of a sweep differ in tasks or settings, not in what the policy reads)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    kept = []
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key != "env" and not key.startswith("env."):
            continue
        if override.is_sweep_override():
            kept.append(f"{override.get_key_element()}={next(iter(override.sweep_string_iterator()))}")
        else:
            kept.append(override.input_line or f"{override.get_key_element()}={override.get_value_element_as_str()}")
    return kept
