"""benchmarks/reproduce.py: the per-paper specs name only parameters the protocols have, the table
divides each mode by the central baseline and marks an infinite ε, a wrong paper is one line."""

from __future__ import annotations

import dataclasses
import math

import pytest

from benchmarks import reproduce
from benchmarks.papers import FIGURE_KEYS, PAPERS, Run, figures
from protocols.base import ConfigError


def test_unknown_paper_is_one_line_and_exit_2(capsys):
    assert reproduce.main(["fedgnn"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown paper 'fedgnn'" in err[0]
    assert all(name in err[0] for name in ("fedpergnn", "verfedgnn", "dgrec", "dipsgnn"))


@pytest.mark.parametrize("quick", [False, True])
def test_specs_build_every_config(quick):
    for paper in PAPERS.values():
        planned = reproduce.configs(paper, quick)
        assert [run for run, _, _ in planned] == list(paper.runs)
        assert all(rounds >= 1 for _, rounds, _ in planned)
        assert paper.mode("paper") and paper.mode("baseline")


def test_a_misspelt_parameter_fails_before_running():
    paper = PAPERS["fedpergnn"]
    bad = Run("paper", "x", "fedlightgcn", 1, {"calibraton": "authors_code"})
    with pytest.raises(ConfigError, match="calibraton"):
        reproduce.configs(dataclasses.replace(paper, runs=(bad,)), False)
    bad = Run("paper", "x", "dipsgnn", 1, {}, {"calibration": "papr"})  # only under --quick
    reproduce.configs(dataclasses.replace(paper, runs=(bad,)), False)
    with pytest.raises(ConfigError, match="calibration"):
        reproduce.configs(dataclasses.replace(paper, runs=(bad,)), True)


def test_paper_figures_name_runs_that_exist():
    for name in PAPERS:
        declared = figures(name)
        labels = {r.label for r in PAPERS[name].runs}
        for key in set(declared) - set(FIGURE_KEYS):
            assert key in labels, f"{name}: figure for {key!r}, which no run is labelled"
        assert set(declared["method"]) <= set(PAPERS[name].metrics)


def _row(value, eps, private=True, claim=None):
    return {
        "status": "ok",
        "metrics": {"recall@20": value, "ndcg@20": value / 2},
        "epsilon": eps,
        "delta": 1e-5 if eps is not None else None,
        "private": private,
        "epsilon_paper": claim,
    }


def test_ratios_and_infinite_epsilon():
    claim = {"value": 1.0, "what": "ε per coordinate of an upload"}
    results = {
        "fedlightgcn calibration=authors_code": _row(0.2771, math.inf, claim=claim),
        "fedlightgcn calibration=thesis": _row(0.2331, 1.84e6, claim=claim),
        "central:lightgcn": _row(0.2969, None, private=False),
    }
    rows = reproduce.build_rows("fedpergnn", PAPERS["fedpergnn"], results)
    assert [r["metric"] for r in rows] == ["recall@20", "ndcg@20"]
    r = rows[0]
    assert r["ratio_paper_mode"] == pytest.approx(0.2771 / 0.2969)
    assert r["ratio_rigorous_mode"] == pytest.approx(0.2331 / 0.2969)
    assert r["paper_figure"] == "0.1661 (gowalla; 0.9347 × central LightGCN 0.1777)"
    cells = reproduce.table_cells(r)
    assert cells[3:7] == ["0.2771", "0.2331", "0.2969 (central:lightgcn)", "0.9333 / 0.7851"]
    assert cells[7] == "1 (ε per coordinate of an upload)"
    assert cells[8] == "∞ (δ=1e-05) / 1.84e+06 (δ=1e-05)"
    # the JSON form of ∞ (engine.compare.jsonable) reads the same
    results["fedlightgcn calibration=authors_code"]["epsilon"] = "inf"
    assert reproduce.build_rows("fedpergnn", PAPERS["fedpergnn"], results)[0][
        "epsilon_paper_mode"
    ].startswith("∞")


def test_same_run_missing_runs_and_lower_is_better():
    # DGREC: no rigorous run of its own; the HyperGNN baseline failed
    results = {
        "dgrec": _row(0.17, 3.4e5),
        "central:lightgcn": _row(0.34, None, private=False),
        "central HyperGNN": {"status": "failed", "reason": "RuntimeError: out of memory"},
    }
    rows = reproduce.build_rows("dgrec", PAPERS["dgrec"], results)
    assert len(rows) == 4  # 2 baselines x 2 metrics
    cells = reproduce.table_cells(rows[0])
    assert cells[4] == "same run" and cells[6] == "0.5"
    assert rows[2]["baseline"] == "central HyperGNN" and rows[2]["ratio_paper_mode"] is None
    assert reproduce.table_cells(rows[2])[5] == "— (central HyperGNN)"
    # VerFedGNN: RMSE, ours / central as for every metric; no paper figure recorded
    rmse = {"status": "ok", "metrics": {"rmse": 0.954}, "epsilon": math.inf, "private": True}
    results = {
        "verfedgnn projection=sparse": rmse,
        "verfedgnn projection=gaussian": {**rmse, "metrics": {"rmse": 0.955}},
        "central:gcn": {"status": "ok", "metrics": {"rmse": 0.942}, "private": False},
    }
    rows = reproduce.build_rows("verfedgnn", PAPERS["verfedgnn"], results)
    assert rows[0]["ratio_paper_mode"] == pytest.approx(0.954 / 0.942)
    assert rows[0]["paper_figure"] == "not recorded"
    assert rows[1]["baseline"] == "central:mf" and rows[1]["baseline_value"] is None


def _entry(key: str, text: str) -> str:
    name, _, dataset = key.partition(":")
    return f"<!-- reproduce:{key} -->\n### {name} on {dataset} (quick budgets)\n\n{text}\n"


def test_writing_twice_leaves_one_table_per_paper_and_dataset(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# Results\n\n## Earlier\n\ntext\n")
    assert not reproduce.write_results(_entry("dgrec:ml-100k", "first"), "dgrec:ml-100k", path)
    assert not reproduce.write_results(_entry("dipsgnn:ml-100k", "other"), "dipsgnn:ml-100k", path)
    text = path.read_text()
    assert text.count(reproduce.HEADING) == 1 and text.count(reproduce.BEGIN) == 1
    assert text.index("## Earlier") < text.index(reproduce.BEGIN) < text.index("first")
    # a section written after the block later; DGREC reproduced again: replaced where it stood
    path.write_text(text + "\n## Later\n\nlater\n")
    assert reproduce.write_results(_entry("dgrec:ml-100k", "second"), "dgrec:ml-100k", path)
    text = path.read_text()
    assert "first" not in text and text.count("<!-- reproduce:dgrec:ml-100k -->") == 1
    assert text.count("### dgrec on ml-100k") == 1
    assert text.index("second") < text.index("other") < text.index(reproduce.END)
    assert text.index(reproduce.END) < text.index("## Later") and "later" in text
    # another dataset of the same paper is a table of its own
    reproduce.write_results(_entry("dgrec:ciao", "on ciao"), "dgrec:ciao", path)
    assert list(reproduce.entries(path.read_text())) == [
        "dgrec:ml-100k",
        "dipsgnn:ml-100k",
        "dgrec:ciao",
    ]


def test_results_md_holds_the_block_with_one_table_per_paper():
    text = reproduce.RESULTS.read_text()
    assert text.count(reproduce.BEGIN) == 1 and text.count(reproduce.END) == 1
    assert text.index(reproduce.BEGIN) < text.index(reproduce.END)
    keys = reproduce.ENTRY_RE.findall(text)
    assert len(keys) == len(set(keys)) and set(reproduce.entries(text)) == set(keys)
    assert {key.partition(":")[0] for key in keys} == set(PAPERS)


def test_an_entry_names_its_commit_and_no_date_in_its_heading():
    info = {
        "key": "dgrec:ml-100k",
        "commit": "abc1234",
        "quick": True,
        "date": "2030-01-02 03:04 UTC",
        "machine": "vm, 2 cores",
        "command": "python -m benchmarks.reproduce dgrec --quick",
        "json": "reproduce-dgrec-quick.json",
        "dataset": "ml-100k (943 users)",
        "seconds": 12.0,
    }
    block = reproduce.render("dgrec", PAPERS["dgrec"], [], {}, info)
    lines = block.splitlines()
    assert lines[0] == "<!-- reproduce:dgrec:ml-100k -->"
    assert lines[1] == "### dgrec on ml-100k (quick budgets)"
    assert "commit abc1234" in lines[3] and "2030-01-02 03:04 UTC" in lines[3]
