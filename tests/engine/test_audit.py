"""``--audit``: a run's report holds its mechanisms' audits (summary.json's
``privacy.audit``, engine/audit.py) with the run's own parameters, and the comparison table gains
a column with the lower bound beside the rigorous ε. The audits run at the quick size (seconds);
every correct mechanism's 95 % bound may exceed its rigorous figure with probability ≤ 5 %, so the
checks of ``lower bound ≤ rigorous`` here use fixed seeds (the run's seed, 0) and the verdict,
which calls a bug only when the bound at 1 − 10⁻⁶ is above it too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli.compare
import cli.run
import cli.shared
from data.synthetic import synthetic
from engine.audit import audit_run, headline
from engine.compare import AUDIT_COLUMN, COLUMNS, columns, render_markdown, render_text
from privacy import audit as pa
from protocols import get_protocol
from protocols.base import build_config

KEYS = {
    "mechanism",
    "kind",
    "delta",
    "epsilon",
    "order",
    "rigorous_epsilon",
    "paper_epsilon",
    "paper_claim",
    "lower_bound_95",
    "lower_bound_strict",
    "samples",
    "verdict",
    "code_path",
    "wall_s",
}

DATA = dict(n_users=40, n_items=60, avg_interactions=12, seed=0)


def _protocol(name: str, **params):
    cls = get_protocol(name)
    return cls(synthetic(**DATA), build_config(cls.Config, params), 0)


def _consistent(records: list[dict]) -> None:
    for r in records:
        assert set(r) == KEYS, r["mechanism"]
        assert r["lower_bound_95"] <= r["rigorous_epsilon"], r
        assert r["verdict"].startswith(pa.CONSISTENT), r
        assert r["samples"] in (pa.QUICK_SAMPLES, pa.QUICK_SLOW_SAMPLES)


@pytest.mark.parametrize(
    "name, params, expect",
    [
        ("fedlightgcn", {"dim": 8, "key_bits": 1024, "laplace_scale": 1e-3}, ["Laplace upload"]),
        ("dgrec", {"pairs": 8}, ["one-bit code", "one-bit code"]),
        ("dgrec", {"pairs": 8, "mechanism": "laplace", "beta": 2.0}, ["Laplace share"]),
        ("dlgnn", {}, []),  # raw float shares: nothing to audit
        ("dlgnn", {"mechanism": "laplace"}, ["Laplace share"]),
        ("verfedgnn", {"parties": 2, "psi_key_bits": 1024}, ["ternary quantizer"]),
        ("verfedgnn", {"parties": 2, "psi_key_bits": 1024, "mechanism": "laplace"}, ["Laplace"]),
        ("dipsgnn", {"epochs": 1, "hidden_dim": 8, "user_dim": 4}, ["Algorithm 3", "eq. 7"]),
        ("dipsgnn", {"epochs": 1, "private_features": False}, ["eq. 7"]),
        ("fedmf", {}, []),  # encryption, no DP mechanism
    ],
)
def test_each_protocol_audits_its_own_mechanisms_with_the_runs_parameters(name, params, expect):
    records = audit_run(_protocol(name, **params), seed=0)
    for r, want in zip(records, expect, strict=True):
        assert r["mechanism"].startswith(want), (r["mechanism"], want)
    _consistent(records)


def test_the_audit_follows_the_runs_parameters():
    """λ = 2δ gives the thesis's ε = 1 per coordinate: rigorous ≈ 1 and paper 1 beside a bound
    that is positive and below them; β = 2 gives DGREC's Laplace share ε = 2."""
    (upload,) = audit_run(_protocol("fedlightgcn", dim=8, key_bits=1024, laplace_scale=1e-3))
    assert upload["rigorous_epsilon"] == pytest.approx(1.0, abs=1e-3)
    assert upload["paper_epsilon"] == pytest.approx(1.0)
    assert 0.5 < upload["lower_bound_95"] <= 1.0
    (share,) = audit_run(_protocol("dgrec", pairs=8, mechanism="laplace", beta=2.0))
    assert share["rigorous_epsilon"] == pytest.approx(2.0, abs=1e-3)
    assert 1.0 < share["lower_bound_95"] <= 2.0
    onebit, rdp = audit_run(_protocol("dgrec", pairs=8))
    assert onebit["kind"] == "epsilon" and onebit["paper_epsilon"] is None  # the claim is RDP
    assert rdp["kind"] == "rdp" and rdp["order"] == 1.5 and rdp["paper_epsilon"] == 0.54
    assert headline([onebit, rdp]) == onebit["lower_bound_95"]
    (ternary,) = audit_run(_protocol("verfedgnn", parties=2, psi_key_bits=1024))
    assert ternary["kind"] == "delta" and ternary["paper_epsilon"] == pytest.approx(1 / 3)


