"""Loaders on the real datasets: the counts must match each dataset's SOURCE.md.

Skipped when the shared data directory (``<repo>/../shared/data``) is absent.
"""

from __future__ import annotations

import numpy as np
import pytest

from data.registry import default_data_dir, load_dataset
from data.types import RecDataset

DATA = default_data_dir()
pytestmark = pytest.mark.skipif(
    DATA is None, reason="real datasets absent: <repo>/../shared/data does not exist"
)


def _load(name: str, **kwargs) -> RecDataset:
    """Loading time is measured by ``python -m benchmarks.data_loading``, not asserted here."""
    return load_dataset(name, DATA, **kwargs)


def _check_consistent(d: RecDataset) -> None:
    """Ids in range, dtypes as documented, links only between users with interactions."""
    parts = [d.train, d.test] + ([d.val] if d.val is not None else [])
    for part in parts:
        assert part.user.dtype == np.int64 and part.item.dtype == np.int64
        if len(part):
            assert 0 <= part.user.min() and part.user.max() < d.n_users
            assert 0 <= part.item.min() and part.item.max() < d.n_items
        if part.rating is not None:
            assert part.rating.dtype == np.float32
    if d.user_links is not None:
        active = np.zeros(d.n_users, dtype=bool)
        for part in parts:
            active[part.user] = True
        assert active[d.user_links].all()
        assert (d.user_links[:, 0] != d.user_links[:, 1]).all()
        dropped = sum(v for k, v in d.meta.items() if k.startswith("links_dropped_"))
        assert d.meta["links_kept"] + dropped == d.meta["links_read"]
        assert len(d.user_links) == d.meta["links_kept"]


def _distinct(values: np.ndarray) -> int:
    return len(set(values.tolist()))


def test_ml100k_published_split_and_side_information():
    d = _load("ml-100k")  # auto -> u1
    _check_consistent(d)
    assert (d.n_users, d.n_items) == (943, 1682)
    assert (len(d.train), len(d.test)) == (80_000, 20_000)
    assert d.meta["split_name"] == "u1"
    stamps = np.concatenate([d.train.timestamp, d.test.timestamp])
    assert (stamps.min(), stamps.max()) == (874_724_710, 893_286_638)
    assert set(np.unique(d.train.rating)) == {1.0, 2.0, 3.0, 4.0, 5.0}
    # user features against an independent parse of u.user
    rows = [
        line.split("|") for line in (DATA / "ml-100k" / "u.user").read_text("latin-1").splitlines()
    ]
    rows.sort(key=lambda r: int(r[0]))
    assert np.array_equal(
        d.user_features["age"], np.array([float(r[1]) for r in rows], dtype=np.float32)
    )
    genders = d.meta["feature_values"]["gender"]
    assert [genders[g] for g in d.user_features["gender"]] == [r[2] for r in rows]
    letters = sum(not r[4][0].isdigit() for r in rows)
    assert (d.user_features["zip_prefix"] == 10).sum() == letters > 0
    assert d.feature_cardinality == {"gender": 2, "occupation": 21, "zip_prefix": 11}
    assert d.feature_kinds["age"] == "numeric"
    # genres: 19 flags; Toy Story (item 1) is Animation, Children's, Comedy
    assert d.item_tags.shape == (1682, 19) and len(d.tag_names) == 19
    toy_story = {d.tag_names[j] for j in d.item_tags[0].indices}
    assert toy_story == {"Animation", "Children's", "Comedy"}
    assert d.user_links is None


