"""dmf, DLGNN and DGREC with absent peers (run conditions): a run with dropout completes, who is
dropped, the metrics and the bytes do not depend on placement, no peer ever tries to reach a user
who is offline in that round, DGREC's eq.-4 sampler skips unreachable neighbours, and a DGREC member
decodes eq. 6 over the gradients that actually reached it (a host killed in the middle of the
gossip makes that observable)."""

from __future__ import annotations

import functools
import json
from collections import defaultdict

import numpy as np
import pytest
import torch

from cluster import wire
from cluster.ledger import is_eval_phase
from cluster.message import index_of
from data.synthetic import synthetic
from engine import deploy, rounds, run_rounds
from nodes.conditions import Conditions
from nodes.node import NodeContext
from privacy.onebit import encode_onebit, onebit_scale
from protocols.base import build_config
from protocols.dgrec.config import DGRECConfig
from protocols.dgrec.messages import decode_held, decode_share
from protocols.dgrec.protocol import DGREC
from protocols.dgrec.sampling import sample_neighbourhood
from protocols.dlgnn.protocol import DLGNN
from protocols.dmf.protocol import DMF

pytestmark = pytest.mark.ray

SEED = 3
ROUNDS = 3
DGREC_SMALL = {"dim": 4, "n_interests": 2, "hidden": 4, "hops": 2, "n_u": 2, "neighbourhoods": 6}
CASES = {
    "dmf": (DMF, {"dim": 8, "pairs": 4, "neighbours": 3, "hops": 2}),
    "dlgnn": (DLGNN, {**DGREC_SMALL, "neighbours": 4}),
    "dgrec": (DGREC, {**DGREC_SMALL, "neighbours": 4}),
}


def small_dataset():
    return synthetic(n_users=12, n_items=40, avg_interactions=8, seed=0)


@functools.cache
def drive(name, placement="packed", hosts=1, tap=True, dropout=0.3):
    """ROUNDS rounds and an evaluation under ``dropout``; per round: the train row, the dropped
    participants, the messages addressed to offline nodes, the bytes by kind. Cached: a run is
    deterministic, and starting host actors is most of a test's time."""
    cls, params = CASES[name]
    protocol = cls(small_dataset(), build_config(cls.Config, params), seed=SEED)
    cond = Conditions(dropout=dropout, snapshot_every=0)  # no faults here: no snapshots needed
    dep = deploy(protocol, placement, hosts, tap=tap, conditions=cond)
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
        return {
            "rounds": per_round,
            "metrics": metrics,
            "ledger": dep.ledger.rows(),
            "tapped": list(dep.tapped),
            "users": [s.nid for s in protocol.node_specs()],
            "conditions": cond,
            "hosts": dep.n_hosts,
        }
    finally:
        dep.close()


def offline_in(out, r) -> set[str]:
    return {u for u in out["users"] if out["conditions"].offline(SEED, r, u)}


def canonical(x) -> str:
    return json.dumps(x, sort_keys=True)  # NaN == NaN here (a round's loss may be NaN)


def assert_same_run(base, other):
    for a, b in zip(base["rounds"], other["rounds"], strict=True):
        assert a["dropped"] == b["dropped"]
        assert a["bytes_by_kind"] == b["bytes_by_kind"]
        assert canonical(a["train"]) == canonical(b["train"])
    assert other["metrics"] == base["metrics"]
    assert other["ledger"] == base["ledger"]


# --------------------------------------------------------------------------------------------- 1
@pytest.mark.parametrize("name", sorted(CASES))
def test_dropout_run_completes_and_does_not_depend_on_placement(ray_local, name):
    base, packed3 = drive(name, "packed", 1), drive(name, "packed", 3)
    assert packed3["hosts"] == 3 > base["hosts"] == 1
    for r, row in enumerate(base["rounds"]):
        offline = offline_in(base, r)
        assert offline, f"round {r}: nobody offline, the test would prove nothing"
        assert set(row["dropped"]) == offline  # every user is activated in every round
        assert row["bytes_by_kind"], f"round {r}: no traffic"
    trained = [
        row["train"].get("participants", row["train"].get("members")) for row in base["rounds"]
    ]
    assert all(t > 0 for t in trained)
    assert all(np.isfinite(v) for v in base["metrics"].values())
    assert_same_run(base, packed3)


@pytest.mark.slow  # an actor per user: 12 processes to start (about a minute on 2 cores)
@pytest.mark.parametrize("name", sorted(CASES))
def test_dropout_run_is_the_same_with_an_actor_per_user(ray_local, name):
    dedicated = drive(name, "dedicated")
    assert dedicated["hosts"] == len(dedicated["users"])
    assert_same_run(drive(name, "packed", 1), dedicated)


