"""Our launchers are what every hydra/launcher option selects, a shard sweep's jobs get eval.num_shards from them,
and the Hydra behaviours the app is built around (callbacks, error reporting) are pinned, so a Hydra release that
changes them fails here."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from lerobot_hydra.launch.shards import with_num_shards
from tests.conftest import run_eval

OURS = {
    "basic": "hydra_plugins.lerobot_hydra_launchers.launchers.BasicLauncher",
    "submitit_local": "hydra_plugins.lerobot_hydra_launchers.launchers.LocalLauncher",
    "submitit_slurm": "hydra_plugins.lerobot_hydra_launchers.launchers.SlurmLauncher",
    "local_shards": "hydra_plugins.lerobot_hydra_launchers.launchers.LocalLauncher",
    "slurm_cpu": "hydra_plugins.lerobot_hydra_launchers.launchers.SlurmLauncher",
    "slurm_gpu": "hydra_plugins.lerobot_hydra_launchers.launchers.SlurmLauncher",
}


@pytest.mark.parametrize("option", sorted(OURS))
def test_every_launcher_option_selects_our_launcher(compose, option: str) -> None:
    cfg = compose(f"hydra/launcher={option}", return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == OURS[option]
    assert cfg.hydra.runtime.choices["hydra/launcher"] == option


def test_the_default_launcher_is_our_basic_one(compose) -> None:
    cfg = compose(return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == OURS["basic"]
    assert cfg.hydra.runtime.choices["hydra/launcher"] == "basic"


def test_the_plugins_settings_are_typed_on_our_launchers(compose) -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose("hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=soon", return_hydra_config=True)
    cfg = compose("hydra/launcher=slurm_cpu", "hydra.launcher.partition=cpu", return_hydra_config=True)
    assert cfg.hydra.launcher.partition == "cpu" and cfg.hydra.launcher.max_num_timeout == 3


def test_num_shards_lands_right_after_each_jobs_shard_id() -> None:
    jobs = [["policy=random", "eval.shard_id=0", "env.task=[a]"], ["policy=random", "eval.shard_id=1", "env.task=[a]"]]
    assert with_num_shards(jobs, 2) == [
        ["policy=random", "eval.shard_id=0", "eval.num_shards=2", "env.task=[a]"],
        ["policy=random", "eval.shard_id=1", "eval.num_shards=2", "env.task=[a]"],
    ]
    assert with_num_shards(jobs, None) == jobs


@pytest.mark.slow
def test_a_shard_sweep_in_this_process_fills_in_num_shards(tmp_path: Path) -> None:
    """The default (basic) launcher: each job's recorded overrides carry eval.num_shards as if typed after its id."""
    sweep = tmp_path / "sweep"
    small = ("policy=random", "env.task=[reach-v3]", "env.obs_type=state", "eval.n_episodes=2", "env.episode_length=5")
    run_eval(*small, "eval.shard_id=0,1", out_dir=sweep, multirun=True)
    for k in (0, 1):
        (recorded,) = sweep.rglob(f"shard_{k}_of_2/.hydra/overrides.yaml")
        overrides = yaml.safe_load(recorded.read_text())
        at = overrides.index(f"eval.shard_id={k}")
        assert overrides[at + 1] == "eval.num_shards=2", overrides
    assert (sweep / "eval_info.json").exists()


# A Hydra app of its own: a callback that records what Hydra calls, and fails where told.
APP = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    import hydra
    from hydra.experimental.callback import Callback

    class Record(Callback):
        def __init__(self, log, fail_in):
            self.log, self.fail_in = Path(log), fail_in

        def _note(self, name):
            with self.log.open("a") as f:
                f.write(name + "\\n")
            if name == self.fail_in:
                raise RuntimeError("callback failed")

        def on_multirun_start(self, config, **kwargs):
            self._note("on_multirun_start")

        def on_multirun_end(self, config, **kwargs):
            self._note("on_multirun_end")

    @hydra.main(config_path=None, config_name=None, version_base="1.3")
    def app(cfg):
        if cfg.get("fail"):
            raise ValueError("job failed")

    if __name__ == "__main__":
        app()
    """
)


def _run_app(tmp_path: Path, *overrides: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    (tmp_path / "app.py").write_text(APP)
    log = tmp_path / "calls.txt"
    callback = [
        "+hydra.callbacks.record._target_=app.Record",
        f"+hydra.callbacks.record.log={log}",
        *overrides,
    ]
    proc = subprocess.run(
        [sys.executable, "app.py", "-m", f"hydra.sweep.dir={tmp_path / 'sweep'}", *callback],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
    )
    return proc, log.read_text().split() if log.exists() else []


def test_hydra_skips_on_multirun_end_when_a_job_fails(tmp_path: Path) -> None:
    """Why the merge callback reports a failed sweep from an exit hook (launch/callbacks.py)."""
    proc, calls = _run_app(tmp_path, "+hydra.callbacks.record.fail_in=null", "+fail=true")
    assert proc.returncode == 1 and "job failed" in proc.stderr
    assert calls == ["on_multirun_start"]


def test_hydra_turns_an_exception_in_a_callback_into_a_warning_and_exit_0(tmp_path: Path) -> None:
    """Why the callbacks print their error and exit themselves instead of raising (launch/callbacks.py)."""
    proc, calls = _run_app(tmp_path, "+hydra.callbacks.record.fail_in=on_multirun_end")
    assert calls == ["on_multirun_start", "on_multirun_end"]
    assert proc.returncode == 0
    assert "Callback Record.on_multirun_end raised RuntimeError: callback failed" in proc.stderr


def test_errors_are_one_line_unless_the_user_asks_hydra_for_everything(tmp_path: Path) -> None:
    """app/cli.py's one_line_errors relies on Hydra raising under HYDRA_FULL_ERROR=1 (its documented switch)."""
    described = run_eval("env=nope", check=False, timeout=120)
    assert described.returncode == 2 and described.stderr.startswith("error: unknown env 'nope'"), described.stderr
    everything = run_eval("env=nope", check=False, timeout=120, env={"HYDRA_FULL_ERROR": "1"})
    assert everything.returncode == 1 and "Traceback" in everything.stderr
    assert "MissingConfigException" in everything.stderr
    # A child of eval.py (a policy server job, a submitit job) inherits both variables and still says one line.
    inherited = {"HYDRA_FULL_ERROR": "1", "LEROBOT_HYDRA_DESCRIBES_ERRORS": "1"}
    child = run_eval("env=nope", check=False, timeout=120, env=inherited)
    assert child.returncode == 2 and child.stderr.startswith("error: unknown env 'nope'"), child.stderr


@pytest.mark.parametrize("plus", ["+", ""])
def test_a_launcher_setting_typo_is_one_line_naming_cfg_hydra(tmp_path: Path, plus: str) -> None:
    """docs/launchers.md: one `error:` line, exit 2; `--cfg hydra` (not `--cfg job`) shows the launcher's settings."""
    sweep = tmp_path / "sweep"
    typo = f"{plus}hydra.launcher.timeout_mn=5"
    proc = run_eval(
        "hydra/launcher=local_shards", typo, "env.task=reach-v3", "eval.n_episodes=1",
        out_dir=sweep, multirun=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: unknown ") and "'hydra.launcher.timeout_mn'" in line, line
    assert "--cfg hydra" in line, line
    assert not sweep.exists()  # refused before the sweep dir is made
