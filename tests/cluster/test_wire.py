"""Property tests for the wire codecs: round trips, size formulas, and clean errors on bad bytes."""

from __future__ import annotations

import math
import struct

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster import wire
from cluster.wire import WireError

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WIRE_DTYPES = ["float32", "float16", "int64", "int32", "float64"]
DECODERS = {
    "dense": wire.decode_dense,
    "signs": wire.decode_signs,
    "ternary": wire.decode_ternary,
    "ternary_sparse": wire.decode_ternary_sparse,
    "bigints": wire.decode_bigints,
    "ids": wire.decode_ids,
    "record": wire.decode_record,
    "blob": wire.decode_blob,
}
TAG_OF = {
    "dense": 1,
    "signs": 2,
    "ternary": 3,
    "ternary_sparse": 3,
    "bigints": 4,
    "ids": 5,
    "record": 6,
    "blob": 7,
}

# --------------------------------------------------------------------------- strategies

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)
sign_vectors = st.lists(st.sampled_from([-1, 1]), max_size=70).map(np.array)


@st.composite
def dense_arrays(draw):
    dtype = draw(st.sampled_from(WIRE_DTYPES))
    return draw(hnp.arrays(np.dtype(dtype), shapes)), dtype


@st.composite
def ternary_vectors(draw):
    n = draw(st.integers(0, 80))
    scale = draw(st.floats(0.0, 1e6, width=32, allow_subnormal=False))
    levels = draw(hnp.arrays(np.int8, n, elements=st.integers(-1, 1)))
    return levels.astype(np.float32) * np.float32(scale), scale


bigint_lists = st.lists(
    st.one_of(st.integers(0, 2**64), st.integers(0, 2**2048), st.just(0)), max_size=12
)


@st.composite
def id_lists(draw):
    width = draw(st.sampled_from([1, 2, 4, 8]))
    top = {1: 255, 2: 65535, 4: 2**32 - 1, 8: 2**63 - 1}[width]
    ids = draw(st.lists(st.integers(0, top), max_size=30))
    return np.array(ids, dtype=np.uint64 if width == 8 else np.int64), width


fields = st.lists(st.binary(max_size=40), max_size=6)


@st.composite
def valid_payloads(draw):
    """(decoder name, a valid payload) for any codec."""
    kind = draw(st.sampled_from(sorted(DECODERS)))
    if kind == "dense":
        arr, dtype = draw(dense_arrays())
        return kind, wire.encode_dense(arr, dtype)
    if kind == "signs":
        return kind, wire.encode_signs(draw(sign_vectors))
    if kind in ("ternary", "ternary_sparse"):
        return kind, wire.encode_ternary(*draw(ternary_vectors()))
    if kind == "bigints":
        return kind, wire.encode_bigints(draw(bigint_lists))
    if kind == "ids":
        ids, width = draw(id_lists())
        return kind, wire.encode_ids(ids, width)
    if kind == "record":
        return kind, wire.encode_record(draw(fields))
    return kind, wire.encode_blob(draw(st.binary(max_size=40)))


def decodes_or_wire_error(decoder, data) -> None:
    """The only allowed outcomes for arbitrary bytes: a value, or WireError."""
    try:
        decoder(data)
    except WireError:
        pass


# --------------------------------------------------------------------------- round trips


@ROUND
@given(dense_arrays())
def test_dense_round_trip_and_size(case):
    arr, dtype = case
    payload = wire.encode_dense(arr, dtype)
    assert len(payload) == wire.dense_size(arr.shape, dtype)
    assert len(payload) == 3 + 4 * arr.ndim + np.dtype(dtype).itemsize * arr.size
    out = wire.decode_dense(payload)
    assert out.shape == arr.shape and out.dtype == np.dtype(dtype)
    assert out.tobytes() == arr.tobytes()  # bit-exact, NaN payloads included
    assert out.flags.writeable
    # a check reads the values in place: read-only, the payload's own memory, the same values
    view = wire.view_dense(payload)
    assert not view.flags.writeable and view.shape == arr.shape
    if arr.size:
        assert np.shares_memory(view, np.frombuffer(payload, np.uint8))
    assert view.tobytes() == out.astype(view.dtype).tobytes()
    assert not wire.view_dense(bytearray(payload)).flags.writeable
    # bytes take the one-read path; a bytearray goes through the full reader: the same array
    slow = wire.decode_dense(bytearray(payload))
    assert slow.shape == out.shape and slow.dtype == out.dtype and slow.tobytes() == out.tobytes()


