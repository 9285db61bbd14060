"""A user's own dataset, from a folder in a standard file format (the format is detected).

Layouts, tried in this order:

- **RecBole atomic files** (``recbole``): ``<name>.inter`` — tab-separated, a typed header
  ``user_id:token<TAB>item_id:token[<TAB>rating:float][<TAB>timestamp:float]`` — and/or the
  pre-split ``<name>.train.inter`` + ``<name>.test.inter`` [+ ``<name>.valid.inter``], which are
  the published split (``split="auto"``); optional ``<name>.net`` (social links: the first two
  columns, e.g. ``source_id:token<TAB>target_id:token``), ``<name>.item`` (item tags: the
  ``token``/``token_seq`` columns named class, genre(s), category/categories or tag(s); a
  ``token_seq`` holds space-separated tokens) and ``<name>.user`` (user features: ``float``
  columns numeric, ``token`` columns categorical; ``*_seq`` columns are not used).
- **LightGCN-style** (``lightgcn``): ``train.txt`` + ``test.txt`` [+ ``valid.txt``] with lines
  ``user item item ...`` (whitespace-separated; the published split); optional ``trust.txt`` or
  ``social.txt`` with lines ``user user [weight]``. No id-map files are needed.
- **CSV/TSV** (``csv``): one ``.csv``/``.tsv`` file whose header names a user and an item column
  and optionally rating and timestamp (the delimiter — comma, tab, semicolon or ``|`` — is taken
  from the header line), or ``train.csv`` + ``test.csv`` [+ ``valid.csv``] (the published split);
  optional ``links.csv`` (first two columns: source and target user), ``item_tags.csv`` (item
  column, then tag columns; a cell may hold several tags separated by ``|``; several rows per
  item allowed) and ``user_features.csv`` (user column, then one column per feature: numeric when
  every value is a number, else categorical). Each may also be ``.tsv``.

One interaction file may also be given on its own (:func:`file_layout`): a ``.csv``/``.tsv``
file (or one of another name whose header names a user and an item column) or a RecBole
``<name>.inter`` file is then the whole dataset, without side files or a published split; a split
part, a side file or a file of another format is refused with a message to give its folder.

Column names are matched case-insensitively: user ``user_id``/``user``/``userid``/``uid``; item
``item_id``/``item``/``itemid``/``iid``; rating ``rating``/``score``; timestamp
``timestamp``/``time``/``ts``/``date``/``datetime``. Other columns are ignored (listed in
``meta["ignored_columns"]``) — but for a name close to an accepted rating or timestamp name (difflib
ratio >= 0.8, the closeness of the did-you-mean for a missing user or item column) while the
header has no such column: ``ratng`` is taken for a misspelt rating, and refused in one line
naming the column and the name meant (``... header: column name not recognised: 'ratng' (did you
mean 'rating'?); ...``), since leaving it out would load explicit data as implicit (or without
timestamps) and let a protocol blame the data. Timestamps are numbers or ISO 8601 dates (seconds since 1970);
fractional ones are replaced by their rank (the order is kept).

Ids of any type are remapped densely: by numeric order when every id of the kind is an
integer, else by string order (so integer ids that are already ``0..n-1`` keep their values).
The universe is the ids that occur in the interactions; side rows (links, tags, features) of
other ids are dropped and counted. Users missing from a features file get the category
``<missing>`` (categorical) or the mean (numeric). A malformed row raises
:class:`~data.errors.DataFormatError` naming the file and line; a folder with none of the
layouts raises :class:`~data.errors.UnknownLayoutError` listing what was looked for — unless
it holds one CSV/TSV table that is neither a side file nor a split part: that table's problem
(empty file, or the missing user/item column with the accepted names and the column names not
recognised) is then raised as a ``DataFormatError``. An interaction file with a header but no
rows is refused (``"no rows"``).

Interaction files (and LightGCN social files) are read by pyarrow's CSV reader
(:mod:`data.loaders.columnar`) wherever it gives exactly what the Python reader (the ``csv``
module, or ``str.split``, line by line) gives; any file it cannot read so — a malformed row, a
blank row among the data, a quoted CSV field, text that is not UTF-8, an empty id, a value that
is not a finite number, ... — is read by the Python reader from the same bytes, which gives the
same result or raises its error naming the line: the errors are the Python reader's, word for
word. ``meta["readers"]`` says which reader read each interaction file; ``COLUMNAR = False``
reads them all with the Python reader. Side files of CSV and RecBole folders are read by the
Python reader.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import hashlib
import io
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import scipy.sparse as sp

from data.errors import DataFormatError, UnknownLayoutError
from data.loaders import columnar
from data.loaders.raw import RawData, concat
from data.loaders.text import read_bytes
from data.types import Interactions

FORMATS = ("recbole", "lightgcn", "csv")
FILES_SPLIT = "files"  # the published split's name: the folder's own train/test files

USER_NAMES = ("user_id", "user", "userid", "uid")
ITEM_NAMES = ("item_id", "item", "itemid", "iid")
RATING_NAMES = ("rating", "score")
TIME_NAMES = ("timestamp", "time", "ts", "date", "datetime")
TAG_NAMES = ("class", "genre", "genres", "category", "categories", "tag", "tags")
RECBOLE_TYPES = ("token", "token_seq", "float", "float_seq")
DELIMITERS = {",": "comma", "\t": "tab", ";": "semicolon", "|": "'|'"}
PARTS = (("train", "train"), ("val", "valid"), ("test", "test"))
SIDE_CSV = {"links": "links", "item_tags": "item_tags", "user_features": "user_features"}
MISSING = "<missing>"
EMPTY_TABLE = "empty file: a header line naming a user and an item column was expected"
CLOSE = 0.8  # difflib ratio from which an unrecognised column name is taken for a misspelling

LOOKED_FOR = (
    "RecBole atomic files (<name>.inter, or <name>.train.inter with <name>.test.inter), "
    "LightGCN-style train.txt with test.txt, or a .csv/.tsv file whose header names a user and "
    "an item column (or train.csv with test.csv)"
)

_INT = re.compile(r"[+-]?\d+")


# --------------------------------------------------------------------------- layout detection


@dataclass
class Layout:
    """What :func:`detect_layout` found in a folder."""

    format: str
    name: str  # the dataset's name: RecBole's <name>, else the folder's name
    root: Path
    pooled: str | None  # file holding all interactions (None: pool the split files)
    split_files: dict[str, str]  # part ("train", "val", "test") -> file name; {} if none
    side: dict[str, str] = field(default_factory=dict)  # "links"/"item_tags"/"user_features"
    has_ratings: bool = False
    has_timestamps: bool = False
    single_file: bool = False  # the dataset is the one file ``pooled`` (see :func:`file_layout`)

    @property
    def published_splits(self) -> tuple[str, ...]:
        return (FILES_SPLIT,) if self.split_files else ()


def _first_line(path: Path) -> str:
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                return _decode(raw).rstrip("\r\n")
    return ""


def _role(names: list[str], aliases: tuple[str, ...]) -> int | None:
    for alias in aliases:
        if alias in names:
            return names.index(alias)
    return None


def _clean(name: str) -> str:
    return name.strip().strip('"').strip("'").strip().lower()


def _recbole_names(header: str) -> list[str]:
    return [_clean(f.partition(":")[0]) for f in header.split("\t")]


def _csv_header(line: str) -> tuple[str, list[str]]:
    """(delimiter, lower-cased column names) of a CSV/TSV header line."""
    counts = {d: line.count(d) for d in DELIMITERS}
    delim = max(counts, key=lambda d: counts[d])
    if counts[delim] == 0:
        return ",", [_clean(line)]
    return delim, [_clean(x) for x in next(csv.reader([line], delimiter=delim))]


def _names_user_item(names: list[str]) -> bool:
    return _role(names, USER_NAMES) is not None and _role(names, ITEM_NAMES) is not None


def _header_problem(names: list[str]) -> str | None:
    """What keeps an interaction file's header (lower-cased names) from being read: each
    missing user/item column with the names accepted for it, then the columns that are not
    recognised (with the accepted name they are closest to, if close); with a user and an item
    column, a misspelt optional column (:func:`_misspelt`); ``None`` if none."""
    missing = [
        (what, aliases)
        for what, aliases in (("user id", USER_NAMES), ("item id", ITEM_NAMES))
        if _role(names, aliases) is None
    ]
    if not missing:
        return _misspelt(names)
    problem = " and ".join(
        f"no {what} column (accepted names: {', '.join(aliases)})" for what, aliases in missing
    )
    known = USER_NAMES + ITEM_NAMES + RATING_NAMES + TIME_NAMES
    unknown = [n for n in names if n not in known]
    if not unknown:
        return f"{problem}; found {', '.join(names)}"
    wanted = [alias for _, aliases in missing for alias in aliases] + _absent_optional(names)
    shown = []
    for name in unknown:
        close = difflib.get_close_matches(name, wanted, n=1, cutoff=CLOSE)
        shown.append(repr(name) + (f" (did you mean {close[0]!r}?)" if close else ""))
    label = "column name" if len(unknown) == 1 else "column names"
    problem += f"; {label} not recognised: {', '.join(shown)}"
    if len(names) == 1:
        problem += " (columns are separated by a comma, tab, semicolon or '|')"
    return problem


def _absent_optional(names: list[str]) -> list[str]:
    """The accepted names of the optional columns (rating, timestamp) the header lacks."""
    return [
        alias
        for aliases in (RATING_NAMES, TIME_NAMES)
        if _role(names, aliases) is None
        for alias in aliases
    ]


def _misspelt(names: list[str]) -> str | None:
    """The header's columns that are not recognised but are close (difflib ratio >= 0.8, as for
    a missing user or item column) to an accepted name of an optional column the header lacks:
    ``ratng`` beside no rating column is a misspelt rating, not a column to leave out (left out,
    explicit data would load as implicit). ``None`` if none; other columns are ignored."""
    wanted = _absent_optional(names)
    known = USER_NAMES + ITEM_NAMES + RATING_NAMES + TIME_NAMES
    shown = []
    for name in names:
        close = [] if name in known else difflib.get_close_matches(name, wanted, 1, CLOSE)
        if close:
            shown.append(f"{name!r} (did you mean {close[0]!r}?)")
    if not shown:
        return None
    label, it = ("column name", "it") if len(shown) == 1 else ("column names", "each")
    return (
        f"{label} not recognised: {', '.join(shown)}; rename {it} to the name meant, or to a "
        "name not close to an accepted one to have it ignored"
    )


def _check_misspelt(path: Path, names: list[str]) -> None:
    """Refuse a misspelt optional column of an interaction file's header before any row is
    read (so before the split is chosen from the columns the header names)."""
    problem = _misspelt(names) if _names_user_item(names) else None
    if problem is not None:
        raise DataFormatError(path, "header", problem)


def _table_problem(path: Path) -> tuple[str | None, str]:
    """(place, problem) of a CSV/TSV file that cannot be an interaction table."""
    line = _first_line(path)
    if not line.strip():
        return None, EMPTY_TABLE
    return "header", _header_problem(_csv_header(line)[1]) or "unreadable header"


def detect_layout(root: Path) -> Layout:
    """The layout of the dataset folder ``root`` (see the module docstring)."""
    root = Path(root)
    files = sorted(p.name for p in root.iterdir() if p.is_file())
    # RecBole
    inter = [f for f in files if f.endswith(".inter")]
    if inter:
        stems: dict[str, dict[str, str]] = {}
        for f in inter:
            base = f[: -len(".inter")]
            for part, word in PARTS:
                if base.endswith("." + word):
                    stems.setdefault(base[: -len(word) - 1], {})[part] = f
                    break
            else:
                stems.setdefault(base, {})["all"] = f
        usable = {s: p for s, p in stems.items() if "all" in p or {"train", "test"} <= set(p)}
        if len(usable) > 1:
            raise UnknownLayoutError(
                root,
                LOOKED_FOR,
                f"several RecBole datasets in one folder ({', '.join(sorted(usable))})",
            )
        if usable:
            (name, found), *_ = usable.items()
            splits = {k: v for k, v in found.items() if k != "all"}
            if not {"train", "test"} <= set(splits):
                splits = {}
            side = {
                role: f"{name}.{ext}"
                for role, ext in (
                    ("links", "net"),
                    ("item_tags", "item"),
                    ("user_features", "user"),
                )
                if f"{name}.{ext}" in files
            }
            main = found.get("all") or splits["train"]
            names = _recbole_names(_first_line(root / main))
            _check_misspelt(root / main, names)
            return Layout(
                "recbole",
                name,
                root,
                found.get("all"),
                splits,
                side,
                _role(names, RATING_NAMES) is not None,
                _role(names, TIME_NAMES) is not None,
            )
    # LightGCN
    if "train.txt" in files and "test.txt" in files:
        splits = {"train": "train.txt", "test": "test.txt"}
        if "valid.txt" in files:
            splits["val"] = "valid.txt"
        side = {}
        for f in ("trust.txt", "social.txt"):
            if f in files:
                side["links"] = f
                break
        return Layout("lightgcn", root.name, root, None, splits, side)
    # CSV / TSV
    tables = [f for f in files if f.lower().endswith((".csv", ".tsv"))]
    stem = {f: f.rsplit(".", 1)[0].lower() for f in tables}
    side = {}
    for role, base in SIDE_CSV.items():
        match = [f for f in tables if stem[f] == base]
        if match:
            side[role] = match[0]
    splits = {}
    for part, word in (*PARTS, ("val", "val")):
        match = [f for f in tables if stem[f] == word]
        if match and part not in splits:
            splits[part] = match[0]
    if not {"train", "test"} <= set(splits):
        splits = {}
    used = set(side.values()) | set(splits.values())
    candidates = [
        f
        for f in tables
        if f not in used
        and stem[f] not in ("train", "test", "valid", "val")
        and _names_user_item(_csv_header(_first_line(root / f))[1])
    ]
    if len(candidates) > 1:
        preferred = [f for f in candidates if stem[f] in ("interactions", "ratings", "inter")]
        if len(preferred) != 1:
            raise UnknownLayoutError(
                root,
                LOOKED_FOR,
                f"several interaction tables ({', '.join(candidates)}); keep one, or name it "
                "interactions.csv",
            )
        candidates = preferred
    if candidates or splits:
        main = candidates[0] if candidates else splits["train"]
        _, names = _csv_header(_first_line(root / main))
        _check_misspelt(root / main, names)
        return Layout(
            "csv",
            root.name,
            root,
            candidates[0] if candidates else None,
            splits,
            side,
            _role(names, RATING_NAMES) is not None,
            _role(names, TIME_NAMES) is not None,
        )
    # No layout. A CSV/TSV table that is neither a side file nor a split part was meant as the
    # interaction table: when it is the only one its problem is the error, else each is listed.
    loose = [
        f for f in tables if f not in used and stem[f] not in ("train", "test", "valid", "val")
    ]
    if len(loose) == 1:
        place, problem = _table_problem(root / loose[0])
        raise DataFormatError(root / loose[0], place, problem)
    shown = ", ".join(files[:8]) + (f" and {len(files) - 8} more" if len(files) > 8 else "")
    detail = f"found {shown or 'no files'}"
    for f in loose:
        place, problem = _table_problem(root / f)
        detail += f"; {f}{' ' + place if place else ''}: {problem}"
    split_stems = {stem[f] for f in tables} & {"train", "test", "valid", "val"}
    if split_stems and not {"train", "test"} <= split_stems:
        detail += "; a split needs both train.csv and test.csv (or .tsv)"
    raise UnknownLayoutError(root, LOOKED_FOR, detail)


def file_layout(path: Path) -> Layout:
    """The layout of one interaction file given on its own: a ``.csv``/``.tsv`` file (or a file
    of another name whose first line is a CSV/TSV header naming a user and an item column) or a
    RecBole ``<name>.inter`` file. It is the whole dataset (its rows pooled, no side files, no
    published split). A split part or a side file, or a file of another format, raises a
    :class:`~data.errors.DataFormatError` saying to give its folder instead."""
    path = Path(path)
    name, lower = path.name, path.name.lower()
    base, suffix = lower.rsplit(".", 1) if "." in lower else (lower, "")
    suffix = "." + suffix if suffix else ""
    folder = f"give its folder ({path.parent}) instead"
    if suffix == ".inter" and base.rsplit(".", 1)[-1] in ("train", "valid", "test"):
        raise DataFormatError(path, None, f"one part of a RecBole split; {folder}")
    if suffix in (".csv", ".tsv") and base in ("train", "valid", "val", "test"):
        raise DataFormatError(path, None, f"one part of a train/test split; {folder}")
    if suffix in (".csv", ".tsv") and base in SIDE_CSV.values():
        raise DataFormatError(path, None, f"side information, not interactions; {folder}")
    if suffix in (".net", ".item", ".user"):
        raise DataFormatError(path, None, f"RecBole side information, not interactions; {folder}")
    if lower in ("train.txt", "valid.txt", "test.txt", "trust.txt", "social.txt"):
        raise DataFormatError(path, None, f"one file of a LightGCN-style folder; {folder}")
    if suffix == ".inter":
        line = _first_line(path)
        names = _recbole_names(line)
        problem = _header_problem(names) if line.strip() else None  # empty: the reader says so
        if problem is not None:
            raise DataFormatError(path, "header", problem)
        return Layout(
            "recbole",
            name[: -len(".inter")],
            path.parent,
            name,
            {},
            has_ratings=_role(names, RATING_NAMES) is not None,
            has_timestamps=_role(names, TIME_NAMES) is not None,
            single_file=True,
        )
    _, names = _csv_header(_first_line(path))
    if suffix not in (".csv", ".tsv") and not _names_user_item(names):
        raise DataFormatError(
            path,
            None,
            "a dataset given as one file must be a .csv/.tsv file whose header names a user and "
            f"an item column, or a RecBole .inter file; for other formats {folder}",
        )
    # the header is checked before any row, as for a folder's table (a wrong header usually
    # also makes the rows' field counts disagree with it)
    if _header_problem(names) is not None:
        raise DataFormatError(path, *_table_problem(path))
    return Layout(
        "csv",
        name.rsplit(".", 1)[0] if "." in name else name,
        path.parent,
        name,
        {},
        has_ratings=_role(names, RATING_NAMES) is not None,
        has_timestamps=_role(names, TIME_NAMES) is not None,
        single_file=True,
    )


# --------------------------------------------------------------------------- reading rows


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


@dataclass
class _Table:
    """A text table: its header names (lower case), declared types (RecBole) and rows."""

    path: Path
    names: list[str]
    types: list[str]
    rows: list[list[str]]
    lines: list[int]  # 1-based line number of each row
    sep: str

    def where(self, k: int) -> str:
        return f"line {self.lines[k]}"

    def fail(self, k: int, problem: str) -> DataFormatError:
        return DataFormatError(self.path, self.where(k), problem, self.lines[k])

    def column(self, index: int) -> list[str]:
        return [r[index].strip() for r in self.rows]


class _Reader:
    """Reads the folder's files, remembering each one's sha256 and size."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.hashes: dict[str, dict] = {}
        self.readers: dict[str, str] = {}  # interaction file -> "pyarrow" or "python"

    def data(self, name: str) -> bytes:
        data = read_bytes(self.layout.root / name, self.layout.name)
        self.hashes[name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        return data

    def text(self, name: str, data: bytes | None = None) -> str:
        return _decode(self.data(name) if data is None else data)

    def recbole(self, name: str, data: bytes | None = None) -> _Table:
        path = self.layout.root / name
        lines = self.text(name, data).split("\n")
        head = next((k for k, line in enumerate(lines) if line.strip()), None)
        if head is None:
            raise DataFormatError(path, None, "empty file: a typed header line was expected")
        names, types = [], []
        for f in lines[head].rstrip("\r").split("\t"):
            fname, _, ftype = f.partition(":")
            ftype = ftype.strip().lower() or "token"
            if ftype not in RECBOLE_TYPES:
                raise DataFormatError(
                    path,
                    f"line {head + 1}",
                    f"header field {f!r}: type must be one of {', '.join(RECBOLE_TYPES)}",
                    head + 1,
                )
            names.append(_clean(fname))
            types.append(ftype)
        rows, numbers = [], []
        for k in range(head + 1, len(lines)):
            line = lines[k].rstrip("\r")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != len(names):
                raise DataFormatError(
                    path,
                    f"line {k + 1}",
                    f"expected {len(names)} tab-separated fields (as in the header), "
                    f"got {len(fields)}",
                    k + 1,
                )
            rows.append(fields)
            numbers.append(k + 1)
        return _Table(path, names, types, rows, numbers, "tab-separated")

    def csv(self, name: str, data: bytes | None = None) -> _Table:
        path = self.layout.root / name
        text = self.text(name, data)
        first = next((line for line in text.split("\n") if line.strip()), "")
        delim, _ = _csv_header(first.rstrip("\r"))
        reader = csv.reader(io.StringIO(text), delimiter=delim)
        names: list[str] | None = None
        rows, numbers = [], []
        sep = f"{DELIMITERS[delim]}-separated"
        try:
            for fields in reader:
                if not fields or all(not f.strip() for f in fields):
                    continue
                if names is None:
                    names = [_clean(f) for f in fields]
                    continue
                if len(fields) != len(names):
                    raise DataFormatError(
                        path,
                        f"line {reader.line_num}",
                        f"expected {len(names)} {sep} fields (as in the header), got {len(fields)}",
                        reader.line_num,
                    )
                rows.append(fields)
                numbers.append(reader.line_num)
        except csv.Error as e:
            raise DataFormatError(
                path, f"line {reader.line_num}", str(e), reader.line_num
            ) from None
        if names is None:
            raise DataFormatError(path, None, EMPTY_TABLE)
        return _Table(path, names, ["token"] * len(names), rows, numbers, sep)

    def table(self, name: str, data: bytes | None = None) -> _Table:
        if self.layout.format == "recbole":
            return self.recbole(name, data)
        return self.csv(name, data)

    def ragged(self, name: str, data: bytes | None = None) -> tuple[list[list[str]], list[int]]:
        """Whitespace-separated lines (LightGCN files): fields and line numbers."""
        rows, numbers = [], []
        for k, line in enumerate(self.text(name, data).split("\n")):
            fields = line.split()
            if fields:
                rows.append(fields)
                numbers.append(k + 1)
        return rows, numbers


# --------------------------------------------------------------------------- columnar fast path
# An interaction file is read by pyarrow (data.loaders.columnar) where that gives exactly what the
# Python reader above gives; where it cannot tell (a malformed or unusual row, text that is not
# UTF-8, an empty id, a value that is not a finite number...), the Python reader reads the same
# bytes: it gives the same result or raises its one-line error naming the line. Side files (links
# of a CSV/RecBole folder, tags, features) are read by the Python reader.

COLUMNAR = True  # False: the Python reader only (the baseline of benchmarks.data_loading)


def _decoded_lines(data: bytes, ends: list[int]) -> Iterator[str]:
    """The lines of ``data`` as the Python reader's text has them (UTF-8, a leading BOM dropped),
    each with its ``\\n``; ``ends`` gets the offset of the byte after each line given."""
    pos = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        stop = len(data) if end < 0 else end + 1
        ends.append(stop)
        yield data[pos:stop].decode("utf-8")
        pos = stop


def _fast_header(data: bytes, fmt: str) -> tuple[list[str], str, int] | None:
    """(column names, delimiter, offset of the first byte after the header) of an interaction
    table, read as the Python reader reads its header; ``None`` where that reader would find it
    unreadable or not UTF-8 (it then says so, or decodes latin-1)."""
    ends: list[int] = []
    lines = _decoded_lines(data, ends)
    try:
        first = next((line for line in lines if line.strip()), None)
        if first is None:
            return None
        if fmt == "recbole":
            fields = first.rstrip("\n").rstrip("\r").split("\t")
            for f in fields:
                if (f.partition(":")[2].strip().lower() or "token") not in RECBOLE_TYPES:
                    return None
            return [_clean(f.partition(":")[0]) for f in fields], "\t", ends[-1]
        delim = _csv_header(first.rstrip("\n").rstrip("\r"))[0]
        # the lines before `first` are blank, so the csv module's first row is read from it (a
        # quoted field may go on to the next lines)
        fields = next(csv.reader(itertools.chain([first], lines), delimiter=delim), [])
    except (csv.Error, UnicodeDecodeError):
        return None
    if all(not f.strip() for f in fields):
        return None
    return [_clean(f) for f in fields], delim, ends[-1]


def _roles(names: list[str]) -> dict[str, int | None]:
    return {
        "user id": _role(names, USER_NAMES),
        "item id": _role(names, ITEM_NAMES),
        "rating": _role(names, RATING_NAMES),
        "timestamp": _role(names, TIME_NAMES),
    }


def _note_ignored(names: list[str], roles: dict, name: str, ignored: dict) -> None:
    used = {i for i in roles.values() if i is not None}
    extra = [n for i, n in enumerate(names) if i not in used]
    if extra:
        ignored[name] = extra


def _fast_table_rows(fmt: str, name: str, data: bytes, ignored: dict) -> _Rows | None:
    """An interaction table read by pyarrow; ``None``: leave it to the Python reader."""
    head = _fast_header(data, fmt)
    if head is None:
        return None
    names, delim, start = head
    if _header_problem(names) is not None:
        return None
    roles = _roles(names)
    cols = columnar.table(
        data,
        start,
        len(names),
        delim,
        [i for i in roles.values() if i is not None],
        csv_rules=fmt != "recbole",
    )
    if cols is None:
        return None
    r, ts = roles["rating"], roles["timestamp"]
    user = columnar.ids(cols[roles["user id"]])
    item = None if user is None else columnar.ids(cols[roles["item id"]])
    rating = None if item is None or r is None else columnar.floats(cols[r])
    time = None if item is None or ts is None else columnar.times(cols[ts])
    if item is None or (r is not None and rating is None) or (ts is not None and time is None):
        return None
    _note_ignored(names, roles, name, ignored)
    return _Rows(user, item, rating, time, name)


def _fast_lines(data: bytes, sizes: tuple[int, ...] | None = None):
    """LightGCN lines read by pyarrow: (tokens, tokens per non-blank line, offset of each line's
    first token); ``None``: leave them to the Python reader (also when ``sizes`` is given and a
    line has another number of tokens)."""
    got = columnar.token_lines(data) if COLUMNAR else None
    if got is None:
        return None
    tokens, counts = got
    if sizes is not None and not np.isin(counts, sizes).all():
        return None
    return tokens, counts, np.cumsum(counts) - counts


# --------------------------------------------------------------------------- field conversion


def _tokens(table: _Table, index: int, what: str) -> np.ndarray:
    values = table.column(index)
    for k, v in enumerate(values):
        if not v:
            raise table.fail(k, f"empty {what}")
    return np.array(values, dtype=str)


def _floats(table: _Table, index: int, what: str) -> np.ndarray:
    values = table.column(index)
    try:
        out = np.array(values, dtype=np.float64)
    except ValueError:
        out = None
    if out is None or not np.isfinite(out).all():
        for k, v in enumerate(values):
            try:
                if np.isfinite(float(v)):
                    continue
            except ValueError:
                pass
            raise table.fail(k, f"{what} {v!r} is not a finite number")
    return out


def _times(table: _Table, index: int) -> np.ndarray:
    """Seconds as float64: numbers as they are, ISO 8601 dates since 1970 (UTC if naive)."""
    values = table.column(index)
    try:
        out = np.array(values, dtype=np.float64)
        if np.isfinite(out).all():
            return out
    except ValueError:
        pass
    out = np.empty(len(values), dtype=np.float64)
    for k, v in enumerate(values):
        try:
            out[k] = float(v)
            if np.isfinite(out[k]):
                continue
        except ValueError:
            try:
                stamp = datetime.fromisoformat(v)
                if stamp.tzinfo is None:
                    stamp = stamp.replace(tzinfo=timezone.utc)
                out[k] = stamp.timestamp()
                continue
            except ValueError:
                pass
        raise table.fail(k, f"timestamp {v!r} is neither a number nor an ISO 8601 date")
    return out


# --------------------------------------------------------------------------- dense ids


def _universe(tokens: np.ndarray) -> tuple[np.ndarray, bool]:
    """Distinct tokens in id order: numeric when all are integers, else string order; and
    whether the order is numeric."""
    uniq = np.unique(tokens)  # string order
    values = uniq.tolist()
    numeric = bool(values) and all(map(_INT.fullmatch, values))
    if numeric:
        ints = list(map(int, values))
        if -(2**63) <= min(ints) and max(ints) < 2**63:
            # a stable sort keeps the string order among equal values ("007", "7")
            order = np.argsort(np.array(ints, dtype=np.int64), kind="stable")
        else:
            order = sorted(range(len(values)), key=lambda k: (ints[k], values[k]))
        uniq = uniq[np.array(order, dtype=np.int64)]
    return uniq, numeric


def _distinct(tokens) -> np.ndarray:
    """A ``str`` array holding every token of ``tokens`` (an array of ``str``, or a pyarrow
    dictionary array, whose dictionary holds exactly the tokens used)."""
    if isinstance(tokens, pa.DictionaryArray):
        return np.array(tokens.dictionary.to_pylist(), dtype=str)
    return tokens


class _IdMap:
    def __init__(self, tokens: list):
        """The ids of the token arrays ``tokens`` (arrays of ``str`` from the Python reader,
        dictionary arrays from pyarrow's)."""
        self.universe, self.numeric = _universe(np.concatenate([_distinct(t) for t in tokens]))
        self._order = np.argsort(self.universe, kind="stable")
        self._sorted = self.universe[self._order]

    def __len__(self) -> int:
        return len(self.universe)

    def codes(self, tokens) -> np.ndarray:
        """int64 codes; -1 for a token outside the universe. ``tokens``: an array of ``str`` or
        a pyarrow string or dictionary array (coded once per distinct token)."""
        if isinstance(tokens, (pa.Array, pa.ChunkedArray)):
            if not isinstance(tokens, pa.DictionaryArray):
                tokens = pc.dictionary_encode(tokens)
                tokens = tokens.combine_chunks() if isinstance(tokens, pa.ChunkedArray) else tokens
            lut = self.codes(np.array(tokens.dictionary.to_pylist(), dtype=str))
            return lut[columnar.numpy(tokens.indices)]
        tokens = np.asarray(tokens, dtype=str)
        if len(self._sorted) == 0:
            return np.full(len(tokens), -1, dtype=np.int64)
        idx = np.searchsorted(self._sorted, tokens).clip(0, len(self._sorted) - 1)
        found = self._sorted[idx] == tokens
        return np.where(found, self._order[idx], -1).astype(np.int64)


# --------------------------------------------------------------------------- interactions


@dataclass
class _Rows:
    user: np.ndarray | pa.DictionaryArray  # str tokens (Python reader) or coded (pyarrow's)
    item: np.ndarray | pa.DictionaryArray
    rating: np.ndarray | None
    time: np.ndarray | None  # float seconds
    file: str


def _table_rows(reader: _Reader, name: str, ignored: dict) -> _Rows:
    data = reader.data(name)
    if COLUMNAR:
        fast = _fast_table_rows(reader.layout.format, name, data, ignored)
        if fast is not None:
            reader.readers[name] = "pyarrow"
            return fast
    reader.readers[name] = "python"
    t = reader.table(name, data)
    roles = _roles(t.names)
    problem = _header_problem(t.names)
    if problem is not None:
        raise DataFormatError(t.path, "header", problem, t.lines[0] - 1 if t.lines else None)
    if not t.rows:
        raise DataFormatError(t.path, None, "no rows: the file has a header but no interactions")
    _note_ignored(t.names, roles, name, ignored)
    r, ts = roles["rating"], roles["timestamp"]
    return _Rows(
        user=_tokens(t, roles["user id"], "user id"),
        item=_tokens(t, roles["item id"], "item id"),
        rating=None if r is None else _floats(t, r, "rating"),
        time=None if ts is None else _times(t, ts),
        file=name,
    )


def _adjacency_rows(reader: _Reader, name: str, meta: dict) -> _Rows:
    data = reader.data(name)
    fast = _fast_lines(data)
    if fast is not None and (fast[1] > 1).any():  # else the Python reader says "no rows"
        tokens, counts, first = fast
        reader.readers[name] = "pyarrow"
        meta.setdefault("lines_without_items", {})[name] = int((counts == 1).sum())
        is_item = np.ones(len(tokens), dtype=bool)
        is_item[first] = False
        user = columnar.ids(tokens.take(columnar.indices(np.repeat(first, counts - 1))))
        item = columnar.ids(tokens.take(columnar.indices(np.flatnonzero(is_item))))
        return _Rows(user, item, None, None, name)
    reader.readers[name] = "python"
    rows, _ = reader.ragged(name, data)
    counts = np.array([len(r) - 1 for r in rows], dtype=np.int64)
    meta.setdefault("lines_without_items", {})[name] = int((counts == 0).sum())
    if not counts.sum():
        raise DataFormatError(
            reader.layout.root / name, None, "no rows: no line lists a user and an item"
        )
    user = np.repeat(np.array([r[0] for r in rows], dtype=str), counts)
    item = np.array([tok for r in rows for tok in r[1:]], dtype=str)
    return _Rows(user, item, None, None, name)


def _check_columns(rows: list[_Rows], root: Path) -> None:
    for attr, what in (("rating", "rating"), ("time", "timestamp")):
        has = [r.file for r in rows if getattr(r, attr) is not None]
        if has and len(has) != len(rows):
            lacks = [r.file for r in rows if getattr(r, attr) is None]
            raise DataFormatError(
                root / lacks[0],
                "header",
                f"no {what} column, but {has[0]} has one (every interaction file must agree)",
            )


def _timestamps(rows: list[_Rows], meta: dict) -> list[np.ndarray | None]:
    if rows[0].time is None:
        meta["timestamps"] = "none"
        return [None] * len(rows)
    joined = np.concatenate([r.time for r in rows])
    if np.array_equal(joined, np.floor(joined)):
        meta["timestamps"] = "as in the files (numbers, or ISO dates as seconds since 1970)"
        values = joined.astype(np.int64)
    else:
        meta["timestamps"] = "ranks of the files' fractional timestamps (order kept)"
        values = np.unique(joined, return_inverse=True)[1].astype(np.int64)
    bounds = np.cumsum([0] + [len(r.time) for r in rows])
    return [values[bounds[k] : bounds[k + 1]] for k in range(len(rows))]


# --------------------------------------------------------------------------- side information


def _links(reader: _Reader, layout: Layout, users: _IdMap) -> np.ndarray:
    name = layout.side["links"]
    path = layout.root / name
    data = reader.data(name) if layout.format == "lightgcn" else None
    fast = None if data is None else _fast_lines(data, (2, 3))
    if fast is not None:
        tokens, _, first = fast
        src = tokens.take(columnar.indices(first))
        dst = tokens.take(columnar.indices(first + 1))
    elif layout.format == "lightgcn":
        rows, numbers = reader.ragged(name, data)
        for fields, number in zip(rows, numbers):
            if len(fields) not in (2, 3):
                raise DataFormatError(
                    path,
                    f"line {number}",
                    f"expected 2 or 3 whitespace-separated fields (user user [weight]), "
                    f"got {len(fields)}",
                    number,
                )
        src = np.array([r[0] for r in rows], dtype=str)
        dst = np.array([r[1] for r in rows], dtype=str)
    else:
        t = reader.table(name)
        if len(t.names) < 2:
            raise DataFormatError(
                path, "header", "a links file needs two columns (source user, target user)"
            )
        src, dst = _tokens(t, 0, "source user id"), _tokens(t, 1, "target user id")
    return np.stack([users.codes(src), users.codes(dst)], axis=1).reshape(-1, 2)


def _item_tags(
    reader: _Reader, layout: Layout, items: _IdMap, meta: dict
) -> tuple[sp.csr_matrix, list[str]]:
    name = layout.side["item_tags"]
    t = reader.table(name)
    id_col = _role(t.names, ITEM_NAMES)
    id_col = 0 if id_col is None else id_col
    if layout.format == "recbole":
        tag_cols = [
            i
            for i, n in enumerate(t.names)
            if n in TAG_NAMES and t.types[i] in ("token", "token_seq") and i != id_col
        ]
        split = {i: (str.split if t.types[i] == "token_seq" else (lambda s: [s])) for i in tag_cols}
    else:
        tag_cols = [i for i in range(len(t.names)) if i != id_col]
        split = {i: (lambda s: s.split("|")) for i in tag_cols}
    ignored = [n for i, n in enumerate(t.names) if i != id_col and i not in tag_cols]
    if ignored:
        meta.setdefault("ignored_columns", {})[name] = ignored
    meta["tag_columns"] = [t.names[i] for i in tag_cols]
    ids = _tokens(t, id_col, "item id")
    if layout.format == "recbole":
        _no_duplicates(t, ids, "item id")
    codes = items.codes(ids)
    meta["item_tag_rows_of_items_without_interactions"] = int((codes < 0).sum())
    pairs: list[tuple[int, str]] = []
    for k, code in enumerate(codes.tolist()):
        if code < 0:
            continue
        for i in tag_cols:
            pairs.extend((code, tag.strip()) for tag in split[i](t.rows[k][i]) if tag.strip())
    names = sorted({tag for _, tag in pairs})
    col = {tag: j for j, tag in enumerate(names)}
    rows = np.array([p[0] for p in pairs], dtype=np.int64)
    cols = np.array([col[p[1]] for p in pairs], dtype=np.int64)
    tags = sp.csr_matrix(
        (np.ones(len(pairs), dtype=np.float32), (rows, cols)), shape=(len(items), len(names))
    )
    tags.sum_duplicates()
    tags.data[:] = 1.0
    return tags, names


def _no_duplicates(t: _Table, ids: np.ndarray, what: str) -> None:
    _, first, counts = np.unique(ids, return_index=True, return_counts=True)
    if (counts > 1).any():
        dup_rows = np.flatnonzero(~np.isin(np.arange(len(ids)), first))
        k = int(dup_rows[0])
        raise t.fail(k, f"duplicate {what} {ids[k]!r}")


def _user_features(
    reader: _Reader, layout: Layout, users: _IdMap, raw: RawData, meta: dict
) -> None:
    name = layout.side["user_features"]
    t = reader.table(name)
    id_col = _role(t.names, USER_NAMES)
    id_col = 0 if id_col is None else id_col
    ids = _tokens(t, id_col, "user id")
    _no_duplicates(t, ids, "user id")
    codes = users.codes(ids)
    known = codes >= 0
    meta["user_feature_rows_of_users_without_interactions"] = int((~known).sum())
    present = np.zeros(len(users), dtype=bool)
    present[codes[known]] = True
    meta["users_without_features"] = int((~present).sum())
    values_meta, ignored = {}, []
    for i, fname in enumerate(t.names):
        if i == id_col:
            continue
        if t.types[i].endswith("_seq"):
            ignored.append(fname)
            continue
        column = t.column(i)
        numeric = t.types[i] == "float"
        if layout.format == "csv":
            numeric = all(_is_number(v) for v in column if v) and any(column)
        if numeric:
            filled = [v for v in column if v]
            if t.types[i] == "float":
                for k, v in enumerate(column):
                    if v and not _is_number(v):
                        raise t.fail(k, f"feature {fname} {v!r} is not a finite number")
            mean = float(np.mean(np.array(filled, dtype=np.float64))) if filled else 0.0
            vals = np.array([float(v) if v else mean for v in column], dtype=np.float64)
            out = np.full(len(users), mean, dtype=np.float32)
            out[codes[known]] = vals[known]
            raw.user_features[fname] = out
            raw.feature_kinds[fname] = "numeric"
        else:
            cats = sorted({v for v in column if v})
            if (~present).any() or any(not v for v in column):
                cats.append(MISSING)
            index = {c: j for j, c in enumerate(cats)}
            vals = np.array([index[v if v else MISSING] for v in column], dtype=np.int64)
            out = np.full(len(users), index.get(MISSING, 0), dtype=np.int64)
            out[codes[known]] = vals[known]
            raw.user_features[fname] = out
            raw.feature_kinds[fname] = "categorical"
            raw.feature_cardinality[fname] = len(cats)
            values_meta[fname] = cats
    if ignored:
        meta.setdefault("ignored_columns", {})[name] = ignored
    meta["feature_values"] = values_meta


def _is_number(v: str) -> bool:
    try:
        return bool(np.isfinite(float(v)))
    except ValueError:
        return False


# --------------------------------------------------------------------------- entry point


def read_folder(layout: Layout, split: str | None) -> RawData:
    """Read the folder of ``layout`` into a :class:`RawData`; ``split``: ``"files"`` (the
    folder's train/test[/valid] files) or ``None`` (all interactions pooled: the single
    interaction file when there is one, else the split files together)."""
    if split not in (None, FILES_SPLIT):
        raise ValueError(f"{layout.name}: the only published split is {FILES_SPLIT!r}")
    if split == FILES_SPLIT and not layout.split_files:
        raise ValueError(f"{layout.name}: the folder has no train/test files")
    reader = _Reader(layout)
    source = layout.root / layout.pooled if layout.single_file else layout.root
    meta: dict = {"format": layout.format, "source_path": str(source)}
    ignored: dict = {}
    if split is None and layout.pooled is not None:
        names = {"all": layout.pooled}
    else:
        names = {p: layout.split_files[p] for p, _ in PARTS if p in layout.split_files}
    if layout.format == "lightgcn":
        rows = [_adjacency_rows(reader, f, meta) for f in names.values()]
    else:
        rows = [_table_rows(reader, f, ignored) for f in names.values()]
    _check_columns(rows, layout.root)
    times = _timestamps(rows, meta)
    users = _IdMap([r.user for r in rows])
    items = _IdMap([r.item for r in rows])
    inter = [
        Interactions(
            user=users.codes(r.user),
            item=items.codes(r.item),
            rating=None if r.rating is None else r.rating.astype(np.float32),
            timestamp=t,
        )
        for r, t in zip(rows, times)
    ]
    if split is None and len(inter) > 1:
        parts = {"all": concat(inter)}
    else:
        parts = dict(zip(names, inter))
    explicit = rows[0].rating is not None
    raw = RawData(
        name=layout.name,
        parts=parts,
        explicit=explicit,
        user_ids=np.arange(len(users), dtype=np.int64),
        item_ids=np.arange(len(items), dtype=np.int64),
        split_name=split,
    )
    if "links" in layout.side:
        raw.links = _links(reader, layout, users)
    if "item_tags" in layout.side:
        raw.item_tags, raw.tag_names = _item_tags(reader, layout, items, meta)
    if "user_features" in layout.side:
        _user_features(reader, layout, users, raw, meta)
    if ignored:
        meta.setdefault("ignored_columns", {}).update(ignored)
    meta["readers"] = reader.readers
    raw.files = list(reader.hashes)
    meta["file_sha256"] = {n: h["sha256"] for n, h in reader.hashes.items()}
    meta["file_bytes"] = {n: h["bytes"] for n, h in reader.hashes.items()}
    meta["id_order"] = {
        "users": "numeric" if users.numeric else "string",
        "items": "numeric" if items.numeric else "string",
    }
    raw.meta = meta
    return raw
