"""DGREC (and DLGNN, which runs DGREC's rounds) with absent peers: the eq.-4 sampler skips
unreachable neighbours, a user's status waits for an offline neighbour, and a member decodes eq. 6
over the gradients that actually reached it (a host killed in the middle of the gossip makes that
observable). The checks every protocol shares (a dropout run completes, does not depend on the
placement, no message to or from an offline peer) are in tests/integration/test_dropout.py."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch

from cluster import wire
from cluster.message import index_of
from data.synthetic import synthetic
from engine import deploy, run_rounds
from nodes.conditions import Conditions
from nodes.node import NodeContext
from privacy.onebit import encode_onebit, onebit_scale
from protocols.base import build_config
from protocols.dgrec.config import DGRECConfig
from protocols.dgrec.messages import decode_held, decode_share
from protocols.dgrec.protocol import DGREC
from protocols.dgrec.sampling import sample_neighbourhood

SEED = 3
PARAMS = {"dim": 4, "n_interests": 2, "hidden": 4, "hops": 2, "n_u": 2, "neighbourhoods": 6}
PARAMS |= {"neighbours": 4}


def small_dataset():
    return synthetic(n_users=12, n_items=40, avg_interactions=8, seed=0)


def small_dgrec():
    return DGREC(small_dataset(), build_config(DGREC.Config, PARAMS), seed=SEED)


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
    protocol = small_dgrec()
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


@pytest.mark.ray
def test_a_member_decodes_what_reached_it_when_a_host_dies_mid_gossip(ray_local):
    """A host killed after gossip step 1: what had to pass through its users after that step never
    arrives; every surviving member's SGD step is −lr times eq. 6 over exactly the gradients it
    holds, and some members hold fewer than their neighbourhood's."""
    protocol = small_dgrec()
    lr, hops, r = protocol.config.lr, protocol.config.hops, 0
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
