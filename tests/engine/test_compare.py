"""launch.py compare: every protocol on the same data and cluster, a table whose figures are all in
comparison.json, baselines added and matched, a protocol that cannot run listed with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli.run
from engine.compare import (
    CompareError,
    baseline_of,
    fmt,
    fmt_bytes,
    main_metric,
    paper_figure,
    parse_label,
    plan,
    protocol_row,
    render_markdown,
)
from protocols import PROTOCOLS
from protocols.base import Protocol, ProtocolConfig


class Broken(Protocol):
    """A protocol that cannot run on any data (stands for one that does not fit the dataset)."""

    name = "broken"
    Config = ProtocolConfig

    def __init__(self, dataset, config, seed):
        raise ValueError("broken cannot run on this data\nsecond line not shown")


def error_of(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_labels_and_baselines():
    assert parse_label("fedmf") == ("fedmf", {})
    assert parse_label("central:lightgcn") == ("central", {"model": "lightgcn"})
    with pytest.raises(CompareError, match="nope"):
        parse_label("nope")
    with pytest.raises(CompareError, match="NAME:VALUE"):
        parse_label("dgrec:lightgcn")
    assert baseline_of("fedmf", {}) == baseline_of("dmf", {}) == "central:bprmf"
    assert baseline_of("fedlightgcn", {}) == baseline_of("dgrec", {}) == "central:lightgcn"
    assert baseline_of("fedpergnn", {"backbone": "gat"}) == "central:gat"
    assert baseline_of("verfedgnn", {}) == "central:gcn"
    assert baseline_of("verfedgnn", {"gnn": "ggnn"}) == "central:ggnn"
    assert baseline_of("dipsgnn", {}) == "central:dipsgnn"
    assert baseline_of("central", {"model": "lightgcn"}) is None
    # every baseline named is a model protocols/central has
    from protocols import get_protocol, protocol_names
    from protocols.central.config import MODEL_DEFAULTS

    for name in protocol_names():
        for variant in ({}, {"backbone": "gat"}, {"gnn": "ggnn"}):
            base = get_protocol(name).central_baseline(variant)
            if base is not None:
                protocol, params = parse_label(base)
                assert protocol == "central" and params["model"] in MODEL_DEFAULTS


def test_plan_adds_baselines_once_and_layers_settings():
    entries = plan(
        ["fedlightgcn", "dgrec", "verfedgnn"],
        per_label={"dgrec": {"rounds": 7, "public_ratio": 0.2}},
        default_rounds=5,
    )
    assert [e.label for e in entries] == [
        "fedlightgcn",
        "dgrec",
        "verfedgnn",
        "central:lightgcn",
        "central:gcn",
    ]
    by = {e.label: e for e in entries}
    assert by["dgrec"].rounds == 7 and by["dgrec"].params == {"public_ratio": 0.2}
    assert by["fedlightgcn"].rounds == 5 and not by["fedlightgcn"].added
    assert by["central:lightgcn"].added and by["central:lightgcn"].params == {"model": "lightgcn"}
    # an added baseline takes over the protocol's shape; --rounds overrides everything
    entries = plan(["fedmf"], per_label={"fedmf": {"dim": 16}}, rounds=3)
    assert [(e.label, e.params, e.rounds) for e in entries] == [
        ("fedmf", {"dim": 16}, 3),
        ("central:bprmf", {"model": "bprmf", "dim": 16}, 3),
    ]
    # a baseline the user named is not added twice, and keeps its own place
    assert [e.label for e in plan(["central:gcn", "verfedgnn"])] == ["central:gcn", "verfedgnn"]
    assert [e.label for e in plan(["dgrec"], baselines=False)] == ["dgrec"]
    from protocols.central.protocol import Central
    from protocols.dipsgnn.protocol import DIPSGNNProtocol

    quick = {e.label: e for e in plan(["fedmf", "dipsgnn"], quick=True)}
    assert quick["dipsgnn"].rounds == DIPSGNNProtocol.QUICK["rounds"]
    want = Central.quick_settings({"model": "dipsgnn"})["dim"]
    assert quick["central:dipsgnn"].params["dim"] == want
    with pytest.raises(CompareError, match="twice"):
        plan(["fedmf", "fedmf"])
    with pytest.raises(CompareError, match="not in the comparison"):
        plan(["fedmf"], per_label={"dgrec": {"rounds": 2}})


def test_main_metric_and_paper_figures():
    assert main_metric({"recall@20": 0.3, "recall@10": 0.2, "ndcg@20": 0.1}) == (
        "recall@20",
        "higher",
    )
    assert main_metric({"recall@5": 0.1, "recall@10": 0.2}) == ("recall@10", "higher")
    assert main_metric({"rmse": 0.9, "test_rmse": 0.9}) == ("rmse", "lower")
    assert main_metric({}) == (None, None)
    # a protocol's declared main metric wins over the guess when the metrics have it
    assert main_metric({"rmse": 0.9, "mae": 0.7}, {"name": "mae", "better": "lower"}) == (
        "mae",
        "lower",
    )
    assert main_metric({"rmse": 0.9}, {"name": "mae", "better": "lower"}) == ("rmse", "lower")
    # the paper's figure is the PrivacyReport's typed claim, whatever the protocol
    from protocols.base import PaperClaim, PrivacyReport

    claim = PrivacyReport(epsilon=3.0, paper=PaperClaim(0.54, "RDP ε at order 1.5")).as_dict()
    assert paper_figure(claim) == {
        "value": 0.54,
        "what": "RDP ε at order 1.5",
        "kind": "epsilon",
        "composed": None,
    }
    delta = PrivacyReport(paper=PaperClaim(1 / 3, "δ per release at ε = 0", kind="delta"))
    assert paper_figure(delta.as_dict())["what"].startswith("δ")
    assert paper_figure(delta.as_dict())["kind"] == "delta"  # shown as a δ, never an ε
    assert paper_figure(PrivacyReport(budget=2.0).as_dict())["value"] == 2.0
    assert paper_figure({"epsilon": 1.0}) is None


def test_protocol_row_reads_the_privacy_delta_of_the_summary():
    summary = {"rounds": 2, "bytes_total": 10, "metrics": {}}
    privacy = {"epsilon": 1.0, "privacy_delta": 1e-5}
    assert protocol_row({**summary, "privacy": privacy}, 1.0)["delta"] == 1e-5
    assert protocol_row({**summary, "privacy": {"epsilon": 1.0}}, 1.0)["delta"] is None


def test_compare_refuses_bad_input_in_one_line(capsys, tmp_path):
    assert "--protocols" in error_of(capsys, ["compare", "--protocols", "fedmf,nope"])
    assert "--rounds" in error_of(capsys, ["compare", "--rounds", "0"])
    cfg = tmp_path / "c.toml"
    cfg.write_text("[compare]\nprotocols = ['dgrec']\n[compare.dgrec]\npairs = 0\n")
    line = error_of(capsys, ["compare", "--config", str(cfg)])
    assert "dgrec" in line and "pairs" in line
    cfg.write_text("dim = 8\n[compare]\nprotocols = ['fedmf']\n")
    assert "[compare.<protocol>]" in error_of(capsys, ["compare", "--config", str(cfg)])
    cfg.write_text("[compare]\nprotocol = ['fedmf']\n")
    assert "protocol" in error_of(capsys, ["compare", "--config", str(cfg)])
    # the run path ignores a [compare] table (one file can serve both)
    cfg.write_text("dim = 8\n[compare]\nprotocols = ['fedmf']\n")
    _, args, params, _, _ = cli.run.parse(["run", "--config", str(cfg)])
    assert args.protocol == "fedmf" and params == {"dim": 8}


def _main_table(md: str) -> dict[str, list[str]]:
    lines = md.split("## ")[0].splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| protocol")]
    out = {}
    for line in rows:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out[cells[0]] = cells
    return out


@pytest.mark.slow  # every protocol and its baseline in one run: CI runs `-m slow`
@pytest.mark.ray
def test_compare_runs_every_protocol_and_its_table_is_in_the_json(
    ray_local, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(PROTOCOLS, "broken", "tests.engine.test_compare:Broken")
    cfg = tmp_path / "cmp.toml"
    cfg.write_text(
        """
