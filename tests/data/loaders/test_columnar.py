"""The columnar (pyarrow) reader of interaction files gives what the Python reader gives: the same
arrays for every file it reads, and for every file it cannot read exactly (malformed, quoted, not
UTF-8, ...) the Python reader's result or its one-line error, word for word and with its line
(data/loaders/columnar.py; the speed is measured by ``python -m benchmarks.data_loading --rows``)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

import data.loaders.files as files
from data.errors import DataFormatError
from data.loaders.columnar import PY_WHITESPACE
from data.registry import load_dataset

CSV_HEAD = "user,item,rating,timestamp"
INTER_HEAD = "user_id:token\titem_id:token\trating:float\ttimestamp:float"
CSV_ROWS = ["u1,i1,4,100", "u1,i2,3,101", "u2,i1,5,102", "u3,i3,1,103"]
INTER_ROWS = [r.replace(",", "\t") for r in CSV_ROWS]


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def _read(path: Path, columnar: bool, monkeypatch):
    """read_folder of a folder or a single file with one reader."""
    monkeypatch.setattr(files, "COLUMNAR", columnar)
    layout = files.detect_layout(path) if path.is_dir() else files.file_layout(path)
    return files.read_folder(layout, None)


def _same(a, b) -> None:
    assert a.parts.keys() == b.parts.keys()
    for key in a.parts:
        for col in ("user", "item", "rating", "timestamp"):
            x, y = getattr(a.parts[key], col), getattr(b.parts[key], col)
            assert (x is None) == (y is None), col
            if x is not None:
                assert x.dtype == y.dtype and np.array_equal(x, y), (key, col)
    drop = ("readers",)
    assert {k: v for k, v in a.meta.items() if k not in drop} == {
        k: v for k, v in b.meta.items() if k not in drop
    }
    assert np.array_equal(a.user_ids, b.user_ids) and np.array_equal(a.item_ids, b.item_ids)
    if a.links is not None or b.links is not None:
        assert np.array_equal(a.links, b.links)


def test_the_whitespace_stripped_is_pythons():
    assert PY_WHITESPACE == "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


# (file name, content, the reader expected to read it)
GOOD = [
    ("plain.csv", "\n".join([CSV_HEAD, *CSV_ROWS]) + "\n", "pyarrow"),
    ("noeol.csv", "\n".join([CSV_HEAD, *CSV_ROWS]), "pyarrow"),
    ("crlf.csv", "\r\n".join([CSV_HEAD, *CSV_ROWS]) + "\r\n", "pyarrow"),
    ("bom.csv", "\ufeff" + "\n".join([CSV_HEAD, *CSV_ROWS]) + "\n", "pyarrow"),
    ("blank_lines.csv", "\n\n" + CSV_HEAD + "\n\n" + "\n\n".join(CSV_ROWS) + "\n\n", "pyarrow"),
    ("leading_blank.csv", "   \n" + "\n".join([CSV_HEAD, *CSV_ROWS]) + "\n", "pyarrow"),
    ("quoted_header.csv", '"user","item","rating"\nu1,i1,4\nu2,i1,3\n', "pyarrow"),
    # " u1 " and "u1" are one id, " 4 " and "\xa04" one rating
    (
        "padded.csv",
        "user , item ,rating\n u1 ,\ti1\x0b, 4 \nu1,i2 ,\xa04\nu2\u3000,i2,1\n",
        "pyarrow",
    ),
    # "007" and "7" are two ids (string order, as the Python reader's)
    ("leading_zeros.csv", "user,item\n007,1\n7,1\n+7,2\n-3,2\n", "pyarrow"),
    ("unicode.tsv", "user\titem\trating\nü\té\t1\nz\té\t2\n١\tx\t3\n", "pyarrow"),
    (
        "semicolon.csv",
        "uid;iid;score;date\n1;10;4.5;2024-01-02\n2;10;3;2024-01-01T10:00:00+02:00\n",
        "pyarrow",
    ),
    ("mixed_times.csv", "user,item,ts\na,x,1700000000\nb,y,2024-01-01\nc,z,1.5\n", "pyarrow"),
    ("underscore.csv", "user,item,rating\na,x,1_0\nb,x,2.5e0\n", "pyarrow"),  # numpy parses 1_0
    ("fractional.csv", "user,item,time\na,x,0.25\nb,x,0.5\nc,y,0.125\n", "pyarrow"),
    ("ignored.csv", "user,item,comment,rating\na,x,fine,2\nb,x,,3\n", "pyarrow"),
    ("empty_last.csv", "user,item,rating,\na,x,2,\nb,x,3,\n", "pyarrow"),
    ("pipe.csv", "user|item\na|x\nb|y\n", "pyarrow"),
    # the Python reader's: quotes, a whitespace-only row, a blank row of commas, latin-1, NUL
    ("quoted.csv", 'user,item,rating\n"a,1",x,2\n"b""",x,3\na"c,"x",4\n"b",x,5\nb,y,1\n', "python"),
    ("quoted_ids.csv", 'user,item\n"b",x\nb,y\n"c",z\n', "python"),  # "b" is b to csv
    ("spaces_row.csv", "user,item\na,x\n   \nb,y\n", "python"),
    ("commas_row.csv", "user,item,rating\na,x,1\n,,\nb,y,2\n", "python"),
    ("latin1.csv", "user,item\nb\xe9,x\nc,y\n".encode("latin-1"), "python"),
    ("nul.csv", "user,item\na\x00,x\nb,y\n", "python"),
    ("toy.inter", "\n".join([INTER_HEAD, *INTER_ROWS]) + "\n", "pyarrow"),
    ("quotes.inter", 'user_id:token\titem_id:token\n"a\tx"\n"b"\t"y\n', "pyarrow"),
    ("seq.inter", "user_id:token\titem_id:token\ttags:token_seq\nu\ti\ta b\nv\ti\t\n", "pyarrow"),
    ("crlf.inter", "\r\n".join([INTER_HEAD, *INTER_ROWS]) + "\r\n", "pyarrow"),
    (
        "spaces.inter",
        INTER_HEAD + "\n" + INTER_ROWS[0] + "\n \t \n" + INTER_ROWS[1] + "\n",
        "python",
    ),
]


