"""What a receiver accepts: every message is untrusted until it passes its kind's check.

A node class declares what it accepts (``ACCEPTS`` on :class:`nodes.node.Node`)::

    ACCEPTS = {"item_grads": Accept(senders=("user",), phases=("aggregate",), check=check_grads)}

and the host (nodes/host.py) screens every incoming message against the destination's
declaration before it reaches the inbox: a kind not declared, a sender of another role, a phase
not listed, or a payload whose ``check(payload, shared)`` raises :class:`Invalid` (or a
:class:`cluster.wire.WireError`, which counts as ``"malformed"``) is dropped and counted as
rejected, by kind and reason. A class that declares nothing (``ACCEPTS = None``, e.g. a
third-party plugin's) accepts everything, as the handler alone decides.

A check reads only the payload and the public records (``shared.config``, ``shared.public``):
sizes, shapes, id ranges, finiteness and the magnitude bounds a protocol guarantees (clipped or
one-bit/ternary codes). What depends on the receiver's own state (is the sender a neighbour in
this round's tree) stays with the handler. Finite values of an absurd size where the protocol has
no natural bound (a plain gradient of 1e30) pass: that is the aggregator's robust defence's job.

The helpers below decode one payload with the codecs of cluster/wire.py and raise Invalid with
one of :data:`REASONS`; protocols' messages.py compose them into their per-kind checks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from cluster import wire

# kind/sender/phase/malformed/shape/range/nonfinite/size: the host's screen or a handler's check of
# one payload; "order": ids or tokens not in the order the codec requires; "peer": a sender the
# receiver's own state does not allow (not a neighbour this round, not a party of this step);
# "budget": more than the receiver grants one sender (the key server's signatures per user)
REASONS = (
    "kind",
    "sender",
    "phase",
    "malformed",
    "shape",
    "range",
    "nonfinite",
    "size",
    "order",
    "peer",
    "budget",
)


class Invalid(Exception):
    """A message fails its receiver's check; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = ""):
        if reason not in REASONS:
            raise ValueError(f"unknown rejection reason {reason!r} (one of {REASONS})")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


Check = Callable[[bytes, Any], None]


@dataclasses.dataclass(frozen=True)
class Accept:
    """One kind a role accepts: from which sender roles, in which receiving phases (``None``: any;
    a phase is matched by its name without the trailing step number: ``hop/2`` → ``hop``,
    ``relay1`` → ``relay``), and the payload's ``check(payload, shared)``."""

    senders: tuple[str, ...]
    phases: tuple[str, ...] | None = None
    check: Check | None = None


def phase_name(phase: str) -> str:
    """A phase without its step number: ``gossip/3`` → ``gossip``, ``eval_exchange2`` →
    ``eval_exchange``."""
    return phase.split("/", 1)[0].rstrip("0123456789")


def screen(accepts: dict[str, Accept] | None, m, phase: str, shared, cache: dict) -> Invalid | None:
    """Why message ``m`` must be dropped (an :class:`Invalid`), or None when it may be delivered.
    ``cache`` (one per superstep) holds the verdict per (payload object, check): a broadcast's
    payload, one bytes object for many receivers, is checked once; and the rule's verdict per
    (declaration, kind, sender role, phase), the same for every such message."""
    if accepts is None:
        return None
    sender = m.src.split("/", 1)[0]
    rule_key = (id(accepts), m.kind, sender, phase)
    try:
        rule, refused = cache[rule_key]
    except KeyError:
        rule, refused = cache[rule_key] = _rule(accepts, m.kind, sender, phase)
    if refused is not None or rule.check is None:
        return refused
    key = (id(m.payload), rule.check)
    if key not in cache:
        try:
            rule.check(m.payload, shared)
            cache[key] = None
        except Invalid as e:
            cache[key] = e
        except wire.WireError as e:
            cache[key] = Invalid("malformed", str(e))
        except (ValueError, TypeError, OverflowError, MemoryError) as e:  # a check's blind spot
            cache[key] = Invalid("malformed", f"{type(e).__name__}: {e}")
    return cache[key]


