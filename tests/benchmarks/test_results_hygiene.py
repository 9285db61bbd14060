"""The README followed as a new user would: a benchmark command never overwrites a recorded
result (a file of benchmarks/out that git tracks) nor writes to RESULTS.md unless told to
(``--write``), and its default name holds the dataset; ``reproduce dgrec --dataset filmtrust``
says why DGREC cannot run there instead of a table of dashes, a dtype error and another dataset's
figure; the comparison sets every protocol beside the popularity baseline of its summary.json,
shows a paper's δ as a δ, gives a failed protocol's reason whole and runs no baseline whose
protocols all failed. RESULTS.md itself is a page of current figures: no work-period history (that
is docs/lab-notes.md), every protocol on its first screen, every row with a command and a commit
that exists, every cited result file recorded. Every test runs in seconds: the comparison's runs
are stand-ins (its tables and plots are built from fabricated summaries), no Ray."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks import common
from benchmarks.common import UsageError

REPO = Path(__file__).resolve().parents[2]


# --- 1. recorded results are kept -------------------------------------------------------------
def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    """A git checkout whose ``out/`` stands for benchmarks/out; ``recorded(name, ...)`` commits
    ``out/<name>`` files (a recorded result) and returns the folder."""
    repo = tmp_path / "repo"
    out = repo / "out"
    out.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.org")
    _git(repo, "config", "user.name", "t")
    monkeypatch.setattr(common, "OUT", out)
    monkeypatch.chdir(tmp_path)

    def commit(*names: str) -> Path:
        for name in names:
            (out / name).write_text('{"recorded": true}\n')
        _git(repo, "add", *(f"out/{n}" for n in names))
        _git(repo, "commit", "-q", "-m", "recorded")
        return out

    return commit


def test_a_tracked_result_is_refused_in_one_line_and_write_allows_it(recorded):
    out = recorded("attacks-ml-100k.json")
    with pytest.raises(UsageError) as refused:
        common.claim_result("attacks-ml-100k")
    message = refused.value.message
    assert "\n" not in message and "recorded result" in message
    assert "--name NAME" in message and "--write" in message
    assert common.claim_result("attacks-ml-100k", write=True) == out / "attacks-ml-100k.json"
    assert common.claim_result("attacks-ml-100k-small") == out / "attacks-ml-100k-small.json"
    # a sibling of another kind (the .md table of audit and floor) is a recorded result too
    recorded("audit.md")
    with pytest.raises(UsageError):
        common.claim_result("audit", suffixes=(".json", ".md"))


def test_write_result_never_overwrites_a_tracked_file_unasked(recorded, capsys):
    out = recorded("data_loading.json")
    path = common.write_result("data_loading", {"x": 1}, echo=False)
    assert path == out / "data_loading-local.json"
    assert json.loads(path.read_text())["figures"] == {"x": 1}
    assert (out / "data_loading.json").read_text() == '{"recorded": true}\n'
    assert "data_loading-local.json" in capsys.readouterr().err
    path = common.write_result("data_loading", {"x": 2}, echo=False, write=True)
    assert path == out / "data_loading.json" and json.loads(path.read_text())["figures"]["x"] == 2


def test_the_repository_keeps_what_results_md_cites():
    """The files the issue saw overwritten are recorded results of this checkout."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    for name in ("attacks-ml-100k", "reproduce-dgrec-quick"):
        with pytest.raises(UsageError, match="recorded result"):
            common.claim_result(name)


def _reached(*args, **kwargs):
    raise AssertionError("reached past the checks of the arguments")


