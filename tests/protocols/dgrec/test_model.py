"""DGREC per-user local model: hypergraph operator, shapes, gradients, ablations, learning; the
DLGNN baseline's ego-graph LightGCN."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from torch_geometric.nn import HypergraphConv

from protocols.dgrec.model import (
    DGRECUserModel,
    DLGNNUserModel,
    build_user_hypergraph,
    hyperedge_index,
    hypergraph_propagate,
    pearson_interest_loss,
)

N_ITEMS, N_TAGS, DIM, N_INT, HIDDEN = 40, 6, 8, 3, 16


def tiny_catalogue(seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    tags = (rng.random((N_ITEMS, N_TAGS)) < 0.3).astype(np.float32)
    tags[np.arange(N_ITEMS), np.arange(N_ITEMS) % N_TAGS] = 1.0  # every item has a tag
    return sp.csr_matrix(tags)


def make_model(**flags) -> DGRECUserModel:
    torch.manual_seed(0)
    return DGRECUserModel(N_ITEMS, N_TAGS, DIM, N_INT, HIDDEN, **flags)


def user_graph() -> tuple[np.ndarray, sp.csr_matrix]:
    return build_user_hypergraph(
        np.array([3, 1, 7, 12]), [np.array([7, 20]), np.array([25, 1, 33])], tiny_catalogue()
    )


def test_build_user_hypergraph_takes_the_union_and_the_tag_rows() -> None:
    tags = tiny_catalogue()
    nodes, inc = build_user_hypergraph(
        np.array([5, 2]), [np.array([9, 2]), np.array([], dtype=np.int64)], tags
    )
    assert nodes.tolist() == [2, 5, 9]
    assert inc.shape == (3, N_TAGS)
    assert np.array_equal(inc.toarray(), tags[[2, 5, 9]].toarray())
    with pytest.raises(ValueError, match="empty"):
        build_user_hypergraph(np.array([], dtype=np.int64), [], tags)
    with pytest.raises(ValueError, match="item ids"):
        build_user_hypergraph(np.array([N_ITEMS]), [], tags)


def test_hypergraph_operator_matches_hand_built_example() -> None:
    # items 0,1,2; tag 0 = {0, 1}, tag 1 = {1, 2}: D_v = (1, 2, 1), D_t = (2, 2)
    inc = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    r = 1 / math.sqrt(2)
    expected = torch.tensor([[0.5, 0.5 * r, 0.0], [0.5 * r, 0.5, 0.5 * r], [0.0, 0.5 * r, 0.5]])
    op = hypergraph_propagate(torch.eye(3), hyperedge_index(inc, 3, 2), 2)
    assert torch.allclose(op, expected, atol=1e-6)
    # same operator from a scipy incidence and a torch sparse one
    assert torch.allclose(
        hypergraph_propagate(torch.eye(3), hyperedge_index(sp.csr_matrix(inc.numpy()), 3, 2), 2),
        expected,
    )
    assert torch.allclose(
        hypergraph_propagate(torch.eye(3), hyperedge_index(inc.to_sparse(), 3, 2), 2), expected
    )


def test_operator_is_pyg_hypergraphconv_with_symmetric_normalisation() -> None:
    nodes, inc = user_graph()
    idx = hyperedge_index(inc, len(nodes), N_TAGS)
    x = torch.randn(len(nodes), 5, generator=torch.Generator().manual_seed(1))
    conv = HypergraphConv(5, 5, bias=False)
    with torch.no_grad():
        conv.lin.weight.copy_(torch.eye(5))
    dv = torch.bincount(idx[0], minlength=len(nodes)).float()
    pyg = dv.sqrt().unsqueeze(1) * conv(x / dv.sqrt().unsqueeze(1), idx, num_edges=N_TAGS)
    assert torch.allclose(hypergraph_propagate(x, idx, N_TAGS), pyg, atol=1e-5)


def test_shapes_and_invariants() -> None:
    model = make_model()
    nodes, inc = user_graph()
    enc = model.encode(nodes, inc)
    m = len(nodes)
    assert enc.e_u.shape == (DIM,)
    assert enc.interests.shape == (N_INT, DIM) and enc.interest_adjacency.shape == (N_INT, N_INT)
    assert enc.assignment.shape == (m, N_INT) and enc.item_repr.shape == (m, DIM)
    assert torch.allclose(enc.assignment.sum(dim=1), torch.ones(m))
    assert torch.allclose(enc.attention.sum(), torch.tensor(1.0))
    assert torch.allclose(
        enc.interest_adjacency, enc.interest_adjacency.t(), atol=1e-6
    )  # op symmetric
    assert torch.allclose(model(nodes, inc), enc.e_u)
    assert model.score(enc.e_u, np.array([0, 5, 39])).shape == (3,)
    # e_u is the attention-weighted mix of the interests
    assert torch.allclose(enc.e_u, enc.attention @ enc.interests)


def test_gradients_reach_every_parameter() -> None:
    for flags in ({}, {"use_bipartite": True}):
        model = make_model(**flags)
        nodes, inc = user_graph()
        total, parts = model.loss(np.array([3, 7, 12]), np.array([30, 31, 32]), nodes, inc)
        total.backward()
        for name, param in model.named_parameters():
            assert param.grad is not None and param.grad.abs().sum() > 0, name
        assert parts["total"] == pytest.approx(float(total.detach()))
        assert set(parts) == {"bpr", "pearson", "l2", "total"}


def test_ablation_switches_change_the_computation() -> None:
    nodes, inc = user_graph()
    base = make_model().encode(nodes, inc)
    flat = make_model(use_hypergraph=False).encode(nodes, inc)
    bip = make_model(use_bipartite=True)
    no_att = make_model(interest_attention=False).encode(nodes, inc)
    assert not torch.allclose(base.e_u, flat.e_u)
    assert torch.allclose(
        flat.item_repr, make_model().w1(make_model().item_emb(torch.as_tensor(nodes)))
    )
    assert bip.tag_emb is not None and make_model().tag_emb is None
    assert not torch.allclose(base.e_u, bip.encode(nodes, inc).e_u)
    assert torch.allclose(no_att.e_u, no_att.interests.mean(dim=0), atol=1e-6)
    assert not torch.allclose(base.e_u, no_att.e_u)
    pos, neg = np.array([3, 7]), np.array([30, 31])
    _, with_p = make_model().loss(pos, neg, nodes, inc)
    total_np, without_p = make_model(pearson=False).loss(pos, neg, nodes, inc)
    assert with_p["pearson"] > 0 and without_p["pearson"] == 0.0
    assert with_p["total"] > without_p["total"]


def test_pearson_loss_by_hand() -> None:
    a = torch.tensor(
        [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [1.0, 3.0, 2.0]]
    )  # ρ01 = −1, ρ02 = ρ12 = 0.5
    assert float(pearson_interest_loss(a)) == pytest.approx(2.0, abs=1e-5)
    assert float(pearson_interest_loss(a[:1])) == 0.0


@pytest.fixture
def one_torch_thread():
    """Tiny tensors: intra-op threads only add contention on a shared machine (20× slower here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.usefixtures("one_torch_thread")
def test_training_separates_positives_from_negatives() -> None:
    tags = tiny_catalogue(3)
    positives = np.flatnonzero(tags[:, 0].toarray().ravel() > 0)[:8]
    negatives = np.setdiff1d(np.arange(N_ITEMS), positives)
    nodes, inc = build_user_hypergraph(positives, [negatives[:6]], tags)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    rng = np.random.default_rng(0)

    def auc() -> float:
        with torch.no_grad():
            e_u = model(nodes, inc)
            sp_, sn = model.score(e_u, positives), model.score(e_u, negatives)
        return float((sp_[:, None] > sn[None, :]).float().mean())

    before = auc()
    first_bpr = None
    for _ in range(300):
        pos = rng.choice(positives, 16)
        neg = rng.choice(negatives, 16)
        total, parts = model.loss(pos, neg, nodes, inc)
        first_bpr = parts["bpr"] if first_bpr is None else first_bpr
        opt.zero_grad()
        total.backward()
        opt.step()
    after = auc()
    assert after > 0.95 and after > before
    assert parts["bpr"] < 0.5 * first_bpr


def test_bad_input_gives_clear_errors() -> None:
    model = make_model()
    nodes, inc = user_graph()
    with pytest.raises(ValueError, match="incidence"):
        model(nodes, inc[:, :3])
    with pytest.raises(ValueError, match="node_item_ids"):
        model(np.array([0, N_ITEMS]), sp.csr_matrix((2, N_TAGS)))
    with pytest.raises(ValueError, match="empty"):
        model(np.array([], dtype=np.int64), sp.csr_matrix((0, N_TAGS)))
    with pytest.raises(ValueError, match="pair up"):
        model.loss(np.array([1, 2]), np.array([3]), nodes, inc)
    with pytest.raises(ValueError, match="e_u"):
        model.score(torch.zeros(DIM + 1), np.array([1]))
    with pytest.raises(ValueError, match="dim"):
        DGRECUserModel(N_ITEMS, N_TAGS, 0, N_INT, HIDDEN)


def test_dlgnn_ego_graph_lightgcn_by_hand() -> None:
    torch.manual_seed(0)
    model = DLGNNUserModel(N_ITEMS, DIM, layers=2)
    own = np.array([2, 5, 9, 30])
    h_u = model(own)
    # star graph u – I_u: x_u^1 = Σ e_i/√n, x_u^2 = e_u, h_u = (e_u + x_u^1 + x_u^2)/3
    e_i = model.item_emb.weight[torch.from_numpy(own)]
    expected = (2 * model.user_emb + e_i.sum(0) / math.sqrt(len(own))) / 3
    assert torch.allclose(h_u, expected, atol=1e-6)
    assert torch.allclose(model.score(h_u, np.array([7])), model.item_emb.weight[7] @ h_u)
    assert model.private_parameter_names == ("user_emb",)
    assert DGRECUserModel.private_parameter_names == ()
    with pytest.raises(ValueError, match="own_items"):
        model(np.array([N_ITEMS]))
    with pytest.raises(ValueError, match="reduction"):
        model.loss(np.array([1]), np.array([3]), own, reduction="max")


@pytest.mark.usefixtures("one_torch_thread")
def test_dlgnn_training_separates_positives_from_negatives() -> None:
    torch.manual_seed(0)
    model = DLGNNUserModel(N_ITEMS, DIM)
    positives, negatives = np.arange(0, 8), np.arange(8, N_ITEMS)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)

    def auc() -> float:
        with torch.no_grad():
            h_u = model(positives)
            sp_, sn = model.score(h_u, positives), model.score(h_u, negatives)
        return float((sp_[:, None] > sn[None, :]).float().mean())

    before = auc()
    for _ in range(200):
        total, parts = model.loss(rng.choice(positives, 16), rng.choice(negatives, 16), positives)
        opt.zero_grad()
        total.backward()
        opt.step()
    assert auc() > 0.95 and auc() > before
    assert parts["bpr"] < 0.2


