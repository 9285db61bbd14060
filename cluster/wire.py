"""Explicit binary codecs for message payloads (never pickle).

Every payload starts with one tag byte naming its codec; all integers are little-endian.

==========  ===  ==================================================================  ==========================
codec       tag  layout after the tag                                                size in bytes
==========  ===  ==================================================================  ==========================
dense       01   dtype u8, ndim u8, shape u32 x ndim, raw data (C order)             3 + 4*ndim + itemsize*numel
signs       02   n u32, ceil(n/8) bytes of np.packbits (1 = +1, 0 = -1)               5 + ceil(n/8)
ternary     03   n u32, nnz u32, scale f32, indices u32 x nnz, ceil(nnz/8) sign bits  13 + 4*nnz + ceil(nnz/8)
bigints     04   count u32, then per value: nbytes u16 + big-endian magnitude         5 + sum(2 + nbytes_i)
ids         05   count u32, width u8 in {1,2,4,8}, values unsigned                   6 + width*count
record      06   count u16, then per field: length u32 + bytes                        3 + sum(4 + len_i)
blob        07   length u32, bytes                                                    5 + len
==========  ===  ==================================================================  ==========================

Dense dtype codes: 0 float32, 1 float16, 2 int64, 3 int32, 4 float64. Padding bits of bit-packed
fields must be zero. Decoders accept ``bytes``, ``bytearray`` or ``memoryview`` and raise only
:class:`WireError` on malformed input: wrong tag, truncated or trailing bytes, bad codes, declared
sizes that do not match the buffer, and so on.

**Declared lengths are untrusted.** Every length or count a decoder reads from a payload is checked
against the bytes actually present, and against the caller's maximum where it gives one
(``max_len``, ``max_count``, ``max_numel``, ``length``...), *before* anything is allocated: what a
decoder allocates is proportional to the payload's own size. The one codec whose decoded size
does not follow from its bytes is the sparse ternary vector (13 bytes may declare 2³² − 1
elements): :func:`decode_ternary_sparse` never densifies, and :func:`decode_ternary` densifies at
most ``length`` / ``max_len`` elements, :data:`MAX_TERNARY_LEN` where the caller states neither.
A payload over a caller's maximum is a :class:`WireError` (a receiver counts it as malformed).
"""

from __future__ import annotations

import math
import operator
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "WireError",
    "TAGS",
    "DENSE_DTYPES",
    "MAX_NDIM",
    "MAX_TERNARY_LEN",
    "peek_tag",
    "encode_dense",
    "decode_dense",
    "view_dense",
    "dense_size",
    "encode_signs",
    "decode_signs",
    "signs_size",
    "encode_ternary",
    "decode_ternary",
    "decode_ternary_sparse",
    "ternary_size",
    "encode_bigints",
    "decode_bigints",
    "bigints_size",
    "encode_ids",
    "decode_ids",
    "ids_size",
    "encode_record",
    "decode_record",
    "record_size",
    "encode_blob",
    "decode_blob",
    "blob_size",
]


class WireError(ValueError):
    """A payload is malformed; the message names the codec and the problem."""


TAG_DENSE, TAG_SIGNS, TAG_TERNARY, TAG_BIGINTS, TAG_IDS, TAG_RECORD, TAG_BLOB = range(1, 8)

TAGS: dict[int, str] = {
    TAG_DENSE: "dense",
    TAG_SIGNS: "signs",
    TAG_TERNARY: "ternary",
    TAG_BIGINTS: "bigints",
    TAG_IDS: "ids",
    TAG_RECORD: "record",
    TAG_BLOB: "blob",
}

_CODEC_TITLE: dict[int, str] = {
    TAG_DENSE: "dense tensor",
    TAG_SIGNS: "signs",
    TAG_TERNARY: "ternary vector",
    TAG_BIGINTS: "bigints",
    TAG_IDS: "id list",
    TAG_RECORD: "record",
    TAG_BLOB: "blob",
}

