"""Malformed and missing files give errors that name the file and the line (or MAT variable)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.io
from datafiles import GENRES, write_ml100k

from data.errors import DataFormatError, DatasetNotFoundError, UnknownDatasetError
from data.registry import DATASETS, load_dataset


def test_tiny_ml100k_loads(tmp_path):
    write_ml100k(tmp_path)
    d = load_dataset("ml-100k", tmp_path, split="random")
    assert (d.n_users, d.n_items, len(d.train) + len(d.test)) == (3, 4, 12)
    assert d.user_features["zip_prefix"].tolist() == [8, 10, 0]  # 85711, T8H1N (letter), 02139
    assert d.tag_names == GENRES and d.item_tags.toarray()[:, 2].tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("2\t1\t3\n", "u.data line 3: expected 4 tab-separated fields, got 3"),
        ("2\t1\tfive\t880000000\n", "u.data line 3: field 3 is not a finite number: 'five'"),
        ("2\t1\tnan\t880000000\n", "u.data line 3: field 3 is not a finite number: 'nan'"),
        ("2\t1.5\t3\t880000000\n", "u.data line 3: item id must be an integer >= 1, got 1.5"),
        ("9\t1\t3\t880000000\n", "u.data line 3: user id 9 is not listed in u.user"),
    ],
)
def test_ml100k_bad_rating_line_is_named(tmp_path, bad_line, message):
    good = "1\t1\t3\t880000000\n\n"  # line 2 is blank: line numbers must still count it
    write_ml100k(tmp_path, ratings=good + bad_line + good)
    with pytest.raises(DataFormatError) as info:
        load_dataset("ml-100k", tmp_path, split="random")
    assert str(info.value).startswith(message)
    assert str(tmp_path / "ml-100k" / "u.data") in str(info.value)
    assert info.value.line == 3


def test_ml100k_bad_side_files(tmp_path):
    folder = write_ml100k(tmp_path)
    (folder / "u.user").write_text("1|24|M|engineer|85711\n2|53|F|pilot|T8H1N\n")
    with pytest.raises(DataFormatError, match=r"u.user line 2: occupation 'pilot'"):
        load_dataset("ml-100k", tmp_path)
    (folder / "u.user").write_text("1|24|M|engineer\n")
    with pytest.raises(DataFormatError, match=r"u.user line 1: expected 5"):
        load_dataset("ml-100k", tmp_path)


def test_missing_file_names_path_and_dataset(tmp_path):
    folder = write_ml100k(tmp_path)
    (folder / "u1.test").unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("ml-100k", tmp_path)  # auto -> u1 needs u1.test
    assert "ml-100k" in str(info.value) and str(folder / "u1.test") in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="gowalla"):
        load_dataset("gowalla", tmp_path)


def test_unknown_dataset_lists_known_names():
    with pytest.raises(UnknownDatasetError) as info:
        load_dataset("movielens-1b")
    assert all(name in str(info.value) for name in DATASETS)
    assert isinstance(info.value, ValueError)


def test_gowalla_bad_token_line(tmp_path):
    folder = tmp_path / "gowalla"
    folder.mkdir()
    (folder / "train.txt").write_text("0 0 1 2\n1 2 x3\n")
    (folder / "test.txt").write_text("0 3\n1 0\n")
    (folder / "user_list.txt").write_text("org_id remap_id\n10 0\n11 1\n")
    (folder / "item_list.txt").write_text("org_id remap_id\n5 0\n6 1\n7 2\n8 3\n")
    with pytest.raises(
        DataFormatError, match=r"^train.txt line 2: field 3 is not a finite number: 'x3'"
    ):
        load_dataset("gowalla", tmp_path)
    (folder / "train.txt").write_text("0 0 1 2\n1 2 3\n")
    d = load_dataset("gowalla", tmp_path)
    assert (d.n_users, d.n_items, len(d.train), len(d.test)) == (2, 4, 5, 2)
    (folder / "item_list.txt").write_text("org_id remap_id\n5 0\n6 1\n7 1\n")
    with pytest.raises(DataFormatError, match="item_list.txt: remap_id"):
        load_dataset("gowalla", tmp_path)


def test_diffnet_crlf_and_bad_field_count(tmp_path):
    folder = tmp_path / "diffnet-yelp"
    folder.mkdir()
    (folder / "yelp.train.rating").write_bytes(b"0\t5\t1\r\n0\t6\t1\r\n1\t5\t1\r\n1\t7\t1\r\n")
    (folder / "yelp.val.rating").write_bytes(b"0\t7\t1\r\n")
    (folder / "yelp.test.rating").write_bytes(b"1\t6\t1\r\n")
    (folder / "yelp.links").write_bytes(b"0\t1\t1\r\n1\t0\t1\r\n0\t9\t1\r\n")
    d = load_dataset("diffnet-yelp", tmp_path)
    assert (d.n_users, d.n_items, len(d.train), len(d.val), len(d.test)) == (2, 3, 4, 1, 1)
    assert d.user_links.tolist() == [[0, 1], [1, 0]]
    assert d.meta["links_dropped_user_without_interactions"] == 1
    (folder / "yelp.links").write_bytes(b"0\t1\t1\r\n1\t0\r\n")
    with pytest.raises(
        DataFormatError, match=r"^yelp.links line 2: expected 3 tab-separated fields, got 2"
    ):
        load_dataset("diffnet-yelp", tmp_path)


def test_filmtrust_negative_id(tmp_path):
    folder = tmp_path / "filmtrust"
    folder.mkdir()
    (folder / "ratings.txt").write_text("1 1 2\n1 2 3.5\n")
    (folder / "trust.txt").write_text("1 -2 1\n")
    with pytest.raises(
        DataFormatError, match=r"^trust.txt line 1: trustee must be an integer >= 0"
    ):
        load_dataset("filmtrust", tmp_path)


def _write_tang(folder: Path, rating: np.ndarray, trust: np.ndarray) -> None:
    folder.mkdir(exist_ok=True)
    scipy.io.savemat(folder / "rating.mat", {"rating": rating})
    scipy.io.savemat(folder / "trustnetwork.mat", {"trustnetwork": trust})


def test_ciao_mat_errors(tmp_path):
    folder = tmp_path / "ciao"
    rating = np.array([[1, 1, 2, 4, 1], [2, 1, 2, 5, 1], [2, 3, 1, 3, 1]], dtype=np.int32)
    trust = np.array([[1, 2], [2, 3]], dtype=np.int32)
    _write_tang(folder, rating, trust)
    d = load_dataset("ciao", tmp_path)
    assert (d.n_users, d.n_items) == (2, 2)  # products 1 and 3
    assert d.item_tags.toarray().tolist() == [[0, 1], [1, 0]]
    assert d.meta["links_dropped_user_without_interactions"] == 1  # user 3 rated nothing

    data = (folder / "rating.mat").read_bytes()
    (folder / "rating.mat").write_bytes(data[: len(data) - 20])
    with pytest.raises(DataFormatError, match=r"^rating.mat: not a readable MATLAB v5 file"):
        load_dataset("ciao", tmp_path)

    scipy.io.savemat(folder / "rating.mat", {"ratings": rating})
    with pytest.raises(DataFormatError, match=r"^rating.mat variable 'rating': not found"):
        load_dataset("ciao", tmp_path)

    scipy.io.savemat(folder / "rating.mat", {"rating": rating[:, :3]})
    with pytest.raises(
        DataFormatError, match=r"^rating.mat variable 'rating': expected 4 to 5 columns"
    ):
        load_dataset("ciao", tmp_path)

    bad = rating.astype(np.float64)
    bad[2, 1] = 0.5
    scipy.io.savemat(folder / "rating.mat", {"rating": bad})
    with pytest.raises(
        DataFormatError, match=r"^rating.mat variable 'rating' row 3: column 2 \(productid\)"
    ):
        load_dataset("ciao", tmp_path)


def test_ciao_timestamp_file_must_match_ratings(tmp_path):
    folder = tmp_path / "ciao"
    rating = np.array([[1, 1, 2, 4, 1], [2, 1, 2, 5, 1], [2, 3, 1, 3, 1]], dtype=np.int32)
    _write_tang(folder, rating, np.array([[1, 2]], dtype=np.int32))
    stamps = np.array([[300], [100], [200]], dtype=np.int32)
    scipy.io.savemat(
        folder / "rating_with_timestamp.mat", {"rating": np.hstack([rating, stamps])[::-1]}
    )
    d = load_dataset("ciao", tmp_path, split="temporal", test_fraction=0.4)
    assert d.test.timestamp.tolist() == [200]  # user 2's later rating (user 1 has only one)
    changed = np.hstack([rating, stamps])
    changed[0, 3] = 1
    scipy.io.savemat(folder / "rating_with_timestamp.mat", {"rating": changed})
    d = load_dataset("ciao", tmp_path)
    assert d.train.timestamp is None and "does not hold the same rows" in d.meta["timestamps"]
    assert sorted(np.concatenate([d.train.rating, d.test.rating]).tolist()) == [3.0, 4.0, 5.0]