# --------------------------------------------------------------------------------------------- 2
@pytest.mark.parametrize("name", sorted(CASES))
def test_no_message_to_or_from_an_offline_user(ray_local, name):
    out = drive(name, "packed", 1)
    by_round = defaultdict(list)
    for m in out["tapped"]:
        # evaluation ignores availability; so does DGREC's stage 1 (enrolment, before round 0's
        # training: protocols/dgrec/protocol.py)
        if not is_eval_phase(m.phase) and m.phase not in ("publicize", "setup"):
            by_round[m.round].append(m)
    for r in range(ROUNDS):
        offline = offline_in(out, r)
        msgs = by_round[r]
        assert msgs
        assert not [m for m in msgs if m.src in offline or m.dst in offline]
        # the protocol itself never tries to reach an offline peer (the engine would drop and count
        # such a message as undelivered): sends, relays, invitations and status go only to peers
        # reachable this round
        assert out["rounds"][r]["undelivered"] == 0, f"round {r}"
    if name != "dmf":  # sampled users (invited, joined) are all online in their round
        for r in range(ROUNDS):
            offline = offline_in(out, r)
            invited = {m.dst for m in by_round[r] if m.kind == "invite"}
            joined = {m.src for m in by_round[r] if m.kind == "join"}
            assert invited and joined <= invited
            assert not invited & offline


def test_eq4_sampler_draws_only_reachable_neighbours():
    rng = np.random.default_rng(0)
    n = 30
    adj = [np.array(sorted(set(rng.choice(n, 6, replace=False)) - {u})) for u in range(n)]
    losses, counts = rng.uniform(0.1, 2.0, n), rng.integers(0, 4, n)
    online = rng.random(n) > 0.3
    online[7] = True
    # everyone online: exactly the draws made without a mask
    a = sample_neighbourhood(7, adj, 3, 2, losses, counts, np.random.default_rng(5))
    b = sample_neighbourhood(
        7, adj, 3, 2, losses, counts, np.random.default_rng(5), np.ones(n, bool)
    )
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    for s in range(50):
        nodes, _ = sample_neighbourhood(
            7, adj, 3, 2, losses, counts, np.random.default_rng(s), online
        )
        assert online[nodes].all()
    # eq. 4 over the reachable candidates: a heavy offline neighbour takes no probability mass
    star = [np.array([1, 2, 3]), np.array([0]), np.array([0]), np.array([0])]
    mask = np.array([True, True, True, False])
    picks = [
        int(
            sample_neighbourhood(
                0,
                star,
                1,
                1,
                np.array([1.0, 1, 3, 100]),
                np.zeros(4, int),
                np.random.default_rng(s),
                mask,
            )[0][1]
        )
        for s in range(400)
    ]
    share_of_2 = picks.count(2) / len(picks)
    assert 3 not in picks and 0.67 < share_of_2 < 0.83  # 3/4 expected
    with pytest.raises(ValueError, match="offline"):
        sample_neighbourhood(3, star, 1, 1, np.ones(4), np.zeros(4, int), rng, mask)


def test_status_waits_for_an_offline_neighbour_and_reaches_it_when_back():
    """(L_u, cnt_u) goes to the neighbours reachable now; one offline in round 1 gets it in round
    2, once; nothing is resent in round 3."""
    cls, params = CASES["dgrec"]
    protocol = cls(small_dataset(), build_config(cls.Config, params), seed=SEED)
    spec = next(sp for sp in protocol.node_specs() if len(sp.kwargs["neighbours"]) >= 2)
    away = f"user/{int(spec.kwargs['neighbours'][0])}"
    cond = Conditions(online_rounds={away: {0, 2, 3}})
    user = spec.cls(
        spec.nid, NodeContext(SEED, torch.device("cpu"), protocol.shared(), cond), **spec.kwargs
    )
    sent = []
    for r in (1, 2, 3):
        user.round, user.phase = r, "status"
        user.handle("status", [])
        sent.append(sorted(m.dst for m in user._drain()[0]))
    everyone = sorted(f"user/{int(v)}" for v in spec.kwargs["neighbours"])
    assert sent == [[v for v in everyone if v != away], [away], []]


# --------------------------------------------------------------------------------------------- 3
@pytest.mark.parametrize("mechanism", ["onebit", "float"])
def test_decoding_divides_by_the_gradients_held(mechanism):
    c = DGRECConfig(mechanism=mechanism, clip=0.1, beta=1.0)
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(50, generator=gen) * 0.05 for _ in range(3)]
    if mechanism == "onebit":
        codes = [encode_onebit(g, c.clip, c.beta, gen) for g in grads]
        encoded = [wire.encode_signs(code) for code in codes]
        vectors = [code.numpy().astype(np.float64) * onebit_scale(c.clip, c.beta) for code in codes]
    else:
        encoded = [wire.encode_dense(g.numpy()) for g in grads]
        vectors = [g.numpy().astype(np.float64) for g in grads]
    held = {0: encoded[0], 2: encoded[2]}  # origin 1's gradient never arrived
    got = decode_held(held, c)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, (vectors[0] + vectors[2]) / 2, rtol=1e-6, atol=1e-7)
    assert not np.allclose(got, (vectors[0] + vectors[2]) / 3, rtol=1e-3)  # not the nominal 3
    with pytest.raises(ValueError):
        decode_held({}, c)


