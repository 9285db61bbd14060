"""FedPerGNN's GAT backbone: the local subgraph against a brute-force edge list, the model's
invariants (candidates never reach h_u; K = 0 is MF; each user's θ-gradient is its own), batched
== one-by-one user training, the server's dense step, and (Ray) a tapped tiny run: bytes of one
round against the formula, no rating or item id in any payload, placement invariance, RMSE."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from cluster import wire
from cluster.message import Message, index_of
from data.synthetic import synthetic
from engine import deploy, run_rounds
from nodes.node import NodeContext
from protocols.base import ConfigError, build_config
from protocols.fedpergnn import gat as gat_steps
from protocols.fedpergnn import messages as msg
from protocols.fedpergnn.gat_model import (
    LocalGAT,
    build_local_gat_graph,
    local_gat_forward,
    predict_candidates,
    rating_loss,
)
from protocols.fedpergnn.protocol import FedPerGNN, ratings_by_user
from protocols.fedpergnn.roles import User

DIM, LAYERS = 8, 2
BASE = {
    "backbone": "gat",
    "dim": DIM,
    "layers": LAYERS,
    "users_per_round": 4,
    "pseudo_items": 3,
    "key_bits": 1024,
    "clip": 0.5,
    "laplace_scale": 0.0,
    "lr_item": 0.05,
    "lr_user": 0.05,
}


def rated_dataset(seed=0, n_users=10, n_items=40, avg=6):
    ds = synthetic(n_users=n_users, n_items=n_items, avg_interactions=avg, seed=seed)
    assert ds.train.rating is not None and ds.test.rating is not None
    return ds


# --------------------------------------------------------------------------- model


def test_local_graph_edges_equal_brute_force():
    v = np.array([0, 0, 1, 2])
    i = np.array([1, 3, 3, 0])
    g = build_local_gat_graph(4, (v, i), n_candidates=2)
    assert (g.n_items, g.n_nbrs, g.n_candidates, g.n_nodes) == (4, 3, 2, 10)
    want = set()
    for k in range(4):  # user 0 <-> item node 1 + k
        want |= {(0, 1 + k), (1 + k, 0)}
    for a, b in zip(v, i):  # neighbour node 5 + a <-> item node 1 + b
        want |= {(5 + a, 1 + b), (1 + b, 5 + a)}
    want |= {(0, 8), (0, 9)}  # candidates: u -> c only
    got = set(map(tuple, g.edge_index.T.tolist()))
    assert got == want and g.edge_index.shape[1] == len(want)
    with pytest.raises(ValueError, match="item positions"):
        build_local_gat_graph(2, (np.array([0]), np.array([2])))


def test_candidates_do_not_change_the_user_and_k0_is_mf():
    rng = torch.Generator().manual_seed(0)
    model = LocalGAT(DIM, LAYERS, seed=1)
    w = model.flat()
    user, items = torch.randn(DIM, generator=rng), torch.randn(5, DIM, generator=rng)
    nbrs, cands = torch.randn(2, DIM, generator=rng), torch.randn(3, DIM, generator=rng)
    links = (np.array([0, 1]), np.array([0, 4]))
    plain = local_gat_forward(model, w, build_local_gat_graph(5, links), user, items, nbrs)
    g = build_local_gat_graph(5, links, 3)
    with_c = local_gat_forward(model, w, g, user, items, nbrs, cands)
    torch.testing.assert_close(with_c[: plain.shape[0]], plain)  # nothing flows back from c
    assert predict_candidates(with_c, g).shape == (3,)
    mf = LocalGAT(DIM, 0)
    h = local_gat_forward(mf, mf.flat(), g, user, items, nbrs, cands)
    torch.testing.assert_close(predict_candidates(h, g), cands @ user)
    with pytest.raises(ValueError, match="flat weights"):
        model.unflatten(torch.zeros(3))


def test_each_users_weight_gradient_is_its_own():
    """θ is a separate leaf per user: its gradient equals that of the user's loss alone, computed
    by hand from GATConv with the module's parameters set to θ."""
    model = LocalGAT(DIM, 1, seed=2)
    w = model.flat().clone().requires_grad_(True)
    rng = torch.Generator().manual_seed(1)
    user, items = torch.randn(DIM, generator=rng), torch.randn(4, DIM, generator=rng)
    g = build_local_gat_graph(4, (np.zeros(0), np.zeros(0)), n_candidates=4)
    ratings = torch.tensor([1.0, 5.0, 3.0, 4.0])
    h = local_gat_forward(model, w, g, user, items, torch.zeros(0, DIM), items)
    rating_loss(predict_candidates(h, g), ratings, user, items, 0.0).backward()
    x0 = torch.cat([user[None], items, items])
    out = model(x0, g.edge_index)
    ((ratings - out[5:] @ out[0]).pow(2).mean()).backward()
    manual = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    torch.testing.assert_close(w.grad, manual)