# wire dtype code -> (name, little-endian numpy dtype)
DENSE_DTYPES: dict[int, tuple[str, np.dtype]] = {
    0: ("float32", np.dtype("<f4")),
    1: ("float16", np.dtype("<f2")),
    2: ("int64", np.dtype("<i8")),
    3: ("int32", np.dtype("<i4")),
    4: ("float64", np.dtype("<f8")),
}
_DTYPE_CODE: dict[str, int] = {name: code for code, (name, _) in DENSE_DTYPES.items()}

MAX_NDIM = 8
# the most elements decode_ternary densifies to when its caller states no length or maximum
# (64 MiB of float32): the declared length of a sparse vector is not bounded by its bytes
MAX_TERNARY_LEN = 2**24
_U32_MAX = 2**32 - 1
_U16_MAX = 2**16 - 1
_ID_WIDTHS = (1, 2, 4, 8)
# decode_ids returns int64, so width-8 ids stop at 2**63 - 1 to round-trip losslessly.
_ID_MAX = {1: 2**8 - 1, 2: 2**16 - 1, 4: 2**32 - 1, 8: 2**63 - 1}
_ID_DTYPE = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")


# --------------------------------------------------------------------------- shared helpers


def _packed_len(n: int) -> int:
    return (n + 7) // 8


def _as_view(b: Any, tag: int) -> memoryview:
    """A flat byte view of ``b``; TypeError for anything that is not bytes-like."""
    if not isinstance(b, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"{_CODEC_TITLE[tag]}: expected bytes, bytearray or memoryview, got {type(b).__name__}"
        )
    mv = memoryview(b)
    if mv.ndim != 1 or mv.itemsize != 1 or not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    elif mv.format != "B":
        mv = mv.cast("B")
    return mv


class _Reader:
    """Bounds-checked sequential reader over one payload; every failure is a WireError."""

    def __init__(self, b: Any, tag: int) -> None:
        self.codec = _CODEC_TITLE[tag]
        self.mv = _as_view(b, tag)
        self.pos = 0
        if len(self.mv) == 0:
            raise WireError(f"{self.codec}: empty payload")
        got = self.mv[0]
        if got != tag:
            raise WireError(
                f"{self.codec}: wrong tag 0x{got:02x} ({_tag_label(got)}), expected 0x{tag:02x}"
            )
        self.pos = 1

    @property
    def remaining(self) -> int:
        return len(self.mv) - self.pos

    def fail(self, problem: str) -> WireError:
        return WireError(f"{self.codec}: {problem}")

    def need(self, n: int, what: str) -> None:
        if n > self.remaining:
            raise self.fail(f"declared {n} bytes of {what}, buffer has {self.remaining}")

    def unpack(self, st: struct.Struct, what: str) -> int:
        if st.size > self.remaining:
            raise self.fail(f"truncated {what}: need {st.size} bytes, buffer has {self.remaining}")
        (value,) = st.unpack_from(self.mv, self.pos)
        self.pos += st.size
        return value

    def take(self, n: int, what: str) -> memoryview:
        self.need(n, what)
        out = self.mv[self.pos : self.pos + n]
        self.pos += n
        return out

    def array(self, dtype: np.dtype, count: int, what: str) -> np.ndarray:
        """A read-only view of ``count`` items; the caller copies or converts it."""
        nbytes = count * dtype.itemsize
        self.need(nbytes, what)
        arr = np.frombuffer(self.mv, dtype=dtype, count=count, offset=self.pos)
        self.pos += nbytes
        return arr

    def finish(self) -> None:
        if self.remaining:
            raise self.fail(f"{self.remaining} trailing bytes after the payload")


def _within(r: _Reader, value: int, limit: int | None, what: str) -> None:
    """A declared ``value`` at most the caller's ``limit`` (None: no limit), checked before use."""
    if limit is not None and value > limit:
        raise r.fail(f"declared {what} {value} exceeds the limit {limit}")


def _tag_label(tag: int) -> str:
    return TAGS.get(tag, "unknown codec")


