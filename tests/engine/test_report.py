"""Run reports: benchmarks/run_report.py (a run directory, possibly resumed → one benchmark
record) and engine/report.py's plots (one run's PNGs, the comparison of several runs)."""

import json
import math

import pytest

from benchmarks.run_report import RunDirError, summarize
from engine.report import (
    RunReport,
    _plotted_metric,
    plot_comparison,
    plot_run,
    privacy_points,
    privacy_row,
    privacy_scalars,
    read_rows,
)
from protocols.base import PaperClaim, PrivacyReport


def write_run(tmp_path, rows, summary=None):
    (tmp_path / "config.json").write_text(
        json.dumps({"settings": {"protocol": "fedmf"}, "dataset": {"name": "synthetic"}})
    )
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    if summary is not None:
        (tmp_path / "summary.json").write_text(json.dumps(summary))
    return tmp_path


def row(rnd, kinds, metrics=None, seconds=1.0):
    return {"round": rnd, "metrics": metrics or {}, "bytes_by_kind": kinds, "seconds": seconds}


def test_resumed_rounds_keep_the_last_row_and_round_zero_is_apart(tmp_path):
    rows = [
        row(0, {"tokens": 100, "up": 10}),
        row(1, {"up": 10}, seconds=2.0),
        row(2, {"up": 99}),  # written before an interruption, replaced after the resume
        row(2, {"up": 30}, {"recall@20": 0.5}),
    ]
    fig = summarize(write_run(tmp_path, rows, {"rounds": 3, "privacy": {"epsilon": 1.0}}))
    assert fig["rounds_done"] == 3 and fig["complete"]
    assert fig["bytes_first_round_by_kind"] == {"tokens": 100, "up": 10}
    assert fig["bytes_per_round_by_kind"] == {"up": 20.0}
    assert fig["curve"] == [{"round": 3, "recall@20": 0.5, "epsilon": None}]
    assert fig["train_seconds"] == 4.0 and fig["privacy"] == {"epsilon": 1.0}


def test_run_in_progress_is_not_complete(tmp_path):
    fig = summarize(write_run(tmp_path, [row(0, {"up": 1}), row(1, {"up": 1})]))
    assert not fig["complete"] and fig["rounds_done"] == 2


def test_bad_run_directories_are_named(tmp_path):
    with pytest.raises(RunDirError, match="no metrics.jsonl"):
        summarize(tmp_path)
    write_run(tmp_path, [row(0, {})])
    (tmp_path / "metrics.jsonl").write_text('{"round": 0}\nnot json\n')
    with pytest.raises(RunDirError, match="metrics.jsonl:2"):
        summarize(tmp_path)