def test_ratings_by_user_aligns_and_averages_repeats():
    from data.types import Interactions

    inter = Interactions(
        user=np.array([1, 0, 1, 1]),
        item=np.array([3, 2, 0, 3]),
        rating=np.array([4.0, 2.0, 1.0, 2.0], dtype=np.float32),
    )
    out = ratings_by_user(inter, 3)
    assert out[0][0].tolist() == [2] and out[0][1].tolist() == [2.0]
    assert out[1][0].tolist() == [0, 3] and out[1][1].tolist() == [1.0, 3.0]
    assert len(out[2][0]) == 0
    with pytest.raises(ValueError, match="explicit ratings"):
        ratings_by_user(Interactions(user=np.zeros(1, int), item=np.zeros(1, int)), 1)


# --------------------------------------------------------------------------- user training


def _users(ds, cfg, ids):
    p = FedPerGNN(ds, cfg, seed=1)
    ctx = NodeContext(1, torch.device("cpu"), p.shared())
    rng = np.random.default_rng(11)
    nodes = []
    for u in ids:
        n = User(
            f"user/{u}",
            ctx,
            p.train_items[u],
            p.test_items[u],
            p.train_ratings[u],
            p.test_ratings[u],
        )
        k = len(n.train_items)
        n_nbrs = int(rng.integers(0, 4))
        v = np.repeat(np.arange(n_nbrs), 2)
        i = rng.integers(0, k, size=len(v))
        keep = np.unique(np.stack([v, i], 1), axis=0)
        n.nbr_links = (keep[:, 0], keep[:, 1])
        n.nbr_emb = torch.from_numpy(rng.normal(size=(n_nbrs, DIM)).astype(np.float32))
        nodes.append(n)
    return nodes


def _inbox(n, e_payload, w_payload, prefix=""):
    return [
        Message(prefix + "item_embeddings", "server/0", n.id, 0, "train", e_payload),
        Message(prefix + "gat_weights", "server/0", n.id, 0, "train", w_payload),
    ]


def test_batched_gat_training_equals_one_by_one():
    ds = rated_dataset()
    cfg = build_config(FedPerGNN.Config, {**BASE, "laplace_scale": 0.01})
    ids = [0, 2, 3, 5, 7]
    e = wire.encode_dense(np.random.default_rng(0).normal(size=(40, DIM)).astype(np.float32))
    w = wire.encode_dense(LocalGAT(DIM, LAYERS, seed=3).flat())
    batch = _users(ds, cfg, ids)
    User.handle_batch(batch, "train", [_inbox(n, e, w) for n in batch])
    alone = _users(ds, cfg, ids)
    for n in alone:
        User.handle_batch([n], "train", [_inbox(n, e, w)])
    for a, b in zip(batch, alone):
        out_a, rep_a = a._drain()
        out_b, rep_b = b._drain()
        assert [m.kind for m in out_a] == ["item_grads", "gat_grads"]
        assert [m.payload for m in out_a] == [m.payload for m in out_b]
        assert rep_a == rep_b
        assert torch.equal(a.embedding, b.embedding)
        ids_up, rows = msg.decode_item_grads(out_a[0].payload)
        assert set(a.train_items) <= set(ids_up.tolist())  # every rated item, plus pseudo ones
        assert len(ids_up) == len(a.train_items) + 3
        assert np.abs(wire.decode_dense(out_a[1].payload)).max() <= 0.5 + 0.01 * 40


def test_server_dense_step_averages():
    flat = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([flat], lr=1.0)
    gat_steps.step_on_mean_dense(flat, opt, [np.array([1.0, 2, 3]), np.array([3.0, 2, 1])])
    torch.testing.assert_close(flat.detach(), torch.tensor([-2.0, -2.0, -2.0]))
    with pytest.raises(wire.WireError, match="shape"):
        gat_steps.step_on_mean_dense(flat, opt, [np.zeros(2)])


