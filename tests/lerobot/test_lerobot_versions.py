"""Both LeRobot lines: a checkpoint saved by LeRobot 0.6 loads under 0.4.4 where nothing it holds is 0.6-only, and
otherwise one line names the LeRobot to install; `policy.revision` is LeRobot's `pretrained_revision`.

LeRobot 0.6.1 writes `pretrained_revision` into every config.json (and diffusion's `gradient_checkpointing`),
which is all that tells its ACT/diffusion config.json from 0.4.4's: the tests add exactly those fields. With
LEROBOT_HYDRA_OTHER_PYTHON set to the other line's interpreter (CI sets it), a checkpoint saved there for real
is loaded here too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from devkit.lerobot_checkpoints import tiny_act, tiny_diffusion
from lerobot_hydra.core.errors import UserError
from lerobot_hydra.policies.lerobot.checkpoint import Checkpoint
from lerobot_hydra.policies.lerobot.versions import inert_fields, lerobot_version
from tests.conftest import ROOT
from tests.lerobot.test_lerobot_policies import build, first_batch

pytest.importorskip("lerobot")
pytestmark = pytest.mark.lerobot

STATE = ["env.obs_type=state", "env.task=reach-v3"]
# What LeRobot 0.6.1 adds to a 0.4.4 config.json of the same policy.
SAVED_BY_06 = {"act": {"pretrained_revision": None}, "diffusion": {"pretrained_revision": None}}
SAVED_BY_06["diffusion"]["gradient_checkpointing"] = False


def edit_config(source: Path, target: Path, **fields: object) -> Path:
    shutil.copytree(source, target)
    config = json.loads((source / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **fields}))
    return target


def actions(compose: Callable, kind: str, directory: Path) -> np.ndarray:
    env, policy = build(compose, f"policy={kind}", f"policy.path={directory}", *STATE)
    policy.reset(env.tasks()[0], [1000])
    return np.asarray(policy.select_action(first_batch(env)))


@pytest.mark.parametrize("kind", ["act", "diffusion"])
def test_a_checkpoint_saved_by_lerobot_06_loads_and_acts_the_same(compose: Callable, tmp_path: Path, kind: str) -> None:
    saved = (tiny_act if kind == "act" else tiny_diffusion)(tmp_path / "saved")
    as_06 = edit_config(saved, tmp_path / "as_06", **SAVED_BY_06[kind])
    assert np.array_equal(actions(compose, kind, saved), actions(compose, kind, as_06))


def test_fields_only_a_newer_lerobot_knows_name_the_lerobot_to_install(compose: Callable, tmp_path: Path) -> None:
    saved = tiny_act(tmp_path / "saved")
    newer = edit_config(saved, tmp_path / "newer", pretrained_revision=None, action_warp="cubic")
    with pytest.raises(UserError) as err:
        build(compose, "policy=act", f"policy.path={newer}", *STATE)
    message = str(err.value)
    assert "\n" not in message and "saved by a newer LeRobot" in message
    assert "does not know its fields action_warp;" in message  # pretrained_revision is not what blocks it
    assert ("LeRobot 0.6.x, which needs Python >= 3.12" in message) or ("upgrade lerobot" in message)

    family = edit_config(saved, tmp_path / "family", type="future_vla")
    with pytest.raises(UserError, match=r"names the policy type 'future_vla', which lerobot [\d.]+ does not know"):
        build(compose, "policy=act", f"policy.path={family}", *STATE)


def test_relative_actions_of_06_load_on_either_line_only_when_switched_off() -> None:
    """0.6's pi0-family relative-action fields are inert while off: an older config class may drop them."""
    fields = {"use_relative_actions", "relative_exclude_joints", "action_feature_names", "pretrained_revision"}
    assert inert_fields({"use_relative_actions": False}, fields) == fields
    assert inert_fields({"use_relative_actions": True}, fields) == {"pretrained_revision"}


def test_policy_revision_is_lerobots_pretrained_revision(compose: Callable, tmp_path: Path) -> None:
    from lerobot_hydra.schemas.schema import instantiate_node

    directory = tiny_act(tmp_path / "act")
    cfg = compose("policy=act", f"policy.path={directory}", "policy.revision=v1.0", "device=cpu")
    # As if fetched from the Hub at that revision (a local directory takes no revision).
    config, _ = instantiate_node(cfg.policy).policy_config(Checkpoint(directory, "someone/tiny_act"), "cpu")
    lerobot_06 = int(lerobot_version().split(".")[1]) >= 6
    assert getattr(config, "pretrained_revision", None) == ("v1.0" if lerobot_06 else None)  # 0.4.4 has no such field
    with pytest.raises(UserError, match=r"overrides.pretrained_revision is set by the loader; use policy.revision"):
        build(compose, "policy=act", f"policy.path={directory}", "policy.overrides={pretrained_revision: main}")


def test_a_checkpoint_saved_by_the_other_lerobot_line_loads_here(compose: Callable, tmp_path: Path) -> None:
    other = os.environ.get("LEROBOT_HYDRA_OTHER_PYTHON")
    if not other:
        pytest.skip("set LEROBOT_HYDRA_OTHER_PYTHON to the other LeRobot line's python (CI does)")
    code = "import sys, pathlib, devkit.lerobot_checkpoints as c; c.tiny_act(pathlib.Path(sys.argv[1]))"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([other, "-c", code, str(tmp_path / "act")], check=True, cwd=ROOT, env=env, timeout=300)
    here = tiny_act(tmp_path / "here")
    assert np.allclose(actions(compose, "act", tmp_path / "act"), actions(compose, "act", here), atol=1e-5)
