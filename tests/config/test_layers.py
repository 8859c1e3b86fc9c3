"""The package's layers: imports point down the stack (docs/architecture.md), never up; modules and functions stay
small."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "lerobot_hydra"
# A package may import its own layer and those below it.
LAYERS = {
    "core": 0,
    "schemas": 1,
    "envs": 2,
    "vector": 2,
    "policies": 2,
    "processors": 2,
    "rollout": 3,
    "results": 4,
    "loggers": 5,
    "publish": 6,
    "store": 7,
    "run": 8,
    "sweeps": 9,
    "launch": 10,
    "serving": 11,
    "app": 12,
}


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in found if name.startswith("lerobot_hydra.")]


def test_every_module_sits_in_a_layer() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} - {"conf"}
    assert packages == set(LAYERS)
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py"]


def test_imports_point_down_the_layers() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        layer = path.relative_to(PACKAGE).parts[0]
        if layer not in LAYERS:
            continue
        for line, name in _imports(path):
            target = name.split(".")[1]
            if target in LAYERS and LAYERS[target] > LAYERS[layer]:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not upward, "imports up the layers:\n" + "\n".join(upward)


MAX_FUNCTION_LINES = 60


def test_no_function_is_over_60_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}() has {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


MAX_MODULE_LINES = 300


def test_no_module_is_over_300_lines() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{path.relative_to(ROOT)} has {lines} lines")
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)