# (module, argv, the default name it writes); every command is stopped before it loads data,
# starts Ray or runs anything (_reached), so a command that does not refuse fails at once
COMMANDS = [
    ("attacks", ["--quick", "--dry-run"], "attacks-synthetic-quick"),
    ("reproduce", ["fedpergnn", "--quick", "--dataset", "synthetic"], None),
    ("audit", ["--quick", "--dry-run"], "audit-quick"),
    ("floor", ["--quick"], "floor-synthetic-quick"),
    ("scale", ["--quick"], "scale-quick"),
    ("central", ["--dataset", "synthetic"], "central-synthetic"),
    ("conditions", ["dropout", "--dataset", "synthetic"], "conditions-dropout-synthetic"),
    ("dgrec", ["--dataset", "synthetic"], "dgrec-synthetic"),
    ("dipsgnn", ["--dataset", "synthetic"], "dipsgnn-synthetic"),
    ("verfedgnn", ["--dataset", "filmtrust"], "verfedgnn-filmtrust"),
    ("fedpergnn", [], "fedpergnn"),
    ("vs_flower", [], "vs_flower"),
    ("run_report", ["no-such-run", "--name", "rr"], "rr"),
]
STOPS = (
    "load_dataset",
    "start_or_join",
    "run",
    "run_sweeps",
    "measure",
    "users_of",
    "summarize",
    "ensure_flower_venv",
    "memcpy_rate",
    "compare",
)