def _rule(accepts: dict[str, Accept], kind: str, sender: str, phase: str):
    """(the rule for ``kind``, the Invalid that refuses it by kind, sender role or phase, or None)."""
    rule = accepts.get(kind)
    if rule is None:
        return None, Invalid("kind", f"{kind!r} is not accepted")
    if sender not in rule.senders:
        return rule, Invalid("sender", f"{kind!r} from a {sender}")
    if rule.phases is not None and phase_name(phase) not in rule.phases:
        return rule, Invalid("phase", f"{kind!r} in phase {phase!r}")
    return rule, None


# --------------------------------------------------------------------------- reusable checks


def decoded(decode: Callable, payload, *args):
    """``decode(payload, *args)``, its WireError as ``Invalid("malformed")``."""
    try:
        return decode(payload, *args)
    except wire.WireError as e:
        raise Invalid("malformed", str(e)) from None


def finite(arr: np.ndarray, what: str = "values", cap: float | None = None) -> np.ndarray:
    """``arr`` if every value is finite (and ``|x| <= cap`` with a cap)."""
    if arr.dtype.kind == "f" and arr.size and not np.isfinite(arr).all():
        raise Invalid("nonfinite", f"{what}: NaN or infinity")
    if cap is not None and arr.size and float(np.abs(arr).max()) > cap:
        raise Invalid("range", f"{what}: |x| = {float(np.abs(arr).max()):.3g} > {cap:.3g}")
    return arr


def shaped(arr: np.ndarray, shape: tuple, what: str = "tensor") -> np.ndarray:
    """``arr`` if its shape matches ``shape`` (``None`` for any size of that dimension)."""
    if len(arr.shape) != len(shape) or any(
        s is not None and d != s for d, s in zip(arr.shape, shape)
    ):
        raise Invalid("shape", f"{what}: shape {arr.shape}, expected {shape}")
    return arr


def dense(
    payload, shape: tuple, *, cap: float | None = None, what: str = "tensor", floats: bool = True
) -> np.ndarray:
    """A dense tensor of ``shape`` (None: any size), float (``floats``), finite, within ``cap``."""
    arr = decoded(wire.view_dense, payload)  # read in place: the handler decodes its own copy
    if floats and arr.dtype.kind != "f":
        raise Invalid("malformed", f"{what}: dtype {arr.dtype}, expected floats")
    finite(shaped(arr, shape, what), what, cap)
    return arr


def ids(
    payload,
    n: int | None = None,
    *,
    count: int | None = None,
    max_count: int | None = None,
    what: str = "ids",
) -> np.ndarray:
    """An id list: exactly ``count`` or at most ``max_count`` ids, each ``< n``."""
    out = decoded(wire.decode_ids, payload)
    if count is not None and len(out) != count:
        raise Invalid("shape", f"{what}: {len(out)} ids, expected {count}")
    if max_count is not None and len(out) > max_count:
        raise Invalid("size", f"{what}: {len(out)} ids, at most {max_count}")
    if n is not None and out.size and int(out.max()) >= n:
        raise Invalid("range", f"{what}: id {int(out.max())} >= {n}")
    return out


def rows(
    payload,
    n_items: int,
    dim: int,
    *,
    max_rows: int | None = None,
    distinct: bool = False,
    cap: float | None = None,
    what: str = "item rows",
) -> tuple[np.ndarray, np.ndarray]:
    """Row-sparse gradients (protocols/sparse_rows.py): at most ``max_rows`` ids ``< n_items``
    (sorted and distinct with ``distinct``), one finite row of width ``dim`` each."""
    ids_b, rows_b = record(payload, 2)
    item_ids = ids(ids_b, n_items, max_count=max_rows, what=what)
    values = dense(rows_b, (len(item_ids), dim), cap=cap, what=what)
    if distinct and np.any(np.diff(item_ids) <= 0):
        raise Invalid("malformed", f"{what}: ids not sorted and distinct")
    return item_ids, values