@FAST
@given(st.integers(0, 4), st.integers(0, 3), st.binary(max_size=40))
def test_dense_one_read_path_accepts_exactly_what_the_full_decoder_accepts(code, ndim, rest):
    payload = bytes([wire.TAG_DENSE, code, ndim]) + rest
    try:
        full = wire.decode_dense(memoryview(payload))
    except WireError:
        full = None
    try:
        fast = wire.decode_dense(payload)
    except WireError:
        fast = None
    assert (full is None) == (fast is None)
    if full is not None:
        assert full.shape == fast.shape and full.tobytes() == fast.tobytes()


@ROUND
@given(hnp.arrays(np.float32, shapes, elements=st.floats(-7e4, 7e4, width=32)))
def test_dense_float16_matches_the_fp16_cast(arr):
    out = wire.decode_dense(wire.encode_dense(arr, "float16"))
    assert out.dtype == np.float16
    with np.errstate(over="ignore"):  # beyond fp16 range the cast gives inf, as the wire does
        np.testing.assert_array_equal(out, arr.astype(np.float16))


def test_dense_accepts_torch_tensors_with_grad_and_torch_dtype():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).requires_grad_(True)
    out = wire.decode_dense(wire.encode_dense(t * 2, torch.float64))
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3) * 2.0)
    assert out.dtype == np.float64
    bf = torch.tensor([1.5, -2.0], dtype=torch.bfloat16)
    np.testing.assert_array_equal(wire.decode_dense(wire.encode_dense(bf)), [1.5, -2.0])


def test_dense_large_matrix_round_trip():
    arr = np.random.default_rng(0).standard_normal((40981, 64), dtype=np.float32)
    np.testing.assert_array_equal(wire.decode_dense(wire.encode_dense(arr)), arr)


def test_dense_rejects_lossy_integer_casts_and_bad_dtypes():
    with pytest.raises(ValueError, match="non-integer"):
        wire.encode_dense(np.array([1.5]), "int64")
    with pytest.raises(ValueError, match="non-finite"):
        wire.encode_dense(np.array([np.nan]), "int32")
    with pytest.raises(ValueError, match="overflow"):
        wire.encode_dense(np.array([2**40]), "int32")
    with pytest.raises(ValueError, match="not supported"):
        wire.encode_dense(np.zeros(3), "uint8")
    with pytest.raises(ValueError, match="ndim"):
        wire.encode_dense(np.zeros((1,) * 9))
    np.testing.assert_array_equal(
        wire.decode_dense(wire.encode_dense([3.0, -4.0], "int32")), [3, -4]
    )


@ROUND
@given(sign_vectors, st.sampled_from([np.int8, np.int64, np.float32, np.float64]))
def test_signs_round_trip_and_size(signs, dtype):
    payload = wire.encode_signs(signs.astype(dtype))
    assert len(payload) == wire.signs_size(signs.size) == 5 + math.ceil(signs.size / 8)
    out = wire.decode_signs(payload)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, signs)


def test_signs_accepts_torch_and_rejects_other_values():
    np.testing.assert_array_equal(
        wire.decode_signs(wire.encode_signs(torch.tensor([1.0, -1.0, -1.0]))), [1, -1, -1]
    )
    for bad in ([1, 0, -1], [1.0, np.nan], [2, -1]):
        with pytest.raises(ValueError, match="signs"):
            wire.encode_signs(np.array(bad))
    with pytest.raises(ValueError, match="1-D"):
        wire.encode_signs(np.ones((2, 2)))


