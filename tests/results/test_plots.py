"""The success plot and the sweep heatmap: real images whose size follows the number of tasks and rows."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from lerobot_hydra.core.labels import split_label
from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.envs.metaworld import task_catalog
from lerobot_hydra.publish.plots import distinct_labels, success_by_task, sweep_heatmap
from lerobot_hydra.publish.publish import publish, publish_sweep
from lerobot_hydra.results.aggregate import Results, aggregate


def mt50_info(seed: int, groups: int = 4, per_group: int = 50) -> Results:
    """Results of made-up outcomes over the real MetaWorld task names (10 episodes per task)."""
    rng = random.Random(seed)
    records = []
    for group, names in list(task_catalog()["difficulty_groups"].items())[:groups]:
        for task_id, name in enumerate(names[:per_group]):
            rate = rng.random()
            for k in range(10):
                success = rng.random() < rate
                records.append(EpisodeRecord(group, task_id, name, name, k, k, success, 1.0, 0.5, 100, 0.1))
    return aggregate(records, eval_s=1.0)


def image(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def colours(pixels: np.ndarray) -> int:
    return len(np.unique(pixels.reshape(-1, 3), axis=0))


def test_success_plot_has_a_row_per_task_and_grows_with_the_task_count(tmp_path: Path) -> None:
    small = image(success_by_task(mt50_info(0, groups=1, per_group=2), tmp_path / "small.png"))
    mt50 = image(success_by_task(mt50_info(0), tmp_path / "mt50.png"))
    assert small.shape[1] == mt50.shape[1] >= 800
    assert mt50.shape[0] > 3 * small.shape[0]  # 50 readable rows need a taller figure
    assert mt50.shape[0] / 50 >= 20  # at least 20 px per task label
    # Bars in four group colours, whiskers, text: far from a blank canvas.
    assert colours(mt50) > 20
    group_colours = {(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)}  # matplotlib C0..C3
    present = {tuple(c) for c in np.unique(mt50.reshape(-1, 3), axis=0)}
    assert len(present) > 4 and all(any(np.abs(np.subtract(c, p)).sum() < 60 for p in present) for c in group_colours)


def test_sweep_heatmap_has_a_row_per_combination_and_a_column_per_task(tmp_path: Path) -> None:
    two = image(sweep_heatmap([("policy=a", mt50_info(1)), ("policy=b", mt50_info(2))], tmp_path / "two.png"))
    three_small = [(f"policy={p}", mt50_info(i, groups=1, per_group=5)) for i, p in enumerate("abc")]
    small = image(sweep_heatmap(three_small, tmp_path / "small.png"))
    assert two.shape[1] > 2 * small.shape[1]  # 50 task columns against 5
    assert small.shape[0] > 200 and colours(two) > 20


def test_publish_writes_the_success_plot_and_the_sweep_heatmap_only_for_several_combinations(tmp_path: Path) -> None:
    info = mt50_info(3, groups=2, per_group=3)
    publish(info, tmp_path, "Evaluation results")
    assert (tmp_path / "eval_info.json").is_file()
    assert image(tmp_path / "success_by_task.png").shape[0] > 200
    assert publish_sweep([("policy=a", info)], tmp_path) is None
    path = publish_sweep([("policy=a", info), ("policy=b", mt50_info(4, groups=2, per_group=3))], tmp_path)
    assert path == tmp_path / "sweep_heatmap.png" and colours(image(path)) > 10


def test_heatmap_rows_are_named_by_the_overrides_that_differ() -> None:
    labels = ["env.task=[a,b],logger=wandb,policy=x", "env.task=[a,b],logger=wandb,policy=y"]
    assert distinct_labels(labels) == ["policy=x", "policy=y"]
    assert distinct_labels(["", "policy=y"]) == ["(default)", "policy=y"]


def test_heatmap_rows_keep_a_quoted_comma_inside_its_value() -> None:
    # The plots' own splitter cut 'a,b' at its comma (rows "b'" and "c'"); core.labels.split_label does not.
    labels = ["policy=x,tags='a,b'", "policy=x,tags='a,c'"]
    assert distinct_labels(labels) == ["tags='a,b'", "tags='a,c'"]
    assert split_label(labels[0]) == ["policy=x", "tags='a,b'"]