def big_user(seed: int = 5, n_items: int = 300, n_tags: int = 12):
    """A user hypergraph as large as an ml-100k one (hundreds of items, few tags): the operator
    averages over big hyperedges, so op E W2 is tiny at the initialisation."""
    rng = np.random.default_rng(seed)
    tags = (rng.random((n_items, n_tags)) < 0.15).astype(np.float32)
    tags[np.arange(n_items), rng.integers(0, n_tags, n_items)] = 1.0
    nodes, inc = build_user_hypergraph(np.arange(n_items), [], sp.csr_matrix(tags))
    return nodes, inc, rng


@pytest.mark.usefixtures("one_torch_thread")
def test_interest_layer_learns_from_the_initialisation() -> None:
    """The fix (standardised assignment logits, Ā scaled to unit mean row sum) breaks the
    symmetric start: S_u is not uniform, attention is not saturated, W2…W5 get real gradients,
    and a few SGD steps lower the Pearson term — which, without the fix, sits at C(n_i, 2)."""
    nodes, inc, rng = big_user()
    n_int, n_pairs = 6, 15  # C(6, 2)
    results = {}
    for fixed in (True, False):
        torch.manual_seed(0)
        model = DGRECUserModel(
            len(nodes),
            inc.shape[1],
            16,
            n_int,
            32,
            standardise_assignment=fixed,
            normalise_interest_adjacency=fixed,
        )
        enc = model.encode(nodes, inc)
        assign = enc.assignment.detach()
        spread = float((assign.max(dim=1).values - assign.min(dim=1).values).mean())
        pos = torch.as_tensor(rng.choice(len(nodes), 16, replace=False))
        neg = torch.as_tensor(rng.choice(len(nodes), 16, replace=False))
        total, parts = model.loss(pos, neg, nodes, inc, reduction="sum")
        total.backward()
        grads = {
            n: float(model.get_parameter(f"{n}.weight").grad.norm())
            for n in ("w2", "w3", "w4", "w5")
        }
        start = parts["pearson"]
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(15):
            opt.zero_grad()
            total, parts = model.loss(pos, neg, nodes, inc, reduction="sum")
            total.backward()
            opt.step()
        results[fixed] = (
            spread,
            float(enc.attention.detach().max()),
            grads,
            start,
            parts["pearson"],
        )
    spread, top_attention, grads, start, end = results[True]
    assert spread > 0.1 and top_attention < 0.9
    assert min(grads.values()) > 1e-4, grads
    assert end < 0.7 * start < 0.7 * n_pairs
    # without the fix: uniform S_u, identical interests, |corr| = 1, no gradient to W2…W5
    spread, _, grads, start, end = results[False]
    assert spread < 0.01 and start > n_pairs - 0.01 and end > n_pairs - 0.01
    assert max(grads[n] for n in ("w3", "w4", "w5")) < 1e-3


def test_constant_assignment_logits_give_finite_gradients() -> None:
    """Items that all share one tag set (and a single item) give constant logits: the
    standardisation must leave S_u uniform with finite gradients, not 0/0."""
    tags = sp.csr_matrix(np.ones((N_ITEMS, 1), dtype=np.float32))
    for own in (np.array([2, 5, 9]), np.array([4])):
        nodes, inc = build_user_hypergraph(own, [], tags)
        torch.manual_seed(0)
        model = DGRECUserModel(N_ITEMS, 1, DIM, N_INT, HIDDEN)
        total, _ = model.loss(np.array([2, 4]), np.array([30, 31]), nodes, inc)
        total.backward()
        enc = model.encode(nodes, inc)
        assert torch.allclose(enc.assignment, torch.full_like(enc.assignment, 1.0 / N_INT))
        for name, param in model.named_parameters():
            assert param.grad is None or torch.isfinite(param.grad).all(), name
