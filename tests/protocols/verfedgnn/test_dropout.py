"""VerFedGNN with absent parties (run conditions, nodes/conditions.py): a party offline in a round
is not in A_t and nobody talks to it, A_t is S of the reachable parties, the accountant counts the
gradients that were sent, and a party whose host died during the alignment rejoins it. That a
dropout run completes and does not depend on the placement is checked for every protocol in
tests/integration/test_dropout.py."""

from __future__ import annotations

import functools
import math

import conditioned_runs
import numpy as np
import pytest

from cluster.ledger import is_eval_phase
from cluster.message import index_of, node_id
from data.synthetic import synthetic
from engine import deploy, run_rounds
from nodes.conditions import Conditions
from protocols.base import build_config
from protocols.verfedgnn.messages import decode_public
from protocols.verfedgnn.protocol import VerFedGNN

pytestmark = pytest.mark.ray

ROUNDS = 3
SEED = 0  # parties offline per round at dropout 0.3: {0, 2}, {2}, {1} (checked below)
VFG = {"parties": 4, "participation": 0.75, "psi": True, "psi_key_bits": 1024}


def _drive(proto, conditions, placement="packed", hosts=1, tap=False):
    return conditioned_runs.drive(proto, conditions, ROUNDS, placement, hosts, tap)


_same = conditioned_runs.same


# --------------------------------------------------------------------------- verfedgnn


def _verfedgnn():
    ds = synthetic(n_users=12, n_items=30, avg_interactions=10, seed=0)
    return VerFedGNN(ds, build_config(VerFedGNN.Config, VFG), seed=SEED)


@functools.cache
def _verfedgnn_run():
    return _drive(_verfedgnn(), Conditions(dropout=0.3), "packed", 1, tap=True)


def _offline_parties(cond, r):
    return {p for p in range(VFG["parties"]) if cond.offline(SEED, r, node_id("party", p))}


def test_verfedgnn_offline_party_gets_and_sends_nothing(ray_local):
    # was `slow` beside a placement test that ran the same tapped run: here that run is this
    # file's only one, and these checks cost nothing on top of it
    cond = Conditions(dropout=0.3)
    a = _verfedgnn_run()
    tapped = a["tapped"]
    parties = {node_id("party", p) for p in range(VFG["parties"])}
    # the alignment is a set-up exempt from availability: offline party/0 and party/2 align too
    assert {m.dst for m in tapped if m.kind == "psi_intersection"} == parties
    sent_gradients = {p: 0 for p in parties}
    for r in range(ROUNDS):
        offline = {node_id("party", p) for p in _offline_parties(cond, r)}
        msgs = [
            m
            for m in tapped
            if m.round == r and not m.phase.startswith("psi") and not is_eval_phase(m.phase)
        ]
        assert msgs and not [m for m in msgs if m.src in offline or m.dst in offline]
        # A_t: S = 3 of the reachable parties (all of them when fewer are online)
        a_t = {m.dst for m in msgs if m.kind == "public_params"}
        assert a_t <= parties - offline and len(a_t) == min(3, len(parties - offline))
        announced = {tuple(decode_public(m.payload)[1]) for m in msgs if m.kind == "public_params"}
        assert announced == {tuple(sorted(index_of(n) for n in a_t))}
        # aggregates between the members of A_t only, each ordered pair once; every member
        # sends its gradient, nobody else does
        pairs = sorted((m.src, m.dst) for m in msgs if m.kind == "aggregates")
        assert pairs == sorted((x, y) for x in a_t for y in a_t if x != y)
        gradients = [m.src for m in msgs if m.kind == "gradient"]
        assert sorted(gradients) == sorted(a_t)
        for src in gradients:
            sent_gradients[src] += 1
    # the accountant counts the gradients that were sent, not the rounds
    proto = a["protocol"]
    assert proto.participation_counts.tolist() == [
        sent_gradients[node_id("party", p)] for p in range(VFG["parties"])
    ]
    assert proto.participation_counts.tolist() == [2, 2, 1, 3]  # party/2 was offline twice
    assert proto.privacy()["releases"] == 3


def test_verfedgnn_party_dropout_completes(ray_local):
    cond = Conditions(dropout=0.3)
    offline = [_offline_parties(cond, r) for r in range(ROUNDS)]
    assert offline == [{0, 2}, {2}, {1}]  # the seed gives a round-0 absence (the PSI set-up)
    a = _verfedgnn_run()
    for r, row in enumerate(a["rows"]):
        assert row["dropped"] == sorted(node_id("party", p) for p in offline[r])
        assert row["train"]["participants"] == min(3, 4 - len(offline[r]))
        assert row["train"]["skipped"] == 0 and math.isfinite(row["train"]["loss"])
    assert math.isfinite(a["metrics"]["test_rmse"])


class _KilledDuringAlignment(VerFedGNN):
    """Kills party/1's host in the middle of the round-0 alignment (after ``psi_blind``)."""

    def align(self, dep, round_):
        host = dep.route["party/1"]
        for phase in ("psi_key", "psi_blind", "psi_sign", "psi_tokens", "psi_match", "psi_align"):
            dep.superstep(
                round_,
                phase,
                activate=["key_server/0"] if phase == "psi_key" else (),
                availability=False,
            )
            if phase == "psi_blind":
                dep.kill_host(host)


@pytest.mark.slow
def test_verfedgnn_party_that_lost_the_alignment_rejoins(ray_local):
    """party/1's host dies during the round-0 alignment: it comes back from the snapshot taken at
    the start of round 0, before the PSI, so it is unaligned; the others align and train without
    it, it asks in round 1 and rejoins the set-up's alignment, and trains in round 2."""
    proto = _KilledDuringAlignment(
        synthetic(n_users=12, n_items=30, avg_interactions=10, seed=0),
        build_config(VerFedGNN.Config, {**VFG, "participation": 1.0}),
        seed=SEED,
    )
    dep = deploy(proto, tap=True)
    try:
        done = run_rounds(proto, dep, ROUNDS, eval_every=0)  # evaluated after the last
        train = [r.train for r in done]
        dropped = [r.stats.dropped for r in done]
        metrics = done[-1].metrics
        aligned = [dep.call(node_id("party", p), "get_aligned_users") for p in range(4)]
    finally:
        dep.close()
    assert [(f["round"], f["phase"]) for f in dep.faults] == [(0, "psi_sign")]
    assert dropped == [["party/1"], [], []]
    assert [t["participants"] for t in train] == [3, 3, 4]
    assert all(t["skipped"] == 0 and math.isfinite(t["loss"]) for t in train)
    rejoin = [m for m in dep.tapped if m.kind == "psi_rejoin"]
    assert [(m.round, m.src) for m in rejoin] == [(1, "party/1")]
    for a in aligned[1:]:
        np.testing.assert_array_equal(a, aligned[0])  # the set-up's index, unchanged
    assert proto.participation_counts.tolist() == [3, 1, 3, 3]
    assert math.isfinite(metrics["test_rmse"])
