"""Hydra, submitit and OmegaConf are extended through their public extension points only: no module of ours assigns
to an attribute of theirs (a runtime patch) or imports a private name of theirs."""

from __future__ import annotations

import ast

from tests.conftest import ROOT

PACKAGE = ROOT / "lerobot_hydra"
PLUGINS = ROOT / "hydra_plugins"  # our Hydra launcher classes
THEIRS = ("hydra", "hydra_plugins", "submitit", "omegaconf")
# (file path relative to the repo root, the private name it uses): why no public hook exists. Empty: none needed.
ALLOWED: dict[tuple[str, str], str] = {}


def _is_theirs(module: str) -> bool:
    return module.split(".")[0] in THEIRS


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def findings(source: str) -> list[tuple[int, str]]:
    """(line, what) for each private import of their modules and each assignment to an attribute of theirs."""
    tree = ast.parse(source)
    theirs: set[str] = set()  # local names bound to their modules, classes and functions
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_theirs(alias.name):
                    theirs.add((alias.asname or alias.name).split(".")[0])
                    if _is_private(alias.name):
                        found.append((node.lineno, f"imports {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.module and _is_theirs(node.module):
            for alias in node.names:
                theirs.add(alias.asname or alias.name)
                if _is_private(f"{node.module}.{alias.name}"):
                    found.append((node.lineno, f"imports {alias.name} from {node.module}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module":
            if node.args and isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith(THEIRS):
                if _is_private(str(node.args[0].value)):
                    found.append((node.lineno, f"imports {node.args[0].value}"))
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="?")] if node.args else []
        for target in targets:
            if isinstance(target, ast.Attribute) and _root_name(target) in theirs:
                found.append((node.lineno, f"assigns to {ast.unparse(target)}"))
    return found


def test_no_module_patches_or_imports_private_names_of_hydra_submitit_or_omegaconf() -> None:
    bad = []
    for path in sorted([*PACKAGE.rglob("*.py"), *PLUGINS.rglob("*.py")]):
        module = str(path.relative_to(ROOT))
        for line, what in findings(path.read_text()):
            if not any(module == allowed and name in what for allowed, name in ALLOWED):
                bad.append(f"{module}:{line} {what}")
    assert not bad, "patches or private imports (add a public extension point, or allow-list with why):\n" + "\n".join(
        bad
    )


def test_the_scan_finds_what_the_old_patches_did() -> None:
    """The patches this package once made (a runtime replacement of Hydra's and submitit's functions) are found."""
    patched = """
import hydra._internal.utils as hydra_utils
import submitit
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
from submitit.core.utils import _private_helper
hydra_utils.run_and_report = print
submitit.AutoExecutor.map_array = print
BaseSubmititLauncher.launch = print
setattr(submitit, "helpers", None)
"""
    what = [w for _, w in findings(patched)]
    assert what == [
        "imports hydra._internal.utils",
        "imports _private_helper from submitit.core.utils",
        "assigns to hydra_utils.run_and_report",
        "assigns to submitit.AutoExecutor.map_array",
        "assigns to BaseSubmititLauncher.launch",
        "assigns to submitit.?",
    ], what
    ours = "from omegaconf import OmegaConf\nclass A:\n    pass\nA.x = 1\nconfig = OmegaConf.create({})\nconfig.x = 1\n"
    assert findings(ours) == []