def signs(payload, n: int | None = None, what: str = "signs") -> np.ndarray:
    """Bit-packed ±1 of length ``n`` (any length with None)."""
    out = decoded(wire.decode_signs, payload)
    if n is not None and len(out) != n:
        raise Invalid("shape", f"{what}: length {len(out)}, expected {n}")
    return out


def ternary(payload, n: int | None = None, cap: float | None = None, what: str = "ternary"):
    """A sparse ternary vector of length ``n`` whose scale is at most ``cap``."""
    length, idx, sgn, scale = decoded(wire.decode_ternary_sparse, payload)
    if n is not None and length != n:
        raise Invalid("shape", f"{what}: length {length}, expected {n}")
    if cap is not None and scale > cap:
        raise Invalid("range", f"{what}: scale {scale:.3g} > {cap:.3g}")
    return length, idx, sgn, scale


def bigints(
    payload,
    *,
    max_bits: int,
    count: int | None = None,
    max_count: int | None = None,
    what: str = "bigints",
) -> list[int]:
    """Non-negative integers below ``2**max_bits`` (e.g. an RSA modulus' size)."""
    if len(payload) > 16 + (max_count or count or 1) * (2 + (max_bits + 7) // 8):
        raise Invalid("size", f"{what}: {len(payload)} bytes")
    out = decoded(wire.decode_bigints, payload)
    if count is not None and len(out) != count:
        raise Invalid("shape", f"{what}: {len(out)} values, expected {count}")
    if max_count is not None and len(out) > max_count:
        raise Invalid("size", f"{what}: {len(out)} values, at most {max_count}")
    if any(v.bit_length() > max_bits for v in out):
        raise Invalid("range", f"{what}: a value exceeds {max_bits} bits")
    return out


def record(payload, n: int | None = None) -> list[bytes]:
    """The fields of a record (exactly ``n`` with ``n``)."""
    return decoded(wire.decode_record, payload, n)


def blob(payload, *, size: int | None = None, max_size: int | None = None) -> bytes:
    """An opaque blob of exactly ``size`` / at most ``max_size`` bytes."""
    out = decoded(wire.decode_blob, payload)
    if size is not None and len(out) != size:
        raise Invalid("size", f"blob of {len(out)} bytes, expected {size}")
    if max_size is not None and len(out) > max_size:
        raise Invalid("size", f"blob of {len(out)} bytes, at most {max_size}")
    return out


def chunks(payload, size: int, *, max_count: int | None = None) -> list[bytes]:
    """Equal-sized chunks (:func:`cluster.wire.encode_chunks`), at most ``max_count``."""
    out = decoded(wire.decode_chunks, payload, size)
    if max_count is not None and len(out) > max_count:
        raise Invalid("size", f"{len(out)} chunks, at most {max_count}")
    return out


def empty(payload, shared=None) -> None:
    """A payload that must carry nothing (raw empty bytes)."""
    if len(payload):
        raise Invalid("size", f"{len(payload)} bytes, expected none")


def empty_blob(payload, shared=None) -> None:
    """An empty blob (a bare signal: a join, a key request)."""
    blob(payload, size=0)


_PER_SHARED: dict[tuple[int, str], tuple[Any, Any]] = {}


def per_shared(shared, name: str, compute: Callable[[Any], Any]):
    """``compute(shared)`` once per shared record and ``name`` (e.g. a model's parameter count that
    a check needs), kept while that record lives."""
    key = (id(shared), name)
    hit = _PER_SHARED.get(key)
    if hit is None or hit[0] is not shared:
        if len(_PER_SHARED) > 256:
            _PER_SHARED.clear()
        hit = _PER_SHARED[key] = (shared, compute(shared))
    return hit[1]
