"""The docs' tables name what exists: docs/architecture.md's where-is-X table every module of the package,
docs/configuration.md's `eval.*` table every field of the eval schema and its group table every config option."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from lerobot_hydra.schemas.schema import EvalConfig
from tests.conftest import ROOT

PACKAGE = ROOT / "lerobot_hydra"
CODE = re.compile(r"`([^`]+)`")


def table_rows(doc: Path, heading: str) -> list[str]:
    """The rows of the first table under `heading` (a line starting with #)."""
    lines = doc.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#") and line.lstrip("# ") == heading)
    rows: list[str] = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break
    return rows[2:]  # after the header and its rule


def modules() -> list[str]:
    """Every module of the package, relative to it; a package's `__init__.py` only where it defines something."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if path.name == "__init__.py" and not re.search(r"^(def|class) ", text, re.MULTILINE):
            continue
        found.append(path.relative_to(PACKAGE).as_posix())
    return found


def named_in(module: str, rows: list[str]) -> bool:
    """A row names a module by its path (`run/sources/plan.py`) or, when the row names its folder's path, by its
    file name (`envs/libero.py` (+ `libero_setup.py`))."""
    folder, _, name = module.rpartition("/")
    if not folder:  # the package's own modules: by their name
        return any(name in CODE.findall(row) for row in rows)
    for row in rows:
        names = CODE.findall(row)
        if module in names or module.removesuffix("/__init__.py") + "/" in names:
            return True
        if name in names and any(n.startswith(folder + "/") for n in names):
            return True
    return False


def test_the_where_is_x_table_names_every_module() -> None:
    rows = table_rows(ROOT / "docs" / "architecture.md", "Where is X?")
    missing = [m for m in modules() if not named_in(m, rows)]
    assert not missing, f"docs/architecture.md's where-is-X table names none of: {', '.join(missing)}"


def test_a_module_the_table_leaves_out_is_found() -> None:
    rows = ["| x | `rollout/plan.py`, `schedule.py` |", "| y | `envs/` |"]
    assert named_in("rollout/schedule.py", rows) and named_in("rollout/plan.py", rows)
    assert not named_in("rollout/runner.py", rows) and not named_in("run/plan.py", rows)


def schema_keys(schema: type, prefix: str = "") -> list[str]:
    keys = []
    for f in dataclasses.fields(schema):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys += schema_keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def test_the_eval_table_lists_every_field_of_the_eval_schema() -> None:
    rows = table_rows(ROOT / "docs" / "configuration.md", "Evaluation keys")
    documented = {name for row in rows for name in CODE.findall(row.split("|")[1])}
    assert documented == set(schema_keys(EvalConfig)), "docs/configuration.md's eval table and EvalConfig differ"


@pytest.mark.parametrize("group", ["env", "policy", "logger", "policy_server"])
def test_the_group_table_names_every_option(group: str) -> None:
    rows = table_rows(ROOT / "docs" / "configuration.md", "Config groups")
    row = next(r for r in rows if r.split("|")[1].strip() == f"`{group}`")
    options = {p.stem for p in (PACKAGE / "conf" / group).glob("*.yaml")}
    assert options <= set(CODE.findall(row.split("|")[2])), f"docs/configuration.md: the {group} row lacks options"
