"""Bring your own dataset: a folder in a standard file format (RecBole atomic files,
LightGCN-style train.txt/test.txt, CSV/TSV) loads through its path, its format is detected, ids
are remapped densely, malformed rows name file and line, and protocols run on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA, needs_shared_data

from data.errors import DataFormatError, UnknownDatasetError, UnknownLayoutError
from data.registry import load_dataset
from data.synthetic import synthetic
from data.types import Interactions, RecDataset

N_USERS, N_ITEMS = 30, 40


@pytest.fixture(scope="module")
def world() -> RecDataset:
    """A small synthetic world with ratings, timestamps, links, tags and user features."""
    return synthetic(n_users=N_USERS, n_items=N_ITEMS, n_tags=6, avg_interactions=12, seed=3)


def _pooled(d: RecDataset) -> Interactions:
    parts = [p for p in (d.train, d.val, d.test) if p is not None]
    return Interactions(
        np.concatenate([p.user for p in parts]),
        np.concatenate([p.item for p in parts]),
        None if parts[0].rating is None else np.concatenate([p.rating for p in parts]),
        None if parts[0].timestamp is None else np.concatenate([p.timestamp for p in parts]),
    )


def _rows(inter: Interactions, with_rating=True, with_time=True) -> set[tuple]:
    cols = [inter.user.tolist(), inter.item.tolist()]
    if with_rating:
        cols.append(np.round(inter.rating, 3).tolist())
    if with_time:
        cols.append(inter.timestamp.tolist())
    return set(zip(*cols))


def _tag_pairs(d: RecDataset) -> set[tuple[int, str]]:
    m = d.item_tags.tocoo()
    return {(int(i), d.tag_names[j]) for i, j in zip(m.row, m.col)}


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")


# ----------------------------------------------------------------------------- writers
# RecBole: integer ids shifted (numeric order = the world's order); CSV: string ids;
# LightGCN: the world's integer ids.


def uid(u) -> str:
    return str(int(u) + 100)


def iid(i) -> str:
    return str(int(i) * 3 + 7)


def write_recbole(w: RecDataset, root: Path, presplit: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    head = "user_id:token\titem_id:token\trating:float\ttimestamp:float"

    def lines(p):
        return [
            f"{uid(u)}\t{iid(i)}\t{r:g}\t{t}.0"
            for u, i, r, t in zip(p.user, p.item, p.rating, p.timestamp)
        ]

    if presplit:
        _write(root / "toy.train.inter", [head, *lines(w.train)])
        _write(root / "toy.test.inter", [head, *lines(w.test)])
    else:
        _write(root / "toy.inter", [head, *lines(_pooled(w))])
    _write(
        root / "toy.net",
        ["source_id:token\ttarget_id:token", *[f"{uid(a)}\t{uid(b)}" for a, b in w.user_links]],
    )
    tags = w.item_tags.tocsr()
    _write(
        root / "toy.item",
        ["item_id:token\ttitle:token_seq\tclass:token_seq"]
        + [
            f"{iid(i)}\tsome title\t" + " ".join(w.tag_names[j] for j in tags[i].indices)
            for i in range(w.n_items)
        ],
    )
    f = w.user_features
    _write(
        root / "toy.user",
        ["user_id:token\tage:float\tgender:token"]
        + [f"{uid(u)}\t{f['age'][u]:g}\tg{f['gender'][u]}" for u in range(w.n_users)],
    )
    return root


def sid(u) -> str:
    return f"user-{int(u):03d}"


def write_csv(w: RecDataset, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    p = _pooled(w)
    _write(
        root / "ratings.csv",
        ["user,item,rating,timestamp"]
        + [
            f"{sid(u)},item {int(i):03d},{r:g},{t}"
            for u, i, r, t in zip(p.user, p.item, p.rating, p.timestamp)
        ],
    )
    _write(root / "links.csv", ["source,target"] + [f"{sid(a)},{sid(b)}" for a, b in w.user_links])
    tags = w.item_tags.tocsr()
    _write(
        root / "item_tags.csv",
        ["item,tags"]
        + [
            f"item {i:03d}," + "|".join(w.tag_names[j] for j in tags[i].indices)
            for i in range(w.n_items)
        ],
    )
    f = w.user_features
    _write(
        root / "user_features.csv",
        ["user,age,occupation"]
        + [f"{sid(u)},{f['age'][u]:g},job{f['occupation'][u]}" for u in range(w.n_users)],
    )
    return root


def write_lightgcn(w: RecDataset, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, part in (("train.txt", w.train), ("test.txt", w.test)):
        by_user = part.items_by_user(w.n_users)
        _write(
            root / name,
            [" ".join(map(str, [u, *items])) for u, items in enumerate(by_user) if len(items)],
        )
    _write(root / "trust.txt", [f"{a} {b}" for a, b in w.user_links])
    return root


WRITERS = {"recbole": write_recbole, "csv": write_csv, "lightgcn": write_lightgcn}


# ----------------------------------------------------------------------------- loading


def test_recbole_folder_loads_as_the_world_it_was_written_from(world, tmp_path):
    d = load_dataset(write_recbole(world, tmp_path / "rb"))
    assert d.name == "toy" and (d.n_users, d.n_items) == (N_USERS, N_ITEMS)
    assert _rows(_pooled(d)) == _rows(_pooled(world))  # integer ids: numeric order kept
    assert d.meta["split_name"] == "random" and len(d.test) > 0
    assert {tuple(x) for x in d.undirected_links()} == {tuple(x) for x in world.undirected_links()}
    assert _tag_pairs(d) == _tag_pairs(world)
    assert d.feature_kinds == {"age": "numeric", "gender": "categorical"}
    assert np.allclose(d.user_features["age"], world.user_features["age"])
    values = d.meta["feature_values"]["gender"]
    decoded = [values[c] for c in d.user_features["gender"]]
    assert decoded == [f"g{g}" for g in world.user_features["gender"]]
    assert d.meta["ignored_columns"] == {"toy.item": ["title"]}
    prov = d.meta["provenance"]
    assert prov["format"] == "recbole" and prov["path"] == str((tmp_path / "rb").resolve())
    assert set(prov["files"]) == {"toy.inter", "toy.net", "toy.item", "toy.user"}
    assert all(len(f["sha256"]) == 64 for f in prov["files"].values())
    assert (prov["n_users"], prov["n_items"], prov["n_links"]) == (
        N_USERS,
        N_ITEMS,
        len(world.user_links),
    )
    assert prov["n_tags"] == len(world.tag_names) and prov["has_timestamps"]
    # a temporal split is possible (timestamps), and so is the same split as a named dataset
    t = load_dataset(tmp_path / "rb", split="temporal")
    assert t.meta["split_name"] == "temporal"


def test_recbole_presplit_files_are_the_split(world, tmp_path):
    root = write_recbole(world, tmp_path / "rb", presplit=True)
    d = load_dataset(str(root))
    assert d.meta["split_name"] == "files" and d.meta["provenance"]["split"] == "files"
    assert _rows(d.train) == _rows(world.train) and _rows(d.test) == _rows(world.test)
    pooled = load_dataset(str(root), split="random", seed=5)  # the parts pooled, re-split
    assert _rows(_pooled(pooled)) == _rows(_pooled(world))
    with pytest.raises(ValueError, match="no split 'u1'"):
        load_dataset(str(root), split="u1")


def test_csv_folder_with_string_ids(world, tmp_path):
    d = load_dataset(write_csv(world, tmp_path / "mine"))
    assert d.name == "mine" and (d.n_users, d.n_items) == (N_USERS, N_ITEMS)
    # zero-padded string ids sort like the world's integers
    assert _rows(_pooled(d)) == _rows(_pooled(world))
    assert len(d.undirected_links()) == len(world.undirected_links())
    assert _tag_pairs(d) == _tag_pairs(world)
    assert d.feature_kinds == {"age": "numeric", "occupation": "categorical"}
    assert d.meta["format"] == "csv" and d.meta["id_order"] == {
        "users": "string",
        "items": "string",
    }


def test_tsv_and_semicolon_delimiters_iso_dates_and_implicit_data(tmp_path):
    root = tmp_path / "tsv"
    root.mkdir()
    _write(
        root / "events.tsv",
        [
            "User_ID\tItem_ID\tTimestamp\tcomment",
            "b\tx\t2024-01-02T10:00:00\tfine",
            "a\ty\t2024-01-01\t",
            "a\tx\t2024-01-03 08:30:00+00:00\tok",
            "b\tz\t2024-01-04\t",
        ],
    )
    d = load_dataset(root, split="temporal", test_fraction=0.5)
    assert not d.has_ratings and d.meta["implicit"] and d.train.timestamp is not None
    assert d.meta["ignored_columns"] == {"events.tsv": ["comment"]}
    # user a = 0, b = 1; the later event of each user is in test
    assert sorted(zip(d.test.user.tolist(), d.test.item.tolist())) == [(0, 0), (1, 2)]
    semi = tmp_path / "semi"
    semi.mkdir()
    _write(semi / "data.csv", ["user;item;rating", "1;10;4.5", "2;10;3", "2;9;1", "10;9;2"])
    s = load_dataset(semi)
    assert s.n_users == 3 and s.n_items == 2 and s.has_ratings
    assert s.meta["id_order"] == {"users": "numeric", "items": "numeric"}
    pooled = _pooled(s)
    assert (0, 1, 4.5) in set(zip(pooled.user.tolist(), pooled.item.tolist(), pooled.rating))
    assert (2, 0, 2.0) in set(zip(pooled.user.tolist(), pooled.item.tolist(), pooled.rating))


def test_lightgcn_folder_without_id_maps(world, tmp_path):
    d = load_dataset(write_lightgcn(world, tmp_path / "lg"))
    assert d.meta["format"] == "lightgcn" and d.meta["split_name"] == "files"
    assert not d.has_ratings
    w_train = {(u, i) for u, i in zip(world.train.user.tolist(), world.train.item.tolist())}
    assert set(zip(d.train.user.tolist(), d.train.item.tolist())) == w_train
    assert len(d.undirected_links()) == len(world.undirected_links())


def test_a_folder_under_data_dir_and_unknown_names(world, tmp_path):
    write_csv(world, tmp_path / "mine")
    assert load_dataset("mine", tmp_path).meta["format"] == "csv"
    with pytest.raises(UnknownDatasetError, match="path of a folder"):
        load_dataset(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="only 'synthetic'"):
        load_dataset(tmp_path / "mine", n_users=5)


# ----------------------------------------------------------------------------- errors


def test_unknown_layout_is_one_line_listing_what_was_looked_for(tmp_path):
    (tmp_path / "notes.md").write_text("hello\n")
    (tmp_path / "data.json").write_text("{}\n")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")  # a header without user and item
    (tmp_path / "more.tsv").write_text("")
    with pytest.raises(UnknownLayoutError) as info:
        load_dataset(tmp_path)
    msg = str(info.value)
    assert "\n" not in msg and isinstance(info.value, ValueError)
    for looked_for in (".inter", "train.txt", "test.txt", ".csv", "user", "item", "notes.md"):
        assert looked_for in msg
    # several tables, none usable: each one's problem is listed
    assert "other.csv header: no user id column" in msg and "'a', 'b'" in msg
    assert "more.tsv: empty file" in msg


@pytest.mark.parametrize(
    "fmt,file,bad,line,needle",
    [
        ("recbole", "toy.inter", "7\t9\t4.0", 3, "expected 4 tab-separated fields"),
        ("recbole", "toy.inter", "7\t9\tfive\t3.0", 3, "rating 'five'"),
        ("recbole", "toy.user", "999\tnot-an-age\tg1", 3, "not-an-age"),
        ("csv", "ratings.csv", "user-001,item 001,4,yesterday", 3, "timestamp 'yesterday'"),
        ("csv", "ratings.csv", ",item 001,4,3", 3, "empty user id"),
        ("csv", "links.csv", "user-001", 3, "expected 2 comma-separated fields"),
        ("lightgcn", "trust.txt", "5", 3, "expected 2 or 3 whitespace-separated fields"),
    ],
)
def test_malformed_rows_name_file_and_line(world, tmp_path, fmt, file, bad, line, needle):
    root = WRITERS[fmt](world, tmp_path / fmt)
    lines = (root / file).read_text().splitlines()
    lines.insert(line - 1, bad)
    _write(root / file, lines)
    with pytest.raises(DataFormatError) as info:
        load_dataset(root)
    assert info.value.path.name == file and info.value.line == line
    assert str(info.value).startswith(f"{file} line {line}: ") and needle in str(info.value)


def test_interaction_file_without_user_column_names_the_header(tmp_path):
    root = tmp_path / "rb"
    root.mkdir()
    _write(root / "x.inter", ["uid:token\tthing:token", "1\t2"])
    with pytest.raises(DataFormatError, match="x.inter header: no item id column"):
        load_dataset(root)


# ----------------------------------------------------------------------------- missing signals


def test_protocols_name_the_signal_the_data_lacks(tmp_path):
    """Implicit CSV without timestamps, links or features: each protocol that needs one of them
    refuses in one line naming it (checked at construction, before any Ray work)."""
    from protocols import get_protocol
    from protocols.base import build_config

    root = tmp_path / "bare"
    root.mkdir()
    rng = np.random.default_rng(0)
    pairs = {(int(u), int(i)) for u, i in rng.integers(0, 12, size=(80, 2))}
    _write(root / "inter.csv", ["user,item", *[f"{u},{i}" for u, i in sorted(pairs)]])
    d = load_dataset(root)
    with pytest.raises(ValueError, match="no timestamps"):
        load_dataset(root, split="temporal")
    expected = {
        "verfedgnn": "ratings",
        "dipsgnn": "timestamps",
        "dmf": "no user links",
        "dgrec": "no item tags",
    }
    for name, signal in expected.items():
        cls = get_protocol(name)
        with pytest.raises(ValueError, match=signal) as info:
            cls(d, build_config(cls.Config, {}), 0)
        assert "\n" not in str(info.value)
    dgrec = get_protocol("dgrec")
    with pytest.raises(ValueError, match="no user links"):
        dgrec(d, build_config(dgrec.Config, {"model": "lightgcn"}), 0)
    gat = get_protocol("fedpergnn")
    with pytest.raises(ValueError, match="ratings"):
        gat(d, build_config(gat.Config, {"backbone": "gat"}), 0)


# ----------------------------------------------------------------------------- ml-100k


@needs_shared_data
def test_ml100k_u1_written_as_recbole_equals_the_named_loader(tmp_path):
    named = load_dataset("ml-100k", SHARED_DATA, split="u1")
    root = tmp_path / "ml"
    root.mkdir()
    head = "user_id:token\titem_id:token\trating:float\ttimestamp:float"
    for suffix, part in (("train", named.train), ("test", named.test)):
        _write(
            root / f"ml-100k.{suffix}.inter",
            [head]
            + [
                f"{u + 1}\t{i + 1}\t{r:g}\t{t}"
                for u, i, r, t in zip(part.user, part.item, part.rating, part.timestamp)
            ],
        )
    values = named.meta["feature_values"]
    f = named.user_features
    _write(
        root / "ml-100k.user",
        ["user_id:token\tage:float\tgender:token\toccupation:token\tzip_prefix:token"]
        + [
            f"{u + 1}\t{f['age'][u]:g}\t{values['gender'][f['gender'][u]]}"
            f"\t{values['occupation'][f['occupation'][u]]}\t{values['zip_prefix'][f['zip_prefix'][u]]}"
            for u in range(named.n_users)
        ],
    )
    tags = named.item_tags.tocsr()
    _write(
        root / "ml-100k.item",
        ["item_id:token\tclass:token_seq"]
        + [
            f"{i + 1}\t" + " ".join(named.tag_names[j] for j in tags[i].indices)
            for i in range(named.n_items)
        ],
    )
    mine = load_dataset(root)
    assert (mine.n_users, mine.n_items) == (named.n_users, named.n_items) == (943, 1682)
    for a, b in ((mine.train, named.train), (mine.test, named.test)):
        for col in ("user", "item", "rating", "timestamp"):
            assert np.array_equal(getattr(a, col), getattr(b, col)), col
    assert _tag_pairs(mine) == _tag_pairs(named)
    assert np.array_equal(mine.user_features["age"], f["age"])
    for name in ("gender", "occupation", "zip_prefix"):
        mv = mine.meta["feature_values"][name]
        decoded = [mv[c] for c in mine.user_features[name]]
        assert decoded == [values[name][c] for c in f[name]], name
    # the named dataset's provenance hashes the files it read
    assert set(named.meta["provenance"]["files"]) >= {"u1.base", "u1.test", "u.user", "u.item"}


@pytest.mark.slow
@needs_shared_data
def test_the_gowalla_folder_read_as_a_lightgcn_folder_equals_the_named_loader():
    """The generic LightGCN reader needs no id-map files and gives gowalla's exact split."""
    mine, named = load_dataset(SHARED_DATA / "gowalla"), load_dataset("gowalla", SHARED_DATA)
    assert mine.meta["format"] == "lightgcn" and (mine.n_users, mine.n_items) == (29_858, 40_981)
    for a, b in ((mine.train, named.train), (mine.test, named.test)):
        assert np.array_equal(a.user, b.user) and np.array_equal(a.item, b.item)