@pytest.mark.parametrize("name, content, reader", GOOD, ids=[g[0] for g in GOOD])
def test_both_readers_give_the_same_arrays(tmp_path, monkeypatch, name, content, reader):
    path = _write(tmp_path / "d" / name, content)
    fast = _read(path, True, monkeypatch)
    slow = _read(path, False, monkeypatch)
    assert fast.meta["readers"] == {name: reader} and slow.meta["readers"] == {name: "python"}
    _same(fast, slow)


def _lightgcn(root: Path, train: str, test: str = "0 1\n", trust: str | None = None) -> Path:
    _write(root / "train.txt", train)
    _write(root / "test.txt", test)
    if trust is not None:
        _write(root / "trust.txt", trust)
    return root


LIGHTGCN = [
    ("plain", "0 1 2 3\n1 2\n2 0 1\n", "pyarrow"),
    ("whitespace", "  0\t1  2 \x0b3\x0c\n\n \t \n1 2\r\n2\n10 0 01\n", "pyarrow"),
    ("string ids", "a x y\nb y\n", "pyarrow"),
    ("unicode", "ü x\nb \xa0y\n", "python"),  # \xa0 splits a str, not bytes
    ("\\x1c", "a\x1cx y\n", "python"),
    ("bare \\r", "0 1\r2 3\n", "python"),
]


@pytest.mark.parametrize("case, train, reader", LIGHTGCN, ids=[c[0] for c in LIGHTGCN])
def test_lightgcn_lines_read_alike(tmp_path, monkeypatch, case, train, reader):
    root = _lightgcn(tmp_path / "lg", train, trust="0 1\n1\t2 0.5\n\n9 0\n")
    fast = _read(root, True, monkeypatch)
    slow = _read(root, False, monkeypatch)
    assert fast.meta["readers"]["train.txt"] == reader
    _same(fast, slow)