def _command(name: str, argv: list[str], monkeypatch):
    """Run benchmark ``name`` with ``argv`` as its command line; its exit status (a SystemExit's
    message is returned as it is)."""
    import importlib

    import ray

    import cluster.runtime
    import data.registry
    import engine.compare

    module = importlib.import_module(f"benchmarks.{name}")
    for target in (module, data.registry, cluster.runtime, engine.compare):
        for attr in STOPS:
            if callable(getattr(target, attr, None)):
                monkeypatch.setattr(target, attr, _reached)
    monkeypatch.setattr(ray, "init", _reached)
    monkeypatch.setattr(sys, "argv", [f"benchmarks.{name}", *argv])
    try:
        takes_argv = bool(inspect.signature(module.main).parameters)
        return module.main(argv) if takes_argv else module.main()
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("name,argv,default", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_benchmark_refuses_to_overwrite_a_recorded_result(
    name, argv, default, recorded, monkeypatch, capsys
):
    default = default or "reproduce-fedpergnn-synthetic-quick"  # the dataset in the name
    recorded(f"{default}.json")
    code = _command(name, argv, monkeypatch)
    said = capsys.readouterr().err if code == 2 else str(code)
    assert code == 2 or isinstance(code, str), f"not refused: exit {code!r}"
    assert "is a recorded result" in said and f"{default}.json" in said
    assert said.strip().count("\n") == 0
    # told to (--write), it goes on past the check (to the stand-in that stops it, or a dry run)
    try:
        code = _command(name, [*argv, "--write"], monkeypatch)
    except AssertionError as err:
        assert "reached past the checks" in str(err)
    else:
        assert code in (0, None) or "recorded result" not in str(code)
        assert "recorded result" not in capsys.readouterr().err


def _fake_compare(fail: set[str]):
    """A stand-in for engine.compare.compare: the labels in ``fail`` fail, a baseline whose
    protocols all failed is skipped (engine.compare.skip_reason), the others run."""
    import engine.compare

    skip_reason = getattr(engine.compare, "skip_reason", lambda e, rows: None)

    def compare(entries, dataset, base, *, dataset_info=None, log=None):
        rows = []
        for i, e in enumerate(entries):
            log(f"[{i + 1}/{len(entries)}] {e.label}: {e.rounds} round(s)")
            why = skip_reason(e, rows)
            if why:
                rows.append({"label": e.label, "status": "skipped", "reason": why})
            elif e.label in fail:
                reason = "UnsuitableDataError: dataset 'x' has no item tags: DGREC's hyperedges"
                rows.append({"label": e.label, "status": "failed", "reason": reason})
            else:
                metrics = {"recall@20": 0.2, "ndcg@20": 0.1}
                rows.append({"label": e.label, "status": "ok", "metrics": metrics, "rounds": 2})
        return Path("runs/cmp"), {"protocols": rows}

    return compare


def test_reproduce_writes_its_dataset_s_file_and_leaves_results_md(recorded, monkeypatch, capsys):
    import engine.compare
    from benchmarks import reproduce

    out = recorded("reproduce-fedpergnn-quick.json")  # the ml-100k table RESULTS.md cites
    results_md = out.parent / "RESULTS.md"
    results_md.write_text("# Results\n")
    monkeypatch.setattr(reproduce, "RESULTS", results_md)
    monkeypatch.setattr(engine.compare, "compare", _fake_compare(set()))
    argv = ["fedpergnn", "--quick", "--dataset", "synthetic", "--out", "runs"]
    assert reproduce.main(argv) == 0
    assert (out / "reproduce-fedpergnn-synthetic-quick.json").exists()
    assert (out / "reproduce-fedpergnn-quick.json").read_text() == '{"recorded": true}\n'
    assert results_md.read_text() == "# Results\n"  # never touched by default
    assert "the table" not in capsys.readouterr().out
    assert reproduce.main([*argv, "--write"]) == 0
    text = results_md.read_text()
    assert reproduce.HEADING in text and text.count("<!-- reproduce:fedpergnn:synthetic -->") == 1
    assert "added the table of fedpergnn:synthetic" in capsys.readouterr().out
    # again: the table is replaced where it stands, not appended
    assert reproduce.main([*argv, "--write"]) == 0
    again = results_md.read_text()
    assert again.count("<!-- reproduce:fedpergnn:synthetic -->") == 1
    assert again.count(reproduce.HEADING) == 1 and again.count("### fedpergnn on synthetic") == 1
    assert "replaced the table of fedpergnn:synthetic" in capsys.readouterr().out


# --- 2. reproduce dgrec on a dataset without item tags ----------------------------------------
def test_central_hypergnn_without_item_tags_says_so():
    from benchmarks.dgrec import central_hypergnn
    from data.synthetic import synthetic
    from protocols.dgrec.central import HyperGNNTrainer

    ds = dataclasses.replace(
        synthetic(n_users=30, n_items=40, avg_interactions=8, seed=0),
        item_tags=None,
        name="untagged",
    )
    with pytest.raises(ValueError, match="dataset 'untagged' has no item tags") as err:
        central_hypergnn(ds, 1, {}, eval_every=1)
    assert "dtype" not in str(err.value)
    with pytest.raises(ValueError, match="no item tags"):
        HyperGNNTrainer([[0]], [[1]], [[]], None)
    # the variant without tag hyperedges needs none
    fig = central_hypergnn(ds, 1, {"use_hypergraph": False, "dim": 4, "pairs": 4}, eval_every=1)
    assert 0 <= fig["recall@20"] <= 1


def test_reproduce_dgrec_where_dgrec_cannot_run_runs_no_baseline(recorded, monkeypatch, capsys):
    import engine.compare
    from benchmarks import reproduce
    from benchmarks.papers import PAPERS

    calls = []
    monkeypatch.setattr(engine.compare, "compare", _fake_compare({"dgrec"}))
    monkeypatch.setattr(reproduce, "hypergnn", lambda *a: calls.append(a) or {"status": "ok"})
    argv = ["dgrec", "--quick", "--dataset", "synthetic", "--out", "runs"]
    assert reproduce.main(argv) == 1
    out, err = capsys.readouterr()
    assert "nothing to reproduce" in out and "paper mode" not in out  # no table of dashes
    assert "did not run: dgrec: UnsuitableDataError" in out
    assert "did not run: central:lightgcn: skipped: the baseline of dgrec" in out
    assert "did not run: central HyperGNN: skipped" in out and calls == []
    assert not list(common.OUT.glob("reproduce-*"))  # nothing recorded
    # the caption no longer offers filmtrust (no item tags) as DGREC's substitute
    assert "filmtrust has no item tags" in PAPERS["dgrec"].datasets


def test_the_paper_figure_is_a_figure_only_on_its_own_dataset():
    from benchmarks import reproduce
    from benchmarks.papers import PAPERS

    failed = {"status": "failed", "reason": "UnsuitableDataError: no item tags"}
    ok = {"status": "ok", "metrics": {"recall@20": 0.3, "ndcg@20": 0.2}, "private": False}
    results = {"dgrec": failed, "central:lightgcn": ok, "central HyperGNN": ok}
    rows = reproduce.build_rows("dgrec", PAPERS["dgrec"], results, "filmtrust")
    r = rows[0]
    assert r["paper_value"] is None
    assert r["paper_figure"].startswith("— (the paper reports Book-Crossing: 9.68 %")
    assert r["epsilon_rigorous_mode"] == "— (did not run)"  # not "— (no DP)"
    info = {"quick": True, "dataset": "filmtrust", "seconds": 1.0}
    text = reproduce.summary("dgrec", rows, results, info)
    assert "— (Book-Crossing)" in text and "0.0968" not in text
    # on the paper's own dataset the figure stands
    own = reproduce.build_rows("dgrec", PAPERS["dgrec"], results, "book-crossing")[0]
    assert own["paper_value"] == pytest.approx(0.0968)
    assert own["paper_figure"].startswith("0.0968 (Book-Crossing")


# --- 3-5. the comparison: popularity, δ claims, reasons, baselines of failed protocols -------
def _summary(label: str, value: float, run_dir: Path, *, paper=None, popularity=0.230) -> dict:
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {"round": r, "bytes": 1000 * (r + 1), "metrics": {"recall@20": value * r / 2}}
        for r in (1, 2)
    ]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    private = label != "central:lightgcn"
    privacy = {"mechanism": "laplace" if private else "none", "epsilon": 5.0 if private else None}
    if private:
        privacy["privacy_delta"] = 1e-5
    if paper:
        privacy["paper_claim"] = paper
    return {
        "metrics": {"recall@20": value, "ndcg@20": value / 2},
        "main_metric": {"name": "recall@20", "better": "higher"},
        "rounds": 2,
        "bytes_total": 0 if not private else 2000,
        "bytes_by_kind": {},
        "privacy": privacy,
        "wall_seconds": 1.0,
        "sim_seconds": None,
        "run_dir": str(run_dir),
        "baselines": {"popularity": {"recall@20": popularity, "ndcg@20": 0.15}},
    }


