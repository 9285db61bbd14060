"""Every protocol of the registry that has participants (nodes of a role in
``Conditions.dropout_roles``) under the dropout run condition (nodes/conditions.py): a run with
30% of the participants away completes with finite metrics, who is dropped is a function of
(seed, round, node) only, the figures, the bytes and the ledger do not depend on the placement
(packed on 1 host or 3; slow: an actor per node), and nothing is sent to or from a participant
that is offline in that round outside the set-up steps the protocol exempts from availability.

A protocol without participants (``central``: one curator) is skipped with the reason. The
protocol-specific consequences of dropout are in tests/protocols/<name>/test_dropout.py."""

from __future__ import annotations

import functools
import json
from collections import defaultdict

import numpy as np
import pytest

from cluster.ledger import is_eval_phase
from cluster.message import role_of
from data.synthetic import synthetic
from engine import deploy, rounds
from nodes.conditions import Conditions
from protocols import get_protocol, protocol_names
from protocols.base import build_config

pytestmark = pytest.mark.ray

ROUNDS = 3
DROPOUT = 0.3
# (dataset, parameters, seed) of a small, fast 3-round run per protocol: the settings of the tests
# these checks replace (tests/test_dropout_*.py) where there were some. A protocol not named here
# (a newly registered one) runs its QUICK parameters on the default dataset.
DATA = {"n_users": 12, "n_items": 40, "avg_interactions": 8, "seed": 0}
DGREC_SMALL = {"dim": 4, "n_interests": 2, "hidden": 4, "hops": 2, "n_u": 2, "neighbourhoods": 6}
FEDPERGNN_SMALL = {"dim": 8, "users_per_round": 5, "negatives": 6, "pseudo_items": 3}
FEDPERGNN_SMALL |= {"key_bits": 1024, "clip": 0.01, "laplace_scale": 1e-4, "max_neighbors": 100}
SETTINGS = {
    "dmf": (DATA, {"dim": 8, "pairs": 4, "neighbours": 3, "hops": 2}, 3),
    "dlgnn": (DATA, {**DGREC_SMALL, "neighbours": 4}, 3),
    "dgrec": (DATA, {**DGREC_SMALL, "neighbours": 4}, 3),
    "fedmf": (DATA, {"dim": 8, "users_per_round": 0}, 3),
    "fedlightgcn": ({**DATA, "n_users": 10, "avg_interactions": 6}, FEDPERGNN_SMALL, 3),
    "fedpergnn": ({**DATA, "n_users": 10, "avg_interactions": 6}, FEDPERGNN_SMALL, 3),
    "verfedgnn": (
        {**DATA, "n_items": 30, "avg_interactions": 10},
        {"parties": 4, "participation": 0.75, "psi": True, "psi_key_bits": 1024},
        0,
    ),
    "dipsgnn": (
        {**DATA, "n_users": 8, "n_items": 30, "avg_interactions": 10},
        {"hidden_dim": 8, "user_dim": 4, "max_len": 12, "batch_size": 16, "epochs": ROUNDS},
        0,
    ),
    "pfedrec": (DATA, {"dim": 8, "users_per_round": 0}, 3),
    "echo": (DATA, {}, 3),
    "ping": (DATA, {}, 3),
}
# a node's final state that must not depend on the placement either: protocol -> (node, getter)
FINAL_STATE = {"verfedgnn": ("server/0", "get_theta")}
# the decentralized protocols' neighbourhood invitations: (invitation kind, answer kind); every
# round someone is invited, and only the invited join
INVITES = {"dgrec": ("invite", "join"), "dlgnn": ("invite", "join")}
# servers that address only the participants reachable this round (the peer-to-peer protocols do too)
ONLY_REACHABLE = ("verfedgnn", "dipsgnn")
# the protocols whose dedicated placement (an actor per node) the old tests compared (slow)
DEDICATED = ("dgrec", "dipsgnn", "dlgnn", "dmf", "fedlightgcn")


def make(name):
    cls = get_protocol(name)
    data, params, seed = SETTINGS.get(name, (DATA, None, 3))
    if params is None:
        params = {k: v for k, v in cls.QUICK.items() if k not in ("rounds", "eval_every")}
    return cls(synthetic(**data), build_config(cls.Config, params), seed=seed)


def participants(protocol) -> list[str]:
    """The nodes the dropout condition can take offline."""
    roles = Conditions().dropout_roles
    return [s.nid for s in protocol.node_specs() if role_of(s.nid) in roles]


@functools.cache
def _takes_dropout(name) -> str:
    """'' when ``name`` has participants, else why the dropout checks skip it."""
    if participants(make(name)):
        return ""
    return f"{name} has no participant of a role in Conditions.dropout_roles: nobody to drop"


def dropout_protocols():
    return [
        pytest.param(n, marks=pytest.mark.skipif(bool(why), reason=why))
        for n, why in ((n, _takes_dropout(n)) for n in protocol_names())
    ]


