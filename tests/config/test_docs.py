"""The README and docs/ stay true: the README is short, every relative link resolves, and every eval.py (autotune,
serve) command in a fenced bash block composes with the real config tree, its env and policy nodes checked against
their dataclasses as a run checks them (devices aside: a doc may name a GPU this machine lacks)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README_MAX_LINES = 300
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^```(\w*)\s*$")
# Command-line options of Hydra's app that are not overrides: dropped, with their argument where they take one.
FLAGS_WITH_ARG = {"--cfg", "-c", "--package", "-p", "--info", "-i"}
FLAGS = {"-m", "--multirun", "--resolve", "--help", "-h", "--hydra-help"}
# lerobot-hydra-autotune's own options.
AUTOTUNE_FLAGS_WITH_ARG = {"--max-batch"}
AUTOTUNE_FLAGS = {"--server"}


def _bash_blocks(path: Path) -> list[tuple[int, int, str]]:
    """(block's line number, line number, logical line) of every line in a ```bash block, continuations joined."""
    found: list[tuple[int, int, str]] = []
    block: str | None = None  # the open fence's language, None outside a block
    pending, start, opened = "", 0, 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            block = fence.group(1) if block is None else None
            opened = number
            continue
        if block not in ("bash", "sh", "shell"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        found.append((opened, start, pending + line))
        pending = ""
    return found


def _fences_balanced(path: Path) -> bool:
    return sum(1 for line in path.read_text().splitlines() if line.startswith("```")) % 2 == 0


def _commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line (split at `&&`, `||`, `;`, `|`), comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token and set(token) <= set("&|;"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _program(argv: list[str]) -> tuple[str, list[str]] | None:
    """(config name, arguments) of an eval.py, lerobot-hydra-eval/-autotune/-serve command; None for any other."""
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", argv[0]):  # VAR=value prefixes
        argv = argv[1:]
    if not argv:
        return None
    head = Path(argv[0]).name
    if head in ("lerobot-hydra-eval", "lerobot-hydra-autotune"):
        return "config", argv[1:]
    if head == "lerobot-hydra-serve":
        return "serve", argv[1:]
    if re.fullmatch(r"python[0-9.]*", head) and len(argv) > 1:
        if Path(argv[1]).name == "eval.py":
            return "config", argv[2:]
        if argv[1] == "-m" and len(argv) > 2:
            module = {"lerobot_hydra.app.main": "config", "lerobot_hydra.app.autotune": "config"}
            if argv[2] in module:
                return module[argv[2]], argv[3:]
            if argv[2] == "lerobot_hydra.app.serve":
                return "serve", argv[3:]
    return None


def _overrides(args: list[str]) -> list[str]:
    """The overrides of a command line, a swept value reduced to its first."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
        elif arg in FLAGS_WITH_ARG or arg in AUTOTUNE_FLAGS_WITH_ARG:
            skip_next = True
        elif arg in FLAGS or arg in AUTOTUNE_FLAGS:
            continue
        else:
            overrides.append(arg)
    parsed = OverridesParser.create().parse_overrides(overrides)
    out = []
    for text, override in zip(overrides, parsed, strict=True):
        if override.is_sweep_override():
            first = next(iter(override.sweep_string_iterator()))
            out.append(f"{override.get_key_element()}={first}")
        else:
            out.append(text)
    return out


def _check_composes(config_name: str, overrides: list[str]) -> None:
    """Compose as the command would, then check the env and policy nodes as a run does before building anything."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    import lerobot_hydra.app.main  # noqa: F401  registers the schemas and resolvers
    import lerobot_hydra.serving.schema  # noqa: F401  registers the server's schema
    from lerobot_hydra.schemas.schema import resolve_target, validate_node
    from lerobot_hydra.schemas.validation import check_policy_fits_env

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="lerobot_hydra.conf", version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()
    policy_cls = validate_node(cfg.policy, "policy")
    check_policy_fits_env(policy_cls, resolve_target(cfg.env._target_, "env"))
    validate_node(cfg.env, "env")


def _doc_commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for path in DOCS:
        installing = set()  # blocks that pip-install a local package use the options that package adds
        for block, number, line in _bash_blocks(path):
            for argv in _commands(line):
                if argv[:2] == ["pip", "install"] and argv[2:3] and argv[2].startswith("./"):
                    installing.add(block)
                program = _program(argv)
                if program is None or block in installing:
                    continue
                # A command with --config-dir composes the reader's own files, which are not here.
                if not {"--config-dir", "-cd", "--config-path", "-cp"} & set(program[1]):
                    found.append((f"{path.relative_to(ROOT)}:{number}", program[0], program[1]))
    return found


def test_readme_is_short() -> None:
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move detail into docs/ (at most {README_MAX_LINES})"
    )


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert _fences_balanced(path), f"{path.name}: a ``` fence is not closed"
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to files that do not exist: {broken}"


def test_docs_hold_commands_to_check() -> None:
    commands = _doc_commands()
    assert len(commands) >= 40, commands  # the extraction still finds the docs' commands
    assert any(name == "serve" for _, name, _ in commands)


@pytest.mark.parametrize(("config_name", "args"), [pytest.param(c, a, id=where) for where, c, a in _doc_commands()])
def test_documented_command_composes(config_name: str, args: list[str]) -> None:
    if "env=lerobot" in args and _lerobot_minor() < 6:
        pytest.skip("env=lerobot composes with LeRobot 0.6 (the Python 3.12 line), which runs this test")
    _check_composes(config_name, _overrides(args))


def _lerobot_minor() -> int:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("lerobot").split(".")[1])
    except PackageNotFoundError:
        return -1


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("python eval.py -m eval.n_episodez=3,4", "n_episodez"),
        ("python eval.py env=pusht policy=metaworld_expert", "metaworld_expert"),
        ("lerobot-hydra-serve policy=random serve.max_batch=8", "max_batch"),
        ("python eval.py env=gym policy=random +env.gym_idd=CartPole-v1 --cfg job", "gym_idd"),
    ],
)
def test_a_wrong_command_fails_the_check(line: str, error: str) -> None:
    (argv,) = _commands(line)
    program = _program(argv)
    assert program is not None
    overrides = _overrides(program[1])
    with pytest.raises(Exception, match=error):
        _check_composes(program[0], overrides)


def test_sweeps_and_flags_reduce_to_one_composable_job() -> None:
    line = "MUJOCO_GL=egl python eval.py -m policy=random,act 'env.task=[reach-v3,push-v3]' --cfg job  # a comment"
    (argv,) = _commands(line)
    assert _program(argv) == ("config", ["-m", "policy=random,act", "env.task=[reach-v3,push-v3]", "--cfg", "job"])
    assert _overrides(["-m", "policy=random,act", "env.task=[reach-v3,push-v3]", "--cfg", "job"]) == [
        "policy=random",
        "env.task=[reach-v3,push-v3]",
    ]
    assert [c[0] for c in _commands("bash scripts/install.sh && python eval.py")] == ["bash", "python"]