def _check_padding(packed: np.ndarray, n_bits: int, codec: str) -> None:
    spare = 8 * packed.size - n_bits
    if spare and int(packed[-1]) & ((1 << spare) - 1):
        raise WireError(f"{codec}: padding bits of the last byte are not zero")


def _header(tag: int, *fields: tuple[struct.Struct, int]) -> bytes:
    return bytes([tag]) + b"".join(st.pack(v) for st, v in fields)


def _to_numpy(x: Any) -> np.ndarray:
    """numpy view of a numpy array, torch tensor (any device; detached) or array-like."""
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy"):  # torch.Tensor
        t = x.detach()
        if str(t.dtype) in ("torch.bfloat16",) or "float8" in str(t.dtype):
            t = t.float()
        return t.cpu().resolve_conj().resolve_neg().numpy()
    return np.asarray(x)


def _check_count(n: int, what: str, limit: int = _U32_MAX) -> int:
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"{what} must be non-negative, got {n}")
    if n > limit:
        raise ValueError(f"{what} {n} exceeds the wire limit {limit}")
    return n


def peek_tag(b: bytes | bytearray | memoryview) -> str:
    """The codec name of a payload ("dense", "signs", ...) from its tag byte."""
    if not isinstance(b, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"peek_tag: expected bytes, bytearray or memoryview, got {type(b).__name__}"
        )
    mv = memoryview(b)
    if mv.nbytes == 0:
        raise WireError("peek_tag: empty payload")
    first = (
        mv.tobytes()[0]
        if (mv.ndim != 1 or mv.itemsize != 1 or not mv.c_contiguous)
        else mv.cast("B")[0]
    )
    if first not in TAGS:
        raise WireError(f"peek_tag: unknown tag 0x{first:02x}")
    return TAGS[first]


# --------------------------------------------------------------------------- dense tensor


_CODE_OF: dict[Any, int] = {}  # dtype argument -> wire code, for the arguments seen so far


def _dense_code(dtype: Any) -> int:
    try:
        return _CODE_OF[dtype]
    except (KeyError, TypeError):  # not seen yet, or unhashable
        pass
    text = str(dtype)
    if text.startswith("torch."):  # torch.float16 -> "float16"
        dtype_name = text[len("torch.") :]
    else:
        dtype_name = dtype
    try:
        name = np.dtype(dtype_name).name
    except TypeError as exc:
        raise ValueError(f"dense tensor: unknown wire dtype {dtype!r}") from exc
    if name not in _DTYPE_CODE:
        raise ValueError(
            f"dense tensor: wire dtype {name!r} not supported; use one of {sorted(_DTYPE_CODE)}"
        )
    try:
        _CODE_OF[dtype] = _DTYPE_CODE[name]
    except TypeError:
        pass
    return _DTYPE_CODE[name]


def dense_size(shape: Sequence[int], dtype: Any = "float32") -> int:
    """Encoded size of a dense tensor of this shape and wire dtype."""
    dims = [_check_count(d, "dense tensor: dimension") for d in shape]
    if len(dims) > MAX_NDIM:
        raise ValueError(f"dense tensor: ndim {len(dims)} exceeds {MAX_NDIM}")
    itemsize = DENSE_DTYPES[_dense_code(dtype)][1].itemsize
    return 3 + 4 * len(dims) + itemsize * math.prod(dims)


def _cast_for_wire(arr: np.ndarray, target: np.dtype) -> np.ndarray:
    kind = arr.dtype.kind
    if kind not in "biuf":
        raise ValueError(f"dense tensor: cannot encode values of dtype {arr.dtype}")
    if target.kind == "i" and arr.size:
        info = np.iinfo(target)
        if kind == "f":
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"dense tensor: non-finite values cannot be cast to {target.name}")
            if not np.all(arr == np.trunc(arr)):
                raise ValueError(
                    f"dense tensor: non-integer values cannot be cast to {target.name}"
                )
        if kind in "iuf":
            lo, hi = arr.min(), arr.max()
            if lo < info.min or hi > info.max:
                raise ValueError(
                    f"dense tensor: values in [{lo}, {hi}] overflow wire dtype {target.name}"
                )
    with np.errstate(over="ignore", invalid="ignore"):
        return np.ascontiguousarray(arr, dtype=target)


