"""lerobot_hydra: Hydra-configured evaluation of robot policies in simulation benchmarks."""

import os

# CPU inference shares the cores with the simulator workers (and, on a shared node, with other jobs); OpenMP
# threads that spin while idle then starve them: on a busy 2-core machine a ResNet-18 forward pass took 700 ms
# instead of 40 ms. The wait policy must be chosen before torch loads, and every entry point imports this
# package first. An explicit OMP_WAIT_POLICY wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["Evaluator", "evaluate"]


def __getattr__(name: str):  # noqa: ANN202 - the Python API, imported on first use (keeps `import` light)
    if name in __all__:
        from lerobot_hydra.app import api

        return getattr(api, name)
    raise AttributeError(f"module 'lerobot_hydra' has no attribute {name!r}")
