"""The synthetic generator: deterministic, complete, and with the signal protocols rely on."""

from __future__ import annotations

import numpy as np
import pytest

from data.registry import load_dataset
from data.synthetic import SyntheticWorld, synthetic, synthetic_world


@pytest.fixture(scope="module")
def world() -> SyntheticWorld:
    return synthetic_world(seed=0)


def _recall_at(scores: np.ndarray, train: np.ndarray, test: np.ndarray, k: int) -> float:
    """Mean over users with test items of |top-k ∩ test| / min(k, |test|), train items excluded."""
    scores = np.where(train, -np.inf, scores)
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    hits = np.take_along_axis(test, top, axis=1).sum(axis=1)
    n_test = test.sum(axis=1)
    has = n_test > 0
    return float((hits[has] / np.minimum(n_test[has], k)).mean())


def test_deterministic_for_a_seed():
    a, b, c = synthetic(seed=5), synthetic(seed=5), synthetic(seed=6)
    for field in ("user", "item", "rating", "timestamp"):
        assert np.array_equal(getattr(a.train, field), getattr(b.train, field))
        assert np.array_equal(getattr(a.test, field), getattr(b.test, field))
    assert np.array_equal(a.user_links, b.user_links)
    assert (a.item_tags != b.item_tags).nnz == 0
    assert not np.array_equal(a.train.item[:100], c.train.item[:100])


def test_shapes_and_every_field(world):
    d = world.dataset
    assert (d.n_users, d.n_items) == (300, 500)
    assert d.has_ratings and d.train.timestamp is not None and d.test.timestamp is not None
    assert set(np.unique(d.train.rating)) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert d.item_tags.shape == (500, 12) and len(d.tag_names) == 12
    tags_per_item = np.diff(d.item_tags.indptr)
    assert tags_per_item.min() >= 1 and tags_per_item.max() <= 3
    assert set(d.user_features) == {"age", "gender", "occupation"}
    assert d.user_features["age"].dtype == np.float32 and d.user_features["age"].shape == (300,)
    for name, card in d.feature_cardinality.items():
        values = d.user_features[name]
        assert d.feature_kinds[name] == "categorical" and values.dtype == np.int64
        assert values.min() >= 0 and values.max() < card and len(np.unique(values)) == card
    assert d.user_links.shape[1] == 2 and 3 * 300 < len(d.user_links) < 8 * 300
    assert (d.user_links[:, 0] != d.user_links[:, 1]).all()
    per_user = np.bincount(np.concatenate([d.train.user, d.test.user]), minlength=300)
    assert per_user.min() >= 2 and 20 < per_user.mean() < 40
    assert world.user_taste.shape == (300, 8) and world.item_taste.shape == (500, 8)


def test_tags_come_from_the_item_cluster(world):
    d = world.dataset
    n_clusters = d.meta["clusters"]
    rows, cols = d.item_tags.nonzero()
    assert np.array_equal(cols % n_clusters, world.item_cluster[rows])


def test_true_taste_dot_product_beats_popularity(world):
    d = world.dataset
    train = d.train.csr(d.n_users, d.n_items).toarray() > 0
    test = d.test.csr(d.n_users, d.n_items).toarray() > 0
    popularity = np.broadcast_to(train.sum(axis=0).astype(float), train.shape)
    dot = world.user_taste @ world.item_taste.T
    recall_dot = _recall_at(dot, train, test, 10)
    recall_pop = _recall_at(popularity, train, test, 10)
    assert recall_dot > 2 * recall_pop
    random_scores = np.random.default_rng(0).random(train.shape)
    assert recall_pop > _recall_at(random_scores, train, test, 10)  # popularity is real signal too


def test_ratings_follow_affinity(world):
    d = world.dataset
    affinity = np.einsum("ed,ed->e", world.user_taste[d.train.user], world.item_taste[d.train.item])
    assert np.corrcoef(affinity, d.train.rating)[0, 1] > 0.6


def test_consecutive_items_are_close_in_taste(world):
    d = world.dataset
    inter = d.train
    order = np.lexsort((inter.timestamp, inter.user))
    user, item, stamp = inter.user[order], inter.item[order], inter.timestamp[order]
    same = user[1:] == user[:-1]
    assert (np.diff(stamp)[same] > 0).all()  # timestamps increase along each user's sequence
    unit = world.item_taste / np.linalg.norm(world.item_taste, axis=1, keepdims=True)
    consecutive = np.einsum("ed,ed->e", unit[item[1:]], unit[item[:-1]])[same].mean()
    shuffled_order = np.lexsort((np.random.default_rng(1).random(len(user)), user))
    shuffled = item[shuffled_order]
    baseline = np.einsum("ed,ed->e", unit[shuffled[1:]], unit[shuffled[:-1]])[same].mean()
    assert consecutive > baseline + 0.1


def test_social_links_are_homophilous(world):
    links = world.dataset.user_links
    unit = world.user_taste / np.linalg.norm(world.user_taste, axis=1, keepdims=True)
    linked = np.einsum("ed,ed->e", unit[links[:, 0]], unit[links[:, 1]]).mean()
    rng = np.random.default_rng(2)
    a, b = rng.integers(0, 300, 20_000), rng.integers(0, 300, 20_000)
    assert linked > np.einsum("ed,ed->e", unit[a], unit[b]).mean() + 0.3


def test_user_features_correlate_with_taste(world):
    d = world.dataset
    design = np.hstack([world.user_taste, np.ones((300, 1))])
    age = d.user_features["age"]
    fitted = design @ np.linalg.lstsq(design, age, rcond=None)[0]
    r_squared = 1 - ((age - fitted) ** 2).sum() / ((age - age.mean()) ** 2).sum()
    assert r_squared > 0.4
    gender = d.user_features["gender"].astype(float)
    fitted = design @ np.linalg.lstsq(design, gender, rcond=None)[0]
    assert ((fitted > 0.5) == (gender > 0.5)).mean() > 0.65


def test_load_dataset_synthetic_matches_and_accepts_options():
    direct = synthetic(n_users=120, n_items=200, seed=3)
    loaded = load_dataset("synthetic", seed=3, n_users=120, n_items=200)
    assert np.array_equal(direct.train.item, loaded.train.item)
    assert np.array_equal(direct.test.user, loaded.test.user)
    temporal = load_dataset("synthetic", split="temporal", n_users=120, n_items=200)
    latest_train = np.full(120, -1)
    np.maximum.at(latest_train, temporal.train.user, temporal.train.timestamp)
    assert (temporal.test.timestamp > latest_train[temporal.test.user]).all()
    implicit = load_dataset(
        "synthetic", implicit=True, n_users=120, n_items=200, min_item_interactions=5
    )
    assert implicit.train.rating is None and implicit.n_items <= 200
    with pytest.raises(TypeError):
        load_dataset("synthetic", n_user=10)
    with pytest.raises(ValueError, match="n_items"):
        synthetic(n_items=1)


@pytest.mark.slow
def test_large_world():
    """Generation time: ``python -m benchmarks.data_loading``."""
    d = synthetic(n_users=10_000, n_items=5_000)
    assert d.n_users == 10_000 and len(d.train) > 150_000