def test_the_flag_is_typed_through_run_settings():
    _, args, *_ = cli.run.parse(["run", "--protocol", "dgrec", "--audit"])
    assert cli.shared.settings(args, None).audit is True
    _, args, *_ = cli.run.parse(["run", "--protocol", "dgrec"])
    assert cli.shared.settings(args, None).audit is False
    _, args, *_ = cli.compare.parse_compare(["--protocols", "dgrec", "--audit"])
    assert cli.shared.settings(args, None).audit is True


def _dgrec_toml(tmp_path):
    cfg = tmp_path / "cmp.toml"
    cfg.write_text(
        "[dataset]\nn_users = 40\nn_items = 60\navg_interactions = 12\n"
        "[conditions]\nsnapshot_every = 0\n"
        '[compare]\nprotocols = ["dgrec", "dipsgnn"]\nrounds = 1\n'
        "[compare.dgrec]\npairs = 8\n"
        "[compare.dipsgnn]\nepochs = 1\nhidden_dim = 8\nuser_dim = 4\n"
    )
    return cfg


def test_a_compare_with_audit_reports_it_and_shows_the_column(ray_local, tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["compare", "--config", str(_dgrec_toml(tmp_path)), "--audit", "--no-baselines"]
    assert cli.main(argv + ["--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    (cmp_dir,) = out.iterdir()
    comparison = json.loads((cmp_dir / "comparison.json").read_text())
    md = (cmp_dir / "comparison.md").read_text()
    assert render_markdown(comparison) == md
    rows = {r["label"]: r for r in comparison["protocols"]}
    assert set(rows) == {"dgrec", "dipsgnn"}
    for r in rows.values():
        summary = json.loads((Path(r["run_dir"]) / "summary.json").read_text())
        records = summary["privacy"]["audit"]
        assert records and records == r["audit"]
        _consistent(records)
        assert r["epsilon_audit"] == headline(records)
    header = next(x for x in md.splitlines() if "ε rigorous" in x)
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert cells.index(AUDIT_COLUMN) == cells.index("ε rigorous") + 1
    dgrec_line = next(x for x in md.splitlines() if x.startswith("| dgrec |"))
    dgrec_cells = [c.strip() for c in dgrec_line.strip("|").split("|")]
    lb = rows["dgrec"]["audit"][0]["lower_bound_95"]
    assert f"{lb:.3g}" in dgrec_cells[cells.index(AUDIT_COLUMN)]
    assert "RDP(1.5)" in dgrec_cells[cells.index(AUDIT_COLUMN)]
    assert "ε audit" in printed.splitlines()[0]
    assert max(len(x) for x in render_text(comparison).splitlines()) <= 120


@pytest.mark.parametrize("audit", [True, False], ids=["audit", "no-audit"])
def test_a_run_has_its_audit_only_with_the_flag(audit, ray_local, tmp_path, capsys):
    out = tmp_path / "runs"
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        "[dataset]\nn_users = 40\nn_items = 60\navg_interactions = 12\n"
        "[conditions]\nsnapshot_every = 0\n"
    )
    argv = ["run", "--protocol", "dgrec", "--rounds", "1", "--pairs", "8", "--config", str(cfg)]
    argv += ["--out", str(out), "--no-progress"] + (["--audit"] if audit else [])
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    (run_dir,) = out.iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    config = json.loads((run_dir / "config.json").read_text())
    assert config["settings"]["audit"] is audit
    if not audit:
        assert "audit" not in summary["privacy"] and '"audit"' not in printed
        row = {"label": "dgrec", "status": "ok", "audit": None}
        assert columns([row]) == COLUMNS
        assert "ε audit" not in render_text({"protocols": [row]})
        return
    records = summary["privacy"]["audit"]
    assert [r["kind"] for r in records] == ["epsilon", "rdp"]  # one-bit code, β = 1
    _consistent(records)
    # the ε audit sits beside the accountant's figure for one element: β
    assert records[0]["rigorous_epsilon"] == pytest.approx(
        summary["privacy"]["epsilon_per_element"], abs=1e-4
    )
    shown = json.loads(printed[: printed.rindex("}") + 1])
    assert [a["mechanism"] for a in shown["audit"]] == [r["mechanism"] for r in records]