def test_gat_needs_ratings_and_checks_key_servers():
    ds = synthetic(n_users=10, n_items=40, avg_interactions=6, seed=0)
    implicit = type(ds)(**{**ds.__dict__, "train": type(ds.train)(ds.train.user, ds.train.item)})
    with pytest.raises(ValueError, match="explicit ratings"):
        FedPerGNN(implicit, build_config(FedPerGNN.Config, BASE), seed=0)
    with pytest.raises(ConfigError, match="key_servers"):
        build_config(FedPerGNN.Config, {**BASE, "key_servers": 0})


# --------------------------------------------------------------------------- Ray


def _run(ds, params, placement="packed", hosts=1, rounds=2, tap=False):
    p = FedPerGNN(ds, build_config(FedPerGNN.Config, {**BASE, **params}), seed=3)
    dep = deploy(p, placement, hosts, tap=tap)
    try:
        metrics = run_rounds(p, dep, rounds, eval_every=0)[-1].metrics  # after the last
        return p, metrics, dep.ledger, list(dep.tapped)
    finally:
        dep.close()


ATTACKS = {"key_servers": 2, "attack_gradient_inference": True, "attack_dictionary": True}


def test_tapped_gat_run_bytes_and_privacy(ray_local):
    """One tapped run (2 key-server replicas, attacks on): every payload scanned for ratings and
    raw item ids, one round's bytes per kind against the formula, the attack figures present."""
    ds = rated_dataset()
    p, metrics, ledger, tapped = _run(ds, ATTACKS, hosts=1, tap=True)
    assert math.isfinite(metrics["rmse"]) and metrics["rmse"] > 0
    # bytes of round 1 (no OPRF, no expansion: epoch = ceil(10/4) = 3 rounds)
    n_w = gat_steps.gat_weight_count(DIM, LAYERS)
    by_kind = ledger.by_kind(round_=1)
    sampled = [index_of(m.dst) for m in tapped if m.round == 1 and m.kind == "gat_weights"]
    assert len(sampled) == 4
    assert by_kind["item_embeddings"] == 4 * wire.dense_size((ds.n_items, DIM))
    assert by_kind["gat_weights"] == 4 * wire.dense_size((n_w,))
    assert by_kind["gat_grads"] == 4 * wire.dense_size((n_w,))
    rows = [len(p.train_items[u]) + 3 for u in sampled]
    assert by_kind["item_grads"] == sum(msg.item_grads_size(r, DIM) for r in rows)
    # who signed what: user u went to replica u mod 2
    for m in tapped:
        if m.kind == "oprf_blinded":
            assert index_of(m.dst) == index_of(m.src) % 2
    # no rating, rating vector or raw item id in any payload of the user
    for m in tapped:
        if not m.src.startswith("user/"):
            continue
        u = index_of(m.src)
        items = p.train_items[u]
        ratings = p.train_ratings[u]
        if len(ratings) >= 2:
            assert ratings.astype(np.float32).tobytes() not in m.payload
        if m.kind != "item_grads":  # item_grads carries ids by design (hidden among pseudo ids)
            assert wire.encode_ids(items) not in m.payload
            assert items.astype(np.int64).tobytes() not in m.payload
    attacks = p.privacy()["attacks"]
    assert attacks["dictionary_textbook_rsa_recovered"] == 0.0
    assert attacks["dictionary_unsigned_hash_recovered"] == 0.0
    assert attacks["dictionary_control_textbook_tokens_recovered"] == 1.0
    assert 0.0 <= attacks["gradient_inference_with_pseudo_f1"] <= 1.0
    assert attacks["gradient_inference_without_pseudo_precision"] == 1.0  # only real rows left


@pytest.mark.slow
def test_gat_placement_invariance(ray_local):
    """The same metrics and bytes packed on 1 host, on 3 hosts, and dedicated (slow: ~20 actor
    starts; lightgcn's placement test covers the shared choreography in the default run)."""
    ds = rated_dataset()
    _, metrics, ledger, _ = _run(ds, ATTACKS, hosts=1)
    for placement, hosts in (("packed", 3), ("dedicated", 1)):
        _, other, other_ledger, _ = _run(ds, ATTACKS, placement=placement, hosts=hosts)
        assert other == metrics
        assert other_ledger.by_kind() == ledger.by_kind()