# --------------------------------------------------------------------------- errors
# Every one-line error of the CSV, RecBole and LightGCN interaction paths, raised alike by both
# readers: (files of the folder, the message's start, its line)
ERRORS = [
    (
        {"r.csv": "user,item,rating\na,x,1\nb,y\n"},
        "r.csv line 3: expected 3 comma-separated fields (as in the header), got 2",
        3,
    ),
    (
        {"r.tsv": "user\titem\na\tx\tz\n"},
        "r.tsv line 2: expected 2 tab-separated fields (as in the header), got 3",
        2,
    ),
    ({"r.csv": "user,item\na,x\n ,y\n"}, "r.csv line 3: empty user id", 3),
    ({"r.csv": "user,item\na,x\nb,\n"}, "r.csv line 3: empty item id", 3),
    (
        {"r.csv": "user,item,rating\na,x,1\nb,y,five\n"},
        "r.csv line 3: rating 'five' is not a finite number",
        3,
    ),
    (
        {"r.csv": "user,item,rating\na,x,nan\nb,y,1\n"},
        "r.csv line 2: rating 'nan' is not a finite number",
        2,
    ),
    (
        {"r.csv": "user,item,time\na,x,1\nb,y,yesterday\n"},
        "r.csv line 3: timestamp 'yesterday' is neither a number nor an ISO 8601 date",
        3,
    ),
    (
        {"r.csv": "user,item,time\na,x,inf\n"},
        "r.csv line 2: timestamp 'inf' is neither a number nor an ISO 8601 date",
        2,
    ),
    ({"r.csv": "user,item,rating\n\n"}, "r.csv: no rows: the file has a header but no", None),
    ({"r.csv": "user,item\na,x\rb,y\n"}, "r.csv line 2: new-line character seen", 2),
    ({"r.csv": " \r \nuser,item\na,x\n"}, "r.csv line 1: new-line character seen", 1),
    (
        {"t.inter": "user_id:token\titem_id:token\n1\t2\n3\n"},
        "t.inter line 3: expected 2 tab-separated fields (as in the header), got 1",
        3,
    ),
    (
        {"t.inter": "user_id:token\titem_id:token\n1\t2\n3\t4\r5\t6\n"},
        "t.inter line 3: expected 2 tab-separated fields (as in the header), got 3",
        3,
    ),
    (
        {"t.inter": "user_id:token\titem_id:tokn\n1\t2\n"},
        "t.inter line 1: header field 'item_id:tokn': type must be one of token, token_seq",
        1,
    ),
    ({"t.inter": "\n\n"}, "t.inter: empty file: a typed header line was expected", None),
    (
        {"t.inter": "user_id:token\titem_id:token\trating:float\n1\t2\tx\n"},
        "t.inter line 2: rating 'x' is not a finite number",
        2,
    ),
    (
        {"t.inter": "user_id:token\tthing:token\n1\t2\n3\n"},  # rows read before the header
        "t.inter line 3: expected 2 tab-separated fields",
        3,
    ),
    (
        {"t.inter": "user_id:token\tthing:token\n1\t2\n"},
        "t.inter header: no item id column (accepted names: item_id, item, itemid, iid)",
        None,  # (the line of the header, 1, in the attribute)
    ),
    (
        {"train.txt": "0\n1\n", "test.txt": "0 1\n"},
        "train.txt: no rows: no line lists a user and an item",
        None,
    ),
    (
        {"train.txt": "0 1\n", "test.txt": "0 1\n", "trust.txt": "0 1\n2\n"},
        "trust.txt line 2: expected 2 or 3 whitespace-separated fields (user user [weight]), got 1",
        2,
    ),
    (
        {"train.txt": "0 1\n", "test.txt": "0 1\n", "trust.txt": "0 1 1 1\n"},
        "trust.txt line 1: expected 2 or 3 whitespace-separated fields",
        1,
    ),
    (
        {
            "a.train.inter": "user_id:token\titem_id:token\trating:float\n1\t2\t3\n",
            "a.test.inter": "user_id:token\titem_id:token\n1\t2\n",
        },
        "a.test.inter header: no rating column, but a.train.inter has one",
        None,
    ),
]


def _error(root: Path, columnar: bool, monkeypatch) -> DataFormatError:
    monkeypatch.setattr(files, "COLUMNAR", columnar)
    with pytest.raises(DataFormatError) as info:
        load_dataset(root)
    return info.value


