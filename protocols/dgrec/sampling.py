"""DGREC neighbourhood sampling (Algorithm 1, eq. 4) and gradient gossip schedule (Algorithm 2).

Pure functions, no Ray: the protocol turns their output into messages.

Eq. 4 — a frontier user picks its neighbour v with probability

    p_v = w_v / Σ_{v'} w_{v'},      w_v = L_v / (ln(cnt_v + 1) + 1)

where L_v is v's latest training loss (users that fit badly are visited more) and cnt_v the number
of times v has been sampled before (so the walk does not keep returning to the same users).

Reading of Algorithm 1 used here: from the seed user, for hops h = 1..H, every user of the current
frontier samples, without replacement and with eq.-4 probabilities restricted to its candidates,
min(n_u, #candidates) of its neighbours that are *not already in the neighbourhood* (a user joins
at most once, at its first hop). The result is a tree of depth ≤ H rooted at the seed with fan-out
≤ n_u, so it holds at most Σ_{h=0}^{H} n_u^h users and its diameter is ≤ 2H. Neighbours whose
weight is zero (zero loss) are never sampled, unless every candidate weighs zero, in which case
the choice is uniform. ``counts`` is read, not updated: the caller increments cnt of the users it
sampled. Only reachable users are candidates: with an ``online`` mask, a user offline this round is
never sampled (eq. 4 is normalised over the reachable candidates); when everyone is online the
draws are exactly those made without a mask.

Algorithm 2 (gossip) — duplicate-suppressing flooding along the sampled edges: at step 1 every user
sends its own encoded gradient to each of its sampled neighbours; at step t > 1 it forwards every
gradient it obtained for the first time at step t − 1 to each neighbour it did not receive that
gradient from. A user decides this from what it has itself seen, so the schedule is implementable
as messages. On a tree every gradient crosses every edge exactly once (N(N − 1) transmissions for N
users, the fewest possible for all-to-all), and after diameter ≤ 2H steps every sampled user holds
every encoded gradient of the neighbourhood.

Paper's cost (§4): worst_case_bits = 2H · n_s · (1 − n_u^H)/(1 − n_u), with (1 − n_u^H)/(1 − n_u)
= Σ_{h=0}^{H−1} n_u^h. Read as "2H steps, in each of which a user sends at most Σ_{h<H} n_u^h
gradients of n_s bits". That bounds the *average* number of gradients a user puts on the wire
when one transmission reaches all of its sampled neighbours (a broadcast), but not the per-user
number of point-to-point messages: the mean of those is N − 1 = #edges ≤ n_u · Σ_{h<H} n_u^h,
above the formula once n_u > 2H. :func:`gossip_bits_on_tree` gives the exact point-to-point count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

Adjacency = sp.spmatrix | sp.sparray | Sequence[np.ndarray]


# --------------------------------------------------------------------------------------- eq. 4
def neighbour_probabilities(losses: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Eq. 4: p_v ∝ L_v / (ln(cnt_v + 1) + 1) over the given candidates (float64, sums to 1);
    uniform when every weight is zero."""
    losses = np.asarray(losses, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.float64)
    if losses.ndim != 1 or counts.shape != losses.shape:
        raise ValueError(
            f"losses and counts must be 1-D of equal length, got {losses.shape} and {counts.shape}"
        )
    if losses.size == 0:
        raise ValueError("no candidate neighbours to sample from")
    if not np.isfinite(losses).all() or (losses < 0).any():
        raise ValueError("losses must be finite and non-negative")
    if not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("sample counts must be finite and non-negative")
    weights = losses / (np.log(counts + 1.0) + 1.0)
    total = weights.sum()
    if total <= 0.0:
        return np.full(losses.shape, 1.0 / losses.size)
    return weights / total


# --------------------------------------------------------------------------------- Algorithm 1
def _neighbours_of(adjacency: Adjacency, user: int) -> np.ndarray:
    if isinstance(adjacency, sp.csr_matrix | sp.csr_array):
        return adjacency.indices[adjacency.indptr[user] : adjacency.indptr[user + 1]].astype(
            np.int64
        )
    return np.asarray(adjacency[user], dtype=np.int64).reshape(-1)


