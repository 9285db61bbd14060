"""The ``malformed`` attack: compromised participants that try every way a message can break a run.

A compromised participant (a user; a party in VerFedGNN) does all its honest work and, in every
training superstep, adds hostile messages beside its honest ones. Which it tries is a function of
(seed, round, node id) only, so placement never changes it:

==============  =========================================================  ======================
move            what it sends                                              who stops it
==============  =========================================================  ======================
forge           its honest message again under another node's id          host (envelope): the
                                                                           sender fails the round
address         an honest payload to a role that accepts nothing from it  host (envelope)
inflate         an honest payload whose declared length (the u32 after    receiver's check
                the codec's tag) is 2³²−1
truncate        an honest payload less its last byte                      receiver's check
misdirect       an honest message to another node of the receiver's role  receiver's handler
                (in gossip: a peer that is not its neighbour)               ("peer")
out-of-range    blinded RSA values 0 and N to the key server, in place of  key server ("range")
                its request
unordered       PSI / matcher tokens in reverse order                     receiver ("order")
==============  =========================================================  ======================

It acts in a ``share`` of its rounds (attack parameter, default 1; 0 gives the control run: the
same participants honest, and not evaluated). In a round in which it forges a sender or addresses
a node it may not, it has failed (the host drops everything it sent, the honest part too);
otherwise everything hostile is dropped and counted under ``rejected`` and its honest messages
stand. It reports no evaluation figure, so every metric is the honest users'.
"""

from __future__ import annotations

import hashlib

from cluster import wire
from cluster.ledger import is_eval_phase
from cluster.message import Message, index_of, node_id, role_of
from nodes.node import Node

FORGE_SHARE = 0.1  # the share of (round, node) in which it forges a sender (it then fails)
ADDRESS_SHARE = 0.1  # ... writes to a role that accepts nothing from it
_HOSTILE_PER_STEP = 4  # at most this many honest messages a superstep get hostile copies


def _unit(*parts) -> float:
    digest = hashlib.sha256(":".join(map(str, ("privrec-malformed", *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64


def inflate(payload: bytes) -> bytes:
    """The payload with the u32 after its codec's tag (a count or length in every codec of
    cluster/wire.py) set to 2³²−1."""
    return payload[:1] + b"\xff\xff\xff\xff" + payload[5:] if len(payload) >= 5 else payload


def truncate(payload: bytes) -> bytes:
    return payload[:-1]


def unordered(payload: bytes) -> bytes | None:
    """Tokens (fixed 32-byte chunks, alone or as a record's first field) in reverse order; None
    for a payload that carries fewer than two."""
    from privacy.oprf import TOKEN_BYTES

    try:
        tokens = wire.decode_chunks(payload, TOKEN_BYTES)
        rest = None
    except Exception:
        try:
            fields = wire.decode_record(payload)
            tokens, rest = wire.decode_chunks(fields[0], TOKEN_BYTES), fields[1:]
        except Exception:
            return None
    if len(tokens) < 2:
        return None
    swapped = wire.encode_chunks(list(reversed(tokens)), TOKEN_BYTES)
    return swapped if rest is None else wire.encode_record([swapped, *map(bytes, rest)])


def out_of_range(node: Node) -> bytes | None:
    """Blinded values 0 and N for the key server of this node's OPRF client (None without one)."""
    from privacy.key_server import OprfClient, encode_residues

    for value in vars(node).values():
        public = getattr(value, "public", None) if isinstance(value, OprfClient) else None
        if public is not None:
            return encode_residues([0, public.n], public.n.bit_length())
    return None


class Malformed:
    """Mixed into a protocol's participant role before it (adversaries/attacks/__init__.py)."""

    adversary = True
    FAKE = False

    def __init__(self, nid, ctx, *args, knowledge=None, **kwargs):
        super().__init__(nid, ctx, *args, **kwargs)
        self.knowledge = knowledge

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        super().handle_batch(nodes, phase, inboxes)
        if not is_eval_phase(phase):
            for n in nodes:
                n._outbox.extend(n.hostile(phase))

    @classmethod
    def batched_phases(cls):
        """The honest role's: the hostile copies are added after its handler, whatever it batches."""
        mro = cls.__mro__
        return mro[mro.index(Malformed) + 1].batched_phases()

    def report(self, name: str, value: float) -> None:
        if not is_eval_phase(self.phase):  # no evaluation figure from an adversary
            super().report(name, value)

    def hostile(self, phase: str) -> list[Message]:
        """The hostile messages of this superstep, beside the honest ones in the outbox."""
        seed, honest = self.ctx.seed, list(self._outbox)
        if not honest or _unit(seed, "act", self.round, self.id) >= self.knowledge.params["share"]:
            return []
        first = honest[0]

        def msg(kind, dst, payload, src=None):
            return Message(kind, src or self.id, dst, self.round, self.phase, payload)

        if _unit(seed, "forge", self.round, self.id) < FORGE_SHARE:
            other = node_id(role_of(self.id), index_of(self.id) + 1)
            return [msg(first.kind, first.dst, first.payload, src=other)]
        if _unit(seed, "address", self.round, self.id) < ADDRESS_SHARE:
            return [msg(first.kind, self._not_addressable(), first.payload)]
        out = []
        for m in honest[:_HOSTILE_PER_STEP]:
            p = bytes(m.payload)
            out += [msg(m.kind, m.dst, inflate(p)), msg(m.kind, m.dst, truncate(p))]
            swapped = unordered(p)
            if swapped is not None:
                out.append(msg(m.kind, m.dst, swapped))
            if role_of(m.dst) == role_of(self.id) and role_of(self.id) != "server":
                peer = node_id(role_of(m.dst), (index_of(m.dst) * 7919 + 1) % self._population())
                if peer not in (self.id, m.dst):
                    out.append(msg(m.kind, peer, p))
        blinded = out_of_range(self)
        asks = [m for m in honest if m.kind in ("oprf_blinded", "psi_blinded")]
        if blinded is not None and asks and _unit(seed, "range", self.round, self.id) < 0.5:
            # in place of its request (a second request in one step is refused as over budget)
            self._outbox.remove(asks[0])
            out.append(msg(asks[0].kind, asks[0].dst, blinded))
        return out

    def _not_addressable(self) -> str:
        """Itself where its role accepts nothing from its own role, else a node that does not
        exist."""
        accepts = type(self).ACCEPTS
        if accepts is not None and not any(self.role in r.senders for r in accepts.values()):
            return self.id
        return node_id("nobody", 0)

    def _population(self) -> int:
        """How many nodes of its own role it knows of (the public record's count)."""
        public = self.public
        for name in ("n_users", "parties"):
            n = getattr(public, name, None) or getattr(self.config, name, None)
            if n:
                return int(n)
        return index_of(self.id) + 1
