"""The envelope the host enforces on what a node sends: the network layer of a real deployment.

A handler's outbox leaves the host only if every message in it is one the sender could have put on
a real network:

    src      = the node that produced it          (no forged sender)
    dst      ∈ the deployment's nodes            (no unknown destination)
    role(src) ∈ senders(role(dst))               (a role its destination accepts messages from)
    payload  : bytes                              (what the wire carries; nothing else)
    kind     : str, round and phase as the host is running them

``senders(role)`` is the union of the sender roles the destination role's node classes declare in
``ACCEPTS`` (cluster/validate.py); a class that declares nothing accepts every role. A violation
is an :class:`EnvelopeError` raised as if the handler itself had raised: a participant has failed
for the round (its outputs are not delivered, the fault is counted), a server, key server or
matcher stops the run in one line (nodes/host.py ``_handle``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cluster.message import Message, role_of

# role -> the sender roles its classes accept (None: a class of it declares nothing, so any)
Senders = Mapping[str, frozenset[str] | None]


class EnvelopeError(ValueError):
    """A node sent a message outside the envelope (see the module docstring)."""


def senders_by_role(classes: Iterable[type]) -> dict[str, frozenset[str] | None]:
    """The roles each role accepts messages from, by the ``ACCEPTS`` of its node classes."""
    out: dict[str, frozenset[str] | None] = {}
    for cls in classes:
        accepts = getattr(cls, "ACCEPTS", None)
        if accepts is None:
            out[cls.role] = None
            continue
        roles = frozenset(r for rule in accepts.values() for r in rule.senders)
        if cls.role not in out:
            out[cls.role] = roles
        elif out[cls.role] is not None:
            out[cls.role] = out[cls.role] | roles
    return out


def check_envelope(
    nid: str, outbox: list, route: Mapping[str, int], senders: Senders, round_: int, phase: str
) -> None:
    """Raise :class:`EnvelopeError` for the first message of node ``nid``'s ``outbox`` outside
    the envelope."""
    src_role = role_of(nid)
    for m in outbox:
        if type(m) is not Message:
            raise EnvelopeError(f"{nid} sent a {type(m).__name__}, not a message")
        if m.src != nid:
            raise EnvelopeError(f"{nid} sent {m.kind!r} under another sender ({m.src!r})")
        if type(m.kind) is not str or m.round != round_ or m.phase != phase:
            raise EnvelopeError(
                f"{nid} sent {m.kind!r} stamped round {m.round!r}, phase {m.phase!r} in round "
                f"{round_}, phase {phase!r}"
            )
        if type(m.dst) is not str or m.dst not in route:
            raise EnvelopeError(f"{nid} sent {m.kind!r} to unknown node {m.dst!r}")
        if type(m.payload) is not bytes:
            raise EnvelopeError(
                f"{nid} sent {m.kind!r} to {m.dst} with a {type(m.payload).__name__} payload, "
                "not bytes"
            )
        allowed = senders.get(role_of(m.dst))
        if allowed is not None and src_role not in allowed:
            raise EnvelopeError(
                f"{nid} sent {m.kind!r} to {m.dst}: role {role_of(m.dst)!r} accepts nothing from "
                f"role {src_role!r}"
            )
