"""Messages between logical nodes and the batch format that carries them between hosts.

A message is ``(kind, src, dst, round, phase, payload)``; the payload is ``bytes`` made by a codec
of :mod:`cluster.wire`. A node id is ``"<role>/<index>"`` (``"user/17"``, ``"server/0"``), so the
ledger can read the role off it.

All the messages a host sends to one other host in a superstep travel as one batch::

    magic "PRB3" | n_strings u32 | n_payloads u32 | n_messages u32
    n_strings × length u16 | the strings' UTF-8, one after another   # each kind, node id, phase once
    n_messages × (round, payload index, kind, src, dst, phase) as u32   # indices into the tables
    n_payloads × length u32 | the payloads, one after another          # identical payloads once

A broadcast (the same payload object sent to many nodes of one host) is stored once in the batch,
which is what a real deployment's multicast would do; the logical ledger still counts it once per
recipient. Lengths and headers are tables of integers, each read in one pass.
"""

from __future__ import annotations

import struct
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
    payload: bytes

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


def encode_batch(messages: list[Message]) -> bytes:
    strings: dict[str, int] = {}
    payload_index: dict[int, int] = {}
    payloads: list[bytes] = []
    table: list[int] = []
    sid = strings.setdefault
    for m in messages:
        idx = payload_index.get(id(m.payload))
        if idx is None:
            if not isinstance(m.payload, (bytes, bytearray)):
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
    return b"".join(
        [
            _HEAD.pack(MAGIC, len(texts), len(payloads), len(messages)),
            np.array([len(b) for b in texts], dtype="<u2").tobytes(),
            *texts,
            np.array(table, dtype="<u4").tobytes(),
            np.array([len(p) for p in payloads], dtype="<u4").tobytes(),
            *payloads,
        ]
    )


def _lengths(buf: memoryview, pos: int, count: int, dtype: str, what: str) -> np.ndarray:
    size = np.dtype(dtype).itemsize * count
    if pos + size > len(buf):
        raise BatchError(
            f"message batch truncated: {count} {what} lengths need {size} bytes at offset {pos}, "
            f"have {len(buf) - pos}"
        )
    return np.frombuffer(buf, dtype=dtype, count=count, offset=pos).astype(np.int64)


def decode_batch(buf) -> list[Message]:
    """The messages of a batch held in any contiguous byte buffer (bytes, or the read-only numpy
    view of Ray's object store a host receives); each payload is copied out as its own bytes."""
    mv = memoryview(buf).cast("B")
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
    pos += 4 * n_payloads
    pay_end = pos + np.cumsum(pay_len)
    end = int(pay_end[-1]) if n_payloads else pos
    if end > len(mv):
        raise BatchError(
            f"message batch truncated: the payloads need {end - pos} bytes, have {len(mv) - pos}"
        )
    if end != len(mv):
        raise BatchError(f"message batch: {len(mv) - end} trailing bytes")
    payloads = [bytes(mv[a:b]) for a, b in zip((pay_end - pay_len).tolist(), pay_end.tolist())]
    return [
        Message(strings[k], strings[s], strings[d], rnd, strings[ph], payloads[i])
        for rnd, i, k, s, d, ph in table.tolist()
    ]
