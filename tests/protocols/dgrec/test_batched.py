"""DGREC's batched stage 2 (protocols/dgrec/batched.py): B users in one pass give each user what its
own model gives it alone — per-user copies (the protocol) and one shared copy (central HyperGNN)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from protocols.dgrec.batched import (
    HypergraphBatch,
    encode_batch,
    loss_batch,
    score_batch,
    shared_parameters,
    stacked_parameters,
)
from protocols.dgrec.model import DGRECUserModel, build_user_hypergraph

N_ITEMS, N_TAGS, DIM, N_INT, HIDDEN = 50, 7, 8, 3, 16


def catalogue() -> sp.csr_matrix:
    rng = np.random.default_rng(1)
    tags = (rng.random((N_ITEMS, N_TAGS)) < 0.3).astype(np.float32)
    tags[np.arange(N_ITEMS), np.arange(N_ITEMS) % N_TAGS] = 1.0
    return sp.csr_matrix(tags)


def users(n: int, seed: int = 0):
    """n users of different sizes: (hypergraph, positives, negatives)."""
    rng = np.random.default_rng(seed)
    out = []
    for b in range(n):
        own = rng.choice(N_ITEMS, size=3 + 2 * b, replace=False)
        public = rng.choice(N_ITEMS, size=4, replace=False)
        graph = build_user_hypergraph(own, [public], catalogue())
        pos = rng.choice(own, size=5)
        neg = rng.choice(np.setdiff1d(np.arange(N_ITEMS), own), size=5)
        out.append((graph, pos, neg))
    return out


def models(n: int, **flags) -> list[DGRECUserModel]:
    out = []
    for b in range(n):  # different parameters per user
        torch.manual_seed(b)
        out.append(DGRECUserModel(N_ITEMS, N_TAGS, DIM, N_INT, HIDDEN, **flags))
    return out


FLAGS = [
    {},
    {"use_bipartite": True},
    {"use_hypergraph": False},
    {"interest_attention": False},
    {"scorer": "dot"},
]


@pytest.mark.parametrize("flags", FLAGS)
def test_stacked_copies_give_each_user_its_own_loss_and_gradient(flags) -> None:
    world, ms = users(4), models(4, **flags)
    params = stacked_parameters(ms)
    graphs = HypergraphBatch.collate([w[0] for w in world], N_TAGS, N_ITEMS)
    pos = torch.as_tensor(np.stack([w[1] for w in world]))
    neg = torch.as_tensor(np.stack([w[2] for w in world]))
    total, parts = loss_batch(ms[0], params, graphs, pos, neg, reduction="sum")
    total.sum().backward()
    for b, (m, ((nodes, inc), p, n)) in enumerate(zip(ms, world)):
        alone, alone_parts = m.loss(p, n, nodes, inc, reduction="sum")
        alone.backward()
        assert float(total[b]) == pytest.approx(float(alone), rel=1e-5)
        assert float(parts["pearson"][b]) == pytest.approx(
            alone_parts["pearson"], rel=1e-4, abs=1e-6
        )
        for name, param in m.named_parameters():
            assert torch.allclose(params[name].grad[b], param.grad, atol=1e-6, rtol=1e-4), name


def test_shared_copy_sums_the_users_gradients() -> None:
    world = users(3)
    shared = models(1)[0]
    graphs = HypergraphBatch.collate([w[0] for w in world], N_TAGS, N_ITEMS)
    pos = torch.as_tensor(np.stack([w[1] for w in world]))
    neg = torch.as_tensor(np.stack([w[2] for w in world]))
    total, _ = loss_batch(shared, shared_parameters(shared), graphs, pos, neg)
    total.sum().backward()
    batched = {n: p.grad.clone() for n, p in shared.named_parameters()}
    expected = {n: torch.zeros_like(p) for n, p in shared.named_parameters()}
    for (nodes, inc), p, n in world:
        shared.zero_grad()
        shared.loss(p, n, nodes, inc)[0].backward()
        for name, param in shared.named_parameters():
            expected[name] += param.grad
    for name in batched:
        assert torch.allclose(batched[name], expected[name], atol=1e-6, rtol=1e-4), name


def test_encoding_and_scores_match_one_user_at_a_time() -> None:
    world, ms = users(3), models(3)
    params = stacked_parameters(ms)
    graphs = HypergraphBatch.collate([w[0] for w in world], N_TAGS, N_ITEMS)
    enc = encode_batch(ms[0], params, graphs)
    all_items = torch.arange(N_ITEMS).expand(3, -1)
    scores = score_batch(ms[0], params, enc.e_u, all_items)
    for b, (m, ((nodes, inc), _, _)) in enumerate(zip(ms, world)):
        alone = m.encode(nodes, inc)
        assert torch.allclose(enc.e_u[b], alone.e_u, atol=1e-6)
        assert torch.allclose(enc.attention[b], alone.attention, atol=1e-6)
        rows = graphs.user_of_node == b
        assert torch.allclose(enc.assignment[rows], alone.assignment, atol=1e-6)
        assert torch.allclose(scores[b], m.score(alone.e_u, np.arange(N_ITEMS)), atol=1e-5)


def test_bad_batches_are_named() -> None:
    model = models(1)[0]
    (nodes, inc), p, n = users(1)[0]
    with pytest.raises(ValueError, match="at least one user"):
        HypergraphBatch.collate([], N_TAGS, N_ITEMS)
    with pytest.raises(ValueError, match="lie in"):
        HypergraphBatch.collate([(np.array([N_ITEMS]), inc[:1])], N_TAGS, N_ITEMS)
    graphs = HypergraphBatch.collate([(nodes, inc)], N_TAGS, N_ITEMS)
    params = shared_parameters(model)
    with pytest.raises(ValueError, match="pos_items"):
        loss_batch(model, params, graphs, torch.as_tensor(p), torch.as_tensor(n))
    with pytest.raises(ValueError, match="pair up"):
        loss_batch(model, params, graphs, torch.as_tensor(p[None]), torch.as_tensor(n[None, :3]))
