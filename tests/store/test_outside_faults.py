"""Files and settings from outside the code, each refused in one line before anything runs (docs/faults.md): an
output dir that cannot be created, a checkpoint whose files are damaged, and the GL variables the simulators read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devkit.lerobot_checkpoints import tiny_act
from tests.conftest import run_eval

QUICK = ("env.task=[reach-v3]", "env.obs_type=state", "eval.n_episodes=1", "env.episode_length=5", "eval.batch_size=1")


def one_error_line(proc: object) -> str:
    stderr = proc.stderr  # type: ignore[attr-defined]
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("[")]
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in stderr, stderr  # type: ignore[attr-defined]
    return lines[0]


def test_an_output_dir_that_cannot_be_created_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("not a dir")
    proc = run_eval(*QUICK, "policy=random", out_dir=tmp_path / "a_file" / "run", check=False)
    assert one_error_line(proc) == (
        f"error: cannot use {tmp_path / 'a_file' / 'run'}: Not a directory; check the path and its permissions "
        "(the output dir is hydra.run.dir=<dir>, or hydra.sweep.dir=<dir> with -m)"
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_act(tmp_path_factory.mktemp("checkpoints") / "act")


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_a_damaged_safetensors_file_of_a_checkpoint_is_one_line(tmp_path: Path, checkpoint: Path, damage: str) -> None:
    copy = tmp_path / "act"
    shutil.copytree(checkpoint, copy)
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncated" else b"")
    proc = run_eval(*QUICK, "policy=act", f"policy.path={copy}", out_dir=tmp_path / "run", check=False)
    line = one_error_line(proc)
    assert line.startswith(f"error: cannot read {weights} (Error while deserializing header: "), line
    assert line.endswith(
        "): the file is damaged or was only partly written (an interrupted download or copy); copy or download "
        "the checkpoint again"
    ), line
    assert not (tmp_path / "run" / "episodes.jsonl").exists(), "refused before anything ran"


def test_a_damaged_json_file_of_a_checkpoint_is_one_line(tmp_path: Path, checkpoint: Path) -> None:
    copy = tmp_path / "act"
    shutil.copytree(checkpoint, copy)
    (copy / "config.json").write_text('{"type": "act", ')
    proc = run_eval(*QUICK, "policy=act", f"policy.path={copy}", out_dir=tmp_path / "run", check=False)
    assert one_error_line(proc).startswith(f"error: cannot read {copy / 'config.json'}: "), proc.stderr


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {"MUJOCO_GL": "bogus"},
            "error: MUJOCO_GL=bogus is not a MuJoCo rendering backend; use egl (an NVIDIA GPU), osmesa (CPU) or glfw "
            "(a display), or unset it to have one chosen",
        ),
        (
            {"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "bogus"},
            "error: PYOPENGL_PLATFORM=bogus disagrees with MUJOCO_GL=osmesa; set PYOPENGL_PLATFORM=osmesa or unset it",
        ),
    ],
)
def test_bad_gl_variables_are_one_line_before_anything_runs(
    tmp_path: Path, variables: dict[str, str], expected: str
) -> None:
    proc = run_eval(*QUICK, "policy=random", out_dir=tmp_path, env=variables, check=False)
    assert one_error_line(proc) == expected
    assert not (tmp_path / "episodes.jsonl").exists()
