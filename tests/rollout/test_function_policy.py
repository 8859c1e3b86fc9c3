"""policy=function: a stateless controller (module.function) drives each row from its own observation."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.base import TaskSpec
from lerobot_hydra.policies.function import FunctionPolicy, FunctionPolicyConfig, resolve_function

TASK = TaskSpec("g", 0, "t", "", 10)


def test_rows_are_the_named_inputs_concatenated_and_idle_rows_get_zeros() -> None:
    action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
    policy = FunctionPolicy(np.cumsum, ["observation.a", "observation.b"], {}, action_space)
    policy.reset(TASK, [1, None])
    batch = {"observation.a": np.array([[1.0, 2.0], [5.0, 5.0]]), "observation.b": np.array([[3.0], [5.0]])}
    np.testing.assert_array_equal(policy.select_action(batch), [[1.0, 3.0, 6.0], [0.0, 0.0, 0.0]])
    policy.reset_slots(TASK, {1: 2})
    assert policy.select_action(batch)[1].tolist() == [5.0, 10.0, 15.0]
    with pytest.raises(UserError, match=r"policy.inputs names observation.b, which the env does not give"):
        policy.select_action({"observation.a": batch["observation.a"]})


def test_settings_are_checked_in_one_line() -> None:
    with pytest.raises(UserError, match="policy.function is required"):
        FunctionPolicyConfig()
    with pytest.raises(UserError, match=r"policy.function 'numpy.nosuch' cannot be imported"):
        resolve_function("numpy.nosuch")
    with pytest.raises(UserError, match=r"policy.function 'numpy.pi' is not callable"):
        resolve_function("numpy.pi")