@pytest.fixture
def comparison(tmp_path, monkeypatch):
    """``comparison(labels, fail)``: engine.compare.compare on the synthetic data with stand-in
    runs (DGREC 0.075, DIPSGNN 0.060, VerFedGNN's claim a δ, central LightGCN 0.30; popularity
    0.230 in every summary) and the plots recorded; returns (folder, comparison, plotted runs,
    the labels run)."""
    import cluster.runtime
    import engine.report
    import engine.runner
    from data.synthetic import synthetic
    from engine import RunSettings
    from engine.compare import compare, plan

    values = {"dgrec": 0.075, "dipsgnn": 0.060, "central:lightgcn": 0.30, "central:dipsgnn": 0.3}
    delta = {"value": 1 / 3, "what": "δ per release at ε = 0", "kind": "delta", "composed": 1.0}
    ran, plotted = [], {}

    def fake_run(settings, dataset, info=None):
        label = settings.protocol
        if label == "central":
            label = f"central:{settings.params['model']}"
        ran.append(label)
        if label in fail_now:
            raise ValueError(fail_now[label])
        paper = delta if label == "verfedgnn" else None
        return None, _summary(label, values.get(label, 0.1), tmp_path / label, paper=paper)

    def fake_plot(runs, out_dir):
        plotted.update(runs)
        return []

    fail_now: dict[str, str] = {}
    monkeypatch.setattr(engine.runner, "run", fake_run)
    monkeypatch.setattr(engine.report, "plot_comparison", fake_plot)
    monkeypatch.setattr(
        cluster.runtime,
        "start_or_join",
        lambda *a, **k: SimpleNamespace(nodes=1, cpus=2, gpus=0),
    )
    ds = synthetic(n_users=20, n_items=30, avg_interactions=5, seed=0)

    def go(labels: list[str], fail: dict[str, str] | None = None):
        fail_now.clear()
        fail_now.update(fail or {})
        ran.clear()
        plotted.clear()
        entries = plan(labels)
        cmp_dir, result = compare(entries, ds, RunSettings(out=str(tmp_path / "runs")))
        return cmp_dir, result, dict(plotted), list(ran)

    return go


def test_popularity_stands_beside_the_protocols(comparison):
    from engine.compare import render_text

    cmp_dir, result, plotted, _ = comparison(["dgrec", "dipsgnn"])
    (ref,) = result["references"]
    assert ref["label"] == "popularity" and ref["metric"] == "recall@20"
    assert ref["value"] == 0.230 and ref["below"] == ["dgrec", "dipsgnn"]
    on_disk = json.loads((cmp_dir / "comparison.json").read_text())
    assert on_disk["references"] == result["references"]
    md = (cmp_dir / "comparison.md").read_text()
    assert "| popularity (reference) | — | recall@20 ↑ 0.23 |" in md
    assert "Below popularity (recall@20 0.23): dgrec 0.075, dipsgnn 0.06." in md
    text = render_text(result)
    assert "popularity (reference)" in text and "Below popularity" in text
    # the plots: popularity as a level that sends nothing, over the rounds the runs evaluated
    assert plotted["popularity (reference)"] == [
        {"round": 1, "bytes": 0, "metrics": {"recall@20": 0.230}},
        {"round": 2, "bytes": 0, "metrics": {"recall@20": 0.230}},
    ]
    assert {"dgrec", "dipsgnn", "central:lightgcn"} <= set(plotted)


