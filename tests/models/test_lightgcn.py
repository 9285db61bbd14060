"""LightGCN: propagation against a dense reference, local subgraphs batched == one by one
(exactly), the local graph of a user equals the central graph restricted to it, and central
training beats popularity on synthetic data."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data.synthetic import synthetic
from models.baselines import popularity_metrics
from models.lightgcn import (
    LightGCN,
    build_local_graphs,
    local_forward,
    train_central,
    xavier_embeddings,
)


def dense_reference(adj: np.ndarray, x0: np.ndarray, layers: int) -> np.ndarray:
    deg = adj.sum(1)
    norm = adj / np.sqrt(np.outer(np.maximum(deg, 1), np.maximum(deg, 1)))
    out, x = x0.copy(), x0.copy()
    for _ in range(layers):
        x = norm @ x
        out = out + x
    return out / (layers + 1)


def test_xavier_bound_and_shape():
    e = xavier_embeddings(1000, 64, torch.Generator().manual_seed(0))
    bound = (6 / (1000 + 64)) ** 0.5
    assert e.shape == (1000, 64) and e.abs().max() <= bound and e.abs().max() > 0.9 * bound


@pytest.mark.parametrize("layers", [0, 1, 2, 3])
def test_central_propagation_matches_dense(layers):
    rng = np.random.default_rng(0)
    n_u, n_i = 6, 9
    users = rng.integers(0, n_u, 30)
    items = rng.integers(0, n_i, 30)
    model = LightGCN(n_u, n_i, 8, layers, generator=torch.Generator().manual_seed(1)).double()
    model.set_graph(users, items)
    h_u, h_i = model()
    adj = np.zeros((n_u + n_i, n_u + n_i))
    adj[users, n_u + items] = 1
    adj[n_u + items, users] = 1
    x0 = torch.cat([model.user, model.item]).detach().numpy()
    ref = dense_reference(adj, x0, layers)
    np.testing.assert_allclose(h_u.detach().numpy(), ref[:n_u], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h_i.detach().numpy(), ref[n_u:], rtol=1e-6, atol=1e-6)


def test_central_propagation_gradient_matches_dense():
    """The sparse product's hand-written backward (Â g, Â symmetric) equals autograd through a
    dense Â."""
    rng = np.random.default_rng(3)
    n_u, n_i, layers = 7, 11, 2
    users, items = rng.integers(0, n_u, 40), rng.integers(0, n_i, 40)
    model = LightGCN(n_u, n_i, 5, layers, generator=torch.Generator().manual_seed(2)).double()
    model.set_graph(users, items)
    weights = torch.from_numpy(rng.normal(size=(n_u + n_i, 5)))
    h_u, h_i = model()
    (torch.cat([h_u, h_i]) * weights).sum().backward()
    got = torch.cat([model.user.grad, model.item.grad])
    dense = model.adjacency.to_dense()
    assert torch.equal(dense, dense.T)
    x0 = torch.cat([model.user, model.item]).detach().requires_grad_()
    x, total = x0, x0
    for _ in range(layers):
        x = dense @ x
        total = total + x
    ((total / (layers + 1)) * weights).sum().backward()
    torch.testing.assert_close(got, x0.grad, rtol=1e-10, atol=1e-12)


def random_local(rng, n_items_u, n_nbrs, dim=8):
    links_v, links_i = [], []
    for v in range(n_nbrs):
        shared = rng.choice(n_items_u, size=rng.integers(1, n_items_u + 1), replace=False)
        links_v += [v] * len(shared)
        links_i += sorted(shared.tolist())
    return (
        (np.array(links_v, dtype=np.int64), np.array(links_i, dtype=np.int64)),
        torch.randn(1, dim, dtype=torch.float64),
        torch.randn(n_items_u, dim, dtype=torch.float64),
        torch.randn(n_nbrs, dim, dtype=torch.float64),
    )


def test_local_graph_matches_dense_reference():
    rng = np.random.default_rng(3)
    links, u, items, nbrs = random_local(rng, 5, 4)
    g = build_local_graphs([5], [links])
    h = local_forward(g, u, items, nbrs, 2)
    n = 1 + 5 + 4
    adj = np.zeros((n, n))
    adj[0, 1:6] = adj[1:6, 0] = 1
    v, i = links
    adj[6 + v, 1 + i] = adj[1 + i, 6 + v] = 1
    ref = dense_reference(adj, torch.cat([u, items, nbrs]).numpy(), 2)
    np.testing.assert_allclose(h.numpy(), ref[:1], rtol=1e-10)


def test_local_batched_equals_one_by_one_exactly():
    rng = np.random.default_rng(5)
    cases = [random_local(rng, int(rng.integers(1, 7)), int(rng.integers(0, 5))) for _ in range(6)]
    cases = [(lk, u.float(), it.float(), nb.float()) for lk, u, it, nb in cases]

    def run(group):
        users = torch.cat([c[1] for c in group]).requires_grad_(True)
        items = torch.cat([c[2] for c in group]).requires_grad_(True)
        nbrs = torch.cat([c[3] for c in group])
        g = build_local_graphs([len(c[2]) for c in group], [c[0] for c in group])
        h = local_forward(g, users, items, nbrs, 2)
        (h.pow(2).sum(-1) * torch.arange(1, len(group) + 1)).sum().backward()
        return h.detach(), users.grad, items.grad

    h_all, gu_all, gi_all = run(cases)
    start = 0
    for b, c in enumerate(cases):
        # one user alone, with the same weight its row had in the batch
        users = c[1].clone().requires_grad_(True)
        items = c[2].clone().requires_grad_(True)
        g = build_local_graphs([len(c[2])], [c[0]])
        h = local_forward(g, users, items, c[3], 2)
        ((b + 1) * h.pow(2).sum()).backward()
        assert torch.equal(h.detach()[0], h_all[b])
        assert torch.equal(users.grad[0], gu_all[b])
        assert torch.equal(items.grad, gi_all[start : start + len(c[2])])
        start += len(c[2])


def test_local_graph_equals_central_two_hop_view():
    """With every co-rater as neighbour and K = 1, h_u on the local graph equals central h_u up to
    degrees: the user row only sees its items, whose local degree = 1 + #neighbours sharing it."""
    ds = synthetic(n_users=12, n_items=20, avg_interactions=5, seed=1)
    train = ds.train.items_by_user(ds.n_users)
    u = 0
    others = [v for v in range(ds.n_users) if v != u and np.intersect1d(train[u], train[v]).size]
    lv, li = [], []
    for j, v in enumerate(others):
        for pos, item in enumerate(train[u]):
            if item in train[v]:
                lv.append(j)
                li.append(pos)
    g = build_local_graphs([len(train[u])], [(np.array(lv), np.array(li))])
    model = LightGCN(ds.n_users, ds.n_items, 8, 1, generator=torch.Generator().manual_seed(0))
    model.set_graph(ds.train.user, ds.train.item)
    # make the central graph's item degrees equal the local ones: keep only u's items' edges
    keep = np.isin(ds.train.item, train[u])
    model.set_graph(ds.train.user[keep], ds.train.item[keep])
    h_central = model()[0][u]
    h_local = local_forward(g, model.user[u : u + 1], model.item[train[u]], model.user[others], 1)[
        0
    ]
    torch.testing.assert_close(h_local, h_central)


def test_central_training_beats_popularity():
    ds = synthetic(n_users=150, n_items=120, avg_interactions=12, seed=0)
    _, metrics = train_central(ds, epochs=40, dim=32, lr=0.01, l2=1e-4, batch_size=256, seed=0)
    pop = popularity_metrics(ds)
    assert metrics["recall@20"] > pop["recall@20"] * 1.1, (metrics, pop)
