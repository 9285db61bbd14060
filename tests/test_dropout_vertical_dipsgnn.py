"""verfedgnn and dipsgnn with absent participants (run conditions, nodes/conditions.py): a party
offline in a round is not in A_t and nobody talks to it; a dipsgnn user offline in round 0
uploads in the first round it is online, and only the releases that happened are accounted;
results do not depend on the placement."""

from __future__ import annotations

import functools
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from cluster.ledger import is_eval_phase
from cluster.message import index_of, node_id
from data.synthetic import synthetic
from engine import deploy, rounds, run_rounds
from nodes.conditions import Conditions
from privacy.accountant import epsilon_of, gaussian_event
from protocols.base import build_config
from protocols.dipsgnn.protocol import DIPSGNNProtocol
from protocols.verfedgnn.messages import decode_public
from protocols.verfedgnn.protocol import VerFedGNN

pytestmark = pytest.mark.ray

ROUNDS = 3
SEED = 0  # parties offline per round at dropout 0.3: {0, 2}, {2}, {1} (checked below)
VFG = {"parties": 4, "participation": 0.75, "psi": True, "psi_key_bits": 1024}
DIPS = {"hidden_dim": 8, "user_dim": 4, "max_len": 12, "batch_size": 16, "epochs": ROUNDS}


def _drive(proto, conditions, placement="packed", hosts=1, tap=False):
    """The runner's loop on a bare deployment: per round the train figures, who was dropped and
    the bytes by kind; then one evaluation."""
    dep = deploy(proto, placement, hosts, tap=tap, conditions=conditions)
    try:
        rows, metrics = [], None
        for res in rounds(proto, dep, ROUNDS, eval_every=0):  # evaluated after the last
            rows.append(
                {
                    "train": res.train,
                    "dropped": res.stats.dropped,
                    "bytes_by_kind": dep.ledger.by_kind(round_=res.round),
                }
            )
            metrics = res.metrics
        extra = {}
        if isinstance(proto, VerFedGNN):
            extra["theta"] = dep.call("server/0", "get_theta")
        assert not dep.has_pending()
        return {"protocol": proto, "rows": rows, "metrics": metrics, "tapped": dep.tapped, **extra}
    finally:
        dep.close()


def _same(a, b):  # equal, NaN included (a round without a loss report has loss NaN)
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# --------------------------------------------------------------------------- verfedgnn


def _verfedgnn():
    ds = synthetic(n_users=12, n_items=30, avg_interactions=10, seed=0)
    return VerFedGNN(ds, build_config(VerFedGNN.Config, VFG), seed=SEED)


@functools.cache
def _verfedgnn_run(hosts: int):
    return _drive(_verfedgnn(), Conditions(dropout=0.3), "packed", hosts, tap=hosts == 1)


def _offline_parties(cond, r):
    return {p for p in range(VFG["parties"]) if cond.offline(SEED, r, node_id("party", p))}


@pytest.mark.slow  # a long vertical run: CI runs `-m slow`
def test_verfedgnn_offline_party_gets_and_sends_nothing(ray_local):
    cond = Conditions(dropout=0.3)
    a = _verfedgnn_run(1)
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


def test_verfedgnn_party_dropout_completes_and_is_placement_invariant(ray_local):
    cond = Conditions(dropout=0.3)
    offline = [_offline_parties(cond, r) for r in range(ROUNDS)]
    assert offline == [{0, 2}, {2}, {1}]  # the seed gives a round-0 absence (the PSI set-up)
    a, b = _verfedgnn_run(1), _verfedgnn_run(3)
    # parties have no packable role: hosts=1 and hosts=3 both give every node its own host,
    # which is also the dedicated placement
    for x in (a, b):
        for r, row in enumerate(x["rows"]):
            assert row["dropped"] == sorted(node_id("party", p) for p in offline[r])
            assert row["train"]["participants"] == min(3, 4 - len(offline[r]))
            assert row["train"]["skipped"] == 0 and math.isfinite(row["train"]["loss"])
    assert _same(a["rows"], b["rows"]) and _same(a["metrics"], b["metrics"])
    assert np.array_equal(a["theta"], b["theta"])
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


# --------------------------------------------------------------------------- dipsgnn


def _dipsgnn():
    ds = synthetic(n_users=8, n_items=30, avg_interactions=10, seed=0)
    return DIPSGNNProtocol(ds, build_config(DIPSGNNProtocol.Config, DIPS), seed=SEED)


def _dips_conditions():
    """dropout 0.3 (at SEED: users 2, 3, 6 offline in round 0; 2, 3, 5 in round 1; 7 in round
    2) and user/0 never online (a trace)."""
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "trace.json"
        trace.write_text(json.dumps({"user/0": []}))
        return Conditions(dropout=0.3, trace=str(trace))  # the trace is read here