def test_the_reference_is_drawn_in_the_comparison_plots(tmp_path):
    import engine.report
    from engine.compare import reference_runs

    runs = {
        label: [{"round": r, "bytes": 10 * r, "metrics": {"recall@20": v * r}} for r in (1, 2)]
        for label, v in (("dgrec", 0.04), ("central:lightgcn", 0.15))
    }
    ref = {"label": "popularity", "metric": "recall@20", "better": "higher", "value": 0.23}
    runs.update(reference_runs(runs, [ref]))
    assert "popularity (reference)" in runs
    paths = engine.report.plot_comparison(runs, tmp_path / "plots")
    assert {Path(p).name for p in paths} >= {"compare_metric.png", "compare_bytes.png"}


def test_a_paper_delta_is_shown_as_a_delta():
    from engine.compare import COLUMNS, paper_cell, paper_figure, render_text, table_row

    claim = {"value": 1 / 3, "what": "δ per release at ε = 0", "kind": "delta", "composed": 1.0}
    figure = paper_figure({"paper_claim": claim})
    assert figure["kind"] == "delta"
    row = {"epsilon_paper": figure}
    assert paper_cell(row) == "δ = 0.3333 (δ per release at ε = 0; δ = 1 over the run)"
    eps = paper_figure({"paper_claim": {"value": 0.54, "what": "RDP ε at order 1.5"}})
    assert paper_cell({"epsilon_paper": eps}) == "0.54 (RDP ε at order 1.5)"
    assert "ε paper" not in COLUMNS  # the column holds ε or δ claims
    ok = {
        "label": "verfedgnn",
        "status": "ok",
        "rounds": 2,
        "metric": "rmse",
        "better": "lower",
        "value": 0.95,
        "baseline": None,
        "bytes_per_round": 1.0,
        "bytes_total": 2.0,
        "epsilon": float("inf"),
        "delta": 1e-5,
        "private": True,
        "epsilon_paper": figure,
        "attack": {},
        "wall_seconds": 1.0,
        "startup_seconds": 0.0,
        "sim_seconds": None,
    }
    cells = table_row(ok)
    assert cells[COLUMNS.index("paper's claim (ε or δ)")].startswith("δ = 0.3333")
    text = render_text({"protocols": [ok]})
    assert "δ=0.3333" in text.splitlines()[2]


def test_a_failed_protocol_s_reason_is_whole_and_its_baseline_is_not_run(comparison):
    from engine.compare import TEXT_WIDTH, render_text

    reason = (
        "no explicit ratings: verfedgnn predicts ratings and the dataset 'synthetic' has only "
        "implicit interactions (give a dataset with ratings, e.g. --dataset ml-100k)"
    )
    cmp_dir, result, _, ran = comparison(["verfedgnn"], {"verfedgnn": reason})
    assert ran == ["verfedgnn"]  # central:gcn, its baseline, was not run
    rows = {r["label"]: r for r in result["protocols"]}
    assert rows["verfedgnn"]["status"] == "failed" and rows["verfedgnn"]["reason"].endswith(
        "--dataset ml-100k)"
    )
    assert rows["central:gcn"]["status"] == "skipped"
    assert rows["central:gcn"]["reason"] == "skipped: the baseline of verfedgnn, which did not run"
    text = render_text(result)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= TEXT_WIDTH
    joined = " ".join(line.strip() for line in lines[4:])
    assert f"verfedgnn did not run: ValueError: {reason}" in joined  # whole, wrapped
    assert "central:gcn did not run: skipped: the baseline of verfedgnn" in joined
    md = (cmp_dir / "comparison.md").read_text()
    assert f"- verfedgnn: ValueError: {reason}" in md
    # a baseline serving two protocols runs when one of them ran
    _, result, _, ran = comparison(["dgrec", "fedlightgcn"], {"dgrec": "no"})
    assert "central:lightgcn" in ran
    assert {r["label"]: r["status"] for r in result["protocols"]}["central:lightgcn"] == "ok"


