"""The ``malformed`` attack (issue 42, adversaries/attacks/malformed.py) against every protocol:
compromised participants forge senders, write to nodes they may not address, inflate declared
lengths, truncate payloads, send out-of-range RSA values, unordered tokens and messages to peers
that are not their neighbours. The run completes; what the receivers' checks caught is counted
under ``rejected``; the only participants that fail are the adversaries (the host's envelope),
never an honest one; and the honest users' figures stay those of a run without the attack, within
the absence of the adversaries' own uploads."""

from __future__ import annotations

import pytest

from adversaries.condition import Adversaries
from data.synthetic import synthetic
from engine import RunSettings, run
from nodes.conditions import Conditions
from tests.test_golden import CASES

pytestmark = pytest.mark.ray

PROTOCOLS = [c for c in CASES if not c[1] == "central"]


def _run(tmp_path, protocol, rounds, params, attack: bool):
    settings = RunSettings(
        protocol=protocol,
        rounds=rounds,
        seed=0,
        params=dict(params),
        out=str(tmp_path / ("attacked" if attack else "clean")),
        progress=False,
        conditions=Conditions(snapshot_every=0),
        adversaries=Adversaries(fraction=0.1, attack="malformed") if attack else None,
    )
    return run(settings, synthetic(n_users=40, n_items=60, avg_interactions=12, seed=0))[1]


@pytest.mark.parametrize(
    "label, protocol, rounds, params", PROTOCOLS, ids=[c[0] for c in PROTOCOLS]
)
def test_a_malformed_attack_is_dropped_and_counted(
    ray_local, tmp_path, label, protocol, rounds, params
):
    summary = _run(tmp_path, protocol, rounds, params, attack=True)
    assert summary["status"] == "ok"
    adversaries = summary["adversaries"]
    assert adversaries["attack"] == "malformed" and adversaries["compromised_users"] >= 1
    rejected = sum(n for by_reason in summary["rejected"].values() for n in by_reason.values())
    assert rejected > 0, f"{label}: nothing rejected"
    # the only failures are the adversaries' own envelope violations: no honest participant fell
    for f in summary["faults"]:
        assert f["error"].startswith("EnvelopeError: "), f"{label}: {f}"


@pytest.mark.slow  # a clean and an attacked run of two protocols: CI runs -m slow
@pytest.mark.parametrize("label", ["fedmf", "dgrec"])
def test_honest_figures_stay_within_noise_of_the_clean_run(ray_local, tmp_path, label):
    (case,) = [c for c in PROTOCOLS if c[0] == label]
    clean = _run(tmp_path, *case[1:], attack=False)
    attacked = _run(tmp_path, *case[1:], attack=True)
    for name, value in clean["metrics"].items():
        if name.startswith("recall") or name.startswith("ndcg"):
            assert attacked["metrics"][name] == pytest.approx(value, abs=0.05), name
