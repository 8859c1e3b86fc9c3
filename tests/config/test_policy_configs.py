"""The LeRobot policy options share conf/policy/base/lerobot.yaml and set only what differs."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from tests.conftest import CONF

BASE = CONF / "policy" / "base" / "lerobot.yaml"
LEROBOT = sorted(
    p.stem
    for p in (CONF / "policy").glob("*.yaml")
    if "base/lerobot@_here_" in (yaml.safe_load(p.read_text()) or {}).get("defaults", [])
)


def test_every_lerobot_policy_option_extends_the_base(compose) -> None:
    options = [p.stem for p in (CONF / "policy").glob("*.yaml")]
    lerobot = {o for o in options if compose(f"policy={o}").policy._target_.endswith(".LeRobotPolicyConfig")}
    assert lerobot == set(LEROBOT) == {
        "act", "diffusion", "groot", "multi_task_dit", "pi0", "pi05", "pi0_fast", "smolvla", "xvla"
    }  # fmt: skip


@pytest.mark.parametrize("name", LEROBOT)
def test_a_lerobot_policy_option_is_the_base_plus_what_differs(compose, name: str) -> None:
    base = yaml.safe_load(BASE.read_text())
    own = {k: v for k, v in yaml.safe_load((CONF / "policy" / f"{name}.yaml").read_text()).items() if k != "defaults"}
    assert "path" in own, f'{name} names its checkpoint ("" where the user must give one)'
    repeated = {k for k, v in own.items() if k in base and base[k] == v}
    assert not repeated, f"conf/policy/{name}.yaml repeats the base's {sorted(repeated)}"
    composed = OmegaConf.to_container(compose(f"policy={name}").policy, resolve=False)
    assert composed == {**base, **own}
