"""load_dataset's arguments: names, splits, data directories, filters and what meta records."""

from __future__ import annotations

import numpy as np
import pytest
from datafiles import write_ml100k

from data import DATASETS as REEXPORTED
from data import load_dataset as reexported_load
from data.errors import DatasetNotFoundError
from data.registry import DATASETS, default_data_dir, load_dataset


def test_names_and_reexports():
    assert DATASETS == (
        "synthetic",
        "ml-100k",
        "gowalla",
        "ciao",
        "epinions",
        "filmtrust",
        "diffnet-yelp",
        "diffnet-flickr",
    )
    assert REEXPORTED is DATASETS and reexported_load is load_dataset


def test_default_data_dir_is_beside_the_repo():
    found = default_data_dir()
    if found is not None:
        assert found.is_dir() and found.name == "data" and found.parent.name == "shared"


def test_data_dir_may_be_the_dataset_folder_itself(tmp_path):
    folder = write_ml100k(tmp_path)
    a = load_dataset("ml-100k", tmp_path, split="random")
    b = load_dataset("ml-100k", folder, split="random")
    assert np.array_equal(a.train.item, b.train.item)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split": "u9"}, "no split 'u9'; choose from auto, random, temporal, published, u1"),
        ({"test_fraction": 1.5}, "test_fraction"),
        ({"min_user_interactions": -1}, "min_user_interactions"),
        ({"n_users": 10}, "only 'synthetic' takes generator parameters"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    write_ml100k(tmp_path)
    with pytest.raises(ValueError, match=message):
        load_dataset("ml-100k", tmp_path, **kwargs)


def test_temporal_needs_timestamps(tmp_path):
    with pytest.raises(ValueError, match="'filmtrust' has no timestamps"):
        load_dataset("filmtrust", tmp_path, split="temporal")


def test_missing_data_dir(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="filmtrust"):
        load_dataset("filmtrust", tmp_path / "nowhere")


def test_published_split_with_kcore_drops_test_rows_of_removed_users(tmp_path):
    folder = write_ml100k(tmp_path)
    # train: user 1 has 3 ratings, user 2 has 3, user 3 has 1 -> a 2-core on users drops user 3
    (folder / "u1.base").write_text(
        "1\t1\t5\t1\n1\t2\t4\t2\n1\t3\t3\t3\n2\t1\t2\t4\n2\t2\t1\t5\n2\t4\t1\t6\n3\t4\t5\t7\n"
    )
    (folder / "u1.test").write_text("1\t4\t5\t8\n3\t1\t5\t9\n2\t3\t3\t10\n")
    d = load_dataset("ml-100k", tmp_path, min_user_interactions=2)
    assert (d.n_users, d.n_items) == (2, 4)
    assert sorted(d.test.timestamp.tolist()) == [8, 10]  # user 3's test row is gone
    assert d.meta["kcore"]["users_removed"] == 1 and d.meta["kcore"]["eval_rows_removed"] == 1
    assert d.user_features["age"].tolist() == [24.0, 53.0]  # features follow the re-indexing
    # with min_item 2, item 3 goes at once and item 4 once user 3 is gone (iterated)
    with_items = load_dataset("ml-100k", tmp_path, min_user_interactions=2, min_item_interactions=2)
    assert with_items.n_items == 2 and len(with_items.test) == 0


def test_implicit_deduplicates_and_explicit_counts(tmp_path):
    folder = write_ml100k(tmp_path)
    rows = "1\t1\t5\t30\n1\t1\t2\t10\n1\t2\t4\t20\n2\t2\t3\t5\n"
    (folder / "u.data").write_text(rows)
    explicit = load_dataset("ml-100k", tmp_path, split="random", test_fraction=0.0)
    assert len(explicit.train) == 4 and explicit.meta["duplicate_pairs"] == 1
    implicit = load_dataset("ml-100k", tmp_path, split="random", implicit=True, test_fraction=0.0)
    assert implicit.train.rating is None and len(implicit.train) == 3
    kept = implicit.train.timestamp[(implicit.train.user == 0) & (implicit.train.item == 0)]
    assert kept.tolist() == [10]  # the earliest of the duplicated pair
    assert implicit.meta["duplicate_pairs_removed"] == 1