# --- 6. RESULTS.md: current figures with their commands and commits; the history elsewhere -------
RESULTS_MD = REPO / "benchmarks" / "RESULTS.md"
LAB_NOTES = REPO / "docs" / "lab-notes.md"
# the protocols that are workloads of the runtime, not recommenders, and the baselines themselves
NOT_IN_THE_GLANCE = {"ping", "echo", "central"}


def _tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of ``text``: its rows (header first, the rule left out) as cells."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def test_results_md_holds_no_history():
    text = RESULTS_MD.read_text()
    assert not re.search(r"\b[Ii]ssues? \d", text), "work periods belong in docs/lab-notes.md"
    assert not re.search(r"\b[Ss]essions? \d", text)
    dated = [h for h in text.splitlines() if h.startswith("#") and re.search(r"\d{4}-\d\d-\d\d", h)]
    assert not dated, f"dates go in the rows, not the headings: {dated}"
    # the history moved there, verbatim
    notes = LAB_NOTES.read_text()
    assert "## Platform" in notes and "chronological" in notes.split("## Index")[0]


def test_the_first_screen_answers_for_every_protocol():
    from protocols import BUILTIN

    lines = RESULTS_MD.read_text().splitlines()
    start = lines.index("## Every protocol at a glance")
    top = next(i for i, line in enumerate(lines) if line.startswith("|"))
    bottom = next(i for i in range(top, len(lines)) if not lines[i].startswith("|"))
    assert start < top < start + 4 and bottom < 45, "the first table is the first screen"
    (first, *_) = _tables("\n".join(lines[top:bottom]))
    header, rows = first[0], first[1:]
    for column in (
        "protocol",
        "central baseline",
        "paper's figure",
        "ε rigorous",
        "round",
        "commit",
    ):
        assert any(column in h for h in header), column
    shown = {_key(r[0]) for r in rows}
    missing = [
        p for p in BUILTIN if p not in NOT_IN_THE_GLANCE and not any(k.startswith(p) for k in shown)
    ]
    assert not missing, f"protocols without a row in the first table: {missing}"


def _commits(cell: str) -> list[str]:
    return re.findall(r"(?:added in|tree) ([0-9a-f]{7,40})\b", cell)


def test_every_row_names_its_command_and_a_commit_that_exists():
    text = RESULTS_MD.read_text()
    begin, end = text.index("<!-- reproduce:begin -->"), text.index("<!-- reproduce:end -->")
    tables = _tables(text[:begin] + text[end:])  # the regenerated block: a line above each table
    seen = set()
    for table in tables:
        header, rows = table[0], table[1:]
        at = [i for i, h in enumerate(header) if "commit" in h]
        assert at, f"a table without a commit column: {header}"
        for row in rows:
            cell = " ".join(row[i] for i in at)
            found = _commits(cell)
            assert found, f"no commit in {row}"
            seen.update(found)
    for entry in re.findall(r"<!-- reproduce:\S+ -->\n###.*\n\n(.*)\n", text[begin:end]):
        assert _commits(entry) and entry.startswith("`python -m benchmarks.reproduce ")
        seen.update(_commits(entry))
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: commits not checked")
    for sha in sorted(seen):
        done = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=REPO)
        assert done.returncode == 0, f"RESULTS.md cites {sha}, which this repository does not hold"


def test_every_cited_result_file_is_recorded():
    text = RESULTS_MD.read_text()
    cited = set(re.findall(r"`out/([\w.+-]+\.(?:json|md|png))`", text))
    assert cited
    missing = sorted(n for n in cited if not (REPO / "benchmarks" / "out" / n).exists())
    assert not missing, f"RESULTS.md cites files benchmarks/out does not hold: {missing}"
    # and no command it cites is a script that is gone
    for module in set(re.findall(r"python -m benchmarks\.(\w+)", text)):
        assert (REPO / "benchmarks" / f"{module}.py").exists(), module
