"""Metrics against hand-computed cases, tie-breaking, exclusion, chunking, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from models.metrics import (
    full_ranking_metrics,
    mae,
    mrr_from_first_hit,
    next_item_metrics,
    own_table_ranking_metrics,
    popularity_scores,
    ranking_metrics,
    recall_from_hits,
    rmse,
    topk_excluding,
)

# Two users, six items.
# user 0: scores 0.9 0.8 0.7 0.6 0.5 0.4, trains on item 0 -> ranking 1 2 3 4 5
#         test {2, 5}: item 2 at rank 2, item 5 at rank 5
# user 1: scores 0.1 0.5 0.5 0.9 0.2 0.5, trains on item 3 -> ties at 0.5 go by index:
#         ranking 1 2 5 4 0; test {5}: item 5 at rank 3
SCORES = torch.tensor(
    [[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], [0.1, 0.5, 0.5, 0.9, 0.2, 0.5]], dtype=torch.float32
)
TRAIN = [np.array([0]), np.array([3])]
TEST = [np.array([2, 5]), np.array([5])]
L3, L4, L6 = 1 / math.log2(3), 1 / math.log2(4), 1 / math.log2(6)


def test_topk_hand_case_excludes_training_and_breaks_ties_by_index():
    top = topk_excluding(SCORES, TRAIN, 5)
    assert top.dtype == torch.int64
    assert top.tolist() == [[1, 2, 3, 4, 5], [1, 2, 5, 4, 0]]


def test_ranking_metrics_hand_case():
    top = topk_excluding(SCORES, TRAIN, 5)
    m = ranking_metrics(top, TEST, ks=(1, 3, 5))
    # k=1: neither user's first item is a test item
    for name in ("recall", "precision", "ndcg", "hit", "mrr"):
        np.testing.assert_allclose(m[f"{name}@1"], [0.0, 0.0])
    # k=3: user 0 hits item 2 at rank 2 (1 of 2 test items); user 1 hits item 5 at rank 3
    np.testing.assert_allclose(m["recall@3"], [1 / 2, 1.0])
    np.testing.assert_allclose(m["precision@3"], [1 / 3, 1 / 3])
    # IDCG over min(3, |test|): user 0 -> 1 + 1/log2(3); user 1 -> 1
    np.testing.assert_allclose(m["ndcg@3"], [L3 / (1 + L3), L4 / 1])
    np.testing.assert_allclose(m["hit@3"], [1.0, 1.0])
    np.testing.assert_allclose(m["mrr@3"], [1 / 2, 1 / 3])
    # k=5: user 0 hits at ranks 2 and 5
    np.testing.assert_allclose(m["recall@5"], [1.0, 1.0])
    np.testing.assert_allclose(m["precision@5"], [2 / 5, 1 / 5])
    np.testing.assert_allclose(m["ndcg@5"], [(L3 + L6) / (1 + L3), L4])
    np.testing.assert_allclose(m["mrr@5"], [1 / 2, 1 / 3])
    assert all(v.dtype == np.float64 and v.shape == (2,) for v in m.values())


def test_perfect_ranking_scores_one():
    m = ranking_metrics(np.array([[4, 1, 0]]), [np.array([1, 4])], ks=(2, 3))
    np.testing.assert_allclose(m["ndcg@2"], [1.0])
    np.testing.assert_allclose(m["ndcg@3"], [1.0])  # IDCG capped at |test| = 2
    np.testing.assert_allclose(m["recall@2"], [1.0])
    np.testing.assert_allclose(m["precision@3"], [2 / 3])


def test_csr_exclusion_equals_list_exclusion():
    csr = sp.csr_matrix((np.ones(2), ([0, 1], [0, 3])), shape=(2, 6))
    assert torch.equal(topk_excluding(SCORES, csr, 4), topk_excluding(SCORES, TRAIN, 4))


def test_excluded_items_never_appear_when_enough_others():
    rng = np.random.default_rng(3)
    scores = torch.from_numpy(rng.standard_normal((50, 40)).astype(np.float32))
    exclude = [rng.choice(40, size=rng.integers(0, 20), replace=False) for _ in range(50)]
    top = topk_excluding(scores, exclude, 10).numpy()
    for row, ex in zip(top, exclude, strict=True):
        assert not set(row) & set(ex.tolist())
        assert len(set(row)) == 10


@pytest.mark.parametrize(
    ("levels", "k"),
    [(4, 8), (4, 25), (12, 5), (50, 8), (None, 8), (None, 25)],
    ids=["heavy-ties", "heavy-ties-k=n", "some-ties", "rare-ties", "continuous", "continuous-k=n"],
)
def test_tie_breaking_matches_a_lexsort_reference(levels, k):
    rng = np.random.default_rng(7 if levels is None else levels)
    if levels is None:
        scores = rng.standard_normal((30, 25)).astype(np.float32)
    else:
        scores = rng.integers(0, levels, size=(30, 25)).astype(np.float32)
    exclude = [rng.choice(25, size=rng.integers(0, 5), replace=False) for _ in range(30)]
    top = topk_excluding(torch.from_numpy(scores), exclude, k).numpy()
    for b in range(30):
        s = scores[b].copy()
        s[exclude[b]] = -np.inf
        reference = np.lexsort((np.arange(25), -s))[:k]  # score desc, then index asc
        np.testing.assert_array_equal(top[b], reference)
    again = topk_excluding(torch.from_numpy(scores), exclude, k).numpy()
    np.testing.assert_array_equal(top, again)


def test_all_equal_scores_give_lowest_indices():
    top = topk_excluding(torch.zeros(3, 10), [np.array([0]), np.array([], dtype=int), [9]], 3)
    assert top.tolist() == [[1, 2, 3], [0, 1, 2], [0, 1, 2]]


def test_topk_does_not_modify_scores():
    scores = SCORES.clone()
    topk_excluding(scores, TRAIN, 2)
    assert torch.equal(scores, SCORES)


def test_chunked_full_ranking_equals_unchunked_and_direct():
    rng = np.random.default_rng(11)
    users = torch.from_numpy(rng.standard_normal((37, 8)).astype(np.float32))
    items = torch.from_numpy(rng.standard_normal((60, 8)).astype(np.float32))
    train = [rng.choice(60, size=rng.integers(0, 10), replace=False) for _ in range(37)]
    test = [rng.choice(60, size=rng.integers(1, 6), replace=False) for _ in range(37)]
    ks = (5, 20)
    small = full_ranking_metrics(users, items, train, test, ks=ks, chunk=4)
    whole = full_ranking_metrics(users, items, train, test, ks=ks, chunk=1000)
    direct = ranking_metrics(topk_excluding(users @ items.T, train, 20), test, ks=ks)
    assert small.keys() == whole.keys() == direct.keys()
    for key in small:
        np.testing.assert_array_equal(small[key], whole[key])
        np.testing.assert_array_equal(small[key], direct[key])
    # numpy embeddings and a CSR training matrix give the same numbers
    csr = sp.csr_matrix(
        (
            np.ones(sum(map(len, train))),
            (np.repeat(np.arange(37), list(map(len, train))), np.concatenate(train)),
        ),
        shape=(37, 60),
    )
    from_numpy = full_ranking_metrics(users.numpy(), items.numpy(), csr, test, ks=ks, chunk=9)
    for key in small:
        np.testing.assert_array_equal(small[key], from_numpy[key])


def test_own_table_ranking_one_broadcast_equals_per_user_copies():
    """Users scoring against one shared item table (one product) or against their own equal
    copies (one product each) get the same metrics as full_ranking_metrics."""
    g = torch.Generator().manual_seed(0)
    users, items = torch.randn(5, 4, generator=g), torch.randn(30, 4, generator=g)
    train = [np.array([u, u + 5]) for u in range(5)]
    test = [np.array([10 + u, 20]) for u in range(5)]
    table = items.numpy()
    shared = own_table_ranking_metrics(users, [table] * 5, train, test, 7)
    copies = own_table_ranking_metrics(users, [table.copy() for _ in range(5)], train, test, 7)
    direct = full_ranking_metrics(users, items, train, test, ks=(7,))
    assert shared.keys() == copies.keys() == direct.keys()
    for name in shared:
        np.testing.assert_allclose(shared[name], copies[name], rtol=1e-12)
        np.testing.assert_array_equal(shared[name], direct[name])


def test_ranking_metrics_errors():
    top = np.array([[0, 1, 2]])
    with pytest.raises(ValueError, match="no test items"):
        ranking_metrics(top, [np.array([], dtype=int)], ks=(3,))
    with pytest.raises(ValueError, match="exceeds"):
        ranking_metrics(top, [np.array([1])], ks=(5,))
    with pytest.raises(ValueError, match="rows"):
        ranking_metrics(top, [np.array([1]), np.array([2])], ks=(3,))
    with pytest.raises(ValueError, match="shape"):
        ranking_metrics(np.array([0, 1, 2]), [np.array([1])], ks=(3,))
    with pytest.raises(ValueError, match="repeats"):
        ranking_metrics(np.array([[0, 1, 0]]), [np.array([1])], ks=(3,))
    with pytest.raises(ValueError, match="positive"):
        ranking_metrics(top, [np.array([1])], ks=(0,))


def test_topk_and_full_ranking_errors():
    with pytest.raises(ValueError, match="NaN"):
        topk_excluding(torch.tensor([[0.1, float("nan")]]), [[]], 1)
    with pytest.raises(ValueError, match="NaN"):
        topk_excluding(torch.tensor([[0.1, 0.3, float("nan"), 0.2]]), [[]], 2)
    with pytest.raises(ValueError, match="k must"):
        topk_excluding(SCORES, TRAIN, 7)
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        topk_excluding(SCORES, [np.array([6]), np.array([0])], 2)
    with pytest.raises(ValueError, match="rows"):
        topk_excluding(SCORES, [np.array([1])], 2)
    with pytest.raises(ValueError, match="sparse shape"):
        topk_excluding(SCORES, sp.csr_matrix((2, 5)), 2)
    with pytest.raises(ValueError, match="shape"):
        topk_excluding(torch.zeros(6), TRAIN, 2)
    with pytest.raises(ValueError, match="embeddings"):
        full_ranking_metrics(torch.zeros(2, 3), torch.zeros(6, 4), TRAIN, TEST, ks=(2,))
    with pytest.raises(ValueError, match="no test items"):
        full_ranking_metrics(torch.zeros(2, 3), torch.zeros(6, 3), TRAIN, [[1], []], ks=(2,))


def test_rmse_and_mae_known_case():
    pred, target = [1.0, 2.0, 3.0], [1.0, 3.0, 5.0]  # errors 0, 1, 2
    assert rmse(pred, target) == pytest.approx(math.sqrt(5 / 3))
    assert mae(torch.tensor(pred), torch.tensor(target)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        rmse([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        mae([], [])


def test_next_item_metrics_hand_case_and_consistency_with_topk():
    # row 0: target 3 scores 0.5; item 1 is higher, item 2 ties with a lower index -> rank 3
    # row 1: target 0 is the best -> rank 1
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.5], [0.8, 0.1, 0.2, 0.3]])
    target = torch.tensor([3, 0])
    m = next_item_metrics(scores, target, ks=(1, 3))
    np.testing.assert_allclose(m["recall@1"], [0.0, 1.0])
    np.testing.assert_allclose(m["mrr@1"], [0.0, 1.0])
    np.testing.assert_allclose(m["recall@3"], [1.0, 1.0])
    np.testing.assert_allclose(m["mrr@3"], [1 / 3, 1.0])

    rng = np.random.default_rng(5)
    s = torch.from_numpy(rng.integers(0, 5, size=(40, 15)).astype(np.float32))
    t = torch.from_numpy(rng.integers(0, 15, size=40))
    m = next_item_metrics(s, t, ks=(5,))
    top = topk_excluding(s, [np.array([], dtype=int)] * 40, 5)
    via_topk = ranking_metrics(top, [np.array([x]) for x in t.tolist()], ks=(5,))
    np.testing.assert_array_equal(m["recall@5"], via_topk["recall@5"])
    np.testing.assert_array_equal(m["mrr@5"], via_topk["mrr@5"])  # one formula for both


def test_recall_and_mrr_formulas():
    np.testing.assert_array_equal(
        recall_from_hits(np.array([0.0, 1.0, 2.0]), np.array([1, 2, 4])), [0, 0.5, 0.5]
    )
    found, first = np.array([False, True, True]), np.array([0, 0, 3])
    np.testing.assert_array_equal(mrr_from_first_hit(found, first), [0.0, 1.0, 0.25])


def test_next_item_metrics_errors():
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        next_item_metrics(torch.zeros(1, 4), torch.tensor([4]))
    with pytest.raises(ValueError, match="shape"):
        next_item_metrics(torch.zeros(2, 4), torch.tensor([1]))
    with pytest.raises(ValueError, match="integers"):
        next_item_metrics(torch.zeros(1, 4), torch.tensor([1.0]))


def test_popularity_scores():
    pop = popularity_scores(np.array([0, 1, 1, 3]), 5)
    assert pop.dtype == torch.float32
    assert pop.tolist() == [1.0, 2.0, 0.0, 1.0, 0.0]
    per_user = popularity_scores([np.array([1, 2]), np.array([2])], 4)
    assert per_user.tolist() == [0.0, 1.0, 2.0, 0.0]
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        popularity_scores(np.array([3]), 3)
    # the baseline ranks popular items first
    top = topk_excluding(pop[None, :], [np.array([1])], 2)
    assert top.tolist() == [[0, 3]]


def test_topk_scores_give_next_item_metrics_of_the_received_lists():
    """Scores built from top-K lists rank each list in order ahead of everything else, so
    next_item_metrics on them is the rank of the target in its list (K when absent)."""
    from models.metrics import topk_scores

    top = np.array([[4, 1, 7], [0, 2, 3]])
    target = torch.tensor([7, 5])
    m = next_item_metrics(topk_scores(top, 8), target, ks=(1, 3))
    np.testing.assert_array_equal(m["recall@3"], [1.0, 0.0])
    np.testing.assert_array_equal(m["mrr@3"], [1.0 / 3.0, 0.0])
    np.testing.assert_array_equal(m["recall@1"], [0.0, 0.0])
    with pytest.raises(ValueError):
        topk_scores(np.array([[8]]), 8)
