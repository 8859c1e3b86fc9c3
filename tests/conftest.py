"""Shared helpers: run eval.py for real in a subprocess or its run in this process, compose the real config tree,
read results."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "lerobot_hydra" / "conf"

# Rendering on CPU everywhere in tests; tests never use a GPU.
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
os.environ.setdefault("WANDB_MODE", "offline")
# No logger library phones home during tests: W&B's Sentry error reports, code and git capture stay off.
os.environ["WANDB_ERROR_REPORTING"] = "false"
os.environ["WANDB_DISABLE_CODE"] = "true"
os.environ["WANDB_DISABLE_GIT"] = "true"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def run_eval(
    *overrides: str,
    out_dir: Path | None = None,
    multirun: bool = False,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    check: bool = True,
    config_videos: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`python eval.py <overrides>` in a subprocess, with its output dir pinned to `out_dir`.

    Videos are off unless a test asks for them (rendering costs ~100 ms a frame on CPU) or keeps the config's
    own setting with `config_videos`."""
    args = [sys.executable, str(ROOT / "eval.py")]
    if multirun:
        args.append("-m")
    if out_dir is not None:
        args.append(f"hydra.{'sweep' if multirun else 'run'}.dir={out_dir}")
    args.extend(_with_videos_off(overrides, config_videos))
    proc = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"eval.py {' '.join(overrides)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def _with_videos_off(overrides: Sequence[str], config_videos: bool) -> list[str]:
    if config_videos or any(o.startswith("eval.max_episodes_rendered=") for o in overrides):
        return list(overrides)
    return ["eval.max_episodes_rendered=0", *overrides]


def run_here(
    *overrides: str, out_dir: Path, env: dict[str, str] | None = None, config_videos: bool = False
) -> dict[str, Any]:
    """What `run_eval(*overrides, out_dir=out_dir)` runs, in this process: Hydra composes the config and sets up
    the job as for `python eval.py hydra.run.dir=<out_dir> ...` (its output dir, the job log `eval.log` and log
    lines on stdout), then the app's `run` evaluates it and returns eval_info. A user's mistake raises `UserError`
    (the command line prints it as `error: ...`); a composition error raises Hydra's exception. `env` is set for
    the run (and the worker processes it starts) only.

    What a run changes in this process is put back after it: Hydra's global state, the root logger's handlers and
    level, the environment; a run that ends leaving a signal handler of its own or a process it started fails."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from lerobot_hydra.app.main import run
    from lerobot_hydra.results.eval_info import to_eval_info

    args = [f"hydra.run.dir={out_dir}", *_with_videos_off(overrides, config_videos)]
    with _no_leftovers(), _hydra_config_module(), _restored_logging(), _environ(env or {}):
        try:
            job = GlobalHydra.instance().hydra.run(config_name="config", task_function=run, overrides=args)
        finally:
            HydraConfig.instance().cfg = None
    return to_eval_info(job.return_value)


def _wandb_service(process: Any) -> bool:
    """W&B (0.19+) keeps one service process per Python process, by design, until that process exits."""
    import psutil

    try:
        return process.name() == "wandb-core"
    except psutil.Error:
        return False


@contextlib.contextmanager
def _no_leftovers() -> Iterator[None]:
    """The signal handlers a run installs are put back, and the processes it starts (workers, their forkserver)
    have ended, once it returns; when it raises, they are put back and waited for without failing."""
    import psutil

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR2)}
    me = psutil.Process()
    children = {p.pid for p in me.children(recursive=True)}
    try:
        yield
    finally:
        changed = [sig.name for sig, handler in handlers.items() if signal.getsignal(sig) != handler]
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        started = [p for p in me.children(recursive=True) if p.pid not in children and not _wandb_service(p)]
        _, alive = psutil.wait_procs(started, timeout=10)
    # Reached only when the run returned.
    assert not changed, f"the run left its handlers of {', '.join(changed)} installed"
    assert not alive, f"processes the run started outlived it: {alive}"


@contextlib.contextmanager
def _hydra_config_module() -> Iterator[None]:
    """The package's config tree as Hydra's global config module, cleared again afterwards."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import lerobot_hydra.app.main  # noqa: F401  registers the schemas and resolvers

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            yield
    finally:
        GlobalHydra.instance().clear()


@contextlib.contextmanager
def _restored_logging() -> Iterator[None]:
    """Hydra's job logging replaces the root logger's handlers (pytest's capture among them): put them back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:] = handlers
        root.setLevel(level)


@contextlib.contextmanager
def _environ(changes: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def read_episodes(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]


def outcome(record: dict[str, Any]) -> tuple:
    """What must not depend on batching, sharding or timing."""
    return (
        record["task_group"],
        record["task_id"],
        record["episode_index"],
        record["seed"],
        record["success"],
        round(record["sum_reward"], 6),
        round(record["max_reward"], 6),
        record["steps"],
        record.get("init_state_id"),
    )


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """One torch thread in this process for a module's tests (tiny policies on a busy CPU)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def compose() -> Iterator[Any]:
    """Compose the real config tree with overrides (no app run)."""
    from hydra import compose as hydra_compose

    with _hydra_config_module():
        yield lambda *overrides, **kw: hydra_compose(config_name="config", overrides=list(overrides), **kw)


def evaluate_here(out_dir: Path, *overrides: str, label: str = "") -> dict[str, Any]:
    """A real evaluation in this process, without Hydra's app or a subprocess: compose the config tree with
    `overrides`, validate it and evaluate into `out_dir` (`label`: the combination label a sweep job would have)."""
    from hydra import compose as hydra_compose

    from lerobot_hydra.app.evaluation import evaluate_config
    from lerobot_hydra.results.eval_info import to_eval_info
    from lerobot_hydra.schemas.schema import validate

    with _no_leftovers(), _hydra_config_module():
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
        return to_eval_info(evaluate_config(cfg, validate(cfg), out_dir, label))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """For `pytest -n N --dist loadgroup` (scripts/test.sh): a module's tests run in one worker, so that the tiny
    checkpoints its fixtures build are built once, and every test that uses the local SLURM cluster (or the Ray head)
    runs in the same worker, so that two tests never share its two CPUs (and the session starts one Ray head)."""
    for item in items:
        marked = [name for name in ("slurm", "ray") if item.get_closest_marker(name)]
        group = marked[0] if marked else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def ray_head() -> Iterator[Any]:
    """One local Ray head for the session's `ray` tests (tests/helpers/ray_head.py: its address, its processes);
    stopped at the end. A test that needs it fails without the `ray` extra."""
    from tests.helpers.ray_head import start_head

    try:
        head = start_head(ROOT)
    except (OSError, RuntimeError) as err:
        pytest.fail(f"the local Ray head did not start (pip install -e '.[ray]'): {err}")
    try:
        yield head
    finally:
        head.stop()
