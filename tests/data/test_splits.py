"""k-core filter, duplicate handling, per-user splits and partitioners."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data.filters import count_duplicate_pairs, first_of_each_pair, is_in, kcore, unique_sorted
from data.partition import balanced_sizes, partition_items, partition_users
from data.splits import n_test_per_user, random_split, temporal_split
from data.types import Interactions


def random_interactions(
    seed: int, n_users: int = 40, n_items: int = 30, n: int = 400
) -> Interactions:
    """Skewed random interactions; ``timestamp`` holds the row number so rows can be traced."""
    rng = np.random.default_rng(seed)
    user = rng.zipf(1.5, n) % n_users
    item = rng.integers(0, n_items, n)
    return Interactions(
        user.astype(np.int64), item.astype(np.int64), None, np.arange(n, dtype=np.int64)
    )


# ---------------------------------------------------------------- k-core


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), k_user=st.integers(0, 6), k_item=st.integers(0, 6))
def test_kcore_every_kept_user_and_item_has_enough_rows(seed, k_user, k_item):
    inter = random_interactions(seed)
    keep = kcore(inter, k_user, k_item)
    kept = inter.subset(keep)
    if len(kept):
        assert np.bincount(kept.user)[np.unique(kept.user)].min() >= k_user
        assert np.bincount(kept.item)[np.unique(kept.item)].min() >= k_item
    # nothing removable was kept and nothing kept violates: re-running is a fixed point
    assert kcore(kept, k_user, k_item).all()


def test_kcore_is_the_maximal_valid_subset():
    """Brute force over all user and item subsets of a small case."""
    rng = np.random.default_rng(7)
    n_users, n_items = 5, 5
    mask = rng.random((n_users, n_items)) < 0.55
    user, item = np.nonzero(mask)
    inter = Interactions(user.astype(np.int64), item.astype(np.int64))
    for k_user, k_item in [(2, 2), (3, 2), (2, 3), (3, 3)]:
        best: set[int] = set()
        for users in itertools.chain.from_iterable(
            itertools.combinations(range(n_users), r) for r in range(n_users + 1)
        ):
            for items in itertools.chain.from_iterable(
                itertools.combinations(range(n_items), r) for r in range(n_items + 1)
            ):
                rows = np.flatnonzero(np.isin(user, users) & np.isin(item, items))
                ok = all((user[rows] == u).sum() >= k_user for u in users) and all(
                    (item[rows] == i).sum() >= k_item for i in items
                )
                if ok and len(rows) > len(best):
                    best = set(rows.tolist())
        assert set(np.flatnonzero(kcore(inter, k_user, k_item)).tolist()) == best


def test_kcore_rejects_bad_thresholds():
    inter = random_interactions(0)
    with pytest.raises(ValueError, match="min_user"):
        kcore(inter, -1, 0)
    with pytest.raises(ValueError, match="min_item"):
        kcore(inter, 0, 2.5)


def test_duplicates_and_set_helpers():
    inter = Interactions(
        np.array([0, 0, 1, 0, 1]), np.array([3, 3, 3, 4, 3]), None, np.array([9, 5, 1, 2, 0])
    )
    assert count_duplicate_pairs(inter) == 2
    assert first_of_each_pair(inter).tolist() == [False, True, False, True, True]  # earliest stamp
    values = np.array([5, 1, 5, 3, 1])
    assert unique_sorted(values).tolist() == [1, 3, 5]
    assert is_in(np.array([0, 1, 4, 5, 6]), unique_sorted(values)).tolist() == [
        False,
        True,
        False,
        True,
        False,
    ]


# ---------------------------------------------------------------- splits


def test_n_test_rule():
    counts = n_test_per_user(np.array([0, 1, 2, 3, 5, 10]), 0.2)
    assert counts.tolist() == [0, 0, 0, 1, 1, 2]  # floor(0.2 n + 0.5)
    assert n_test_per_user(np.array([1, 2, 4]), 0.9).tolist() == [1, 1, 3]  # keep >= 1 in train


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5])
def test_random_split_fractions_disjoint_union_deterministic(fraction):
    inter = random_interactions(1)
    n_users = 40
    train, test = random_split(inter, n_users, fraction, seed=3)
    rows_train, rows_test = train.timestamp, test.timestamp
    assert not set(rows_train.tolist()) & set(rows_test.tolist())
    assert sorted(np.concatenate([rows_train, rows_test]).tolist()) == list(range(len(inter)))
    per_user = np.bincount(inter.user, minlength=n_users)
    expected = np.floor(fraction * per_user + 0.5)
    expected = np.where(per_user >= 2, np.minimum(expected, per_user - 1), expected)
    assert np.array_equal(np.bincount(test.user, minlength=n_users), expected)
    assert (np.bincount(train.user, minlength=n_users)[per_user >= 2] >= 1).all()
    again_train, _ = random_split(inter, n_users, fraction, seed=3)
    assert np.array_equal(again_train.timestamp, rows_train)
    other_train, _ = random_split(inter, n_users, fraction, seed=4)
    assert not np.array_equal(other_train.timestamp, rows_train)


def test_random_split_is_uniform_within_a_user():
    """Each of a user's 10 rows lands in test with probability 2/10 over seeds."""
    inter = Interactions(np.zeros(10, dtype=np.int64), np.arange(10), None, np.arange(10))
    hits = np.zeros(10)
    for seed in range(400):
        hits[random_split(inter, 1, 0.2, seed)[1].timestamp] += 1
    assert np.allclose(hits / 400, 0.2, atol=0.07)


