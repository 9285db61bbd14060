"""VerFedGNN party aggregation (protocols/verfedgnn/aggregation.py): the parties' X_p add up
to the centralized aggregation, the primitives match dense reference formulas, the eq. 12
estimator is unbiased over item splits, and the eq. 21 estimator is unbiased over subsets."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from models.rating_gnn import RatingGNN
from models.rating_gnn import aggregation as agg
from protocols.verfedgnn.aggregation import (
    gat_party_aggregate,
    gat_party_scores,
    gcn_party_aggregate,
    ggnn_party_aggregate,
    partial_participation_aggregate,
)

N_USERS, N_ITEMS, DIM, N_PARTIES = 40, 60, 5, 3


def _graph(seed: int = 0, density: float = 0.15):
    rng = np.random.default_rng(seed)
    adj = rng.random((N_USERS, N_ITEMS)) < density
    eu, ei = np.nonzero(adj)
    gen = torch.Generator().manual_seed(seed)
    user_emb = torch.randn(N_USERS, DIM, generator=gen, dtype=torch.float64)
    item_emb = torch.randn(N_ITEMS, DIM, generator=gen, dtype=torch.float64)
    owner = rng.permutation(np.arange(N_ITEMS) % N_PARTIES)  # random item split
    owner[:3] = 0  # with unequal party sizes
    return adj, eu, ei, user_emb, item_emb, owner


def _party(eu, ei, item_emb, owner, p):
    items = np.flatnonzero(owner == p)
    local_id = -np.ones(N_ITEMS, dtype=np.int64)
    local_id[items] = np.arange(len(items))
    keep = owner[ei] == p
    return items, eu[keep], local_id[ei[keep]], item_emb[torch.as_tensor(items)]


def _degrees(eu, ei):
    du = agg.node_degree(torch.as_tensor(eu), N_USERS, torch.float64)
    dv = agg.node_degree(torch.as_tensor(ei), N_ITEMS, torch.float64)
    return du, dv


def test_gcn_parties_sum_to_central_and_to_dense_formula() -> None:
    adj, eu, ei, ue, ve, owner = _graph()
    du, dv = _degrees(eu, ei)
    teu, tei = torch.as_tensor(eu), torch.as_tensor(ei)
    central = agg.gcn_user_aggregate(ve, teu, tei, du, dv, N_USERS)
    a = torch.as_tensor(adj, dtype=torch.float64)
    inv_sqrt = lambda d: torch.where(d > 0, d.clamp_min(1).rsqrt(), torch.zeros_like(d))  # noqa: E731
    dense = (inv_sqrt(du)[:, None] * a * inv_sqrt(dv)[None, :]) @ ve
    assert torch.allclose(central, dense)
    parts = [
        gcn_party_aggregate(ue, emb, u, v, n_total_items=N_ITEMS, user_degree=du)
        for _, u, v, emb in (_party(eu, ei, ve, owner, p) for p in range(N_PARTIES))
    ]
    assert torch.allclose(sum(parts), central)


def test_ggnn_parties_sum_to_central_mean() -> None:
    adj, eu, ei, ue, ve, owner = _graph(1)
    du, _ = _degrees(eu, ei)
    a = torch.as_tensor(adj, dtype=torch.float64)
    dense = (a / du.clamp_min(1)[:, None]) @ ve
    parts = [
        ggnn_party_aggregate(ue, emb, u, v, n_total_items=N_ITEMS, user_degree=du)
        for _, u, v, emb in (_party(eu, ei, ve, owner, p) for p in range(N_PARTIES))
    ]
    assert torch.allclose(sum(parts), dense)


def test_gat_parties_sum_to_central_with_exact_denominator_and_dense_softmax() -> None:
    adj, eu, ei, ue, ve, owner = _graph(2)
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(DIM, DIM, generator=gen, dtype=torch.float64) / DIM
    a_src = torch.randn(DIM, generator=gen, dtype=torch.float64)
    a_dst = torch.randn(DIM, generator=gen, dtype=torch.float64)
    # dense reference of eq. 14: softmax over {u} ∪ N_u of LeakyReLU(a_dstᵀWe_u + a_srcᵀWe_j)
    wu, wv = ue @ w.T, ve @ w.T
    logits = torch.nn.functional.leaky_relu((wu @ a_dst)[:, None] + (wv @ a_src)[None, :], 0.2)
    self_logit = torch.nn.functional.leaky_relu(wu @ a_dst + wu @ a_src, 0.2)
    mask = torch.as_tensor(adj)
    scores = torch.where(mask, logits.exp(), torch.zeros_like(logits))
    z = self_logit.exp() + scores.sum(1)
    dense = (scores / z[:, None]) @ ve

    parties = [_party(eu, ei, ve, owner, p) for p in range(N_PARTIES)]
    kw = dict(weight=w, att_src=a_src, att_dst=a_dst)
    # exact Z_u = exp(s_uu) + Σ over every party's edges (what the protocol cannot see)
    z_exact = (
        sum(
            agg.gat_user_denominator(gat_party_scores(ue, emb, u, v, **kw), torch.as_tensor(u))
            for _, u, v, emb in parties
        )
        - (N_PARTIES - 1) * self_logit.exp()
    )
    assert torch.allclose(z_exact, z)
    parts = [
        gat_party_aggregate(ue, emb, u, v, n_total_items=N_ITEMS, user_denominator=z_exact, **kw)
        for _, u, v, emb in parties
    ]
    assert torch.allclose(sum(parts), dense)
    # with the eq. 15 estimate the sum is only approximate (not exact, but close)
    est = [
        gat_party_aggregate(ue, emb, u, v, n_total_items=N_ITEMS, **kw) for _, u, v, emb in parties
    ]
    rel = float((sum(est) - dense).norm() / dense.norm())
    assert 1e-6 < rel < 0.5


def test_single_party_estimates_are_exact() -> None:
    # P = 1: M_p = M, so E_p(N_u) = N_u and E_p(Z_u) = Z_u — the central computation
    _, eu, ei, ue, ve, _ = _graph(3)
    du, dv = _degrees(eu, ei)
    teu, tei = torch.as_tensor(eu), torch.as_tensor(ei)
    assert torch.allclose(
        gcn_party_aggregate(ue, ve, eu, ei, n_total_items=N_ITEMS),
        agg.gcn_user_aggregate(ve, teu, tei, du, dv, N_USERS),
    )
    assert torch.allclose(
        ggnn_party_aggregate(ue, ve, eu, ei, n_total_items=N_ITEMS),
        agg.mean_user_aggregate(ve, teu, tei, du, N_USERS),
    )


def test_degree_estimate_is_unbiased_over_random_item_splits() -> None:
    # eq. 12: E_p(N_u) = N_u^p · M / M_p; over random splits with |party| = M_p its mean is N_u
    adj, eu, ei, *_ = _graph(4)
    rng = np.random.default_rng(0)
    m_p, trials = 17, 2000
    true = adj.sum(1).astype(float)
    est = np.empty((trials, N_USERS))
    for t in range(trials):
        items = rng.choice(N_ITEMS, size=m_p, replace=False)
        local = torch.as_tensor(adj[:, items].sum(1), dtype=torch.float64)
        est[t] = agg.estimate_user_degree(local, m_p, N_ITEMS).numpy()
    se = est.std(0) / np.sqrt(trials) + 1e-12
    assert bool((np.abs(est.mean(0) - true) < 5 * se).all())


def test_party_model_sends_what_the_party_functions_compute() -> None:
    _, eu, ei, ue, ve, owner = _graph(5)
    _, u, v, emb = _party(eu, ei, ve, owner, 1)
    for kind in ("gcn", "gat", "ggnn"):
        model = RatingGNN(
            N_USERS, emb.shape[0], u, v, kind=kind, dim=DIM, n_total_items=N_ITEMS, seed=0
        ).double()
        with torch.no_grad():
            model.user_emb.weight.copy_(ue)
            model.item_emb.weight.copy_(emb)
            sent = model.propagate().local_user_aggregates[0]
        if kind == "gcn":
            ref = gcn_party_aggregate(ue, emb, u, v, n_total_items=N_ITEMS)
        elif kind == "ggnn":
            ref = ggnn_party_aggregate(ue, emb, u, v, n_total_items=N_ITEMS)
        else:
            ref = gat_party_aggregate(
                ue,
                emb,
                u,
                v,
                n_total_items=N_ITEMS,
                weight=model.layer_weight[0].weight,
                att_src=model.att_src[0],
                att_dst=model.att_dst[0],
            )
        assert torch.allclose(sent, ref.detach()), kind


@pytest.mark.parametrize("kind", ["gcn", "ggnn"])
def test_layerwise_federated_propagation_equals_central(kind: str) -> None:
    # with exact user degrees and exact (unprojected) exchange, party models reproduce the
    # central model layer by layer: federated and central differ only by the protocol
    _, eu, ei, ue, ve, owner = _graph(6)
    du, _ = _degrees(eu, ei)
    central = RatingGNN(N_USERS, N_ITEMS, eu, ei, kind=kind, dim=DIM, seed=1).double()
    with torch.no_grad():
        central.user_emb.weight.copy_(ue)
        central.item_emb.weight.copy_(ve)
    parties, items_of = [], []
    for p in range(N_PARTIES):
        items, u, v, emb = _party(eu, ei, ve, owner, p)
        m = RatingGNN(N_USERS, len(items), u, v, kind=kind, dim=DIM, user_degree=du).double()
        state = {k: t for k, t in central.state_dict().items() if not k.startswith("item_emb")}
        m.load_state_dict(state, strict=False)
        with torch.no_grad():
            m.item_emb.weight.copy_(emb)
        parties.append(m)
        items_of.append(items)
    with torch.no_grad():
        ref = central.propagate()
        states = [(m.user_emb.weight, m.item_emb.weight) for m in parties]
        users_k, items_k = [[s[0]] for s in states], [[s[1]] for s in states]
        for k in range(central.n_layers):
            inputs = [m.layer_inputs(k, *s) for m, s in zip(parties, states, strict=True)]
            total = sum(inp.user_agg for inp in inputs)  # Σ_p X_p^k (exchanged)
            states = [
                m.layer_update(k, *s, total, inp.item_agg)
                for m, s, inp in zip(parties, states, inputs, strict=True)
            ]
            for p, s in enumerate(states):
                users_k[p].append(s[0])
                items_k[p].append(s[1])
        a = central.layer_combination
        for p in range(N_PARTIES):
            h_user = torch.einsum("k,knd->nd", a, torch.stack(users_k[p]))
            h_item = torch.einsum("k,knd->nd", a, torch.stack(items_k[p]))
            assert torch.allclose(h_user, ref.user)
            assert torch.allclose(h_item, ref.item[torch.as_tensor(items_of[p])])


def test_partial_participation_is_unbiased_over_all_subsets() -> None:
    gen = torch.Generator().manual_seed(0)
    n_parties, s = 5, 2
    grads = [torch.randn(4, 3, generator=gen, dtype=torch.float64) for _ in range(n_parties)]
    full = sum(grads)
    subsets = list(itertools.combinations(range(n_parties), s))
    estimates = [
        partial_participation_aggregate([grads[i] for i in sub], n_parties, s) for sub in subsets
    ]
    assert torch.allclose(sum(estimates) / len(subsets), full)  # exact expectation
    assert not torch.allclose(estimates[0], full)  # but a single round is noisy
    # all parties present: the plain sum
    assert torch.allclose(partial_participation_aggregate(grads, n_parties), full)


def test_item_ratio_form_equals_default_for_equal_parties_and_is_biased_otherwise() -> None:
    gen = torch.Generator().manual_seed(1)
    n_parties, s = 4, 2
    grads = [torch.randn(6, generator=gen, dtype=torch.float64) for _ in range(n_parties)]
    sub = [0, 2]
    equal = partial_participation_aggregate(
        [grads[i] for i in sub], n_parties, party_items=[10, 10], total_items=40
    )
    assert torch.allclose(equal, partial_participation_aggregate([grads[i] for i in sub], 4))
    items = [5, 10, 20, 40]
    subsets = list(itertools.combinations(range(n_parties), s))
    mean = sum(
        partial_participation_aggregate(
            [grads[i] for i in c], n_parties, party_items=[items[i] for i in c], total_items=75
        )
        for c in subsets
    ) / len(subsets)
    assert not torch.allclose(mean, sum(grads))


def test_bad_input_raises_value_error() -> None:
    _, eu, ei, ue, ve, _ = _graph()
    g = [torch.zeros(3)]
    with pytest.raises(ValueError, match="no gradients"):
        partial_participation_aggregate([], 3)
    with pytest.raises(ValueError, match="n_participating"):
        partial_participation_aggregate(g, 3, 2)
    with pytest.raises(ValueError, match="same shape"):
        partial_participation_aggregate([torch.zeros(3), torch.zeros(4)], 3)
    with pytest.raises(ValueError, match="only 1 parties"):
        partial_participation_aggregate(g * 2, 1)
    with pytest.raises(ValueError, match="together"):
        partial_participation_aggregate(g, 3, party_items=[4])
    with pytest.raises(ValueError, match="item ids"):
        gcn_party_aggregate(ue, ve[:5], eu, ei, n_total_items=N_ITEMS)
    with pytest.raises(ValueError, match="equal length"):
        gcn_party_aggregate(ue, ve, eu, ei[:-1], n_total_items=N_ITEMS)
    with pytest.raises(ValueError, match="width"):
        ggnn_party_aggregate(ue, ve[:, :2], eu, ei, n_total_items=N_ITEMS)
    with pytest.raises(ValueError, match="total items"):
        gcn_party_aggregate(ue, ve, eu, ei, n_total_items=10)
    with pytest.raises(ValueError, match="user_degree"):
        gcn_party_aggregate(ue, ve, eu, ei, n_total_items=N_ITEMS, user_degree=torch.ones(3))