@ROUND
@given(ternary_vectors())
def test_ternary_round_trip_and_size(case):
    values, scale = case
    payload = wire.encode_ternary(values, scale)
    nnz = int(np.count_nonzero(values))
    assert len(payload) == wire.ternary_size(nnz) == 13 + 4 * nnz + math.ceil(nnz / 8)
    out = wire.decode_ternary(payload)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, values)
    n, idx, signs, s = wire.decode_ternary_sparse(payload)
    assert n == values.size and idx.dtype == np.int64 and signs.dtype == np.int8
    np.testing.assert_array_equal(idx, np.flatnonzero(values))
    np.testing.assert_array_equal(signs, np.sign(values[idx]))
    assert s == float(np.float32(scale))


def test_ternary_rejects_values_off_the_grid():
    with pytest.raises(ValueError, match="entries"):
        wire.encode_ternary(np.array([0.5, 0.25]), 0.5)
    with pytest.raises(ValueError, match="scale"):
        wire.encode_ternary(np.zeros(3), -1.0)
    with pytest.raises(ValueError, match="scale"):
        wire.encode_ternary(np.zeros(3), float("inf"))


@ROUND
@given(bigint_lists)
def test_bigints_round_trip_and_size(values):
    payload = wire.encode_bigints(values)
    nbytes = [(v.bit_length() + 7) // 8 for v in values]
    assert len(payload) == wire.bigints_size(nbytes) == 5 + sum(2 + n for n in nbytes)
    assert wire.decode_bigints(payload) == values


def test_bigints_rejects_negative_and_oversized():
    with pytest.raises(ValueError, match="negative"):
        wire.encode_bigints([5, -1])
    with pytest.raises(ValueError, match="bytes"):
        wire.encode_bigints([1 << (8 * 65536)])
    with pytest.raises(WireError, match="leading zero"):
        wire.decode_bigints(b"\x04\x01\x00\x00\x00\x02\x00\x00\x07")


def test_bigints_ten_thousand_rsa_values():
    rng = np.random.default_rng(1)
    values = [int.from_bytes(rng.bytes(256), "big") for _ in range(10_000)]
    assert wire.decode_bigints(wire.encode_bigints(values)) == values


@ROUND
@given(id_lists())
def test_ids_round_trip_and_size(case):
    ids, width = case
    payload = wire.encode_ids(ids, width)
    assert len(payload) == wire.ids_size(ids.size, width) == 6 + width * ids.size
    out = wire.decode_ids(payload)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, ids.astype(np.int64))


