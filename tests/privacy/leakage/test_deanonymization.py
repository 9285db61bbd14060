"""The de-anonymization attack (privacy/leakage/deanonymization.py) and its VerFedGNN set-up
(protocols/verfedgnn/deanonymization.py): the subset search against brute force, exact matching of
individual embeddings, the micro scores, and the ordering FedPerGNN-style ≫ VerFedGNN."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from privacy.leakage.deanonymization import (
    choose_adversarial_items,
    match_aggregates,
    match_neighbour_embeddings,
    score,
)
from privacy.projection import GaussianProjection, project, reconstruct
from protocols.verfedgnn.aggregation import gcn_party_aggregate
from protocols.verfedgnn.deanonymization import items_by_user, simulate, with_adversaries


def _world(n_users: int, n_items: int, seed: int, lo: int = 1, hi: int = 6):
    """Random victim graph: each user rates lo..hi−1 distinct items."""
    rng = np.random.default_rng(seed)
    eu, ei = [], []
    for u in range(n_users):
        items = rng.choice(n_items, size=int(rng.integers(lo, hi)), replace=False)
        eu += [u] * len(items)
        ei += list(items)
    emb = torch.randn(n_items, 6, generator=torch.Generator().manual_seed(seed)) * 0.1
    return emb, np.array(eu, dtype=np.int64), np.array(ei, dtype=np.int64)


def test_choose_adversarial_items_and_bad_inputs():
    rng = np.random.default_rng(0)
    items = choose_adversarial_items(50, 0.3, rng)
    assert len(items) == 15 and len(np.unique(items)) == 15
    assert items.min() >= 0 and items.max() < 50 and np.all(np.diff(items) > 0)
    assert len(choose_adversarial_items(3, 0.01, rng)) == 1  # at least one
    with pytest.raises(ValueError, match="p_ad"):
        choose_adversarial_items(10, 0.0, rng)
    with pytest.raises(ValueError, match="signature_items"):
        match_aggregates(np.zeros((2, 3)), np.zeros((4, 3)), np.arange(3))
    with pytest.raises(ValueError, match="width"):
        match_aggregates(np.zeros((2, 3)), np.zeros((4, 2)), np.arange(4))
    with pytest.raises(ValueError, match="NaN"):
        match_aggregates(np.full((2, 3), np.nan), np.zeros((4, 3)), np.arange(4))
    with pytest.raises(ValueError, match="outside"):
        score([np.array([5])], [np.array([1])], n_items=5)


@pytest.mark.parametrize("power", [0.0, 0.5, 1.0])
def test_subset_search_equals_brute_force(power):
    """With a beam holding every partial subset, eq. (I.1) is solved exactly."""
    gen = torch.Generator().manual_seed(1)
    sig = torch.randn(7, 4, generator=gen, dtype=torch.float64)
    targets = torch.randn(12, 4, generator=gen, dtype=torch.float64)
    labels = np.arange(100, 107)
    got = match_aggregates(targets, sig, labels, max_items=3, degree_power=power, beam=64)
    for x, found in zip(targets, got):
        best, best_set = np.inf, None
        for c in (1, 2, 3):
            for subset in itertools.combinations(range(7), c):
                d = float((x - sig[list(subset)].sum(0) * c**-power).abs().sum())
                if d < best:
                    best, best_set = d, subset
        assert found.tolist() == sorted(labels[list(best_set)].tolist())


def test_exact_gcn_aggregates_are_fully_deanonymized():
    """Without projection, a user whose ≤ 3 items all have an adversarial user is found
    exactly from X[u] = N_u^(−½) Σ X[a_v] (the GCN normalisation)."""
    emb, eu, ei = _world(30, 12, seed=2, lo=1, hi=4)
    adv = np.arange(12)  # p_ad = 1
    eu2, ei2, adv_users = with_adversaries(eu, ei, 30, adv)
    x = gcn_party_aggregate(torch.zeros(30 + 12, 6), emb, eu2, ei2, n_total_items=48).double()
    truth = items_by_user(eu, ei, np.arange(30))
    inferred = match_aggregates(x[:30], x[adv_users], adv, max_items=3, beam=64)
    assert all(np.array_equal(a, b) for a, b in zip(inferred, truth))
    assert score(inferred, truth, 12).f1 == 1.0


def test_individual_embeddings_match_exactly_and_only_covered_items():
    emb, eu, ei = _world(40, 30, seed=3)
    adv = np.arange(0, 30, 2)  # every other item has an adversarial user
    truth = items_by_user(eu, ei, np.arange(40))
    neighbours = [emb[t] for t in truth]
    inferred = match_neighbour_embeddings(neighbours, emb[adv], adv)
    for t, got in zip(truth, inferred):
        assert np.array_equal(got, t[np.isin(t, adv)])
    s = score(inferred, truth, 30)
    covered = sum(int(np.isin(t, adv).sum()) for t in truth)
    assert s.precision == 1.0
    assert s.recall == pytest.approx(covered / sum(len(t) for t in truth))
    assert s.n_inferred == covered


def test_scores_are_micro_averaged():
    truth = [np.array([0, 1]), np.array([2])]
    s = score([np.array([0, 3]), np.array([], dtype=np.int64)], truth, n_items=4)
    assert (s.precision, s.recall) == (0.5, pytest.approx(1 / 3))
    assert s.f1 == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert score(truth, truth, 4).f1 == 1.0


def test_ordering_fedpergnn_style_far_above_verfedgnn():
    """Paper Table 3's ordering on a synthetic victim (200 users, 120 items): individual
    embeddings give precision 1 and recall ≈ p_ad; the projected aggregate stays near
    chance (|Ŝ| ≤ 3 guesses among ~p_ad·120 candidates)."""
    emb, eu, ei = _world(200, 120, seed=4, lo=2, hi=9)
    for p_ad in (0.2, 0.5, 0.8):
        r = simulate(emb, eu, ei, 200, n_total_items=480, p_ad=p_ad, seed=5)
        fed, ver = r["fedpergnn_style"], r["verfedgnn"]
        assert fed.precision == 1.0
        assert abs(fed.recall - p_ad) < 0.1  # covered share of true items (binomial, n≈1000)
        assert ver.f1 < 0.1
        assert fed.f1 > 4 * ver.f1
        # the aggregate alone (no projection) leaks more than the projected one
        assert r["verfedgnn_unprojected"].f1 > ver.f1


def test_projected_attack_fails_by_noise_not_by_search():
    """Under projection the search still finds subsets at least as close (eq. I.1) as the true
    ones: the attack fails because X̂ = ΦᵀΦX is far from X, not because the search is weak."""
    emb, eu, ei = _world(120, 80, seed=6, lo=1, hi=4)
    adv = np.arange(80)  # p_ad = 1: every true set is a candidate
    eu2, ei2, adv_users = with_adversaries(eu, ei, 120, adv)
    n = 120 + 80
    x = gcn_party_aggregate(torch.zeros(n, 6), emb, eu2, ei2, n_total_items=320).double()
    phi = GaussianProjection(n // 5, n, 7)
    x_hat = reconstruct(phi, project(phi, x))
    truth = items_by_user(eu, ei, np.arange(120))
    inferred = match_aggregates(x_hat[:120], x_hat[adv_users], adv, beam=32)

    def dist(u, items):
        rows = x_hat[adv_users[np.asarray(items)]]
        return float((x_hat[u] - rows.sum(0) * len(items) ** -0.5).abs().sum())

    assert all(dist(u, s) <= dist(u, t) + 1e-12 for u, (s, t) in enumerate(zip(inferred, truth)))
    assert score(inferred, truth, 80).f1 < 0.2
