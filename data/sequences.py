"""Users' behaviour sequences, next-item examples, and the behaviour graph (DIPSGNN eq. 4, as in
SR-GNN, Wu et al. AAAI 2019).

Sequences: each user's items in chronological order (ties in time broken by item id), keeping the
``max_len`` most recent.

Examples (``training_prefixes``): a sequence s of length L is split at n_tr = ⌊0.8 · L⌋ (the
authors' ``int(0.8 * len)``).
  * train: every prefix of the first n_tr items predicts the next one:
        s[:j] → s[j]   for j = 1 .. n_tr - 1
  * test: every item of the last L - n_tr positions is a target once:
        ``test_context="history"`` (default):  s[:j] → s[j]         for j = max(n_tr, 1) .. L - 1
        ``test_context="test_only"`` (the released DIPSGNN code):   s[n_tr:j] → s[j]
                                                                     for j = n_tr + 1 .. L - 1
    "history" conditions on everything the user did before the target; "test_only" conditions
    only on earlier test items, so the first test item is never a target.

Behaviour graph (eq. 4) of one sequence: nodes are its distinct items (sorted ids), and every
consecutive pair s_t → s_{t+1} adds 1 to the directed edge weight w(s_t, s_{t+1}):

    A_out[i, j] = w(v_i → v_j),        A_in[i, j] = w(v_j → v_i) = A_out[j, i]

so row i of A_out·H aggregates v_i's successors and row i of A_in·H its predecessors. By default
the weights are the raw COUNTS (as in the released DIPSGNN code and the paper's sensitivity
argument, whose w_max is the largest count); ``normalize=True`` divides each row by its out-
(resp. in-) degree as SR-GNN does; ``max_weight`` caps the counts (bounding w_max).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from data.types import Interactions, RecDataset


def pooled_interactions(dataset: RecDataset) -> Interactions:
    """Every interaction of the dataset, its train, val and test parts pooled, for a split made on
    the users' sequences rather than by the dataset loader (DIPSGNN's); needs timestamps."""
    parts = [p for p in (dataset.train, dataset.val, dataset.test) if p is not None]
    if any(p.timestamp is None for p in parts):
        raise ValueError(f"dipsgnn needs timestamps; dataset {dataset.name!r} has none")
    return Interactions(
        user=np.concatenate([p.user for p in parts]),
        item=np.concatenate([p.item for p in parts]),
        timestamp=np.concatenate([p.timestamp for p in parts]),
    )


def user_sequences(
    interactions: Interactions, n_users: int, max_len: int | None = None
) -> list[np.ndarray]:
    """Per user, item ids in time order (ties by item id), the last ``max_len`` kept; int64."""
    if interactions.timestamp is None:
        raise ValueError("user_sequences needs interactions with timestamps")
    if max_len is not None and max_len < 1:
        raise ValueError(f"max_len must be >= 1 or None, got {max_len}")
    user = np.asarray(interactions.user, dtype=np.int64)
    if len(user) and (user.min() < 0 or user.max() >= n_users):
        raise ValueError(f"user ids must lie in [0, {n_users})")
    order = np.lexsort((interactions.item, interactions.timestamp, user))
    items = np.asarray(interactions.item, dtype=np.int64)[order]
    bounds = np.searchsorted(user[order], np.arange(n_users + 1))
    seqs = []
    for u in range(n_users):
        seq = items[bounds[u] : bounds[u + 1]]
        if max_len is not None:
            seq = seq[-max_len:]
        seqs.append(seq.copy())
    return seqs


def train_length(seq_len: int, train_fraction: float = 0.8) -> int:
    """n_tr = ⌊train_fraction · L⌋: how many leading items of a sequence are training data."""
    if not 0.0 < train_fraction <= 1.0:
        raise ValueError(f"train_fraction must lie in (0, 1], got {train_fraction}")
    return int(math.floor(train_fraction * seq_len + 1e-9))


@dataclass
class PrefixExamples:
    """Next-item examples: ``prefixes[i]`` (the user's items so far) → ``target[i]``."""

    user: np.ndarray  # int64 [N]
    prefixes: list[np.ndarray]  # N arrays of int64, each non-empty
    target: np.ndarray  # int64 [N]

    def __len__(self) -> int:
        return int(self.target.shape[0])


def _examples(rows: list[tuple[int, np.ndarray, int]]) -> PrefixExamples:
    return PrefixExamples(
        user=np.array([r[0] for r in rows], dtype=np.int64),
        prefixes=[r[1] for r in rows],
        target=np.array([r[2] for r in rows], dtype=np.int64),
    )


def training_prefixes(
    seqs: Sequence[np.ndarray], train_fraction: float = 0.8, test_context: str = "history"
) -> tuple[PrefixExamples, PrefixExamples]:
    """(train, test) next-item examples; the split rule is in the module docstring.
    ``seqs[u]`` is user u's sequence (as from :func:`user_sequences`)."""
    if test_context not in ("history", "test_only"):
        raise ValueError(f"test_context must be 'history' or 'test_only', got {test_context!r}")
    train_rows: list[tuple[int, np.ndarray, int]] = []
    test_rows: list[tuple[int, np.ndarray, int]] = []
    for u, seq in enumerate(seqs):
        seq = np.asarray(seq, dtype=np.int64)
        n_tr = train_length(len(seq), train_fraction)
        for j in range(1, n_tr):
            train_rows.append((u, seq[:j], int(seq[j])))
        if test_context == "history":
            for j in range(max(n_tr, 1), len(seq)):
                test_rows.append((u, seq[:j], int(seq[j])))
        else:
            for j in range(n_tr + 1, len(seq)):
                test_rows.append((u, seq[n_tr:j], int(seq[j])))
    return _examples(train_rows), _examples(test_rows)


def transition_counts(seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct directed transitions (a, b) of ``seq`` as int64 [E, 2] and their counts int64 [E]."""
    seq = np.asarray(seq, dtype=np.int64)
    if len(seq) < 2:
        return np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=np.int64)
    pairs = np.stack([seq[:-1], seq[1:]], axis=1)
    return np.unique(pairs, axis=0, return_counts=True)


def max_edge_weight(seqs: Sequence[np.ndarray]) -> int:
    """w_max: the largest count of one transition inside one sequence (0 if no transitions)."""
    best = 0
    for seq in seqs:
        _, counts = transition_counts(seq)
        if len(counts):
            best = max(best, int(counts.max()))
    return best


def behaviour_graph(
    seq: np.ndarray, normalize: bool = False, max_weight: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unique_items int64 [n], A_in float32 [n, n], A_out float32 [n, n]) of one sequence (eq. 4)."""
    seq = np.asarray(seq, dtype=np.int64)
    if seq.ndim != 1 or len(seq) == 0:
        raise ValueError("behaviour_graph needs a non-empty 1-D sequence of item ids")
    if max_weight is not None and max_weight <= 0:
        raise ValueError(f"max_weight must be positive or None, got {max_weight}")
    unique_items = np.unique(seq)
    pos = np.searchsorted(unique_items, seq)
    n = len(unique_items)
    a_out = np.zeros((n, n), dtype=np.float64)
    np.add.at(a_out, (pos[:-1], pos[1:]), 1.0)
    if max_weight is not None:
        np.minimum(a_out, max_weight, out=a_out)
    a_in = a_out.T.copy()
    if normalize:
        for mat in (a_in, a_out):
            deg = mat.sum(axis=1, keepdims=True)
            np.divide(mat, deg, out=mat, where=deg > 0)
    return unique_items, a_in.astype(np.float32), a_out.astype(np.float32)


@dataclass
class SessionGraphBatch:
    """Behaviour graphs of B prefixes padded to N nodes and L positions (SR-GNN batching).

    ``items[b, i]`` is node i's item id (0 in padding), ``alias[b, t]`` the node index of the
    t-th item of prefix b, ``seq_mask`` marks real positions; padded nodes have no edges."""

    items: np.ndarray  # int64 [B, N]
    node_mask: np.ndarray  # bool [B, N]
    a_in: np.ndarray  # float32 [B, N, N]
    a_out: np.ndarray  # float32 [B, N, N]
    alias: np.ndarray  # int64 [B, L]
    seq_mask: np.ndarray  # bool [B, L]

    @property
    def lengths(self) -> np.ndarray:
        return self.seq_mask.sum(axis=1)


def pad_behaviour_graphs(
    prefixes: Sequence[np.ndarray], normalize: bool = False, max_weight: float | None = None
) -> SessionGraphBatch:
    """Build and pad the behaviour graphs of a batch of prefixes."""
    if len(prefixes) == 0:
        raise ValueError("empty batch of prefixes")
    graphs = [behaviour_graph(p, normalize=normalize, max_weight=max_weight) for p in prefixes]
    b = len(prefixes)
    n = max(len(g[0]) for g in graphs)
    max_len = max(len(p) for p in prefixes)
    items = np.zeros((b, n), dtype=np.int64)
    node_mask = np.zeros((b, n), dtype=bool)
    a_in = np.zeros((b, n, n), dtype=np.float32)
    a_out = np.zeros((b, n, n), dtype=np.float32)
    alias = np.zeros((b, max_len), dtype=np.int64)
    seq_mask = np.zeros((b, max_len), dtype=bool)
    for r, (prefix, (uniq, g_in, g_out)) in enumerate(zip(prefixes, graphs, strict=True)):
        k = len(uniq)
        items[r, :k] = uniq
        node_mask[r, :k] = True
        a_in[r, :k, :k] = g_in
        a_out[r, :k, :k] = g_out
        alias[r, : len(prefix)] = np.searchsorted(uniq, np.asarray(prefix, dtype=np.int64))
        seq_mask[r, : len(prefix)] = True
    return SessionGraphBatch(items, node_mask, a_in, a_out, alias, seq_mask)