def test_temporal_split_puts_latest_in_test():
    rng = np.random.default_rng(2)
    inter = random_interactions(2)
    inter.timestamp = rng.permutation(len(inter)).astype(np.int64)
    train, test = temporal_split(inter, 40, 0.3)
    latest_train = np.full(40, -1)
    np.maximum.at(latest_train, train.user, train.timestamp)
    assert (test.timestamp > latest_train[test.user]).all()
    per_user = np.bincount(inter.user, minlength=40)
    assert np.array_equal(np.bincount(test.user, minlength=40), n_test_per_user(per_user, 0.3))
    assert len(train) + len(test) == len(inter)


def test_split_input_errors():
    inter = random_interactions(0)
    with pytest.raises(ValueError, match="test_fraction"):
        random_split(inter, 40, 1.5, 0)
    with pytest.raises(ValueError, match="user ids"):
        random_split(inter, 3, 0.2, 0)
    with pytest.raises(ValueError, match="timestamps"):
        temporal_split(Interactions(inter.user, inter.item), 40, 0.2)


# ---------------------------------------------------------------- partitioners


@pytest.mark.parametrize("n, groups", [(10, 3), (3, 5), (0, 2), (1000, 7)])
def test_partition_users_balanced_contiguous_deterministic(n, groups):
    host = partition_users(n, groups)
    assert host.shape == (n,) and np.array_equal(host, partition_users(n, groups))
    sizes = np.bincount(host, minlength=groups)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1 and len(sizes) == groups
    assert (np.diff(host) >= 0).all()  # contiguous blocks in order
    assert np.array_equal(sizes, balanced_sizes(n, groups))


@pytest.mark.parametrize("n, parties", [(10, 3), (3, 5), (1001, 4)])
def test_partition_items_random_balanced_deterministic(n, parties):
    party = partition_items(n, parties, seed=1)
    assert party.shape == (n,) and np.array_equal(party, partition_items(n, parties, seed=1))
    sizes = np.bincount(party, minlength=parties)
    assert sizes.sum() == n and sizes.max() - sizes.min() <= 1 and party.max() < parties
    if n > 100:
        assert not np.array_equal(party, partition_items(n, parties, seed=2))
        assert not (np.diff(party) >= 0).all()  # not contiguous blocks


def test_partition_errors():
    with pytest.raises(ValueError, match="n_hosts"):
        partition_users(10, 0)
    with pytest.raises(ValueError, match="n_items"):
        partition_items(-1, 2, 0)
