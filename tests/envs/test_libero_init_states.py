"""LIBERO's init states are loaded without unpickling arbitrary objects: the shipped files load, a pickle that
would run code is refused before it runs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from lerobot_hydra.core.errors import UserError
from lerobot_hydra.envs.libero_init_states import load_init_states


class RunsCode:
    """Unpickling this opens (creates) a file: what a crafted init-state file would do, harmlessly."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (open, (str(self.marker), "w"))


@pytest.mark.libero
def test_shipped_init_states_load_as_the_arrays_they_hold() -> None:
    from lerobot_hydra.envs.libero import load_suite
    from lerobot_hydra.envs.libero_setup import prepare_libero

    prepare_libero()  # before LIBERO's first import, which would ask questions otherwise
    from libero.libero import get_libero_path

    task = load_suite("libero_spatial").get_task(0)
    path = Path(get_libero_path("init_states")) / task.problem_folder / task.init_states_file
    assert path.suffix == ".pruned_init"
    states = load_init_states(path)
    assert states.dtype == np.float64 and states.ndim == 2 and states.shape[0] == 50
    # The same array the unrestricted (pickle-running) loader gives for this trusted file.
    np.testing.assert_array_equal(states, torch.load(path, weights_only=False))


def test_an_init_state_file_that_would_run_code_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "code_ran"
    path = tmp_path / "evil.pruned_init"
    torch.save(RunsCode(marker), path)
    with pytest.raises(UserError, match=r"evil.pruned_init hold more than a float64 array \(it names _?io.open\)"):
        load_init_states(path)
    assert not os.path.exists(marker)


def test_an_init_state_file_of_another_array_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ints.pruned_init"
    torch.save(np.zeros((3, 4), dtype=np.int64), path)
    with pytest.raises(UserError, match="ints.pruned_init hold more than a float64 array"):
        load_init_states(path)