# --- plots -----------------------------------------------------------------------------------------
def plot_rows(rounds=5, eps=None, paper=None, metric="recall@20", bytes_per_round=1000, delta=None):
    """Rows as the runner writes them: a loss every round, one evaluation (the last round)."""
    rows = []
    for rnd in range(rounds):
        privacy = PrivacyReport()
        if eps is not None:
            claim = PaperClaim(paper, "ε per coordinate") if paper is not None else None
            privacy = PrivacyReport("laplace", eps * (rnd + 1), paper=claim)
        if delta is not None:
            privacy = PrivacyReport(
                "ternary",
                math.inf,
                1e-5,
                delta_spent=min(1.0, delta * (rnd + 1)),
                paper=PaperClaim(
                    delta / 2,
                    "δ per release",
                    kind="delta",
                    composed=min(1.0, delta / 2 * (rnd + 1)),
                ),
            )
        rows.append(
            {
                "round": rnd,
                "train": {"loss": 1.0 / (rnd + 1), "participants": 10},
                "metrics": {metric: 0.1 + 0.01 * rnd, "mrr@20": 0.05} if rnd == rounds - 1 else {},
                "bytes": bytes_per_round,
                "bytes_by_kind": (
                    {"up": bytes_per_round // 2, "down": bytes_per_round - bytes_per_round // 2}
                    if bytes_per_round
                    else {}
                ),
                "epsilon": privacy.epsilon,
                "privacy": privacy_row(privacy),
                "sim_elapsed": 0.5 * (rnd + 1),
                "dropped": 0,
                "late": 0,
                "faults": [],
            }
        )
    return rows


def names(paths):
    return sorted(p.name for p in paths)


def test_a_run_with_one_evaluation_is_plotted_without_privacy_png(tmp_path):
    report = RunReport(tmp_path)
    for r in plot_rows():
        report.add_round(r)
    report.close()
    assert (tmp_path / "metrics.png").stat().st_size > 10_000  # loss curve + evaluated markers
    assert (tmp_path / "bytes.png").exists()
    assert not (tmp_path / "privacy.png").exists() and not (tmp_path / "participation.png").exists()
    # a single round, a single evaluation: still drawn
    (tmp_path / "one").mkdir()
    assert names(plot_run(plot_rows(rounds=1), tmp_path / "one")) == ["bytes.png", "metrics.png"]


def test_privacy_png_only_when_privacy_is_spent(tmp_path):
    for sub, rows, want in [
        ("none", plot_rows(), False),
        ("zero", plot_rows(eps=0.0), False),
        ("eps", plot_rows(eps=3.0, paper=0.5), True),
        ("delta", plot_rows(delta=0.3), True),  # ternary quantization: ε = 0, δ spent
    ]:
        (tmp_path / sub).mkdir()
        assert ("privacy.png" in names(plot_run(rows, tmp_path / sub))) == want, sub


def test_privacy_points_read_the_rigorous_and_the_paper_figures():
    rows = plot_rows(eps=2.0, paper=0.5)
    assert privacy_points(rows[1])["epsilon"] == 4.0
    assert privacy_points(rows[1])["epsilon_paper"] == 0.5
    details = {
        "epsilon": 9.0,
        "paper_stated_rdp": {"order": 1.5, "epsilon": 0.54},
        "mechanism": "x",
    }
    flat = privacy_scalars(details)
    assert flat == {"epsilon": 9.0, "paper_stated_rdp.order": 1.5, "paper_stated_rdp.epsilon": 0.54}
    report = PrivacyReport("onebit", 9.0, paper=PaperClaim(0.54, "RDP ε at order 1.5"))
    pts = privacy_points({"epsilon": 9.0, "privacy": privacy_row(report)})
    assert pts["epsilon_paper"] == 0.54 and "order 1.5" in pts["paper_label"]
    # an older row with only "epsilon", an infinite ε stored as null: no figures, no crash
    assert privacy_points({"epsilon": None})["epsilon"] is None


def test_plotted_metric_prefers_recall_at_20_then_rmse():
    assert (
        _plotted_metric([{"metrics": {"recall@10": 0.1, "recall@20": 0.2, "mrr@20": 0.3}}])
        == "recall@20"
    )
    rows = [{"metrics": {}}, {"metrics": {"rmse": 1.0, "val_rmse": 1.1}}]
    assert _plotted_metric(rows) == "rmse"
    assert _plotted_metric([{"metrics": {"mrr@20": 0.3, "hit@20": 0.5}}]) == "hit@20"
    assert _plotted_metric([{"metrics": {}}]) is None


def test_plot_comparison_writes_its_files(tmp_path):
    runs = {
        "fedpergnn": plot_rows(eps=1e6, paper=100.0),
        "dipsgnn": plot_rows(eps=0.5, paper=0.1),
        "central": plot_rows(bytes_per_round=0),  # nothing sent: a level on the bytes plot
        "verfedgnn": plot_rows(metric="rmse", delta=0.3),  # another metric: its own panel
    }
    paths = plot_comparison(runs, tmp_path / "cmp")
    assert names(paths) == ["compare_bytes.png", "compare_metric.png", "compare_privacy.png"]
    assert all(p.parent == tmp_path / "cmp" and p.stat().st_size > 10_000 for p in paths)
    # nobody spends ε: no privacy comparison
    paths = plot_comparison({"fedmf": plot_rows(), "dmf": plot_rows(rounds=2)}, tmp_path / "c2")
    assert names(paths) == ["compare_bytes.png", "compare_metric.png"]
    assert plot_comparison({"empty": []}, tmp_path / "c3") == []


@pytest.mark.ray
def test_a_private_run_records_per_round_privacy_and_plots_it(ray_local, tmp_path):
    from data.synthetic import synthetic
    from engine import RunSettings, run

    settings = RunSettings(
        protocol="dgrec", rounds=2, out=str(tmp_path), params={"eval_every": 0}, progress=False
    )
    run_dir, summary = run(settings, synthetic(n_users=30, n_items=50, seed=2))
    rows = read_rows(run_dir)
    assert [r["privacy"]["epsilon"] for r in rows] == [r["epsilon"] for r in rows]
    assert 0 < rows[0]["epsilon"] < rows[-1]["epsilon"] == summary["privacy"]["epsilon"]
    paper = summary["privacy"]["paper_stated_rdp"]["epsilon"]
    assert all(privacy_points(r)["epsilon_paper"] == paper for r in rows)
    assert all(r["train"]["loss"] is not None for r in rows)
    assert sum(bool(r["metrics"]) for r in rows) == 1
    for png in ("metrics.png", "bytes.png", "privacy.png"):
        assert (run_dir / png).exists(), png
