"""Every file and folder name of a run dir or a sweep dir is spelled once, in core/layout.py."""

from __future__ import annotations

import ast

from lerobot_hydra.core import layout
from tests.conftest import ROOT

PACKAGE = ROOT / "lerobot_hydra"
NAMES = {value for key, value in vars(layout).items() if key.isupper() and isinstance(value, str)}
# The same words meaning something else: (module, value).
OTHER_MEANINGS = {
    ("lerobot_hydra/core/labels.py", "policy_server"),  # the config group +policy_server=<preset>
    ("lerobot_hydra/serving/sweep_callback.py", "policy_server"),  # the same config node
    ("lerobot_hydra/envs/libero_setup.py", "config.yaml"),  # LIBERO's own config file
}


def test_no_module_but_the_layout_spells_a_run_dir_name() -> None:
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "core" / "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = str(path.relative_to(ROOT))
            if isinstance(node, ast.Constant) and node.value in NAMES and (where, node.value) not in OTHER_MEANINGS:
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not spelled, "name these through lerobot_hydra/core/layout.py:\n" + "\n".join(spelled)


def test_the_layout_names_what_a_run_writes() -> None:
    assert {"episodes.jsonl", "eval_info.json", ".lerobot_hydra.lock", ".hydra", "videos", "report.html"} <= NAMES
    assert layout.parse_shard_file_name(layout.shard_file_name(2, 4)) == (2, 4)
    assert layout.parse_shard_file_name("shard_2_of_4.jsonl") is None
    assert layout.video_path("reach", 3, 7) == "videos/reach_3/episode_7.mp4"
