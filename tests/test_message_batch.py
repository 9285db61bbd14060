import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.message import MAGIC, BatchError, Message, decode_batch, encode_batch

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