# ----------------------------------------------------------------------------- runs


DGREC_SMALL = {"dim": 8, "hidden": 8, "pairs": 8, "neighbourhoods": 4.0}
FEDMF_SMALL = {"dim": 8, "users_per_round": 0}


@pytest.mark.ray
@pytest.mark.parametrize(
    "fmt,protocol,params",
    [
        # by default every format runs one protocol (a Ray actor start costs seconds here) ...
        ("recbole", "fedmf", FEDMF_SMALL),
        ("csv", "dgrec", DGREC_SMALL),
        ("lightgcn", "dmf", {"dim": 8, "pairs": 4}),
        # ... and with -m slow every format runs fedmf and a protocol that uses the links
        pytest.param("recbole", "dgrec", DGREC_SMALL, marks=pytest.mark.slow),
        pytest.param("csv", "fedmf", FEDMF_SMALL, marks=pytest.mark.slow),
        pytest.param("lightgcn", "fedmf", FEDMF_SMALL, marks=pytest.mark.slow),
    ],
)
def test_protocols_run_on_a_folder_dataset(ray_local, world, tmp_path, fmt, protocol, params):
    from engine import RunSettings, run

    d = load_dataset(WRITERS[fmt](world, tmp_path / fmt))
    settings = RunSettings(
        protocol=protocol, rounds=1, out=str(tmp_path / "runs"), params=params, progress=False
    )
    run_dir, summary = run(settings, d, d.meta)
    assert summary["rounds"] == 1 and summary["bytes_total"] > 0
    assert 0.0 <= summary["metrics"]["recall@20"] <= 1.0
    on_disk = json.loads((Path(run_dir) / "summary.json").read_text())
    prov = on_disk["dataset_provenance"]
    assert prov["format"] == fmt and prov["n_users"] == N_USERS
    assert prov["files"] and all(len(v["sha256"]) == 64 for v in prov["files"].values())
    config = json.loads((Path(run_dir) / "config.json").read_text())
    assert config["dataset"]["provenance"] == prov