@pytest.mark.parametrize("mechanism", ["onebit", "float"])
def test_a_member_keeps_a_running_sum_not_every_gradient(mechanism):
    """Without a defence a member holds Σ_j x_j, not the k vectors (DLGNN's neighbourhoods of
    ≈ 100 would otherwise hold 100 gradients each), and the mean it decodes in arrival order is
    the mean of the k stacked vectors in origin order, to the bit."""
    from protocols.dgrec.messages import HeldShares

    c = DGRECConfig(mechanism=mechanism, clip=0.1, beta=1.0)
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(2000, generator=gen) * 10.0 ** -(i % 5) for i in range(40)]
    if mechanism == "onebit":
        codes = [encode_onebit(g, c.clip, c.beta, gen) for g in grads]
        encoded = [wire.encode_signs(code) for code in codes]
        stacked = np.stack([code.numpy() for code in codes]).astype(np.float64)
        expected = (stacked.mean(axis=0) * onebit_scale(c.clip, c.beta)).astype(np.float32)
    else:
        encoded = [wire.encode_dense(g.numpy()) for g in grads]
        stacked = np.stack([g.numpy() for g in grads]).astype(np.float64)
        expected = stacked.mean(axis=0).astype(np.float32)
    held = HeldShares(c)
    for o in np.random.default_rng(0).permutation(len(grads)).tolist():
        held.add(o, encoded[o])
    assert len(held) == len(grads) and 7 in held and held._kept == {}
    np.testing.assert_array_equal(held.mean(), expected)
    with pytest.raises(ValueError, match="twice"):
        held.add(7, encoded[7])


def test_a_member_decodes_what_reached_it_when_a_host_dies_mid_gossip(ray_local):
    """A host killed after gossip step 1: what had to pass through its users after that step never
    arrives; every surviving member's SGD step is −lr times eq. 6 over exactly the gradients it
    holds, and some members hold fewer than their neighbourhood's."""
    cls, params = CASES["dgrec"]
    protocol = cls(small_dataset(), build_config(cls.Config, params), seed=SEED)
    lr, hops, r = protocol.config.lr, protocol.config.hops, 0
    # 3 hosts: the shape of the packed-3 runs above, whose host actors this deployment reuses
    dep = deploy(protocol, "packed", 3, tap=True, conditions=Conditions(snapshot_every=1))
    try:
        dep.begin_round(r)
        protocol.stage1(dep, r)
        dep.superstep(r, "status", activate=["user"])
        dep.superstep(r, "seed", activate=["user"])
        for h in range(1, hops + 1):
            dep.superstep(r, f"hop/{h}")
        dep.superstep(r, "train", activate=["user"])
        # each member's own encoded gradient (gossip step 1) and the neighbourhood trees
        encoded, parent_of = {}, {}
        for m in dep.tapped:
            if m.kind == "share" and m.phase == "train":
                [(origin, enc)] = decode_share(m.payload)
                encoded[origin] = enc
            if m.kind == "join":
                parent_of[index_of(m.src)] = index_of(m.dst)

        def root(u):
            while u in parent_of:
                u = parent_of[u]
            return u

        tree = defaultdict(set)
        for u in encoded:
            tree[root(u)].add(u)
        host_of = {index_of(nid): h for nid, h in dep.route.items()}

        def splits(h):  # a tree whose surviving members the users of host h separate
            for members in tree.values():
                alive = {u for u in members if host_of[u] != h}
                edges = [(c, p) for c, p in parent_of.items() if c in alive and p in alive]
                if len(alive) - len(edges) >= 2:  # a forest of >= 2 trees
                    return True
            return False

        killable = [h for h in range(dep.n_hosts) if splits(h)]
        assert killable, "no neighbourhood that a dead host would cut: nothing to lose"
        killed = killable[0]
        survivors = sorted(u for u in encoded if host_of[u] != killed)
        before = {u: dep.call(f"user/{u}", "get_parameters") for u in survivors}
        dep.kill_host(killed)
        for t in range(2, 2 * hops + 1):
            dep.superstep(r, f"gossip/{t}")
        dep.superstep(r, "update", activate=["user"])
        assert [f["host"] for f in dep.faults] == [killed]
        short = 0
        for u in survivors:
            last = dep.call(f"user/{u}", "get_last_round")
            held = last["held"]
            members = tree[root(u)]
            assert u in held and set(held) <= members
            short += len(held) < len(members)
            mean = decode_held({o: encoded[o] for o in held}, protocol.config)
            expect = torch.tensor(before[u]) - lr * torch.from_numpy(mean)
            np.testing.assert_allclose(
                dep.call(f"user/{u}", "get_parameters"), expect.numpy(), rtol=0, atol=1e-6
            )
        assert short > 0
        # the next round, the restored users (their snapshot predates stage 1) take part again
        (nxt,) = run_rounds(protocol, dep, r + 2, start=r + 1)  # round r + 1, evaluated
        assert nxt.train["members"] > 0
        restored = [f"user/{u}" for u, h in host_of.items() if h == killed]
        rejoined = [u for u in restored if dep.call(u, "get_last_round").get("round") == r + 1]
        assert rejoined, "no restored user was sampled in the next round"
        assert all(np.isfinite(v) for v in nxt.metrics.values())
    finally:
        dep.close()