# the dense header for each ndim: tag, dtype code, ndim, shape
_DENSE_HEAD = [struct.Struct(f"<BBB{n}I") for n in range(MAX_NDIM + 1)]


def encode_dense(array: Any, dtype: Any = "float32") -> bytes:
    """Encode a numpy array or torch tensor (any device) as a dense tensor of wire ``dtype``."""
    code = _dense_code(dtype)
    wire_dtype = DENSE_DTYPES[code][1]
    arr = _to_numpy(array)
    if arr.ndim > MAX_NDIM:
        raise ValueError(f"dense tensor: ndim {arr.ndim} exceeds {MAX_NDIM}")
    if any(d > _U32_MAX for d in arr.shape):
        raise ValueError(f"dense tensor: dimension of shape {arr.shape} exceeds u32")
    if arr.dtype == wire_dtype and arr.flags.c_contiguous:
        data = arr  # already the wire's bytes: no cast, no check to make
    else:
        data = _cast_for_wire(arr, wire_dtype)
    head = _DENSE_HEAD[arr.ndim].pack(TAG_DENSE, code, arr.ndim, *arr.shape)
    return b"".join([head, data.reshape(-1).view(np.uint8)])


def _view_dense_fast(b: bytes) -> np.ndarray | None:
    """view_dense of a well-formed, non-empty dense payload; None where anything is unusual (the
    full reader then says what)."""
    if len(b) < 3 or b[0] != TAG_DENSE or b[1] not in DENSE_DTYPES or b[2] > MAX_NDIM:
        return None
    ndim = b[2]
    if len(b) < 3 + 4 * ndim:
        return None
    shape = _DENSE_HEAD[ndim].unpack_from(b)[3:]
    wire_dtype = DENSE_DTYPES[b[1]][1]
    numel = math.prod(shape)
    if numel == 0 or 3 + 4 * ndim + numel * wire_dtype.itemsize != len(b):
        return None
    return np.frombuffer(b, dtype=wire_dtype, count=numel, offset=3 + 4 * ndim).reshape(shape)


def view_dense(b: bytes | bytearray | memoryview, *, max_numel: int | None = None) -> np.ndarray:
    """The dense tensor of ``b`` as a read-only view of its data, in the wire's little-endian
    dtype, nothing copied: what a check that only reads the values needs
    (cluster/validate.py). Raises WireError exactly where :func:`decode_dense` does; with
    ``max_numel``, also for a tensor of more elements."""
    if type(b) is bytes:  # the common case, well formed: one header read, no reader
        arr = _view_dense_fast(b)
        if arr is not None and (max_numel is None or arr.size <= max_numel):
            return arr
    r = _Reader(b, TAG_DENSE)
    code = r.unpack(_U8, "dtype code")
    if code not in DENSE_DTYPES:
        raise r.fail(f"unknown dtype code {code}")
    ndim = r.unpack(_U8, "ndim")
    if ndim > MAX_NDIM:
        raise r.fail(f"ndim {ndim} exceeds {MAX_NDIM}")
    shape = tuple(r.unpack(_U32, "shape") for _ in range(ndim))
    wire_dtype = DENSE_DTYPES[code][1]
    if math.prod(max(d, 1) for d in shape) * wire_dtype.itemsize >= 2**62:
        raise r.fail(f"shape {shape} is too large for an array")  # numpy refuses it even if empty
    numel = math.prod(shape)
    _within(r, numel, max_numel, "element count")
    nbytes = numel * wire_dtype.itemsize
    if nbytes != r.remaining:
        raise r.fail(f"declared {nbytes} data bytes, buffer has {r.remaining}")
    arr = r.array(wire_dtype, numel, "data").reshape(shape)
    arr.flags.writeable = False  # a bytearray's view would be writable
    return arr


