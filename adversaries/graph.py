"""Fake peers in a decentralized protocol's user graph (dmf, DGREC, DLGNN).

A fake peer joins the peer-to-peer network the way a Sybil joins a social network: it befriends
``k`` real users, drawn without replacement among the participating real users by the smallest
hash of (seed, fake node id, real node id), and each link is undirected (the befriended user adds
the fake peer to its own neighbours, as a social/trust link is mutual). ``k`` is the mean degree
of the real users' graph (at least 1), so a fake peer looks like an ordinary user to its
neighbours. The links are a function of the seed and the node ids alone: the placement never
changes them, and the real users' links to each other are untouched.
"""

from __future__ import annotations

import numpy as np

from adversaries.condition import unit


def with_fake_peers(
    graph: list[np.ndarray], real_users: list[int], fake: tuple[int, ...], seed: int
) -> list[np.ndarray]:
    """``graph`` (sorted neighbour ids of the ``len(graph)`` real users) extended with the fake
    users ``fake`` (ids after the real ones): one sorted neighbour array per user, fake users
    included; the real users befriended by a fake one list it among their neighbours."""
    from cluster.message import node_id

    out = [np.asarray(g, dtype=np.int64) for g in graph]
    if not fake:
        return out
    degrees = [len(out[u]) for u in real_users]
    k = max(1, min(len(real_users), int(round(np.mean(degrees))) if degrees else 1))
    added: dict[int, list[int]] = {}
    for f in fake:
        fid = node_id("user", f)
        ranked = sorted(real_users, key=lambda u: unit(seed, "befriend", fid, node_id("user", u)))
        friends = sorted(int(u) for u in ranked[:k])
        out.append(np.array(friends, dtype=np.int64))
        for u in friends:
            added.setdefault(u, []).append(int(f))
    for u, extra in added.items():
        out[u] = np.unique(np.concatenate([out[u], np.array(extra, dtype=np.int64)]))
    return out