def test_ml100k_other_splits_and_options():
    ua = _load("ml-100k", split="ua")
    assert (len(ua.train), len(ua.test)) == (90_570, 9_430)
    rnd = _load("ml-100k", split="random", seed=3)
    assert len(rnd.train) + len(rnd.test) == 100_000
    temporal = _load("ml-100k", split="temporal")
    last_train = np.full(temporal.n_users, -1)
    np.maximum.at(last_train, temporal.train.user, temporal.train.timestamp)
    assert (temporal.test.timestamp >= last_train[temporal.test.user]).all()
    core = _load("ml-100k", split="random", min_user_interactions=50, min_item_interactions=50)
    both = (
        np.concatenate([core.train.user, core.test.user]),
        np.concatenate([core.train.item, core.test.item]),
    )
    assert np.bincount(both[0]).min() >= 50 and np.bincount(both[1]).min() >= 50
    assert core.n_users < 943 and core.user_features["age"].shape == (core.n_users,)
    assert core.item_tags.shape[0] == core.n_items
    assert core.meta["kcore"]["users_removed"] == 943 - core.n_users


def test_gowalla_lightgcn_split():
    d = _load("gowalla")
    _check_consistent(d)
    assert (d.n_users, d.n_items) == (29_858, 40_981)
    assert (len(d.train), len(d.test)) == (810_128, 217_242)
    assert d.train.rating is None and d.meta["implicit"]
    assert _distinct(d.train.user) == _distinct(d.test.user) == 29_858  # every user in both
    assert d.meta["user_list_size"] == 29_858 and d.meta["item_list_size"] == 40_981
    # first line of train.txt: user 0 followed by its items
    first = [int(x) for x in (DATA / "gowalla" / "train.txt").open().readline().split()]
    assert sorted(d.train.item[d.train.user == first[0]].tolist()) == sorted(first[1:])


def test_ciao_ratings_categories_trust_and_timestamps():
    d = _load("ciao")
    _check_consistent(d)
    assert (d.n_users, d.n_items) == (7_375, 105_114)
    assert len(d.train) + len(d.test) == 284_086
    assert d.item_tags.shape == (105_114, 28) and d.tag_names[0] == "DVDs"
    assert d.meta["links_read"] == 111_781
    stamps = np.concatenate([d.train.timestamp, d.test.timestamp])
    # 2000-05-30 ... 2011-04-12 (UTC dates of the first/last stamp)
    days = np.array([stamps.min(), stamps.max()]).astype("datetime64[s]").astype("datetime64[D]")
    assert days.tolist() == np.array(["2000-05-30", "2011-04-12"], dtype="datetime64[D]").tolist()
    assert "rating_with_timestamp.mat" in d.meta["files"]
    assert d.meta["duplicate_pairs"] > 0  # kept as in the file and counted


def test_epinions_ratings_categories_trust():
    d = _load("epinions")
    _check_consistent(d)
    assert (d.n_users, d.n_items) == (22_164, 296_277)
    assert len(d.train) + len(d.test) == 922_267
    assert d.item_tags.shape[1] == 27
    assert d.meta["links_read"] == 355_754
    assert d.train.timestamp is None


def test_filmtrust_ratings_and_trust():
    d = _load("filmtrust")
    _check_consistent(d)
    assert (d.n_users, d.n_items) == (1_508, 2_071)
    assert len(d.train) + len(d.test) == 35_497
    ratings = np.concatenate([d.train.rating, d.test.rating])
    assert ratings.min() == 0.5 and ratings.max() == 4.0
    assert d.meta["links_read"] == 1_853
    assert _distinct(d.user_links.ravel()) <= 874


@pytest.mark.parametrize(
    "name, sizes, n_users, n_items, links",
    [
        ("diffnet-yelp", (185_869, 3_497, 18_579), 17_235, 37_378, 143_765),
        ("diffnet-flickr", (282_444, 13_006, 32_365), 8_252, 82_120, 187_273),
    ],
)
def test_diffnet_train_val_test_and_links(name, sizes, n_users, n_items, links):
    d = _load(name)
    _check_consistent(d)
    assert (len(d.train), len(d.val), len(d.test)) == sizes
    assert (d.n_users, d.n_items) == (n_users, n_items)
    assert d.meta["links_read"] == links
    assert d.train.rating is None