def sample_neighbourhood(
    seed_user: int,
    adjacency: Adjacency,
    hops: int,
    n_u: int,
    losses: np.ndarray,
    counts: np.ndarray,
    rng: np.random.Generator,
    online: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Algorithm 1: sample the seed's H-hop neighbourhood tree (reading in the module docstring).

    ``adjacency``: the inter-user graph, a CSR matrix [n_users, n_users] or a list of neighbour-id
    arrays; ``losses``/``counts``: float/int arrays [n_users] (L_v and cnt_v of eq. 4);
    ``online``: bool [n_users], who is reachable this round (None: everyone); the seed must be.
    Returns ``nodes`` int64 [N] (global ids, seed first, then by hop) and ``edges`` int64
    [N − 1, 2] of (parent, child) global ids, in sampling order."""
    if isinstance(adjacency, sp.spmatrix | sp.sparray):
        adjacency = sp.csr_matrix(adjacency)
        n_users = adjacency.shape[0]
        if adjacency.shape[1] != n_users:
            raise ValueError(f"adjacency must be square, got shape {adjacency.shape}")
    else:
        n_users = len(adjacency)
    losses = np.asarray(losses, dtype=np.float64)
    counts = np.asarray(counts)
    if losses.shape != (n_users,) or counts.shape != (n_users,):
        raise ValueError(
            f"losses and counts need one entry per user ({n_users}), got {losses.shape} and {counts.shape}"
        )
    if not 0 <= int(seed_user) < n_users:
        raise ValueError(f"seed user {seed_user} outside 0..{n_users - 1}")
    if int(hops) < 1 or int(n_u) < 1:
        raise ValueError(f"hops and n_u must be ≥ 1, got hops={hops}, n_u={n_u}")
    if online is not None:
        online = np.asarray(online, dtype=bool)
        if online.shape != (n_users,):
            raise ValueError(f"online needs one entry per user ({n_users}), got {online.shape}")
        if not online[int(seed_user)]:
            raise ValueError(f"seed user {seed_user} is offline")

    nodes: list[int] = [int(seed_user)]
    members = {int(seed_user)}
    edges: list[tuple[int, int]] = []
    frontier = [int(seed_user)]
    for _hop in range(int(hops)):
        next_frontier: list[int] = []
        for parent in frontier:
            nbrs = np.unique(_neighbours_of(adjacency, parent))
            if nbrs.size and (nbrs[0] < 0 or nbrs[-1] >= n_users):
                raise ValueError(f"user {parent} has a neighbour id outside 0..{n_users - 1}")
            keep = [int(v) not in members and (online is None or online[v]) for v in nbrs]
            candidates = nbrs[keep] if nbrs.size else nbrs
            if candidates.size == 0:
                continue
            p = neighbour_probabilities(losses[candidates], counts[candidates])
            k = min(int(n_u), int(np.count_nonzero(p)))
            picked = rng.choice(candidates, size=k, replace=False, p=p)
            for child in picked.tolist():
                members.add(child)
                nodes.append(child)
                edges.append((parent, child))
                next_frontier.append(child)
        frontier = next_frontier
        if not frontier:
            break
    edge_arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    return np.asarray(nodes, dtype=np.int64), edge_arr


def local_edges(nodes: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Map (global id, global id) edges onto positions 0..N−1 in ``nodes`` (for gossip_rounds)."""
    nodes = np.asarray(nodes, dtype=np.int64)
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    order = np.argsort(nodes, kind="stable")
    pos = np.searchsorted(nodes, edges, sorter=order)
    pos = np.minimum(pos, len(nodes) - 1)
    local = order[pos]
    if not (nodes[local] == edges).all():
        raise ValueError("an edge endpoint is not among the sampled nodes")
    return local


# --------------------------------------------------------------------------------- Algorithm 2
def gossip_rounds(edges: np.ndarray, n_nodes: int, steps: int) -> list[np.ndarray]:
    """Algorithm 2 as duplicate-suppressing flooding (module docstring) over undirected ``edges``
    int [E, 2] between local node ids 0..n_nodes−1 (node i's own encoded gradient has origin i).
    Returns one int64 array [m_t, 3] of (src, dst, origin) deliveries per step t = 1..steps
    (empty once every node holds everything)."""
    n_nodes, steps = int(n_nodes), int(steps)
    if n_nodes < 1 or steps < 0:
        raise ValueError(f"need n_nodes ≥ 1 and steps ≥ 0, got {n_nodes} and {steps}")
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    if edges.size and (edges.min() < 0 or edges.max() >= n_nodes):
        raise ValueError(f"edge endpoints must lie in 0..{n_nodes - 1}")
    if (edges[:, 0] == edges[:, 1]).any():
        raise ValueError("self-loop in gossip edges")
    und = np.unique(np.sort(edges, axis=1), axis=0)
    src = np.concatenate([und[:, 0], und[:, 1]])  # directed edge e and its reverse e ± E
    dst = np.concatenate([und[:, 1], und[:, 0]])
    n_e = len(und)
    reverse = np.concatenate([np.arange(n_e) + n_e, np.arange(n_e)])

    holds = np.eye(n_nodes, dtype=bool)  # holds[x, g]: x has origin g's gradient
    fresh = holds.copy()  # obtained at the previous step (own gradient "obtained" at step 0)
    delivered = np.zeros(
        (2 * n_e, n_nodes), dtype=bool
    )  # what crossed each directed edge last step
    schedule: list[np.ndarray] = []
    for _ in range(steps):
        send = fresh[src] & ~delivered[reverse]  # not back to whoever just sent it
        e_idx, origin = np.nonzero(send)
        schedule.append(np.stack([src[e_idx], dst[e_idx], origin], axis=1).astype(np.int64))
        received = np.zeros((n_nodes, n_nodes), dtype=bool)
        received[dst[e_idx], origin] = True
        fresh = received & ~holds
        holds |= received
        delivered = send
    return schedule


def gossip_holdings(schedule: Sequence[np.ndarray], n_nodes: int) -> np.ndarray:
    """Replay a schedule: bool [n_nodes, n_nodes], [x, g] true when x holds origin g's gradient.
    Raises ValueError if a node forwards a gradient before it holds it."""
    holds = np.eye(int(n_nodes), dtype=bool)
    for step, deliveries in enumerate(schedule, start=1):
        d = np.asarray(deliveries, dtype=np.int64).reshape(-1, 3)
        if not holds[d[:, 0], d[:, 2]].all():
            raise ValueError(f"step {step}: a node sends a gradient it does not hold")
        holds[d[:, 1], d[:, 2]] = True
    return holds


def transmissions_per_node(schedule: Sequence[np.ndarray], n_nodes: int) -> np.ndarray:
    """Point-to-point gradient transmissions sent by each node over the whole schedule: int64 [N]."""
    sent = np.zeros(int(n_nodes), dtype=np.int64)
    for deliveries in schedule:
        np.add.at(sent, np.asarray(deliveries, dtype=np.int64).reshape(-1, 3)[:, 0], 1)
    return sent


def broadcasts_per_node(schedule: Sequence[np.ndarray], n_nodes: int) -> np.ndarray:
    """Distinct (step, gradient) sends per node, counting one send to all neighbours as one: [N]."""
    out = np.zeros(int(n_nodes), dtype=np.int64)
    for deliveries in schedule:
        d = np.asarray(deliveries, dtype=np.int64).reshape(-1, 3)
        if len(d):
            pairs = np.unique(d[:, [0, 2]], axis=0)
            np.add.at(out, pairs[:, 0], 1)
    return out


# --------------------------------------------------------------------------------------- costs
def worst_case_bits(hops: int, n_u: int, n_s: int) -> int:
    """Paper's per-user worst case (§4): 2H · n_s · (1 − n_u^H)/(1 − n_u) bits
    (= 2H · n_s · Σ_{h=0}^{H−1} n_u^h; the geometric sum is H when n_u = 1)."""
    hops, n_u, n_s = int(hops), int(n_u), int(n_s)
    if hops < 1 or n_u < 1 or n_s < 1:
        raise ValueError(f"hops, n_u and n_s must be ≥ 1, got {hops}, {n_u}, {n_s}")
    geometric = sum(n_u**h for h in range(hops))
    return 2 * hops * n_s * geometric


def max_neighbourhood_size(hops: int, n_u: int) -> int:
    """Largest tree Algorithm 1 can sample: Σ_{h=0}^{H} n_u^h users."""
    if int(hops) < 1 or int(n_u) < 1:
        raise ValueError(f"hops and n_u must be ≥ 1, got {hops}, {n_u}")
    return sum(int(n_u) ** h for h in range(int(hops) + 1))


def gossip_bits_on_tree(n_nodes: int, n_s: int) -> int:
    """Exact point-to-point bits of the gossip on a sampled tree of N users: each of the N
    encoded gradients (n_s bits) crosses each of the N − 1 edges once: N (N − 1) n_s."""
    if int(n_nodes) < 1 or int(n_s) < 1:
        raise ValueError(f"n_nodes and n_s must be ≥ 1, got {n_nodes}, {n_s}")
    return int(n_nodes) * (int(n_nodes) - 1) * int(n_s)
