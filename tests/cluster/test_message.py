import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.message import (
    MAGIC,
    BatchError,
    Message,
    batch_size,
    decode_batch,
    encode_batch,
    encode_batch_parts,
    join_batch,
)

text = st.text(min_size=0, max_size=12)
messages = st.lists(
    st.builds(Message, text, text, text, st.integers(0, 2**32 - 1), text, st.binary(max_size=64)),
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(messages)
def test_batch_round_trip(msgs):
    assert decode_batch(encode_batch(msgs)) == msgs


def test_broadcast_payload_stored_once():
    payload = bytes(1000)
    msgs = [Message("k", "server/0", f"user/{i}", 0, "p", payload) for i in range(50)]
    batch = encode_batch(msgs)
    assert len(batch) < 1000 + 50 * 64  # one copy of the payload, not fifty
    assert all(m.payload == payload for m in decode_batch(batch))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_batch_error(junk):
    with pytest.raises(BatchError):
        decode_batch(MAGIC + junk if len(junk) % 2 else junk)


def test_truncations_raise_batch_error():
    batch = encode_batch(
        [Message("kind", "a/1", "b/2", 3, "ph", b"xyz"), Message("k2", "a/1", "b/3", 3, "ph", b"")]
    )
    for cut in range(len(batch)):
        with pytest.raises(BatchError):
            decode_batch(batch[:cut])
    with pytest.raises(BatchError):
        decode_batch(batch + b"\0")


@settings(max_examples=100, deadline=None)
@given(messages)
def test_parts_join_to_the_batch_and_decode_alike(msgs):
    parts = encode_batch_parts(msgs)
    assert join_batch(parts) == encode_batch(msgs)
    assert batch_size(parts) == len(encode_batch(msgs))
    assert decode_batch(parts) == msgs
    assert decode_batch(tuple(memoryview(p) for p in parts)) == msgs  # as Ray hands them over


def test_in_place_payloads_are_views_of_the_batch_and_others_one_copy():
    shared = bytes(range(200))
    msgs = [
        Message("k", "server/0", "agg/0", 1, "p", b"one"),
        Message("k", "server/0", "user/1", 1, "p", shared),
        Message("k", "server/0", "user/2", 1, "p", shared),
        Message("k", "server/0", "agg/0", 1, "p", shared),
    ]
    for batch in (encode_batch(msgs), encode_batch_parts(msgs)):
        out = decode_batch(batch, in_place={"agg/0"})
        assert out == msgs
        views = [m.payload for m in out if m.dst == "agg/0"]
        assert all(isinstance(v, memoryview) and v.readonly for v in views)
        copies = [m.payload for m in out if m.dst != "agg/0"]
        assert all(type(c) is bytes for c in copies)
        assert copies[0] is copies[1]  # a broadcast is copied out once for its recipients
        assert all(type(m.payload) is bytes for m in decode_batch(batch))  # none in place


def test_parts_that_disagree_with_their_header_raise_batch_error():
    head, *payloads = encode_batch_parts(
        [Message("k", "a/1", "b/2", 0, "p", b"xyz"), Message("k", "a/1", "b/3", 0, "p", b"uv")]
    )
    bad = [
        [],
        [head, payloads[0]],  # a payload missing
        [head, *payloads, b"w"],  # one too many
        [head, payloads[0], b"u"],  # shorter than declared
        [head + b"\0", *payloads],  # trailing header bytes
        [head[:-1], *payloads],  # a truncated header
    ]
    for parts in bad:
        with pytest.raises(BatchError):
            decode_batch(parts)