@pytest.mark.parametrize("folder, message, line", ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_both_readers_raise_the_same_error(tmp_path, monkeypatch, folder, message, line):
    root = tmp_path / "d"
    for name, content in folder.items():
        _write(root / name, content)
    fast, slow = _error(root, True, monkeypatch), _error(root, False, monkeypatch)
    assert str(fast) == str(slow) and fast.line == slow.line and fast.path == slow.path
    assert str(fast).startswith(message) and "\n" not in str(fast)
    if line is not None:
        assert fast.line == line


def test_a_field_over_the_csv_limit_is_the_csv_modules_error(tmp_path, monkeypatch):
    root = tmp_path / "d"
    _write(root / "r.csv", "user,item,note\na,x," + "n" * 300 + "\nb,y,z\n")
    limit = csv.field_size_limit(200)
    try:
        fast, slow = _error(root, True, monkeypatch), _error(root, False, monkeypatch)
    finally:
        csv.field_size_limit(limit)
    assert str(fast) == str(slow) and fast.line == slow.line == 2
    assert str(fast).startswith("r.csv line 2: field larger than field limit (200)")


def test_a_large_file_is_read_by_pyarrow_with_the_same_result(tmp_path, monkeypatch):
    """Several of pyarrow's blocks (its threads), integer and string ids, dates."""
    rng = np.random.default_rng(0)
    n = 60_000
    user, item = rng.integers(0, 3_000, n), rng.integers(0, 900, n)
    day = rng.integers(1, 28, n)
    lines = [
        f"{u},it{i:04d},{(u + i) % 10 / 2 + 0.5},2024-02-{d:02d}T{u % 24:02d}:00:00"
        for u, i, d in zip(user, item, day)
    ]
    path = _write(tmp_path / "d" / "big.csv", "\n".join([CSV_HEAD, *lines]) + "\n")
    monkeypatch.setattr(files.columnar, "BLOCK", 1 << 16)
    fast, slow = _read(path, True, monkeypatch), _read(path, False, monkeypatch)
    assert fast.meta["readers"] == {"big.csv": "pyarrow"}
    _same(fast, slow)
    assert fast.meta["id_order"] == {"users": "numeric", "items": "string"}


def test_the_reader_benchmark_compares_both_readers(tmp_path, monkeypatch):
    """``python -m benchmarks.data_loading --rows N`` on a tiny file: each reader in its own
    child process, the same arrays from both, the JSON under benchmarks/out (here tmp_path)."""
    import json

    from benchmarks import common, data_loading

    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    argv = ["data_loading", "--rows", "3000", "--repeats", "1", "--shared", ""]
    monkeypatch.setattr(sys, "argv", [*argv, "--tmp", str(tmp_path / "files"), "--name", "t"])
    data_loading.main()
    doc = json.loads((tmp_path / "out" / "t.json").read_text())
    got = doc["figures"]["files"]
    assert set(got) == {"synthetic 3,000 rows (CSV)", "synthetic 3,000 rows (RecBole .inter)"}
    for case in got.values():
        assert case["same_result"] and case["rows"] == 3000
        assert case["python"]["readers_used"] == ["python"]
        assert case["pyarrow"]["readers_used"] == ["pyarrow"]
        assert case["pyarrow"]["peak_rss_mib"] > 0 and len(case["pyarrow"]["read_s"]) == 1
    assert "pyarrow.csv.read_csv" in doc["figures"]["parsers_on_the_synthetic_csv"]


def test_integer_ids_are_ordered_by_value_then_string():
    """The id order both readers share: integers by value (ties such as "007" and "7" in string
    order), past int64 too; any other token makes the order the string order."""
    tokens = ["7", "007", "+7", "-0", "0", "١٢", "-12", "9" * 25, "10", "-" + "9" * 22]
    universe, numeric = files._universe(np.array(tokens, dtype=str))
    assert numeric
    assert universe.tolist() == sorted(tokens, key=lambda t: (int(t), t))
    universe, numeric = files._universe(np.array([*tokens, "x"], dtype=str))
    assert not numeric and universe.tolist() == sorted([*tokens, "x"])


def test_reading_with_pyarrow_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas (a third of a second, 60 MB) on its first numpy conversion where
    pandas is installed; the reader converts through buffers instead (a fresh interpreter)."""
    import subprocess

    _write(tmp_path / "r.csv", "user,item,rating,time\n a,x,4,2024-01-01\nb,y,3,5\n")
    _lightgcn(tmp_path / "lg", "0 1 2\n1 2\n", trust="0 1\n")
    code = (
        "import sys; from pathlib import Path; import data.loaders.files as F\n"
        f"for p in (Path({str(tmp_path / 'r.csv')!r}), Path({str(tmp_path / 'lg')!r})):\n"
        "    layout = F.detect_layout(p) if p.is_dir() else F.file_layout(p)\n"
        "    raw = F.read_folder(layout, None)\n"
        "    assert set(raw.meta['readers'].values()) == {'pyarrow'}, raw.meta['readers']\n"
        "print('pandas' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
