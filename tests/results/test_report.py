"""report.html opened from disk in a real headless Chromium: it renders its table and plot, and its H.264 videos
load and decode; and the provenance of a result is shown as a key/value table."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from lerobot_hydra.publish.report import run_report
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
    table = pixels[90:260, 20:700]  # where the success plot (the page begins with it) is drawn at this size
    assert (table.mean(axis=2) < 0.3).sum() > 800, "no dark text where the plot should be"
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 200  # plot and video frames


def test_the_provenance_is_shown_as_a_table_of_keys_and_values(tmp_path: Path) -> None:
    provenance = {"git": {"revision": "abc123", "dirty": False}, "packages": {"torch": "2.5<1>"}}
    results = aggregate([rec("reach-v3", k, k == 0) for k in range(3)], 1.0, provenance)
    html = run_report(results, tmp_path, "Evaluation results", {}).read_text()
    assert "<h2>Provenance</h2>" in html
    for key, value in (("git.revision", "abc123"), ("git.dirty", "false"), ("packages.torch", "2.5&lt;1&gt;")):
        assert f'<td class="kv">{key}</td><td class="kv">{value}</td>' in html
    assert "Provenance" not in run_report(aggregate([rec("reach-v3", 0, True)], 1.0), tmp_path, "t", {}).read_text()


# Appended to a copy of the page: where the first plot and the first table row are, written into the DOM.
_POSITIONS = """<script>
window.addEventListener("load", () => {
  const img = document.querySelector("img"), row = document.querySelector("tbody tr");
  document.body.dataset.plotTop = Math.round(img.getBoundingClientRect().top);
  document.body.dataset.plotBottom = Math.round(img.getBoundingClientRect().bottom);
  document.body.dataset.rowTop = Math.round(row.getBoundingClientRect().top);
});
</script></body>"""


def test_an_mt50_sized_report_shows_its_plots_before_its_long_table(tmp_path: Path) -> None:
    from lerobot_hydra.core.records import EpisodeRecord
    from lerobot_hydra.publish.publish import publish

    records = [
        EpisodeRecord("mt50", t, f"task-{t}-v3", "", k, 1000 + k, (t + k) % 3 != 0, 0.0, 0.0, 40 + 3 * t + k, 0.1)
        for t in range(50)
        for k in range(4)
    ]
    publish(aggregate(records, 1.0), tmp_path, "MT50")
    page = tmp_path / "report.html"
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", _POSITIONS))
    dom = dump_dom(probe)
    found = {k: int(v) for k, v in re.findall(r'data-(plot-top|plot-bottom|row-top)="(\d+)"', dom)}
    assert found["plot-top"] < 200  # the success plot starts on the first screen
    assert found["plot-bottom"] < found["row-top"]  # and the first of the 51 table rows comes after it
    assert dom.index('alt="success_by_task"') < dom.index('alt="steps_cdf"') < dom.index("<tbody>")
    pixels = imread(screenshot(page, tmp_path / "shot.png", height=700))[..., :3]
    assert len(np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0)) > 50  # a plot, not text alone
