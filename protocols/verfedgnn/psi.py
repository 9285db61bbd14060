"""User alignment for VerFedGNN (Algorithm 1, step 1) by an OPRF-based private set intersection.

Every party turns each of its user ids into a token with the blind-RSA OPRF of privacy/oprf.py
(a key-server node signs blinded values it cannot read), sends only the sorted tokens to the
server, and the server intersects the token sets. It answers each party with the positions of the
common tokens in that party's sorted token list (in the order of the sorted common tokens); each
party maps them to its own ids of the common users and orders those by id, which is the aligned
user index 0..N−1 that all parties then share (the server needs only N: θ has a row per aligned
user). Ordering by id rather than by token keeps the index, hence the run, independent of the
key. The server sees tokens (pseudo-random 32-byte strings; without the key it cannot evaluate
id ↦ token) and the key server sees uniformly random blinded values; no raw user id leaves a
party.

The key server (privacy/key_server.py) draws its RSA key from the operating system and the
parties their blinding factors from ``secrets``: nothing of either follows from the run's seed.
"""

from __future__ import annotations

import numpy as np


def intersect_positions(token_lists: list[list[bytes]]) -> list[np.ndarray]:
    """For each party's sorted token list, the positions of the common tokens, in the order of
    the sorted common tokens (aligned user index j ↦ position in that party's list)."""
    common = set(token_lists[0])
    for toks in token_lists[1:]:
        common &= set(toks)
    order = sorted(common)
    out = []
    for toks in token_lists:
        where = {t: i for i, t in enumerate(toks)}
        out.append(np.array([where[t] for t in order], dtype=np.int64))
    return out


def common_positions(tokens: list[bytes], common: list[bytes]) -> np.ndarray | None:
    """Positions of the ``common`` tokens (in their order) in one party's sorted token list, or
    None if one is missing: how a party that lost its alignment rejoins the set-up's index."""
    where = {t: i for i, t in enumerate(tokens)}
    if any(t not in where for t in common):
        return None
    return np.array([where[t] for t in common], dtype=np.int64)


def match(
    token_lists: list[list[bytes]], common: list[bytes] | None
) -> tuple[list[np.ndarray | None], list[bytes]]:
    """The server's answer to every party's sorted token list, and the common tokens: at the
    set-up (``common`` None) the intersection of the lists; at a rejoin the set-up's common
    tokens, so that the aligned index does not change (None for a list that lacks one)."""
    if common is None:
        positions = intersect_positions(token_lists)
        return positions, [token_lists[0][i] for i in positions[0]]
    return [common_positions(toks, common) for toks in token_lists], common


def align_ratings(
    raw: dict[str, tuple], user_ids: np.ndarray, aligned_users: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Each (raw user id, local item, rating) triple set re-indexed by aligned user: index j is
    raw user ``aligned_users[j]``; ratings of users outside the intersection drop out."""
    lookup = -np.ones(
        max(int(user_ids.max(initial=0)), int(aligned_users.max(initial=0))) + 1, dtype=np.int64
    )
    lookup[aligned_users] = np.arange(len(aligned_users))
    out = {}
    for name, (u, i, r) in raw.items():
        u = np.asarray(u, dtype=np.int64)
        a = np.where(u < len(lookup), lookup[np.minimum(u, len(lookup) - 1)], -1)
        keep = a >= 0
        out[name] = (a[keep], np.asarray(i)[keep], np.asarray(r, np.float32)[keep])
    return out
