"""One episode's outcome run two ways agrees exactly in everything but floats, which agree to 1e-5 relative: CPU
float kernels round differently for another batch size, row position or CPU (~1e-7 in an action), and a reward
sums many such steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest


def _floats_approx(value: Any) -> Any:
    if isinstance(value, float):
        return pytest.approx(value, rel=1e-5, abs=1e-6)
    if isinstance(value, tuple | list):
        return type(value)(_floats_approx(v) for v in value)
    return value


def assert_same_outcomes(got: Sequence[Sequence[Any]], want: Sequence[Sequence[Any]]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert tuple(g) == _floats_approx(tuple(w))
