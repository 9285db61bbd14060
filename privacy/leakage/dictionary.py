"""The matcher's dictionary attack on item tokens (FedPerGNN's third-party matching).

Item ids live in a small space (tens of thousands of items), so whoever can evaluate the
token function x ↦ T(x) recovers an id from its token by enumerating every candidate:

    table = { T(c) : c  for c in candidate ids },     recovered = { t : table[t] }  for t observed

This succeeds against textbook RSA (T(x) = x^e mod N, public key known) and against a key
shared by all clients (one colluding client leaks it). Against the blind-RSA OPRF the matcher
holds no key, so it can only try substitutes for T (textbook RSA, a plain hash of the id) and
recovers nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping


def dictionary_attack(
    observed_tokens: Iterable[bytes],
    candidate_ids: Iterable[int],
    token_fn: Callable[[int], bytes],
) -> dict[bytes, int]:
    """Map every observed token that ``token_fn`` reproduces for some candidate id to that id
    (tokens the attacker cannot reproduce are absent from the result)."""
    if not callable(token_fn):
        raise ValueError(f"token_fn must be callable, got {type(token_fn).__name__}")
    table: dict[bytes, int] = {}
    for c in candidate_ids:
        table.setdefault(bytes(token_fn(int(c))), int(c))
    out: dict[bytes, int] = {}
    for t in observed_tokens:
        if not isinstance(t, bytes | bytearray):
            raise ValueError(f"observed tokens must be bytes, got {type(t).__name__}")
        if bytes(t) in table:
            out[bytes(t)] = table[bytes(t)]
    return out


def recovery_rate(recovered: Mapping[bytes, int], truth: Mapping[bytes, int]) -> float:
    """Fraction of the true (token → id) pairs that the attack recovered correctly."""
    if not truth:
        raise ValueError("truth is empty: nothing to recover")
    hits = sum(1 for t, x in truth.items() if recovered.get(t) == x)
    return hits / len(truth)
