"""report.html opened from disk in a real headless Chromium: it renders its table and plot, and its H.264 videos
load and decode; and the provenance of a result is shown as a key/value table."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from lerobot_hydra.outputs.report import run_report
from lerobot_hydra.results.aggregate import aggregate
from tests.conftest import evaluate_here
from tests.helpers.browser import dump_dom, screenshot
from tests.results.test_stats import rec


@pytest.mark.slow
def test_a_run_writes_a_report_page_that_chromium_renders_with_its_videos_playing(tmp_path: Path) -> None:
    run = tmp_path / "run"
    info = evaluate_here(
        run,
        "policy=metaworld_expert",
        "env.task=[reach-v3,push-v3]",
        "eval.n_episodes=1",
        "env.episode_length=20",
        "eval.max_episodes_rendered=1",
        "env.observation_height=64",
        "env.observation_width=64",
        "eval.batch_size=1",
        "eval.use_async_envs=false",
    )
    page = run / "report.html"
    html = page.read_text()
    assert "http://" not in html and "https://" not in html  # nothing to fetch: it opens offline
    dom = dump_dom(page)
    videos = re.findall(r"<video [^>]*>", dom)
    assert [re.search(r'src="([^"]+)"', v)[1] for v in videos] == [  # type: ignore[index]
        "videos/reach-v3_0/episode_0.mp4",
        "videos/push-v3_0/episode_0.mp4",
    ]
    assert all('data-state="loaded"' in v for v in videos), videos  # first frame decoded: H.264 plays
    assert re.search(r'<img alt="success_by_task"[^>]*data-state="loaded"', dom)
    cells = re.findall(r"<td>([^<]*)</td>", dom)
    low, high = info["overall"]["ci95_pc_success"]
    assert ["reach-v3", "1"] == cells[:2] and "overall" in cells and f"[{low:.1f}, {high:.1f}]" in cells

    pixels = imread(screenshot(page, tmp_path / "shot.png"))[..., :3]
    table = pixels[90:260, 20:700]  # where the results table is drawn at this window size
    assert (table.mean(axis=2) < 0.3).sum() > 800, "no dark text where the table should be"
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 200  # plot and video frames


def test_the_provenance_is_shown_as_a_table_of_keys_and_values(tmp_path: Path) -> None:
    provenance = {"git": {"revision": "abc123", "dirty": False}, "packages": {"torch": "2.5<1>"}}
    results = aggregate([rec("reach-v3", k, k == 0) for k in range(3)], 1.0, provenance)
    html = run_report(results, tmp_path, "Evaluation results", {}).read_text()
    assert "<h2>Provenance</h2>" in html
    for key, value in (("git.revision", "abc123"), ("git.dirty", "false"), ("packages.torch", "2.5&lt;1&gt;")):
        assert f'<td class="kv">{key}</td><td class="kv">{value}</td>' in html
    assert "Provenance" not in run_report(aggregate([rec("reach-v3", 0, True)], 1.0), tmp_path, "t", {}).read_text()