@functools.cache
def _dipsgnn_run(placement: str, hosts: int):
    tap = (placement, hosts) == ("packed", 1)
    return _drive(_dipsgnn(), _dips_conditions(), placement, hosts, tap=tap)


def _first_online(cond, u):
    return next((r for r in range(ROUNDS) if not cond.offline(SEED, r, f"user/{u}")), -1)


def test_dipsgnn_user_dropout_completes_and_is_placement_invariant(ray_local):
    cond = _dips_conditions()
    # packed on 5 hosts first: with the curator's, 6 hosts, the shape of the verfedgnn runs above,
    # whose host actors it reuses (starting them is most of the time); then packed on one host
    b = _dipsgnn_run("packed", 5)
    a = _dipsgnn_run("packed", 1)
    users = a["protocol"].users
    first = {int(u): _first_online(cond, u) for u in users}
    assert first == {0: -1, 1: 0, 2: 2, 3: 2, 4: 0, 5: 0, 6: 1, 7: 0}
    for r, row in enumerate(a["rows"]):
        # asked to act: everyone in round 0, later the users the curator does not hold yet
        asked = [u for u in users if first[int(u)] < 0 or first[int(u)] >= r]
        offline = [f"user/{u}" for u in asked if cond.offline(SEED, r, f"user/{u}")]
        assert row["dropped"] == sorted(offline)
        # late uploads: whoever is online and not yet held uploads this round
        assert row["train"]["uploads"] == sum(1 for u in users if first[int(u)] == r)
        assert row["train"]["skipped"] == 0 and math.isfinite(row["train"]["loss"])
    assert [row["train"]["examples"] for row in a["rows"]] == sorted(
        row["train"]["examples"] for row in a["rows"]
    )  # the training set grows as late users upload
    assert _same(b["rows"], a["rows"]) and _same(b["metrics"], a["metrics"])
    assert 0 <= a["metrics"]["recall@20"] <= 1


def test_dipsgnn_accountant_counts_only_releases_that_happened(ray_local):
    cond = _dips_conditions()
    a = _dipsgnn_run("packed", 1)
    proto, tapped = a["protocol"], a["tapped"]
    c = proto.config
    full = {}
    for row, u in enumerate(proto.users):
        u = int(u)
        first = _first_online(cond, u)
        mine = [m for m in tapped if m.src == f"user/{u}" and not is_eval_phase(m.phase)]
        # one upload (features + sequence) in the first round the user is online, none else
        assert sorted((m.round, m.kind) for m in mine) == (
            [] if first < 0 else [(first, "features"), (first, "sequence")]
        )
        acc = proto.user_privacy(u)
        epochs = 0 if first < 0 else ROUNDS - first  # epochs trained while holding its data
        assert acc["uploaded_round"] == first and acc["epochs"] == epochs
        assert acc["epsilon1_features"] == (c.eps1 if first >= 0 else 0.0)
        releases = int(proto.edge_prefixes[row]) * c.steps * epochs
        assert acc["releases_per_edge"] == releases
        release = gaussian_event(proto.sigma, proto.sensitivity)  # one Gaussian release (eq. 7)
        assert acc["epsilon2"] == epsilon_of(release, releases, c.privacy_delta)
        # the same user had it uploaded in round 0 (its data held for every epoch)
        full[u] = epsilon_of(
            release, int(proto.edge_prefixes[row]) * c.steps * ROUNDS, c.privacy_delta
        )
        if first == 0:
            assert acc["epsilon2"] == full[u]  # offline later (users 5, 7): nothing saved
        else:
            assert acc["epsilon2"] < full[u]  # offline in round 0: fewer releases
    assert proto.user_privacy(0)["epsilon2"] == 0.0  # never online: nothing released
    assert 0 < proto.user_privacy(6)["epsilon2"] < full[6]  # uploaded in round 1
    # users 2 (offline in rounds 0 and 1) and 4 (online throughout) have sequences whose edges
    # are in as many prefixes; 2's data was trained on in one epoch, 4's in three
    assert proto.edge_prefixes[2] == proto.edge_prefixes[4] > 0
    assert proto.user_privacy(2)["epsilon2"] < proto.user_privacy(4)["epsilon2"]
    priv = proto.privacy()
    assert priv["epsilon"] == max(proto.user_privacy(int(u))["epsilon2"] for u in proto.users)
    assert priv["users_uploaded"] == priv["users_held"] == len(proto.users) - 1
    # no ranking for the user the curator holds nothing of
    assert "user/0" not in {m.dst for m in tapped if m.kind == "topk"}


@pytest.mark.slow
def test_dipsgnn_user_dropout_dedicated_equals_packed(ray_local):
    a, b = _dipsgnn_run("packed", 1), _dipsgnn_run("dedicated", 1)  # 9 hosts
    assert _same(b["rows"], a["rows"]) and _same(b["metrics"], a["metrics"])