def decode_dense(b: bytes | bytearray | memoryview, *, max_numel: int | None = None) -> np.ndarray:
    """Decode a dense tensor into a fresh, writable, native-endian numpy array (of at most
    ``max_numel`` elements with one)."""
    view = view_dense(b, max_numel=max_numel)
    return view.astype(view.dtype.newbyteorder("="), copy=True)


# --------------------------------------------------------------------------- signs


def signs_size(n: int) -> int:
    """Encoded size of a bit-packed vector of ``n`` signs."""
    return 5 + _packed_len(_check_count(n, "signs: length"))


def _as_vector(x: Any, codec: str) -> np.ndarray:
    arr = _to_numpy(x)
    if arr.ndim != 1:
        raise ValueError(f"{codec}: expected a 1-D vector, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iuf":
        raise ValueError(f"{codec}: expected integer or float values, got dtype {arr.dtype}")
    if arr.size > _U32_MAX:
        raise ValueError(f"{codec}: length {arr.size} exceeds u32")
    return arr


def encode_signs(x: Any) -> bytes:
    """Bit-pack a 1-D vector of +1/-1 values (any int/float dtype; numpy or torch)."""
    arr = _as_vector(x, "signs")
    positive = arr == 1
    if not np.all(positive | (arr == -1)):
        bad = arr[~(positive | (arr == -1))][0]
        raise ValueError(f"signs: values must be +1 or -1, found {bad!r}")
    return _header(TAG_SIGNS, (_U32, arr.size)) + np.packbits(positive).tobytes()


def decode_signs(b: bytes | bytearray | memoryview, *, max_len: int | None = None) -> np.ndarray:
    """Decode bit-packed signs into an int8 vector of +1/-1 (at most ``max_len`` with one)."""
    r = _Reader(b, TAG_SIGNS)
    n = r.unpack(_U32, "length")
    _within(r, n, max_len, "length")
    nbytes = _packed_len(n)
    if nbytes != r.remaining:
        raise r.fail(f"declared {nbytes} sign bytes for n={n}, buffer has {r.remaining}")
    packed = r.array(np.dtype("u1"), nbytes, "sign bits")
    _check_padding(packed, n, r.codec)
    bits = np.unpackbits(packed, count=n).view(np.int8)
    return (2 * bits - 1).astype(np.int8)


# --------------------------------------------------------------------------- sparse ternary


def ternary_size(nnz: int) -> int:
    """Encoded size of a sparse ternary vector with ``nnz`` non-zeros (independent of n)."""
    nnz = _check_count(nnz, "ternary vector: nnz")
    return 13 + 4 * nnz + _packed_len(nnz)


def encode_ternary(values: Any, scale: float) -> bytes:
    """Encode a 1-D vector with entries in {-scale, 0, +scale} as indices plus sign bits.

    The scale travels as float32; entries are compared with ``scale`` in the vector's own float
    dtype (float64 for integer vectors), exactly.
    """
    arr = _as_vector(values, "ternary vector")
    scale = float(scale)
    if not math.isfinite(scale) or scale < 0:
        raise ValueError(f"ternary vector: scale must be finite and >= 0, got {scale}")
    if not math.isfinite(float(np.float32(scale))):
        raise ValueError(f"ternary vector: scale {scale} overflows float32")
    v = arr if arr.dtype.kind == "f" else arr.astype(np.float64)
    s = v.dtype.type(scale)
    nonzero = v != 0
    if not np.all(np.abs(v[nonzero]) == s):
        bad = v[nonzero & (np.abs(v) != s)][0]
        raise ValueError(
            f"ternary vector: entries must be in {{-{scale}, 0, +{scale}}}, found {bad!r}"
        )
    idx = np.flatnonzero(nonzero)
    nnz = idx.size
    head = struct.pack("<BIIf", TAG_TERNARY, arr.size, nnz, scale)
    return b"".join([head, idx.astype("<u4").tobytes(), np.packbits(v[idx] > 0).tobytes()])


def decode_ternary_sparse(
    b: bytes | bytearray | memoryview,
    *,
    length: int | None = None,
    max_len: int | None = None,
) -> tuple[int, np.ndarray, np.ndarray, float]:
    """Decode to ``(n, indices int64, signs int8 of +1/-1, scale)`` without densifying: what it
    allocates follows from the non-zeros present, whatever n the payload declares. With
    ``length`` the dense length must be exactly that, with ``max_len`` at most that."""
    r = _Reader(b, TAG_TERNARY)
    n = r.unpack(_U32, "dense length")
    if length is not None and n != length:
        raise r.fail(f"declared dense length {n}, expected {length}")
    _within(r, n, max_len, "dense length")
    nnz = r.unpack(_U32, "nnz")
    if r.remaining < 4:
        raise r.fail(f"truncated scale: need 4 bytes, buffer has {r.remaining}")
    (scale,) = struct.unpack_from("<f", r.mv, r.pos)
    r.pos += 4
    if not math.isfinite(scale) or scale < 0:
        raise r.fail(f"scale must be finite and >= 0, got {scale}")
    if nnz > n:
        raise r.fail(f"nnz {nnz} exceeds dense length {n}")
    body = 4 * nnz + _packed_len(nnz)
    if body != r.remaining:
        raise r.fail(
            f"declared {body} bytes of indices and sign bits for nnz={nnz}, buffer has {r.remaining}"
        )
    idx = r.array(np.dtype("<u4"), nnz, "indices").astype(np.int64)
    if nnz and (idx[-1] >= n or np.any(idx[1:] <= idx[:-1])):
        raise r.fail(f"indices must be strictly increasing and < n={n}")
    packed = r.array(np.dtype("u1"), _packed_len(nnz), "sign bits")
    _check_padding(packed, nnz, r.codec)
    signs = (2 * np.unpackbits(packed, count=nnz).view(np.int8) - 1).astype(np.int8)
    return n, idx, signs, float(scale)


def decode_ternary(
    b: bytes | bytearray | memoryview,
    *,
    length: int | None = None,
    max_len: int | None = None,
) -> np.ndarray:
    """Decode a sparse ternary vector into a dense float32 vector: of exactly ``length``
    elements, or at most ``max_len``, or, where the caller states neither, at most
    :data:`MAX_TERNARY_LEN` (the declared length is checked before the vector is allocated)."""
    if length is None and max_len is None:
        max_len = MAX_TERNARY_LEN
    n, idx, signs, scale = decode_ternary_sparse(b, length=length, max_len=max_len)
    out = np.zeros(n, dtype=np.float32)
    out[idx] = signs.astype(np.float32) * np.float32(scale)
    return out


# --------------------------------------------------------------------------- big integers


def bigints_size(nbytes: Iterable[int]) -> int:
    """Encoded size of big integers whose magnitudes take these byte counts.

    A value ``v`` takes ``(v.bit_length() + 7) // 8`` bytes (0 takes none).
    """
    sizes = [_check_count(n, "bigints: nbytes", _U16_MAX) for n in nbytes]
    _check_count(len(sizes), "bigints: count")
    return 5 + sum(2 + n for n in sizes)


def encode_bigints(values: Sequence[int]) -> bytes:
    """Encode non-negative integers (e.g. RSA values) as length-prefixed big-endian magnitudes."""
    values = list(values)
    _check_count(len(values), "bigints: count")
    parts = [_header(TAG_BIGINTS, (_U32, len(values)))]
    pack16 = _U16.pack
    for i, raw in enumerate(values):
        try:
            v = operator.index(raw)
        except TypeError as exc:
            raise TypeError(f"bigints: value {i} is {type(raw).__name__}, not an integer") from exc
        if v < 0:
            raise ValueError(f"bigints: value {i} is negative")
        nb = (v.bit_length() + 7) // 8
        if nb > _U16_MAX:
            raise ValueError(f"bigints: value {i} needs {nb} bytes, more than {_U16_MAX}")
        parts.append(pack16(nb))
        parts.append(v.to_bytes(nb, "big"))
    return b"".join(parts)


def decode_bigints(
    b: bytes | bytearray | memoryview,
    *,
    max_count: int | None = None,
    max_bytes: int | None = None,
) -> list[int]:
    """Decode a list of non-negative integers; non-canonical (zero-led) magnitudes are errors.
    With ``max_count`` at most that many values, with ``max_bytes`` each of at most that many
    bytes (an RSA modulus' size), both checked before the values are read."""
    r = _Reader(b, TAG_BIGINTS)
    count = r.unpack(_U32, "count")
    _within(r, count, max_count, "count")
    if 2 * count > r.remaining:
        raise r.fail(
            f"declared {count} values need at least {2 * count} bytes, buffer has {r.remaining}"
        )
    data = r.mv[r.pos :].tobytes()
    pos, end, out = 0, len(data), []
    from_bytes = int.from_bytes
    for i in range(count):
        if pos + 2 > end:
            raise r.fail(f"truncated length of value {i}")
        nb = data[pos] | (data[pos + 1] << 8)
        pos += 2
        if pos + nb > end:
            raise r.fail(f"value {i} declares {nb} bytes, buffer has {end - pos}")
        _within(r, nb, max_bytes, f"size of value {i}")
        if nb and data[pos] == 0:
            raise r.fail(f"value {i} has a leading zero byte (non-canonical)")
        out.append(from_bytes(data[pos : pos + nb], "big"))
        pos += nb
    if pos != end:
        raise r.fail(f"{end - pos} trailing bytes after the payload")
    return out


# --------------------------------------------------------------------------- id list


def _check_width(width: int) -> int:
    if width not in _ID_WIDTHS:
        raise ValueError(f"id list: width must be one of {_ID_WIDTHS}, got {width!r}")
    return int(width)


def ids_size(count: int, width: int = 4) -> int:
    """Encoded size of ``count`` ids of ``width`` bytes each."""
    return 6 + _check_width(width) * _check_count(count, "id list: count")


def encode_ids(ids: Any, width: int = 4) -> bytes:
    """Encode a 1-D sequence of non-negative integer ids as fixed-width unsigned values.

    Width 8 is limited to ids < 2**63 so that ``decode_ids`` (int64) round-trips.
    """
    width = _check_width(width)
    arr = _to_numpy(ids)
    if arr.ndim != 1:
        raise ValueError(f"id list: expected a 1-D sequence, got shape {arr.shape}")
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"id list: ids must be integers, got dtype {arr.dtype}")
    if arr.size > _U32_MAX:
        raise ValueError(f"id list: count {arr.size} exceeds u32")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0:
            raise ValueError(f"id list: ids must be non-negative, found {lo}")
        if hi > _ID_MAX[width]:
            raise ValueError(f"id list: id {hi} does not fit width {width} (max {_ID_MAX[width]})")
    head = struct.pack("<BIB", TAG_IDS, arr.size, width)
    return head + arr.astype(_ID_DTYPE[width]).tobytes()


