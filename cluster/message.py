"""Messages between logical nodes and the batch format that carries them between hosts.

A message is ``(kind, src, dst, round, phase, payload)``; the payload is ``bytes`` made by a codec
of :mod:`cluster.wire`. A node id is ``"<role>/<index>"`` (``"user/17"``, ``"server/0"``), so the
ledger can read the role off it.

All the messages a host sends to one other host in a superstep travel as one batch::

    magic "PRB3" | n_strings u32 | n_payloads u32 | n_messages u32
    n_strings × length u16 | the strings' UTF-8, one after another   # each kind, node id, phase once
    n_messages × (round, payload index, kind, src, dst, phase) as u32   # indices into the tables
    n_payloads × length u32 | the payloads, one after another          # identical payloads once

A large batch travels between hosts as its parts (the header up to the payloads, then each payload),
so the object store takes every payload straight from the node that made it, with no joined copy
(nodes/host.py ``_put_batches`` decides which batches do).

A broadcast (the same payload object sent to many nodes of one host) is stored once in the batch,
which is what a real deployment's multicast would do; the logical ledger still counts it once per
recipient. Lengths and headers are tables of integers, each read in one pass.
"""

from __future__ import annotations

import struct
from collections.abc import Container
from dataclasses import dataclass

import numpy as np

MAGIC = b"PRB3"
_HEAD = struct.Struct("<4sIII")
_FIELDS = 6  # round, payload, kind, src, dst, phase


class BatchError(ValueError):
    """A message batch could not be decoded."""


@dataclass(frozen=True, slots=True)
class Message:
    kind: str
    src: str
    dst: str
    round: int
    phase: str
    payload: bytes  # or a read-only memoryview of a received batch (decode_batch's in_place)

    @property
    def src_role(self) -> str:
        return role_of(self.src)

    @property
    def dst_role(self) -> str:
        return role_of(self.dst)


def node_id(role: str, index: int) -> str:
    return f"{role}/{index}"


def role_of(nid: str) -> str:
    return nid.split("/", 1)[0]


def index_of(nid: str) -> int:
    return int(nid.split("/", 1)[1])


def encode_batch_parts(messages: list[Message]) -> list:
    """The batch as its parts: the header (everything before the payloads, as ``bytes``) and then
    each distinct payload object, uncopied. Joined they are :func:`encode_batch`'s bytes; a host
    hands the parts to Ray as they are (out-of-band buffers), so each payload is copied once,
    straight into the object store."""
    strings: dict[str, int] = {}
    payload_index: dict[int, int] = {}
    payloads: list = []
    table: list[int] = []
    sid = strings.setdefault
    for m in messages:
        idx = payload_index.get(id(m.payload))
        if idx is None:
            if not isinstance(m.payload, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"message {m.kind} {m.src}->{m.dst}: payload must be bytes, "
                    f"got {type(m.payload).__name__}"
                )
            idx = payload_index[id(m.payload)] = len(payloads)
            payloads.append(m.payload)
        table += (
            m.round,
            idx,
            sid(m.kind, len(strings)),
            sid(m.src, len(strings)),
            sid(m.dst, len(strings)),
            sid(m.phase, len(strings)),
        )
    texts = [t.encode() for t in strings]
    if texts and max(map(len, texts)) > 0xFFFF:
        raise ValueError(f"string field too long for a batch header: {max(map(len, texts))} bytes")
    head = b"".join(
        [
            _HEAD.pack(MAGIC, len(texts), len(payloads), len(messages)),
            np.array([len(b) for b in texts], dtype="<u2").tobytes(),
            *texts,
            np.array(table, dtype="<u4").tobytes(),
            np.array([_nbytes(p) for p in payloads], dtype="<u4").tobytes(),
        ]
    )
    return [head, *payloads]


def encode_batch(messages: list[Message]) -> bytes:
    return b"".join(encode_batch_parts(messages))


def batch_size(batch) -> int:
    """Bytes in a batch, joined (bytes or any buffer) or as its parts."""
    if isinstance(batch, (list, tuple)):
        return sum(map(_nbytes, batch))
    return _nbytes(batch)


def join_batch(batch) -> bytes:
    """A batch, joined or as its parts, as one ``bytes`` (what a checkpoint stores)."""
    if isinstance(batch, (list, tuple)):
        return b"".join(batch)
    return bytes(batch)


def _nbytes(buf) -> int:
    return memoryview(buf).nbytes


def _lengths(buf: memoryview, pos: int, count: int, dtype: str, what: str) -> np.ndarray:
    size = np.dtype(dtype).itemsize * count
    if pos + size > len(buf):
        raise BatchError(
            f"message batch truncated: {count} {what} lengths need {size} bytes at offset {pos}, "
            f"have {len(buf) - pos}"
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=pos).astype(np.int64)


