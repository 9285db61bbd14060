"""A newcomer's first hour: a single interaction file given as --dataset, a header that names
the wrong columns, an empty or header-only file, a filter that empties the data and a misspelt
synthetic option each give one line that names the problem (no Ray: load_dataset only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from data.errors import (
    DataFormatError,
    EmptyDatasetError,
    UnknownDatasetError,
    UnknownLayoutError,
    UnknownOptionError,
)
from data.registry import load_dataset

ROWS = [
    "u1,i1,4,100",
    "u1,i2,3,101",
    "u1,i3,5,102",
    "u2,i1,2,103",
    "u2,i3,4,104",
    "u3,i2,1,105",
    "u3,i4,5,106",
]


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _one_line(error: BaseException) -> str:
    message = str(error)
    assert "\n" not in message and isinstance(error, ValueError)
    return message


# ----------------------------------------------------------------------------- 1. one file


def test_a_csv_file_loads_as_a_one_file_dataset(tmp_path):
    folder = tmp_path / "mine"
    file = _write(folder / "ratings.csv", ["user,item,rating,timestamp", *ROWS])
    # side files beside it are not part of a one-file dataset
    _write(folder / "links.csv", ["source,target", "u1,u2"])
    d = load_dataset(file)
    assert (d.n_users, d.n_items) == (3, 4) and len(d.train) + len(d.test) == len(ROWS)
    assert d.name == "ratings" and d.has_ratings and d.user_links is None
    prov = d.meta["provenance"]
    assert prov["format"] == "csv" and prov["path"] == str(file.resolve())
    assert list(prov["files"]) == ["ratings.csv"] and d.meta["source_path"] == str(file.resolve())
    # the same rows as the folder (which also reads links.csv)
    whole = load_dataset(folder)
    assert np.array_equal(whole.train.item, d.train.item) and whole.user_links is not None
    # a relative path under data_dir, and the temporal split of its timestamps
    assert load_dataset("mine/ratings.csv", tmp_path, split="temporal").n_users == 3


def test_tsv_inter_and_headed_text_files_load_on_their_own(tmp_path):
    tsv = _write(tmp_path / "a" / "plays.tsv", ["user_id\titem_id", "1\t7", "2\t7", "2\t8"])
    inter = _write(
        tmp_path / "b" / "toy.inter",
        ["user_id:token\titem_id:token\trating:float", "1\t7\t4", "2\t7\t5", "2\t8\t3"],
    )
    txt = _write(tmp_path / "c" / "ratings.txt", ["uid;iid", "1;7", "2;8"])
    assert load_dataset(tsv).meta["provenance"]["format"] == "csv"
    d = load_dataset(inter)
    assert d.name == "toy" and d.meta["provenance"]["format"] == "recbole" and d.has_ratings
    assert load_dataset(txt).n_items == 2


@pytest.mark.parametrize(
    "name, lines, needle",
    [
        ("train.csv", ["user,item", "1,2"], "one part of a train/test split; give its folder"),
        ("toy.train.inter", ["user_id:token\titem_id:token", "1\t2"], "RecBole split"),
        ("train.txt", ["1 2 3"], "LightGCN-style folder; give its folder"),
        ("links.csv", ["source,target", "1,2"], "side information"),
        ("ratings.txt", ["1 2 4"], "must be a .csv/.tsv file"),
    ],
)
def test_a_file_that_is_not_a_whole_dataset_says_to_give_its_folder(tmp_path, name, lines, needle):
    file = _write(tmp_path / "d" / name, lines)
    with pytest.raises(DataFormatError) as info:
        load_dataset(file)
    message = _one_line(info.value)
    assert message.startswith(f"{name}: ") and needle in message
    assert f"give its folder ({file.parent})" in message


def test_a_missing_path_is_still_an_unknown_dataset(tmp_path):
    with pytest.raises(UnknownDatasetError, match="one .csv/.tsv/.inter interaction file"):
        load_dataset(tmp_path / "nowhere.csv")


# ----------------------------------------------------------------------------- 2. headers


HEADERS = [
    (
        "user,rating",
        "r.csv header: no item id column (accepted names: item_id, item, itemid, iid); "
        "found user, rating",
    ),
    (
        "user_id,movie_id,rating",
        "r.csv header: no item id column (accepted names: item_id, item, itemid, iid); "
        "column name not recognised: 'movie_id'",
    ),
    (
        "usr,item",
        "r.csv header: no user id column (accepted names: user_id, user, userid, uid); "
        "column name not recognised: 'usr' (did you mean 'user'?)",
    ),
    (
        "user item rating",
        "column name not recognised: 'user item rating' (columns are separated by a comma, tab, "
        "semicolon or '|')",
    ),
]


@pytest.mark.parametrize("given", ["folder", "file"])
@pytest.mark.parametrize("header, expected", HEADERS)
def test_a_header_names_the_missing_and_the_unrecognised_columns(tmp_path, given, header, expected):
    file = _write(tmp_path / "d" / "r.csv", [header, "1,2"])
    with pytest.raises(DataFormatError) as info:
        load_dataset(file.parent if given == "folder" else file)
    assert not isinstance(info.value, UnknownLayoutError)
    assert expected in _one_line(info.value) and info.value.path == file.resolve()


@pytest.mark.parametrize("given", ["folder", "file"])
def test_an_empty_file_is_named(tmp_path, given):
    file = _write(tmp_path / "d" / "r.csv", [])
    with pytest.raises(DataFormatError) as info:
        load_dataset(file.parent if given == "folder" else file)
    assert _one_line(info.value).startswith("r.csv: empty file: a header line naming a user")
    assert info.value.path == file.resolve()


MISSPELT = [
    (
        "r.csv",
        ["user,item,ratng", "1,2,4", "2,2,3"],
        "r.csv header: column name not recognised: 'ratng' (did you mean 'rating'?); rename it "
        "to the name meant, or to a name not close to an accepted one to have it ignored",
    ),
    (
        "r.tsv",
        ["User\tItem\tRatings\tTimestmp", "1\t2\t4\t100", "2\t2\t3\t101"],
        "r.tsv header: column names not recognised: 'ratings' (did you mean 'rating'?), "
        "'timestmp' (did you mean 'timestamp'?); rename each",
    ),
    (
        "x.inter",
        ["user_id:token\titem_id:token\trating:float\ttime_stamp:float", "1\t2\t4\t5"],
        "x.inter header: column name not recognised: 'time_stamp' (did you mean 'timestamp'?)",
    ),
]


@pytest.mark.parametrize("given", ["folder", "file"])
@pytest.mark.parametrize("name, lines, expected", MISSPELT, ids=[m[0] for m in MISSPELT])
def test_a_misspelt_rating_or_timestamp_column_is_named(tmp_path, given, name, lines, expected):
    """A column close to an accepted name of a rating or timestamp column that the header lacks
    is a misspelling, not a column to ignore: left out, explicit data would load as implicit and
    a protocol needing ratings would blame the data."""
    file = _write(tmp_path / "d" / name, lines)
    with pytest.raises(DataFormatError) as info:
        load_dataset(file.parent if given == "folder" else file, split="random")
    assert expected in _one_line(info.value) and info.value.path == file.resolve()
    # named before the split is chosen from the columns: not "no timestamps"
    with pytest.raises(DataFormatError, match="not recognised"):
        load_dataset(file.parent if given == "folder" else file, split="temporal")


def test_columns_not_close_to_an_accepted_name_are_still_ignored(tmp_path):
    header = "user,item,rating,comment,times_played,rated_at,item_rating"
    file = _write(tmp_path / "d" / "r.csv", [header, "1,2,4,ok,3,x,5", "2,2,3,,1,y,4"])
    d = load_dataset(file)
    assert d.has_ratings
    assert d.meta["ignored_columns"] == {
        "r.csv": ["comment", "times_played", "rated_at", "item_rating"]
    }
    # beside a rating column, a near miss of it is a column of its own, ignored
    _write(file, ["user,item,rating,ratings", "1,2,4,4", "2,2,3,3"])
    assert load_dataset(file).meta["ignored_columns"] == {"r.csv": ["ratings"]}


def test_a_header_without_user_suggests_the_optional_columns_too(tmp_path):
    file = _write(tmp_path / "d" / "r.csv", ["usr,item,ratng", "1,2,3"])
    with pytest.raises(DataFormatError) as info:
        load_dataset(file)
    assert (
        "column names not recognised: 'usr' (did you mean 'user'?), 'ratng' (did you mean "
        "'rating'?)" in _one_line(info.value)
    )


def test_an_inter_file_header_lists_the_accepted_names(tmp_path):
    _write(tmp_path / "rb" / "x.inter", ["user_id:token\tmovie:token", "1\t2"])
    with pytest.raises(DataFormatError) as info:
        load_dataset(tmp_path / "rb")
    assert "x.inter header: no item id column (accepted names: item_id, item" in str(info.value)
    assert "not recognised: 'movie'" in str(info.value)


def test_an_inter_file_given_alone_has_its_header_checked_first(tmp_path):
    file = _write(tmp_path / "x.inter", ["user_id:token\tmovie:token\trating:float", "1\t2"])
    with pytest.raises(DataFormatError) as info:
        load_dataset(file)
    assert _one_line(info.value).startswith("x.inter header: no item id column (accepted names")


# ----------------------------------------------------------------------------- 3. empty data


@pytest.mark.parametrize("given", ["folder", "file"])
@pytest.mark.parametrize(
    "name, lines",
    [
        ("r.csv", ["user,item,rating"]),
        ("r.tsv", ["user\titem", "", "  "]),
        ("x.inter", ["user_id:token\titem_id:token"]),
    ],
)
def test_a_header_only_file_is_refused_at_load(tmp_path, given, name, lines):
    file = _write(tmp_path / "d" / name, lines)
    with pytest.raises(DataFormatError) as info:
        load_dataset(file.parent if given == "folder" else file)
    assert _one_line(info.value).startswith(f"{name}: no rows")
    assert info.value.path == file.resolve()


def test_a_lightgcn_file_without_items_is_refused(tmp_path):
    _write(tmp_path / "lg" / "train.txt", ["0", "1"])
    _write(tmp_path / "lg" / "test.txt", ["0 5"])
    with pytest.raises(DataFormatError, match=r"^train.txt: no rows"):
        load_dataset(tmp_path / "lg")


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"min_user_interactions": 5}, "the k-core filter min_user_interactions=5 removes every"),
        ({"min_item_interactions": 9}, "the k-core filter min_item_interactions=9 removes every"),
        (
            {"min_user_interactions": 3, "min_item_interactions": 3},
            "min_user_interactions=3 and min_item_interactions=3",
        ),
    ],
)
def test_a_filter_that_empties_the_dataset_is_named(tmp_path, kwargs, needle):
    file = _write(tmp_path / "r.csv", ["user,item,rating,timestamp", *ROWS])
    with pytest.raises(EmptyDatasetError) as info:
        load_dataset(file, **kwargs)
    message = _one_line(info.value)
    assert message.startswith("dataset 'r': ") and needle in message
    assert "(of 3 users, 4 items and 7 interactions read)" in message
    assert isinstance(info.value, DataFormatError) and info.value.path == file.resolve()


def test_a_split_that_leaves_no_training_rows_is_named(tmp_path):
    file = _write(tmp_path / "r.csv", ["user,item", "1,7", "2,8"])
    with pytest.raises(EmptyDatasetError, match="the random split leaves no training") as info:
        load_dataset(file, test_fraction=1.0)
    assert "test_fraction 1.0" in _one_line(info.value)


def test_synthetic_emptied_by_a_filter_is_named():
    with pytest.raises(EmptyDatasetError) as info:
        load_dataset("synthetic", n_users=5, n_items=20, min_item_interactions=1000)
    assert "dataset 'synthetic': the k-core filter min_item_interactions=1000" in str(info.value)
    assert info.value.path is None


# ----------------------------------------------------------------------------- 4. options


def test_an_unknown_synthetic_option_is_named_with_the_known_ones():
    with pytest.raises(UnknownOptionError) as info:
        load_dataset("synthetic", nusers=50)
    message = _one_line(info.value)
    assert isinstance(info.value, TypeError)  # as for any unexpected keyword argument
    assert message.startswith(
        "dataset 'synthetic': unknown option 'nusers' (did you mean 'n_users'?)"
    )
    for known in (
        "n_users",
        "n_items",
        "n_tags",
        "dim",
        "avg_interactions",
        "min_user_interactions",
    ):
        assert known in message
    assert "seed" not in message.split("known options:")[1]
    with pytest.raises(UnknownOptionError, match="unknown options 'colour', 'nitems'"):
        load_dataset("synthetic", nitems=5, colour="red")
    assert load_dataset("synthetic", n_users=20, n_items=30, avg_interactions=5).n_users == 20
