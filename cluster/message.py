"""Messages between logical nodes and the batch format that carries them between hosts.

A message is ``(kind, src, dst, round, phase, payload)``; the payload is ``bytes`` made by a codec
of :mod:`cluster.wire`. A node id is ``"<role>/<index>"`` (``"user/17"``, ``"server/0"``), so the
ledger can read the role off it.

All the messages a host sends to one other host in a superstep travel as one batch::

    magic "PRB2" | n_strings u32 | n_payloads u32 | n_messages u32
    n_strings × (length u16, UTF-8)                      # each distinct kind, node id, phase once
    n_messages × (round, payload index, kind, src, dst, phase) as u32   # indices into the tables
    n_payloads × (length u32, bytes)                     # identical payloads stored once

A broadcast (the same payload object sent to many nodes of one host) is stored once in the batch,
which is what a real deployment's multicast would do; the logical ledger still counts it once per
recipient. The message headers are a table of integers, read in one pass.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"PRB2"
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
    for m in messages:
        if not isinstance(m.payload, (bytes, bytearray)):
            raise TypeError(
                f"message {m.kind} {m.src}->{m.dst}: payload must be bytes, got {type(m.payload).__name__}"
            )
        idx = payload_index.get(id(m.payload))
        if idx is None:
            idx = payload_index[id(m.payload)] = len(payloads)
            payloads.append(m.payload)
        table.append(m.round)
        table.append(idx)
        for text in (m.kind, m.src, m.dst, m.phase):
            table.append(strings.setdefault(text, len(strings)))
    parts = [_HEAD.pack(MAGIC, len(strings), len(payloads), len(messages))]
    for text in strings:
        b = text.encode()
        if len(b) > 0xFFFF:
            raise ValueError(f"string field too long for a batch header: {len(b)} bytes")
        parts.append(struct.pack("<H", len(b)) + b)
    parts.append(np.array(table, dtype="<u4").tobytes())
    for p in payloads:
        parts.append(struct.pack("<I", len(p)))
        parts.append(p)
    return b"".join(parts)


class _Reader:
    def __init__(self, buf):
        self.buf = memoryview(buf).cast("B")
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise BatchError(
                f"message batch truncated: need {n} bytes at offset {self.pos}, have {len(self.buf) - self.pos}"
            )
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def string(self) -> str:
        (n,) = struct.unpack("<H", self.take(2))
        try:
            return bytes(self.take(n)).decode()
        except UnicodeDecodeError as e:
            raise BatchError(f"message batch: header string is not UTF-8 ({e.reason})") from None


def decode_batch(buf) -> list[Message]:
    """The messages of a batch held in any contiguous byte buffer (bytes, or the read-only numpy
    view of Ray's object store a host receives); each payload is copied out as its own bytes."""
    r = _Reader(buf)
    magic, n_strings, n_payloads, n_messages = _HEAD.unpack(r.take(_HEAD.size))
    if magic != MAGIC:
        raise BatchError("message batch: bad magic (not a privrec batch)")
    # each string needs at least 2 bytes, each payload 4 and each header 24: refuse absurd counts
    if 2 * n_strings + 4 * n_payloads + 4 * _FIELDS * n_messages > len(r.buf):
        raise BatchError(
            f"message batch: declares {n_strings} strings, {n_payloads} payloads and {n_messages} "
            f"messages, buffer has {len(r.buf)} bytes"
        )
    strings = [r.string() for _ in range(n_strings)]
    table = np.frombuffer(r.take(4 * _FIELDS * n_messages), dtype="<u4").reshape(-1, _FIELDS)
    if n_messages and (
        int(table[:, 1].max()) >= n_payloads or int(table[:, 2:].max()) >= n_strings
    ):
        raise BatchError(
            f"message batch: an index out of range ({n_payloads} payloads, {n_strings} strings)"
        )
    payloads = [bytes(r.take(r.u32())) for _ in range(n_payloads)]
    if r.pos != len(r.buf):
        raise BatchError(f"message batch: {len(r.buf) - r.pos} trailing bytes")
    return [
        Message(strings[k], strings[s], strings[d], rnd, strings[ph], payloads[i])
        for rnd, i, k, s, d, ph in table.tolist()
    ]