def _read_head(mv: memoryview):
    """(strings, message table, payload lengths, offset where the payloads begin)."""
    if len(mv) < _HEAD.size:
        raise BatchError(f"message batch truncated: {len(mv)} bytes, the header needs {_HEAD.size}")
    magic, n_strings, n_payloads, n_messages = _HEAD.unpack_from(mv)
    if magic != MAGIC:
        raise BatchError("message batch: bad magic (not a privrec batch)")
    # each string needs at least 2 bytes, each payload 4 and each header 24: refuse absurd counts
    if 2 * n_strings + 4 * n_payloads + 4 * _FIELDS * n_messages > len(mv):
        raise BatchError(
            f"message batch: declares {n_strings} strings, {n_payloads} payloads and {n_messages} "
            f"messages, buffer has {len(mv)} bytes"
        )
    pos = _HEAD.size
    str_len = _lengths(mv, pos, n_strings, "<u2", "string")
    pos += 2 * n_strings
    str_end = pos + np.cumsum(str_len)
    if n_strings and str_end[-1] > len(mv):
        raise BatchError("message batch truncated: the strings run past the end")
    text = bytes(mv[pos : int(str_end[-1]) if n_strings else pos])
    try:
        strings = [
            text[a:b].decode()
            for a, b in zip((str_end - str_len - pos).tolist(), (str_end - pos).tolist())
        ]
    except UnicodeDecodeError as e:
        raise BatchError(f"message batch: header string is not UTF-8 ({e.reason})") from None
    pos += len(text)
    if pos + 4 * _FIELDS * n_messages > len(mv):
        raise BatchError("message batch truncated: the message table runs past the end")
    table = np.frombuffer(mv, dtype="<u4", count=_FIELDS * n_messages, offset=pos)
    table = table.reshape(-1, _FIELDS)
    pos += 4 * _FIELDS * n_messages
    if n_messages and (
        int(table[:, 1].max()) >= n_payloads or int(table[:, 2:].max()) >= n_strings
    ):
        raise BatchError(
            f"message batch: an index out of range ({n_payloads} payloads, {n_strings} strings)"
        )
    pay_len = _lengths(mv, pos, n_payloads, "<u4", "payload")
    return strings, table, pay_len, pos + 4 * n_payloads


def _payload_views(batch) -> tuple[list[str], np.ndarray, list[memoryview]]:
    """(strings, message table, a read-only view of each payload) of a batch, joined or as its
    parts, checked against the lengths its header declares."""
    if isinstance(batch, (list, tuple)):
        if not batch:
            raise BatchError("message batch: no parts")
        strings, table, pay_len, end = _read_head(memoryview(batch[0]).cast("B"))
        if end != _nbytes(batch[0]):
            raise BatchError(f"message batch: {_nbytes(batch[0]) - end} trailing header bytes")
        views = [memoryview(p).cast("B") for p in batch[1:]]
        if len(views) != len(pay_len) or any(len(v) != n for v, n in zip(views, pay_len.tolist())):
            raise BatchError(
                f"message batch: the header declares {len(pay_len)} payloads of "
                f"{int(pay_len.sum())} bytes, the parts are {len(views)} of "
                f"{sum(map(len, views))} bytes"
            )
        return strings, table, [v.toreadonly() for v in views]
    mv = memoryview(batch).cast("B").toreadonly()
    strings, table, pay_len, pos = _read_head(mv)
    pay_end = pos + np.cumsum(pay_len)
    end = int(pay_end[-1]) if len(pay_len) else pos
    if end > len(mv):
        raise BatchError(
            f"message batch truncated: the payloads need {end - pos} bytes, have {len(mv) - pos}"
        )
    if end != len(mv):
        raise BatchError(f"message batch: {len(mv) - end} trailing bytes")
    return strings, table, [mv[a:b] for a, b in zip((pay_end - pay_len).tolist(), pay_end.tolist())]


def decode_batch(batch, in_place: Container[str] = ()) -> list[Message]:
    """The messages of a batch: joined (bytes, or the read-only numpy view of Ray's object store
    a host receives) or as its parts (:func:`encode_batch_parts`; what a host receives from Ray is
    read-only views of the store). A payload for a node of ``in_place`` is a read-only memoryview
    of the batch (no copy: that node reads it during the superstep and keeps none of it); any
    other is copied out as its own bytes, once however many nodes it goes to."""
    strings, table, views = _payload_views(batch)
    rows = table.tolist()
    if not in_place:
        payloads = [bytes(v) for v in views]
        return [
            Message(strings[k], strings[s], strings[d], rnd, strings[ph], payloads[i])
            for rnd, i, k, s, d, ph in rows
        ]
    copies: dict[int, bytes] = {}
    out = []
    for rnd, i, k, s, d, ph in rows:
        dst = strings[d]
        if dst in in_place:
            payload = views[i]
        else:
            payload = copies.get(i)
            if payload is None:
                payload = copies[i] = bytes(views[i])
        out.append(Message(strings[k], strings[s], dst, rnd, strings[ph], payload))
    return out