[dataset]
n_users = 40
n_items = 60
avg_interactions = 12
[conditions]
snapshot_every = 0
[compare]
protocols = ["fedlightgcn", "broken", "dgrec", "verfedgnn", "dipsgnn"]
rounds = 1
[compare.fedlightgcn]
dim = 8
negatives = 16
key_bits = 1024
users_per_round = 0
[compare.dgrec]
pairs = 8
[compare.verfedgnn]
parties = 1
psi_key_bits = 1024
[compare.dipsgnn]
epochs = 1
hidden_dim = 8
user_dim = 4
[compare."central:lightgcn"]
dim = 8
[compare."central:dipsgnn"]
dim = 8
user_dim = 4
"""
    )
    out = tmp_path / "runs"
    argv = ["compare", "--config", str(cfg), "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    (cmp_dir,) = out.iterdir()
    assert cmp_dir.name.endswith("-compare")
    comparison = json.loads((cmp_dir / "comparison.json").read_text())
    md = (cmp_dir / "comparison.md").read_text()
    # the markdown is a rendering of the json: every figure of the table is in comparison.json
    assert render_markdown(comparison) == md
    rows = {r["label"]: r for r in comparison["protocols"]}
    expected = {
        "fedlightgcn",
        "broken",
        "dgrec",
        "verfedgnn",
        "dipsgnn",
        "central:lightgcn",
        "central:gcn",
        "central:dipsgnn",
    }
    assert set(rows) == expected
    table = _main_table(md)
    # the protocols, and under them the trivial baselines of the summaries as reference rows
    assert set(table) == expected | {"popularity (reference)", "mean rating (reference)"}
    for label in expected:
        assert label in printed
    # the failure is listed with its one-line reason, and the protocols after it ran
    assert rows["broken"]["status"] == "failed"
    assert rows["broken"]["reason"] == "UnsuitableDataError: broken cannot run on this data"
    assert "broken cannot run on this data" in table["broken"][2]
    assert "- broken: UnsuitableDataError: broken cannot run on this data" in md
    ok = [r for r in comparison["protocols"] if r["label"] != "broken"]
    assert all(r["status"] == "ok" for r in ok)
    for r in ok:
        cells = table[r["label"]]
        assert cells[1] == fmt(r["rounds"])
        assert fmt(r["value"]) in cells[2] and r["metric"] in cells[2]
        assert cells[4] == fmt_bytes(r["bytes_per_round"])
        assert cells[5] == fmt_bytes(r["bytes_total"])
        assert cells[9] == fmt(r["wall_seconds"]) and cells[11] == fmt(r["sim_seconds"])
        assert r["bytes_total"] == pytest.approx(r["bytes_per_round"] * r["rounds"])
        assert r["bytes_per_round"] == pytest.approx(sum(r["bytes_per_round_by_kind"].values()))
        run_dir = Path(r["run_dir"])
        assert run_dir.parent == cmp_dir  # the run reports lie inside the comparison's folder
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["bytes_total"] == r["bytes_total"]
        assert summary["metrics"][r["metric"]] == pytest.approx(r["value"])
    # main metrics and baselines
    assert rows["verfedgnn"]["metric"] == "rmse" and rows["central:gcn"]["metric"] == "rmse"
    for label, base in [
        ("fedlightgcn", "central:lightgcn"),
        ("dgrec", "central:lightgcn"),
        ("verfedgnn", "central:gcn"),
        ("dipsgnn", "central:dipsgnn"),
    ]:
        r, b = rows[label], rows[base]
        assert r["baseline"] == base and r["baseline_value"] == b["value"]
        assert r["ratio"] == pytest.approx(r["value"] / b["value"])
        assert fmt(r["ratio"]) in table[label][3] and base in table[label][3]
        assert r["private"] and not b["private"] and b["bytes_total"] == 0
        assert r["bytes_total"] > 0 and r["epsilon_paper"] is not None
        assert fmt(r["epsilon_paper"]["value"]) in table[label][7]
    assert rows["dgrec"]["epsilon_paper"]["value"] == 0.54
    assert fmt(rows["dgrec"]["epsilon"]) in table["dgrec"][6]
    assert table["central:lightgcn"][6] == "none (non-private)"
    assert comparison["dataset"]["n_users"] == 40


def test_a_protocol_that_does_not_fit_the_data_is_listed_with_its_reason(ray_local, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[dataset]\nn_users = 30\nn_items = 40\nimplicit = true\n")
    out = tmp_path / "runs"
    argv = ["compare", "--protocols", "verfedgnn", "--config", str(cfg), "--out", str(out)]
    assert cli.main(argv) == 1  # nothing could run
    (cmp_dir,) = out.iterdir()
    comparison = json.loads((cmp_dir / "comparison.json").read_text())
    rows = {r["label"]: r for r in comparison["protocols"]}
    assert set(rows) == {"verfedgnn", "central:gcn"}
    assert "explicit ratings" in rows["verfedgnn"]["reason"]
    # its baseline serves no protocol that ran: not run, said in one line
    assert rows["central:gcn"]["status"] == "skipped"
    assert rows["central:gcn"]["reason"] == "skipped: the baseline of verfedgnn, which did not run"
    md = (cmp_dir / "comparison.md").read_text()
    assert f"- verfedgnn: {rows['verfedgnn']['reason']}" in md


def test_the_terminal_table_fits_120_columns():
    from engine.compare import TEXT_WIDTH, render_text

    ok = {
        "label": "central:lightgcn",
        "status": "ok",
        "metric": "recall@20",
        "better": "higher",
        "value": 0.123456,
        "baseline": "central:lightgcn",
        "ratio": 0.98765,
        "bytes_per_round": 123456789.0,
        "epsilon": 6.554e6,
        "delta": 1e-5,
        "private": True,
        "epsilon_paper": {"value": 0.54, "what": "RDP ε at order 1.5"},
        "wall_seconds": 12345.6,
    }
    failed = {"label": "x" * 40, "status": "failed", "reason": "ConfigError: " + "y" * 300}
    text = render_text({"protocols": [ok, failed]})
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= TEXT_WIDTH == 120
    assert "6.554e+06 (δ=1e-05)" in lines[2] and "0.9877" in lines[2] and "0.54" in lines[2]
    assert lines[3].split()[1] == "failed:"  # the reason starts in its column, cut with "…"
