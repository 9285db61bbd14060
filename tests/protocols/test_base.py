"""The typed contract between a protocol and the engine: what every built-in protocol declares
(main metric, central baseline and the shape it shares with it, quick settings, paper figures)
holds against its Config and its golden run, and privacy() is a PrivacyReport."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from engine.compare import parse_label
from protocols import BUILTIN, get_protocol, protocol_names
from protocols.base import (
    MainMetric,
    PaperClaim,
    PaperFigure,
    PrivacyReport,
    build_config,
)
from tests.integration.test_golden import CASES, GOLDEN, dataset


@pytest.mark.parametrize("label,name,rounds,params", CASES, ids=[c[0] for c in CASES])
def test_declared_main_metric_is_what_the_golden_run_reports(label, name, rounds, params):
    recorded = json.loads(GOLDEN.read_text())[label]["metrics"]
    cls = get_protocol(name)
    protocol = cls(dataset(), build_config(cls.Config, params), 0)
    metric = protocol.main_metric()
    assert isinstance(metric, MainMetric)
    assert metric.name in recorded
    assert metric.better == ("lower" if "rmse" in metric.name else "higher")
    # before any round: a PrivacyReport whose flat record is what summary.json holds
    report = protocol.privacy()
    assert isinstance(report, PrivacyReport)
    assert dict(report) == report.as_dict()


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_declarations_fit_the_configs(name):
    cls = get_protocol(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    quick = cls.quick_settings({})
    build_config(cls.Config, {k: v for k, v in quick.items() if k != "rounds"})
    assert set(cls.BASELINE_SHARES) <= fields
    base = cls.central_baseline({})
    if base is not None:
        base_name, base_params = parse_label(base)
        base_cls = get_protocol(base_name)
        base_fields = {f.name for f in dataclasses.fields(base_cls.Config)}
        assert set(cls.BASELINE_SHARES.values()) <= base_fields
        build_config(base_cls.Config, base_params)
    if cls.LABEL_PARAM is not None:
        assert cls.LABEL_PARAM in fields
    if cls.PAPER is not None:
        assert isinstance(cls.PAPER, PaperFigure) and cls.PAPER.on


def test_privacy_report_reads_as_the_summary_record():
    r = PrivacyReport(
        "onebit",
        12.5,
        1e-5,
        unit="user",
        per_element=1.0,
        paper=PaperClaim(0.54, "RDP ε at order 1.5"),
        attacks={"f1": 0.3},
        details={"n_s": 7},
    )
    flat = r.as_dict()
    assert flat["epsilon"] == 12.5 and flat["privacy_delta"] == 1e-5 and flat["n_s"] == 7
    assert flat["paper_claim"] == {
        "value": 0.54,
        "what": "RDP ε at order 1.5",
        "kind": "epsilon",
        "composed": None,
    }
    assert r["attacks"] == {"f1": 0.3} and r.get("missing") is None and r.private
    assert not PrivacyReport("none", math.inf).private
    row = r.figures()
    assert row["paper_value"] == 0.54 and row["epsilon_per_element"] == 1.0


def test_registry_names_import_paths_and_unknowns():
    assert "fedmf" in protocol_names()
    assert get_protocol("protocols.fedmf.protocol:FedMF") is get_protocol("fedmf")
    with pytest.raises(ValueError, match="unknown protocol 'nope'"):
        get_protocol("nope")
    with pytest.raises(ValueError, match="cannot import"):
        get_protocol("protocols.nope:Thing")
    with pytest.raises(ValueError, match="not a protocols.base.Protocol"):
        get_protocol("protocols.base:PrivacyReport")
