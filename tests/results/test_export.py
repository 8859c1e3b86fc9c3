"""Exports: the compare CLI's Markdown, LaTeX and CSV tables (two dirs, three or more, one), a sweep's summary files,
each printed number checked against scipy/statsmodels, the LaTeX checked structurally (no TeX engine here), and the
one-line refusals."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from lerobot_hydra.core.records import EpisodeRecord
from lerobot_hydra.results.aggregate import aggregate
from lerobot_hydra.results.eval_info import to_eval_info
from lerobot_hydra.results.export import Table, escape, latex
from lerobot_hydra.sweeps.compare import main as compare_main
from lerobot_hydra.sweeps.summary import SweepEntry, sweep_summary
from lerobot_hydra.sweeps.summary_export import write_exports

N = 20


def records(wins: list[bool], steps: int = 50) -> list[EpisodeRecord]:
    """`N` episodes of two tasks (10 each) of group 'mt_test' (so names need LaTeX escaping)."""
    return [
        EpisodeRecord("mt_test", k // 10, f"task_{k // 10}", "", k % 10, 1000 + k % 10, w, 0.0, 0.0, steps + k, 0.1)
        for k, w in enumerate(wins)
    ]


WINS = {
    "policy_a": [True] * 18 + [False] * 2,
    "policy_b": [True] * 15 + [False] * 5,
    "policy_c": [k % 3 == 0 for k in range(N)],
}


def write_run(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    out.mkdir()
    (out / "eval_info.json").write_text(json.dumps(to_eval_info(aggregate(records(WINS[name]), 1.0))))
    return out


def wilson(k: int, n: int) -> list[float]:
    ci = binomtest(k, n).proportion_ci(method="wilson")
    return [100 * ci.low, 100 * ci.high]


def test_two_dirs_as_csv_markdown_and_latex(tmp_path: Path, capsys) -> None:
    a, b = write_run(tmp_path, "policy_a"), write_run(tmp_path, "policy_b")
    assert compare_main([str(a), str(b), "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    overall = rows[-1]
    assert overall["task"] == "overall" and overall["pairs"] == "20"
    a_only = sum(x and not y for x, y in zip(WINS["policy_a"], WINS["policy_b"], strict=True))
    b_only = sum(y and not x for x, y in zip(WINS["policy_a"], WINS["policy_b"], strict=True))
    assert float(overall["p"]) == pytest.approx(binomtest(b_only, a_only + b_only).pvalue)
    assert float(overall["difference"]) == pytest.approx(100 * (15 - 18) / N)
    assert (overall["test"], overall["adjustment"]) == ("McNemar exact", "Holm")
    tasks = rows[:2]
    raw = [float(t["p"]) for t in tasks]
    assert [float(t["p (Holm)"]) for t in tasks] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    assert compare_main([str(a), str(b), "--format", "markdown", "--mid-p"]) == 0
    md = capsys.readouterr().out
    assert "| overall | 20 | 90.0 | 75.0 | -15.0 |" in md and "McNemar mid-p test on paired episodes" in md
    assert compare_main([str(a), str(b), "--format", "latex"]) == 0
    check_latex(capsys.readouterr().out, rows=4)  # two tasks, their group, overall


def check_latex(tex: str, rows: int) -> None:
    """Booktabs structure: one tabular, its rules in order, `rows` body rows of as many cells as columns, the
    caption naming the test and the adjustment, no unescaped underscore, percent or ampersand in text."""
    assert tex.count(r"\begin{tabular}") == 1 and tex.count(r"\end{tabular}") == 1
    order = [tex.index(r"\toprule"), tex.index(r"\midrule"), tex.index(r"\bottomrule")]
    assert order == sorted(order)
    spec = re.search(r"\\begin\{tabular\}\{([lr]+)\}", tex)
    assert spec is not None
    body = [line for line in tex.splitlines() if line.endswith(r"\\")]
    assert len(body) == rows + 1  # and the header
    assert all(len(re.split(r"(?<!\\)&", line)) == len(spec[1]) for line in body)
    assert "Holm" in tex and "McNemar" in tex
    assert not re.search(r"(?<!\\)[_%]", tex.replace(r"\begin", "").replace(r"\end", ""))


def test_three_dirs_give_the_many_policy_table_and_one_dir_its_results(tmp_path: Path, capsys) -> None:
    dirs = [str(write_run(tmp_path, name)) for name in WINS]
    assert compare_main([*dirs, "--format", "csv"]) == 0
    rows = {r["policy"]: r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    assert {name: r["group"] for name, r in rows.items()} == {"policy_a": "a", "policy_b": "ab", "policy_c": "b"}
    assert_letters_follow_holm({name: r["group"] for name, r in rows.items()})
    for name, r in rows.items():
        wins = sum(WINS[name])
        assert float(r["success (%)"]) == pytest.approx(100 * wins / N)
        assert [float(r["95% CI low"]), float(r["95% CI high"])] == pytest.approx(wilson(wins, N))
    assert compare_main([*dirs, "--format", "latex"]) == 0
    check_latex(capsys.readouterr().out.split(r"\end{table}")[0], rows=3)
    assert compare_main([dirs[0], "--format", "markdown"]) == 0
    md = capsys.readouterr().out
    assert "| overall | 20 | 18 | 90.0 | [69.9, 97.2] |" in md
    assert [round(x, 1) for x in wilson(18, N)] == [69.9, 97.2]


def assert_letters_follow_holm(letters: dict[str, str]) -> None:
    """Two policies share a letter exactly when their exact McNemar test, Holm-adjusted over the three pairs
    (statsmodels), is not significant."""
    names = list(WINS)
    pairs = [(x, y) for i, x in enumerate(names) for y in names[i + 1 :]]
    raw = []
    for x, y in pairs:
        x_only = sum(u and not v for u, v in zip(WINS[x], WINS[y], strict=True))
        y_only = sum(v and not u for u, v in zip(WINS[x], WINS[y], strict=True))
        raw.append(binomtest(y_only, x_only + y_only).pvalue)
    for (x, y), reject in zip(pairs, multipletests(raw, method="holm")[0], strict=True):
        assert bool(set(letters[x]) & set(letters[y])) == (not reject)


def test_wrong_inputs_get_one_line(tmp_path: Path, capsys) -> None:
    a, b = write_run(tmp_path, "policy_a"), write_run(tmp_path, "policy_b")
    other = tmp_path / "other"
    other.mkdir()
    (other / "eval_info.json").write_text(json.dumps(to_eval_info(aggregate(records([True] * N)[:-1], 1.0))))
    assert compare_main([str(a), str(b), str(other)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: policy_a and other cannot be paired (different episode counts") and err.count("\n") == 1
    )
    assert compare_main([str(a), "--margin", "5"]) == 2
    assert capsys.readouterr().err == "error: --margin needs two dirs (B judged against A), not 1; leave it out\n"
    assert escape("a_b 5% & c") == r"a\_b 5\% \& c"


def test_a_sweep_writes_its_tables_beside_its_summary(tmp_path: Path) -> None:
    entries = [
        SweepEntry(f"policy={n}", f"policy={n}", 1, {"policy": n, "seed": 1000}, aggregate(records(w), 1.0), Path(), [])
        for n, w in WINS.items()
    ]
    summary = sweep_summary(entries, tmp_path, None)
    paths = write_exports(summary, tmp_path)
    assert [p.name for p in paths] == ["sweep_summary.md", "sweep_summary.tex", "sweep_summary.csv"]
    rows = list(csv.DictReader(io.StringIO(paths[2].read_text())))
    assert [(r["policy"], r["group"]) for r in rows] == [
        (f"policy={n}", g) for n, g in zip(WINS, ("a", "ab", "b"), strict=True)
    ]
    md = paths[0].read_text()
    assert "Policies that share a letter are not significantly different" in md and "Holm-adjusted" in md
    assert "policy=policy_b vs baseline policy=policy_a" in md and "| policy=policy_c | 20 | 35.0 |" in md
    single = sweep_summary(entries[:2], tmp_path, None)
    assert "many_policies" not in single and "many_policies_missing" not in single


def test_latex_sets_a_small_p_value_in_math_mode() -> None:
    """With LaTeX's default font encoding (OT1) a text-mode `<` typesets as an inverted exclamation mark."""
    tex = latex(Table("Paired test < 1 > 0", [("task", "text"), ("p", "p")], [["reach", 1e-6], ["push", 0.5]]))
    assert r"reach & $<$0.0001 \\" in tex and "Paired test $<$ 1 $>$ 0" in tex
    assert not re.search(r"(?<!\$)[<>]", tex)