@functools.cache
def drive(name, placement="packed", hosts=1):
    """ROUNDS rounds under ``dropout`` and an evaluation. Per round: the train row, the dropped
    participants, the undelivered messages, the bytes by kind; the tapped messages, the ledger and
    the (round, phase) steps the protocol exempted from availability. Cached: a run is
    deterministic, and starting host actors is most of a test's time."""
    protocol = make(name)
    cond = Conditions(dropout=DROPOUT, snapshot_every=0)  # no faults here: no snapshots needed
    dep = deploy(protocol, placement, hosts, tap=True, conditions=cond)
    exempt = set()
    step = dep.superstep

    def superstep(round_, phase, activate=(), *, availability=True):
        if not availability:
            exempt.add((round_, phase))
        return step(round_, phase, activate, availability=availability)

    dep.superstep = superstep  # the protocol drives the deployment through this attribute
    try:
        per_round, metrics = [], None
        for res in rounds(protocol, dep, ROUNDS, eval_every=0):  # evaluated after the last
            per_round.append(
                {
                    "train": res.train,
                    "dropped": res.stats.dropped,
                    "undelivered": res.stats.undelivered,
                    "bytes_by_kind": dep.ledger.by_kind(round_=res.round),
                }
            )
            metrics = res.metrics
        state = None
        if name in FINAL_STATE:
            state = np.asarray(dep.call(*FINAL_STATE[name]))
        assert not dep.has_pending()
        return {
            "rounds": per_round,
            "metrics": metrics,
            "ledger": dep.ledger.rows(),
            "tapped": list(dep.tapped),
            "participants": participants(protocol),
            "peer_to_peer": len(participants(protocol)) == len(protocol.node_specs()),
            "seed": protocol.seed,
            "conditions": cond,
            "hosts": dep.n_hosts,
            "exempt": exempt,
            "state": state,
        }
    finally:
        dep.close()


def offline_in(out, r) -> set[str]:
    return {u for u in out["participants"] if out["conditions"].offline(out["seed"], r, u)}


def canonical(x) -> str:
    return json.dumps(x, sort_keys=True)  # NaN == NaN here (a round's loss may be NaN)


def assert_same_run(base, other):
    for a, b in zip(base["rounds"], other["rounds"], strict=True):
        assert a["dropped"] == b["dropped"]
        assert a["bytes_by_kind"] == b["bytes_by_kind"]
        assert canonical(a["train"]) == canonical(b["train"])
    assert canonical(other["metrics"]) == canonical(base["metrics"])
    assert other["ledger"] == base["ledger"]
    if base["state"] is not None:
        assert np.array_equal(base["state"], other["state"])


@pytest.mark.parametrize("name", dropout_protocols())
def test_dropout_run_completes_and_does_not_depend_on_placement(ray_local, name):
    base, packed3 = drive(name, "packed", 1), drive(name, "packed", 3)
    assert base["hosts"] <= packed3["hosts"]
    dropped = [set(row["dropped"]) for row in base["rounds"]]
    assert any(dropped), "nobody was dropped: the test would prove nothing"
    for r, row in enumerate(base["rounds"]):
        # who is dropped is a function of (seed, round, node) only: offline participants
        offline = offline_in(base, r)
        assert dropped[r] <= offline, f"round {r}"
        if base["peer_to_peer"]:  # every peer is activated in every round: all the offline ones
            assert offline and dropped[r] == offline, f"round {r}"
        assert row["bytes_by_kind"], f"round {r}: no traffic"
        # those who trained (the key the protocol reports them under, where it does)
        trained = [row["train"][k] for k in ("participants", "members") if k in row["train"]]
        assert all(t > 0 for t in trained), f"round {r}: nobody trained"
    assert len(base["rounds"]) == ROUNDS and base["metrics"] is not None  # evaluated (ping: {})
    assert all(np.isfinite(v) for v in base["metrics"].values())
    assert_same_run(base, packed3)


@pytest.mark.slow  # an actor per node: a dozen processes to start (about a minute on 2 cores)
@pytest.mark.parametrize("name", [n for n in DEDICATED if n in protocol_names()])
def test_dropout_run_is_the_same_with_an_actor_per_node(ray_local, name):
    dedicated = drive(name, "dedicated")
    assert dedicated["hosts"] >= len(dedicated["participants"])
    assert_same_run(drive(name, "packed", 1), dedicated)


@pytest.mark.parametrize("name", dropout_protocols())
def test_no_message_to_or_from_an_offline_participant(ray_local, name):
    out = drive(name, "packed", 1)
    by_round = defaultdict(list)
    for m in out["tapped"]:
        # evaluation ignores availability; so do the set-up steps the protocol exempts (DGREC's
        # enrolment, VerFedGNN's alignment)
        if not is_eval_phase(m.phase) and (m.round, m.phase) not in out["exempt"]:
            by_round[m.round].append(m)
    for r in range(ROUNDS):
        offline = offline_in(out, r)
        assert not [m for m in by_round[r] if m.src in offline or m.dst in offline], f"round {r}"
        # a peer-to-peer protocol (every node a participant), VerFedGNN's server and DIPSGNN's
        # curator never even try to reach an offline participant (the engine would drop and count
        # such a message as undelivered); a FedAvg-shaped server sends its download blind
        if name in ONLY_REACHABLE or out["peer_to_peer"]:
            assert out["rounds"][r]["undelivered"] == 0, f"round {r}"
    assert any(by_round.values())
    if name in INVITES:  # sampled users (invited, joined) are all online in their round
        invite, join = INVITES[name]
        for r in range(ROUNDS):
            invited = {m.dst for m in by_round[r] if m.kind == invite}
            joined = {m.src for m in by_round[r] if m.kind == join}
            assert invited and joined <= invited
            assert not invited & offline_in(out, r)
