"""Centralized rating GNNs (models/rating_gnn): shapes, gradient flow, the GCN layer against
its dense formula, input checks, and that a few epochs beat the global-mean baseline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data.types import Interactions
from models.rating_gnn import (
    KINDS,
    RatingGNN,
    build_rating_gnn,
    evaluate_rmse,
    global_mean_rmse,
    rating_edges,
    train_central,
)


def _synthetic(n_users: int = 80, n_items: int = 100, density: float = 0.3, seed: int = 0):
    """Low-rank ratings 1..5 with user/item offsets; 80/20 train/validation split."""
    rng = np.random.default_rng(seed)
    u_f, v_f = rng.normal(size=(n_users, 3)), rng.normal(size=(n_items, 3))
    b_u, b_v = rng.normal(scale=0.5, size=n_users), rng.normal(scale=0.5, size=n_items)
    user, item = np.nonzero(rng.random((n_users, n_items)) < density)
    signal = 3.2 + b_u[user] + b_v[item] + 0.7 * (u_f[user] * v_f[item]).sum(1)
    rating = np.clip(np.round(signal + rng.normal(scale=0.3, size=len(user))), 1, 5)
    perm = rng.permutation(len(user))
    cut = int(0.8 * len(user))
    tr, va = perm[:cut], perm[cut:]
    train = Interactions(user[tr], item[tr], rating[tr].astype(np.float32))
    val = (user[va], item[va], rating[va].astype(np.float32))
    return train, val, n_users, n_items


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_and_gradient_flow(kind: str) -> None:
    train, _, n_users, n_items = _synthetic()
    model = build_rating_gnn(n_users, n_items, train, kind=kind, seed=0)
    users = torch.as_tensor(train.user[:32])
    items = torch.as_tensor(train.item[:32])
    prop = model.propagate()
    assert prop.user.shape == (n_users, 6) and prop.item.shape == (n_items, 6)
    assert len(prop.local_user_aggregates) == (0 if kind == "mf" else 2)
    pred = model(users, items)
    assert pred.shape == (32,)
    loss = model.loss(prop, users, items, torch.as_tensor(train.rating[:32]), l2=1e-3)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and float(p.grad.abs().sum()) > 0, name


def test_gcn_layer_matches_dense_formula() -> None:
    train, _, n_users, n_items = _synthetic(seed=1)
    model = build_rating_gnn(n_users, n_items, train, kind="gcn", n_layers=1, seed=0).double()
    eu, ei = rating_edges(train.user, train.item, train.rating, 4.0)
    adj = torch.zeros(n_users, n_items, dtype=torch.float64)
    adj[eu, ei] = 1.0
    du, dv = adj.sum(1).clamp_min(1), adj.sum(0).clamp_min(1)
    norm = adj / du.sqrt()[:, None] / dv.sqrt()[None, :]
    e_u, e_v = model.user_emb.weight, model.item_emb.weight
    w = model.layer_weight[0].weight
    e1_u = torch.sigmoid((e_u + norm @ e_v) @ w.T)  # eq. 13
    e1_v = torch.sigmoid((e_v + norm.T @ e_u) @ w.T)
    a = model.layer_combination
    prop = model.propagate()
    assert torch.allclose(prop.user, a[0] * e_u + a[1] * e1_u)
    assert torch.allclose(prop.item, a[0] * e_v + a[1] * e1_v)


def test_rating_edges_threshold_and_dedup() -> None:
    eu, ei = rating_edges(
        np.array([0, 0, 1, 1, 2]), np.array([3, 3, 4, 5, 6]), np.array([5, 4, 3, 4, 1.0]), 4.0
    )
    assert list(zip(eu.tolist(), ei.tolist(), strict=True)) == [(0, 3), (1, 5)]


@pytest.mark.parametrize("kind", KINDS)
def test_few_epochs_beat_global_mean(kind: str) -> None:
    train, val, n_users, n_items = _synthetic()
    baseline = global_mean_rmse(train, val)
    model = build_rating_gnn(n_users, n_items, train, kind=kind, seed=0)
    before = evaluate_rmse(model, val, (1.0, 5.0))
    history = train_central(model, train, val, epochs=40, lr=0.2, batch_size=256)
    assert len(history) == 40
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_rmse"] < min(before, 0.95 * baseline)


def test_bias_option_uses_training_mean() -> None:
    train, val, n_users, n_items = _synthetic(seed=2)
    model = build_rating_gnn(n_users, n_items, train, kind="gcn", use_bias=True, seed=0)
    history = train_central(model, train, val, epochs=10, lr=0.05, batch_size=256)
    assert float(model.global_mean) == pytest.approx(float(train.rating.mean()))
    assert history[-1]["val_rmse"] < global_mean_rmse(train, val)


def test_bad_input_raises_value_error() -> None:
    train, val, n_users, n_items = _synthetic()
    with pytest.raises(ValueError, match="kind"):
        RatingGNN(3, 3, [0], [0], kind="lightgcn")
    with pytest.raises(ValueError, match="needs edge_user"):
        RatingGNN(3, 3, kind="gcn")
    with pytest.raises(ValueError, match="item ids"):
        RatingGNN(3, 3, [0], [7])
    with pytest.raises(ValueError, match="n_total_items"):
        RatingGNN(3, 3, [0], [0], n_total_items=2)
    model = build_rating_gnn(n_users, n_items, train, seed=0)
    with pytest.raises(ValueError, match="external aggregates"):
        model.propagate([torch.zeros(n_users, 6)])
    with pytest.raises(ValueError, match="must be"):
        model.propagate([torch.zeros(n_users, 5)] * 2)
    with pytest.raises(ValueError, match="user ids"):
        train_central(model, (np.array([n_users]), np.array([0]), np.array([3.0])), epochs=1)
    with pytest.raises(ValueError, match="no rating"):
        train_central(model, Interactions(train.user, train.item), epochs=1)
    with pytest.raises(ValueError, match="lr > 0"):
        train_central(model, train, lr=0.0)