def test_ids_reject_out_of_range_and_bad_width():
    with pytest.raises(ValueError, match="non-negative"):
        wire.encode_ids([3, -1])
    with pytest.raises(ValueError, match="width 1"):
        wire.encode_ids([256], width=1)
    with pytest.raises(ValueError, match="width"):
        wire.encode_ids([1], width=3)
    with pytest.raises(ValueError, match="integers"):
        wire.encode_ids(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(wire.decode_ids(wire.encode_ids(torch.tensor([7, 9]))), [7, 9])


@ROUND
@given(fields)
def test_record_round_trip_size_and_expect(parts):
    payload = wire.encode_record(parts)
    assert len(payload) == wire.record_size([len(p) for p in parts])
    assert len(payload) == 3 + sum(4 + len(p) for p in parts)
    assert wire.decode_record(payload) == parts
    assert wire.decode_record(payload, expect=len(parts)) == parts
    with pytest.raises(WireError, match="expected"):
        wire.decode_record(payload, expect=len(parts) + 1)


def test_record_nests_other_codecs():
    inner = [wire.encode_ids([1, 2, 3]), wire.encode_blob("héllo".encode())]
    a, b = wire.decode_record(wire.encode_record(inner), expect=2)
    np.testing.assert_array_equal(wire.decode_ids(a), [1, 2, 3])
    assert wire.decode_blob(b).decode() == "héllo"


@ROUND
@given(st.binary(max_size=100))
def test_blob_round_trip_and_size(data):
    payload = wire.encode_blob(data)
    assert len(payload) == wire.blob_size(len(data)) == 5 + len(data)
    assert wire.decode_blob(payload) == data
    with pytest.raises(TypeError, match="utf-8"):
        wire.encode_blob("text")


@FEW
@given(valid_payloads())
def test_decoders_accept_bytearray_and_memoryview(case):
    kind, payload = case
    expected = DECODERS[kind](payload)
    for form in (bytearray(payload), memoryview(payload)):
        got = DECODERS[kind](form)
        if isinstance(expected, np.ndarray):
            assert got.tobytes() == expected.tobytes()
        elif kind == "ternary_sparse":
            assert got[0] == expected[0] and np.array_equal(got[1], expected[1])
        else:
            assert got == expected
    assert wire.peek_tag(payload) == kind.removesuffix("_sparse")


def test_size_helpers_reject_nonsense():
    for call in (
        lambda: wire.signs_size(-1),
        lambda: wire.ternary_size(-3),
        lambda: wire.ids_size(4, width=5),
        lambda: wire.blob_size(2**32),
        lambda: wire.bigints_size([70000]),
        lambda: wire.dense_size((2, -1)),
        lambda: wire.dense_size((2,), "complex64"),
    ):
        with pytest.raises(ValueError):
            call()


# --------------------------------------------------------------------------- malformed bytes


@FAST
@given(st.sampled_from(sorted(DECODERS)), st.binary(max_size=64))
def test_random_bytes_give_a_value_or_wire_error(kind, data):
    decodes_or_wire_error(DECODERS[kind], data)


@FAST
@given(st.sampled_from(sorted(DECODERS)), st.binary(max_size=64))
def test_random_bytes_behind_the_right_tag(kind, rest):
    decodes_or_wire_error(DECODERS[kind], bytes([TAG_OF[kind]]) + rest)


@FAST
@given(valid_payloads(), st.data())
def test_mutated_payloads_give_a_value_or_wire_error(case, data):
    kind, payload = case
    buf = bytearray(payload)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    decodes_or_wire_error(DECODERS[kind], bytes(buf))


@FEW
@given(valid_payloads())
def test_every_truncation_is_a_wire_error(case):
    kind, payload = case
    for cut in range(len(payload)):
        with pytest.raises(WireError):
            DECODERS[kind](payload[:cut])


@FAST
@given(valid_payloads(), st.binary(min_size=1, max_size=16))
def test_trailing_junk_is_a_wire_error(case, junk):
    kind, payload = case
    with pytest.raises(WireError, match="bytes"):
        DECODERS[kind](payload + junk)


@FAST
@given(valid_payloads(), st.integers(0, 255))
def test_wrong_tag_is_a_wire_error(case, tag):
    kind, payload = case
    if tag == TAG_OF[kind]:
        tag = 0
    with pytest.raises(WireError, match="tag"):
        DECODERS[kind](bytes([tag]) + payload[1:])


def test_specific_malformations_are_named():
    cases = [
        (wire.decode_dense, b"\x01\x07\x00", "dtype code"),
        (wire.decode_dense, b"\x01\x00\x09" + b"\x00" * 36, "ndim"),
        # shape 1e9 x 1e9 must be refused before anything is allocated
        (wire.decode_dense, b"\x01\x00\x02" + struct.pack("<II", 10**9, 10**9), "declared"),
        # an empty tensor whose other dims overflow numpy's size limit
        (wire.decode_dense, b"\x01\x00\x04" + struct.pack("<4I", 0, *[2**32 - 1] * 3), "too large"),
        (wire.decode_signs, b"\x02\x03\x00\x00\x00\xff", "padding"),
        (
            wire.decode_ternary,
            struct.pack("<BIIf", 3, 10, 2, 1.0) + struct.pack("<II", 5, 5) + b"\x00",
            "increasing",
        ),
        (
            wire.decode_ternary,
            struct.pack("<BIIf", 3, 4, 1, 1.0) + struct.pack("<I", 4) + b"\x00",
            "< n",
        ),
        (wire.decode_ternary, struct.pack("<BIIf", 3, 4, 0, float("nan")), "scale"),
        (wire.decode_ternary, struct.pack("<BIIf", 3, 1, 3, 1.0), "nnz"),
        (wire.decode_ids, b"\x05\x01\x00\x00\x00\x03\x00\x00\x00", "width"),
        (wire.decode_ids, b"\x05\x01\x00\x00\x00\x08" + b"\xff" * 8, "int64"),
        (wire.decode_bigints, b"\x04\xff\xff\xff\xff", "declared"),
        (wire.decode_record, b"\x06\x01\x00\xff\xff\xff\xff", "field 0"),
        (wire.peek_tag, b"\x63", "unknown tag"),
        (wire.peek_tag, b"", "empty"),
    ]
    for decoder, data, fragment in cases:
        with pytest.raises(WireError, match=fragment):
            decoder(data)


def test_non_bytes_input_is_a_type_error():
    with pytest.raises(TypeError, match="bytes"):
        wire.decode_dense("not bytes")


def test_chunks_round_trip_and_refuse_ragged_input():
    chunks = [bytes([i]) * 32 for i in range(3)]
    payload = wire.encode_chunks(chunks, 32)
    assert payload == wire.encode_blob(b"".join(chunks))  # the blob framing, nothing added
    assert wire.decode_chunks(payload, 32) == chunks
    with pytest.raises(wire.WireError, match="32 bytes"):
        wire.encode_chunks([b"x" * 31], 32)
    with pytest.raises(wire.WireError, match="multiple of 32"):
        wire.decode_chunks(wire.encode_blob(b"x" * 33), 32)


# --------------------------------------------------------------------------- declared lengths
# A declared length or count is checked against the bytes present (and the caller's maximum)
# before anything is allocated: a few bytes never make a decoder allocate gigabytes.

HUGE = 2**32 - 1  # the largest a u32 length field can declare (2**32 does not fit in it)
HOSTILE_HEADERS = {  # a few bytes each, declaring ~2**32 elements, values or bytes
    "ternary_n": struct.pack("<BIIf", 3, HUGE, 0, 1.0),  # n = 2**32-1, no non-zeros: 13 bytes
    "ternary_nnz": struct.pack("<BIIf", 3, HUGE, HUGE, 1.0),
    "signs": struct.pack("<BI", 2, HUGE),
    "ids": struct.pack("<BIB", 5, HUGE, 8),
    "bigints": struct.pack("<BI", 4, HUGE),
    "bigints_value": struct.pack("<BIH", 4, 1, 0xFFFF) + b"\x01",
    "record": struct.pack("<BHI", 6, 0xFFFF, HUGE),
    "record_field": struct.pack("<BHI", 6, 1, HUGE),
    "blob": struct.pack("<BI", 7, HUGE),
    "dense": struct.pack("<BBB2I", 1, 0, 2, HUGE, HUGE),
    "dense_1d": struct.pack("<BBBI", 1, 4, 1, HUGE),
}
HOSTILE_DECODERS = {
    "ternary_n": wire.decode_ternary,
    "ternary_nnz": wire.decode_ternary_sparse,
    "signs": wire.decode_signs,
    "ids": wire.decode_ids,
    "bigints": wire.decode_bigints,
    "bigints_value": wire.decode_bigints,
    "record": wire.decode_record,
    "record_field": wire.decode_record,
    "blob": wire.decode_blob,
    "dense": wire.decode_dense,
    "dense_1d": wire.decode_dense,
}


def _peak_bytes(call) -> int:
    """Peak bytes allocated (Python and numpy, both traced by tracemalloc) while ``call`` runs."""
    import tracemalloc

    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("name", sorted(HOSTILE_HEADERS))
def test_a_huge_declared_length_is_a_wire_error_before_any_allocation(name):
    import time

    payload, decode = HOSTILE_HEADERS[name], HOSTILE_DECODERS[name]
    assert len(payload) <= 16
    errors = []

    def call():
        try:
            decode(payload)
        except WireError as e:
            errors.append(e)

    t0 = time.perf_counter()
    peak = _peak_bytes(call)
    assert errors, f"{name}: decoded without an error"
    assert time.perf_counter() - t0 < 1.0
    assert peak < 1 << 20, f"{name}: {peak} bytes allocated for a {len(payload)}-byte payload"


def test_a_ternary_vector_declaring_2_32_elements_is_refused_before_it_is_densified():
    payload = HOSTILE_HEADERS["ternary_n"]  # 13 bytes asking for 16 GiB of float32
    assert len(payload) == 13
    with pytest.raises(WireError, match="exceeds the limit"):
        wire.decode_ternary(payload)
    with pytest.raises(WireError, match="expected 5"):
        wire.decode_ternary(payload, length=5)
    with pytest.raises(WireError, match="exceeds the limit 100"):
        wire.decode_ternary_sparse(payload, max_len=100)
    # the sparse form allocates only what the non-zeros take: the declared n is a number
    n, idx, signs, scale = wire.decode_ternary_sparse(payload)
    assert n == HUGE and idx.size == signs.size == 0 and scale == 1.0
    # the default bound, and a caller's, are exact: at the bound it decodes, one over it fails
    at_bound = struct.pack("<BIIf", 3, wire.MAX_TERNARY_LEN, 0, 1.0)
    assert wire.decode_ternary(at_bound).shape == (wire.MAX_TERNARY_LEN,)
    over = struct.pack("<BIIf", 3, wire.MAX_TERNARY_LEN + 1, 0, 1.0)
    with pytest.raises(WireError):
        wire.decode_ternary(over)
    assert wire.decode_ternary(over, max_len=wire.MAX_TERNARY_LEN + 1).shape == (
        wire.MAX_TERNARY_LEN + 1,
    )
    ok = wire.encode_ternary(np.array([0, 0.5, -0.5, 0], dtype="f4"), 0.5)
    assert wire.decode_ternary(ok, length=4).tolist() == [0, 0.5, -0.5, 0]
    assert wire.decode_ternary(ok, max_len=4).shape == (4,)
    with pytest.raises(WireError):
        wire.decode_ternary(ok, max_len=3)


def test_callers_maxima_bound_every_length_bearing_codec():
    payloads = {
        "signs": (wire.encode_signs(np.ones(9)), wire.decode_signs, "max_len", 9),
        "ids": (wire.encode_ids(np.arange(5)), wire.decode_ids, "max_count", 5),
        "bigints": (wire.encode_bigints([3, 2**70]), wire.decode_bigints, "max_count", 2),
        "bigint_size": (wire.encode_bigints([3, 2**70]), wire.decode_bigints, "max_bytes", 9),
        "record": (wire.encode_record([b"a", b"b", b"c"]), wire.decode_record, "max_fields", 3),
        "blob": (wire.encode_blob(b"abcd"), wire.decode_blob, "max_len", 4),
        "dense": (wire.encode_dense(np.zeros((2, 3))), wire.decode_dense, "max_numel", 6),
        "view": (wire.encode_dense(np.zeros((2, 3))), wire.view_dense, "max_numel", 6),
        "ternary": (
            wire.encode_ternary(np.zeros(7), 1.0),
            wire.decode_ternary_sparse,
            "max_len",
            7,
        ),
    }
    for payload, decode, arg, limit in payloads.values():
        decode(payload, **{arg: limit})  # at the limit: decodes
        with pytest.raises(WireError, match="exceeds the limit"):
            decode(payload, **{arg: limit - 1})
    chunks = wire.encode_chunks([b"x" * 4] * 3, 4)
    assert len(wire.decode_chunks(chunks, 4, max_count=3)) == 3
    with pytest.raises(WireError):
        wire.decode_chunks(chunks, 4, max_count=2)
