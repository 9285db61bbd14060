"""Columnar reading of large interaction files with pyarrow: the fast path of
:mod:`data.loaders.files` (CSV/TSV and RecBole ``.inter`` tables, LightGCN ``user item ...``
lines).

Each reader returns ``None`` whenever the file is not one it can read exactly as the Python reader
of :mod:`data.loaders.files` reads it: a row whose field count differs from the header's, a blank
or whitespace-only row among the data, a double quote in a CSV row, a bare carriage return, a NUL
byte, text that is not UTF-8, an empty id, a value that is not a finite number, a field longer
than the ``csv`` module's limit... The caller then reads the file with the Python reader, which
gives the same result or raises its one-line error naming the file and the line. So a file read
here gives the arrays the Python reader would give, and every error is the Python reader's: the
fast path has no error messages of its own.

Ids stay strings (an id is a token; ``"007"`` and ``"7"`` are two ids), held as dictionary arrays:
the distinct tokens, few beside the rows, and an int32 index per row.
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

# the characters str.strip() and str.split() take for whitespace (str.isspace), which the Python
# reader strips from every field (tests/data/loaders/test_columnar.py checks the list against Python)
PY_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
# the ASCII ones that bytes.split() and pyarrow's ascii_split_whitespace do not also take
_SEPARATORS_ONLY_IN_STR = (b"\x1c", b"\x1d", b"\x1e", b"\x1f")
_ASCII_SPACE = " \t\n\x0b\x0c\r"
BLOCK = 1 << 24  # pyarrow's block: a row (a LightGCN line) must fit in one


def _unquoted(delimiter: str) -> pcsv.ParseOptions:
    """Fields split at ``delimiter`` only, as the Python readers split them: no quoting or
    escaping, no newline inside a value, blank lines skipped."""
    return pcsv.ParseOptions(
        delimiter=delimiter,
        quote_char=False,
        double_quote=False,
        escape_char=False,
        newlines_in_values=False,
        ignore_empty_lines=True,
    )


def plain_text(data: bytes) -> bool:
    """Whether ``data`` is text the fast path reads as the Python reader does: valid UTF-8 (the
    Python reader falls back to latin-1), no NUL byte (numpy's ``str`` arrays drop trailing NULs)
    and no carriage return other than in ``\\r\\n`` (pyarrow ends a line there; the ``csv`` module
    refuses it in a field, the RecBole and LightGCN readers split lines on ``\\n`` only)."""
    if b"\x00" in data:
        return False
    cr = data.count(b"\r")
    if cr and cr != data.count(b"\r\n"):
        return False
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    return True


def _may_hold_space(data: bytes, start: int, separator: str) -> bool:
    """Whether a field of ``data`` may begin or end with whitespace (if not, no field is
    trimmed: an ASCII file without a space, tab (but the separator), vertical tab, form feed or
    \\x1c-\\x1f after ``start``)."""
    if not data.isascii():
        return True
    spaces = [b" ", b"\x0b", b"\x0c", *_SEPARATORS_ONLY_IN_STR]
    if separator != "\t":
        spaces.append(b"\t")
    return any(data.find(s, start) >= 0 for s in spaces)


_NUMPY_TYPES = {"int32": np.int32, "int64": np.int64, "double": np.float64}


def numpy(array: pa.Array) -> np.ndarray:
    """A numeric pyarrow array without nulls as a (read-only, zero-copy) numpy array. pyarrow's
    own ``to_numpy`` (and its conversions of numpy arguments) import pandas where it is
    installed (as it is beside ray[tune]): a third of a second and 60 MB in every process that
    reads a file, which these two functions spare."""
    assert array.null_count == 0
    dtype = np.dtype(_NUMPY_TYPES[str(array.type)])
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def indices(positions: np.ndarray) -> pa.Array:
    """``positions`` as a pyarrow int64 array (for ``take``), without pandas (see :func:`numpy`)."""
    positions = np.ascontiguousarray(positions, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(positions), [None, pa.py_buffer(positions)])


def _whole(column: pa.ChunkedArray) -> pa.Array:
    """One array of a column's chunks (with 64-bit offsets past 2 GiB of text)."""
    try:
        return column.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        return column.cast(pa.large_string()).combine_chunks()


def _strip(column: pa.Array) -> pa.Array:
    return pc.utf8_trim(column, characters=PY_WHITESPACE)


def table(
    data: bytes,
    start: int,
    n_fields: int,
    delimiter: str,
    wanted: list[int],
    *,
    csv_rules: bool = False,
) -> dict[int, pa.Array] | None:
    """The fields ``wanted`` (0-based column numbers) of the rows of ``data`` after byte
    ``start`` (the byte after the header line), each as a string array stripped as ``str.strip()``
    strips; every row must have ``n_fields`` fields separated by ``delimiter``. ``csv_rules``: the
    Python reader is the ``csv`` module, so no row may hold a double quote (its quoting is left to
    it) and no field may be longer than its ``csv.field_size_limit()``. ``None``: read it with the
    Python reader (see the module docstring); so is a file without rows."""
    if not plain_text(data) or (csv_rules and data.find(b'"', start) >= 0):
        return None
    max_field = csv.field_size_limit() if csv_rules else None
    names = [f"f{i}" for i in range(n_fields)]
    include = names if max_field is not None else [names[i] for i in sorted(set(wanted))]
    try:
        got = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(memoryview(data)[start:])),
            read_options=pcsv.ReadOptions(column_names=names, block_size=BLOCK),
            parse_options=_unquoted(delimiter),
            convert_options=pcsv.ConvertOptions(
                column_types={n: pa.string() for n in include},
                include_columns=include,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                check_utf8=True,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a row with another field count, an empty file, a row over BLOCK bytes ...
    if got.num_rows == 0:
        return None
    if max_field is not None:
        for column in got.columns:
            if pc.max(pc.binary_length(column)).as_py() > max_field:
                return None
    trim = _may_hold_space(data, start, delimiter)
    out = {}
    for i in wanted:
        column = _whole(got.column(f"f{i}"))
        out[i] = _strip(column) if trim else column
    return out


def ids(column: pa.Array) -> pa.DictionaryArray | None:
    """Id tokens as a dictionary array; ``None`` if one is empty."""
    if len(column) == 0 or pc.min(pc.binary_length(column)).as_py() == 0:
        return None
    return pc.dictionary_encode(column)


def floats(column: pa.Array) -> np.ndarray | None:
    """The values as float64, as ``np.array(values, dtype=np.float64)`` gives them; ``None`` if
    one is not a finite number. pyarrow's cast accepts a subset of what numpy parses (no
    surrounding space, no ``_``) and rounds the same (correctly); whatever it refuses is parsed
    by numpy, once per distinct value."""
    try:
        out = numpy(pc.cast(column, pa.float64()))
    except pa.ArrowInvalid:
        coded = pc.dictionary_encode(column)
        try:
            distinct = np.array(coded.dictionary.to_pylist(), dtype=np.float64)
        except ValueError:
            return None
        out = distinct[numpy(coded.indices)]
    return out if np.isfinite(out).all() else None


def _seconds(value: str) -> float | None:
    """One timestamp as the Python reader converts it (a number, or an ISO 8601 date as seconds
    since 1970, UTC if naive); ``None`` if it is neither."""
    try:
        seconds = float(value)
        return seconds if np.isfinite(seconds) else None
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def times(column: pa.Array) -> np.ndarray | None:
    """Timestamps as float64 seconds, converted as the Python reader converts them (numbers as
    they are, ISO 8601 dates once per distinct value); ``None`` if one is neither."""
    out = floats(column)
    if out is not None:
        return out
    coded = pc.dictionary_encode(column)
    values = coded.dictionary.to_pylist()
    try:
        distinct = np.array(values, dtype=np.float64)
        if not np.isfinite(distinct).all():
            distinct = None
    except ValueError:
        distinct = None
    if distinct is None:
        distinct = np.empty(len(values), dtype=np.float64)
        for k, value in enumerate(values):
            seconds = _seconds(value)
            if seconds is None:
                return None
            distinct[k] = seconds
    return distinct[numpy(coded.indices)]


def token_lines(data: bytes) -> tuple[pa.Array, np.ndarray] | None:
    """The whitespace-separated tokens of the non-blank lines of ``data`` (LightGCN files):
    (every token in file order, tokens per non-blank line), as ``line.split()`` splits the
    lines of the decoded text; ``None``: read it with the Python reader (non-ASCII text, a NUL
    byte or \\x1c-\\x1f (``str.split`` separators that ``bytes.split`` keeps), a bare carriage
    return, a line over :data:`BLOCK` bytes, or no token at all)."""
    if not data.isascii() or not plain_text(data):
        return None
    if any(s in data for s in _SEPARATORS_ONLY_IN_STR):
        return None
    try:
        got = pcsv.read_csv(
            pa.BufferReader(pa.py_buffer(data)),
            read_options=pcsv.ReadOptions(column_names=["line"], block_size=BLOCK),
            parse_options=_unquoted("\x1f"),  # a byte not in the data: one field per line
            convert_options=pcsv.ConvertOptions(
                column_types={"line": pa.string()}, strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    lines = pc.utf8_trim(_whole(got.column(0)), characters=_ASCII_SPACE)
    lines = lines.take(indices(np.flatnonzero(numpy(pc.binary_length(lines)))))
    if len(lines) == 0:
        return None
    split = pc.ascii_split_whitespace(lines)
    counts = numpy(pc.list_value_length(split)).astype(np.int64)
    return pc.list_flatten(split), counts