def decode_ids(b: bytes | bytearray | memoryview, *, max_count: int | None = None) -> np.ndarray:
    """Decode an id list into an int64 vector (of at most ``max_count`` ids with one)."""
    r = _Reader(b, TAG_IDS)
    count = r.unpack(_U32, "count")
    _within(r, count, max_count, "count")
    width = r.unpack(_U8, "width")
    if width not in _ID_WIDTHS:
        raise r.fail(f"width {width} is not one of {_ID_WIDTHS}")
    if count * width != r.remaining:
        raise r.fail(f"declared {count * width} bytes of ids, buffer has {r.remaining}")
    raw = r.array(_ID_DTYPE[width], count, "ids")
    if width == 8 and count and int(raw.max()) > _ID_MAX[8]:
        raise r.fail("id exceeds int64 range")
    return raw.astype(np.int64)


# --------------------------------------------------------------------------- record


def record_size(field_sizes: Iterable[int]) -> int:
    """Encoded size of a record whose fields have these lengths."""
    sizes = [_check_count(n, "record: field length") for n in field_sizes]
    _check_count(len(sizes), "record: field count", _U16_MAX)
    return 3 + sum(4 + n for n in sizes)


def encode_record(fields: Sequence[bytes | bytearray | memoryview]) -> bytes:
    """Concatenate several payloads into one, each length-prefixed."""
    fields = list(fields)
    _check_count(len(fields), "record: field count", _U16_MAX)
    parts = [_header(TAG_RECORD, (_U16, len(fields)))]
    for i, f in enumerate(fields):
        if not isinstance(f, (bytes, bytearray, memoryview)):
            raise TypeError(f"record: field {i} is {type(f).__name__}, not bytes")
        data = memoryview(f).tobytes() if isinstance(f, memoryview) else bytes(f)
        _check_count(len(data), f"record: length of field {i}")
        parts.append(_U32.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def decode_record(
    b: bytes | bytearray | memoryview,
    expect: int | None = None,
    *,
    max_fields: int | None = None,
) -> list[bytes]:
    """Split a record into its fields; with ``expect``, the field count must equal it, with
    ``max_fields`` be at most that. Each field's declared length is checked against the bytes
    left before it is copied."""
    r = _Reader(b, TAG_RECORD)
    count = r.unpack(_U16, "field count")
    if expect is not None and count != expect:
        raise r.fail(f"expected {expect} fields, payload has {count}")
    _within(r, count, max_fields, "field count")
    if 4 * count > r.remaining:
        raise r.fail(
            f"declared {count} fields need at least {4 * count} bytes, buffer has {r.remaining}"
        )
    out = []
    for i in range(count):
        length = r.unpack(_U32, f"length of field {i}")
        out.append(r.take(length, f"field {i}").tobytes())
    r.finish()
    return out


# --------------------------------------------------------------------------- blob


def blob_size(n: int) -> int:
    """Encoded size of an opaque blob of ``n`` bytes."""
    return 5 + _check_count(n, "blob: length")


def encode_blob(data: bytes | bytearray | memoryview) -> bytes:
    """Wrap opaque bytes (tokens, a UTF-8 string) with a length prefix."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        hint = " (encode str with .encode('utf-8'))" if isinstance(data, str) else ""
        raise TypeError(f"blob: expected bytes, got {type(data).__name__}{hint}")
    raw = memoryview(data).tobytes() if isinstance(data, memoryview) else bytes(data)
    _check_count(len(raw), "blob: length")
    return _header(TAG_BLOB, (_U32, len(raw))) + raw


def decode_blob(b: bytes | bytearray | memoryview, *, max_len: int | None = None) -> bytes:
    """Unwrap an opaque blob (of at most ``max_len`` bytes with one)."""
    r = _Reader(b, TAG_BLOB)
    length = r.unpack(_U32, "length")
    _within(r, length, max_len, "length")
    if length != r.remaining:
        raise r.fail(f"declared {length} bytes, buffer has {r.remaining}")
    return r.take(length, "data").tobytes()


def encode_chunks(chunks: list[bytes], size: int) -> bytes:
    """Equal-sized opaque chunks (e.g. 32-byte OPRF tokens) as one blob, in order."""
    if any(len(c) != size for c in chunks):
        raise WireError(f"chunks: every chunk must be {size} bytes")
    return encode_blob(b"".join(chunks))


def decode_chunks(
    b: bytes | bytearray | memoryview, size: int, *, max_count: int | None = None
) -> list[bytes]:
    """The chunks of :func:`encode_chunks` (at most ``max_count`` with one, checked before the
    blob is copied)."""
    raw = decode_blob(b, max_len=None if max_count is None else max_count * size)
    if len(raw) % size:
        raise WireError(f"chunks: {len(raw)} bytes is not a multiple of {size}")
    return [raw[i : i + size] for i in range(0, len(raw), size)]
