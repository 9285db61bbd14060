"""Ranking and rating metrics, vectorized (torch for scoring, numpy for per-user results).

Conventions (LightGCN's evaluation, which the papers follow):

- full ranking: every item is a candidate except the user's training positives;
- ``recall@k`` = hits / |test|, ``precision@k`` = hits / k;
- ``ndcg@k``: binary relevance, discount 1/log2(rank + 1) with rank 1-based, ideal DCG over
  min(k, |test|) relevant items;
- ``hit@k``: 1 if any test item is in the top k; ``mrr@k``: 1/rank of the first hit, else 0;
- ties in scores are broken by the lower item index, so results are deterministic.

Every function returns per-user (per-example) float64 arrays; average them as needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from cluster.device import to_device

__all__ = [
    "topk_excluding",
    "ranking_metrics",
    "full_ranking_metrics",
    "own_table_ranking_metrics",
    "recall_from_hits",
    "mrr_from_first_hit",
    "rmse",
    "mae",
    "next_item_metrics",
    "topk_scores",
    "popularity_scores",
]

Exclusion = list[np.ndarray] | sp.csr_matrix


# --------------------------------------------------------------------------- input checks


def _check_ks(ks: Sequence[int] | int, limit: int | None = None) -> list[int]:
    """Distinct positive ks in the given order; each at most ``limit`` when one is given."""
    if isinstance(ks, (int, np.integer)):
        ks = [int(ks)]
    out: list[int] = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"ks must be positive integers, got {k!r}")
        if limit is not None and k > limit:
            raise ValueError(f"k={k} exceeds the {limit} ranked items available")
        if int(k) not in out:
            out.append(int(k))
    if not out:
        raise ValueError("ks must name at least one cutoff")
    return out


def _as_tensor(x: Any, name: str) -> torch.Tensor:
    """``x`` as a tensor where it was (a numpy array or a list: on the CPU)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    try:
        return to_device(np.asarray(x), None)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name}: cannot be read as a numeric array ({exc})") from exc


def _score_matrix(scores: Any, name: str = "scores", check_nan: bool = True) -> torch.Tensor:
    """A floating [B, n_items] tensor (integer scores are promoted to float64).

    With ``check_nan`` a NaN anywhere is an error; callers that rank with ``torch.topk`` skip
    this full pass and check the selected values instead (topk ranks NaN first).
    """
    s = _as_tensor(scores, name)
    if s.ndim != 2:
        raise ValueError(f"{name}: expected shape [batch, n_items], got {tuple(s.shape)}")
    if s.dtype == torch.bool or s.is_complex():
        raise ValueError(f"{name}: expected real numeric scores, got {s.dtype}")
    if not s.is_floating_point():
        s = s.to(torch.float64)
    if check_nan and torch.isnan(s).any():
        raise ValueError(f"{name}: contains NaN")
    return s


def _int_vector(x: Any, name: str) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of item ids, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: item ids must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _flatten_lists(lists: Sequence[Any], n_rows: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(row, item) pairs of a per-row list of item arrays."""
    if len(lists) != n_rows:
        raise ValueError(f"{name}: has {len(lists)} rows, expected {n_rows}")
    arrays = [_int_vector(a, f"{name}[{i}]") for i, a in enumerate(lists)]
    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=n_rows)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), lengths)
    cols = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    return rows, cols


def _exclusion_pairs(exclude: Any, n_rows: int, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    if sp.issparse(exclude):
        m = sp.csr_matrix(exclude)
        if m.shape != (n_rows, n_items):
            raise ValueError(
                f"exclude: sparse shape {m.shape} does not match scores {(n_rows, n_items)}"
            )
        rows = np.repeat(np.arange(n_rows, dtype=np.int64), np.diff(m.indptr))
        return rows, m.indices.astype(np.int64)
    if isinstance(exclude, (np.ndarray, torch.Tensor)) and exclude.ndim != 1:
        raise ValueError("exclude: pass a list of per-row item arrays or a scipy CSR matrix")
    rows, cols = _flatten_lists(exclude, n_rows, "exclude")
    if cols.size and (cols.min() < 0 or cols.max() >= n_items):
        raise ValueError(
            f"exclude: item ids must lie in [0, {n_items}), found {cols.min()}..{cols.max()}"
        )
    return rows, cols


# --------------------------------------------------------------------------- top-k


def _topk_by_scan(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Exact top-k with index tie-breaking for rows whose k-th score is tied beyond the top k:
    every item at or above the k-th value is a candidate; candidates are sorted stably."""
    n_rows = scores.shape[0]
    threshold = torch.topk(scores, k, dim=1).values[:, -1:]
    rows, cols = (scores >= threshold).nonzero(as_tuple=True)  # row-major: cols ascending
    counts = torch.bincount(rows, minlength=n_rows)
    by_score = torch.sort(scores[rows, cols], descending=True, stable=True).indices
    rows, cols = rows[by_score], cols[by_score]
    cols = cols[torch.sort(rows, stable=True).indices]
    starts = torch.cumsum(counts, 0) - counts
    return cols[starts[:, None] + torch.arange(k, device=scores.device)]


def _topk_lowest_index_ties(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k indices per row, ordered by score descending then item index ascending.

    ``torch.topk`` returns the right values but an unspecified order among equal scores. One
    ``topk(k + 1)`` shows which rows have a tie across the k-th place; the others already hold
    the right set and only need reordering, the tied rows go through :func:`_topk_by_scan`.
    """
    n_items = scores.shape[1]
    wide = min(k + 1, n_items)
    values, index = torch.topk(scores, wide, dim=1)
    if torch.isnan(values).any():
        raise ValueError("scores: contains NaN")
    if wide > k:
        tied = values[:, k] == values[:, k - 1]
        values, index = values[:, :k], index[:, :k]
    else:
        tied = torch.zeros(scores.shape[0], dtype=torch.bool, device=scores.device)
    by_index = torch.argsort(index, dim=1)
    index, values = index.gather(1, by_index), values.gather(1, by_index)
    by_score = torch.sort(values, dim=1, descending=True, stable=True).indices
    out = index.gather(1, by_score)
    if tied.any():
        out[tied] = _topk_by_scan(scores[tied], k)
    return out


def _mask_and_rank(scores: torch.Tensor, exclude: Any, k: int) -> torch.Tensor:
    """Set excluded entries of ``scores`` to -inf IN PLACE, then rank."""
    n_rows, n_items = scores.shape
    rows, cols = _exclusion_pairs(exclude, n_rows, n_items)
    if rows.size:
        dev = scores.device
        scores[to_device(rows, dev), to_device(cols, dev)] = float("-inf")
    return _topk_lowest_index_ties(scores, k)


def topk_excluding(scores: torch.Tensor, exclude: Exclusion, k: int) -> torch.Tensor:
    """Top-k item indices per row after masking each row's excluded items (training positives).

    ``scores`` is [B, n_items]; ``exclude`` is a list of B item arrays or a B x n_items sparse
    matrix. Excluded items get -inf (they can still fill a row that has fewer than k others).
    Ties are broken by the lower item index. Returns int64 [B, k] on the scores' device.
    ``scores`` itself is not modified.
    """
    s = _score_matrix(scores, check_nan=False)
    n_items = s.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n_items:
        raise ValueError(f"k must be an integer in [1, {n_items}], got {k!r}")
    return _mask_and_rank(s.clone(), exclude, int(k))


# --------------------------------------------------------------------------- ranking metrics


def recall_from_hits(hits: np.ndarray, n_relevant: np.ndarray | float) -> np.ndarray:
    """``recall@k`` per row: relevant items in the top k (``hits``, float64) / relevant items."""
    return hits / n_relevant


def mrr_from_first_hit(found: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``mrr@k`` per row: 1/rank of the first relevant item (``first``: its 0-based position)
    where one is in the top k (``found``), else 0."""
    return np.where(found, 1.0 / (first + 1.0), 0.0)


def ranking_metrics(
    topk: torch.Tensor | np.ndarray,
    test_items: list[np.ndarray],
    ks: Sequence[int] = (20,),
) -> dict[str, np.ndarray]:
    """Per-user recall/precision/ndcg/hit/mrr at each k from ranked lists ``topk`` [B, K].

    Keys are ``"recall@k"``, ``"precision@k"``, ``"ndcg@k"``, ``"hit@k"``, ``"mrr@k"``; values are
    float64 arrays of length B. Every user needs a non-empty test set (drop the others first).
    """
    ranked = topk.detach().cpu().numpy() if isinstance(topk, torch.Tensor) else np.asarray(topk)
    if ranked.ndim != 2:
        raise ValueError(f"topk: expected shape [users, K], got {ranked.shape}")
    if ranked.size and ranked.dtype.kind not in "iu":
        raise ValueError(f"topk: item ids must be integers, got dtype {ranked.dtype}")
    ranked = ranked.astype(np.int64, copy=False)
    n_users, width = ranked.shape
    ks = _check_ks(ks, width)
    if ranked.size and ranked.min() < 0:
        raise ValueError("topk: item ids must be non-negative")
    if width > 1 and np.any(np.diff(np.sort(ranked, axis=1), axis=1) == 0):
        raise ValueError("topk: a user's ranked list repeats an item")

    rows, cols = _flatten_lists(test_items, n_users, "test_items")
    if cols.size and cols.min() < 0:
        raise ValueError("test_items: item ids must be non-negative")
    base = int(max(ranked.max(initial=0), cols.max(initial=0))) + 1
    test_keys = np.unique(rows * base + cols)
    n_test = np.bincount(test_keys // base, minlength=n_users)
    empty = np.flatnonzero(n_test == 0)
    if empty.size:
        raise ValueError(
            f"test_items: {empty.size} user(s) have no test items (first: row {empty[0]}); "
            "drop them before evaluating"
        )

    hit = np.isin(np.arange(n_users, dtype=np.int64)[:, None] * base + ranked, test_keys)
    discount = 1.0 / np.log2(np.arange(width, dtype=np.float64) + 2.0)
    ideal = np.cumsum(discount)
    out: dict[str, np.ndarray] = {}
    for k in ks:
        h = hit[:, :k]
        hits = h.sum(axis=1).astype(np.float64)
        found = hits > 0
        first = np.argmax(h, axis=1)
        out[f"recall@{k}"] = recall_from_hits(hits, n_test)
        out[f"precision@{k}"] = hits / k
        # a row-wise sum, not a matrix product: each user's value must not depend on who else is
        # in the batch (BLAS blocks by shape), so that results are placement-independent
        out[f"ndcg@{k}"] = (h * discount[:k]).sum(axis=1) / ideal[np.minimum(n_test, k) - 1]
        out[f"hit@{k}"] = found.astype(np.float64)
        out[f"mrr@{k}"] = mrr_from_first_hit(found, first)
    return out


def full_ranking_metrics(
    user_emb: torch.Tensor | np.ndarray,
    item_emb: torch.Tensor | np.ndarray,
    train_items: Exclusion,
    test_items: list[np.ndarray],
    ks: Sequence[int] = (20,),
    chunk: int = 1024,
) -> dict[str, np.ndarray]:
    """Score every item for every user (``user_emb @ item_emb.T``, ``chunk`` users at a time),
    exclude training positives, and return :func:`ranking_metrics` per user.
    """
    users = _as_tensor(user_emb, "user_emb")
    items = _as_tensor(item_emb, "item_emb")
    if users.ndim != 2 or items.ndim != 2 or users.shape[1] != items.shape[1]:
        raise ValueError(
            f"embeddings: expected [users, d] and [items, d], got {tuple(users.shape)} and "
            f"{tuple(items.shape)}"
        )
    if not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive integer, got {chunk!r}")
    n_users, n_items = users.shape[0], items.shape[0]
    ks = _check_ks(ks, n_items)
    if len(test_items) != n_users:
        raise ValueError(f"test_items: has {len(test_items)} rows, expected {n_users}")
    if any(len(t) == 0 for t in test_items):
        raise ValueError("test_items: some users have no test items; drop them before evaluating")
    train_rows = train_items.shape[0] if sp.issparse(train_items) else len(train_items)
    if train_rows != n_users:
        raise ValueError(f"train_items: has {train_rows} rows, expected {n_users}")

    dtype = torch.float64 if torch.float64 in (users.dtype, items.dtype) else torch.float32
    items = items.to(device=users.device, dtype=dtype)
    train = sp.csr_matrix(train_items) if sp.issparse(train_items) else train_items
    ranked = []
    with torch.no_grad():
        for start in range(0, n_users, int(chunk)):
            stop = min(start + int(chunk), n_users)
            scores = users[start:stop].to(dtype) @ items.T
            ranked.append(_mask_and_rank(scores, train[start:stop], max(ks)).cpu())
    topk = (
        torch.cat(ranked) if ranked else torch.zeros((0, max(ks)), dtype=torch.int64, device="cpu")
    )
    return ranking_metrics(topk, test_items, ks)


def own_table_ranking_metrics(
    user_vecs: torch.Tensor,
    item_mats: list[np.ndarray],
    train_items: list[np.ndarray],
    test_items: list[np.ndarray],
    k: int,
) -> dict[str, np.ndarray]:
    """Per-user :func:`ranking_metrics` at ``k`` when user b scores every item with its own copy
    ``item_mats[b]`` [n_items, d] of the item table (federated and decentralised users): scores
    ``item_mats[b] @ user_vecs[b]``, training items excluded. When every entry of ``item_mats``
    is the same array (one broadcast), the scores are one product ``user_vecs @ table.T``."""
    if all(m is item_mats[0] for m in item_mats):
        scores = user_vecs @ to_device(item_mats[0], user_vecs.device).T
    else:
        scores = torch.stack([to_device(m, u.device) @ u for u, m in zip(user_vecs, item_mats)])
    top = topk_excluding(scores, train_items, k)
    return ranking_metrics(top, test_items, ks=(k,))


def target_exposure(
    topk: torch.Tensor | np.ndarray, train_items: list[np.ndarray], targets: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exposure of the ``targets`` (items an attack promotes) in ranked lists ``topk`` [B, K]:
    per user, ``er`` (1 when its top K holds a target it has not interacted with: the exposure
    ratio ER@K of FedRecAttack), ``hr`` (the share of its non-interacted targets in its top K:
    HR@K of the targets) and ``counted`` (False for a user who has interacted with every target:
    it has nothing to be exposed to and is left out)."""
    ranked = topk.detach().cpu().numpy() if isinstance(topk, torch.Tensor) else np.asarray(topk)
    t = np.asarray(sorted(set(int(x) for x in targets)), dtype=np.int64)
    er = np.zeros(len(ranked))
    hr = np.zeros(len(ranked))
    counted = np.zeros(len(ranked), dtype=bool)
    for b, (row, train) in enumerate(zip(ranked, train_items)):
        open_t = t[~np.isin(t, train)]
        if not len(open_t):
            continue
        shown = np.isin(open_t, row)
        counted[b], er[b], hr[b] = True, float(shown.any()), float(shown.mean())
    return er, hr, counted


def own_table_target_exposure(
    user_vecs: torch.Tensor,
    item_mats: list[np.ndarray],
    train_items: list[np.ndarray],
    targets: Sequence[int],
    k: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`target_exposure` at ``k`` when user b scores every item with its own copy
    ``item_mats[b]`` of the item table (as :func:`own_table_ranking_metrics`)."""
    if all(m is item_mats[0] for m in item_mats):
        scores = user_vecs @ to_device(item_mats[0], user_vecs.device).T
    else:
        scores = torch.stack([to_device(m, u.device) @ u for u, m in zip(user_vecs, item_mats)])
    return target_exposure(topk_excluding(scores, train_items, k), train_items, targets)


# --------------------------------------------------------------------------- rating metrics


def _paired(pred: Any, target: Any) -> tuple[np.ndarray, np.ndarray]:
    p = pred.detach().cpu().numpy() if isinstance(pred, torch.Tensor) else np.asarray(pred)
    t = target.detach().cpu().numpy() if isinstance(target, torch.Tensor) else np.asarray(target)
    if p.shape != t.shape:
        raise ValueError(f"pred shape {p.shape} does not match target shape {t.shape}")
    if p.size == 0:
        raise ValueError("pred and target are empty")
    for name, a in (("pred", p), ("target", t)):
        if a.dtype.kind not in "biuf":
            raise ValueError(f"{name}: expected numeric values, got dtype {a.dtype}")
    return p.astype(np.float64), t.astype(np.float64)


def rmse(pred: Any, target: Any) -> float:
    """Root mean squared error over all entries."""
    p, t = _paired(pred, target)
    return float(np.sqrt(np.mean((p - t) ** 2)))


def mae(pred: Any, target: Any) -> float:
    """Mean absolute error over all entries."""
    p, t = _paired(pred, target)
    return float(np.mean(np.abs(p - t)))


# --------------------------------------------------------------------------- sequential


def next_item_metrics(
    scores: torch.Tensor, target: torch.Tensor, ks: Sequence[int] = (5, 10, 20)
) -> dict[str, np.ndarray]:
    """Per-example ``recall@k`` (the single target is in the top k) and ``mrr@k``.

    The target's rank counts items scoring higher plus equal-scoring items of lower index,
    matching :func:`topk_excluding`'s tie-breaking. No items are excluded.
    """
    s = _score_matrix(scores)
    n_rows, n_items = s.shape
    ks = _check_ks(ks)
    t = _as_tensor(target, "target")
    if t.shape != (n_rows,):
        raise ValueError(f"target: expected shape ({n_rows},), got {tuple(t.shape)}")
    if t.is_floating_point() or t.dtype == torch.bool or t.is_complex():
        raise ValueError(f"target: item ids must be integers, got {t.dtype}")
    t = t.to(device=s.device, dtype=torch.int64)
    if n_rows and (t.min() < 0 or t.max() >= n_items):
        raise ValueError(f"target: item ids must lie in [0, {n_items})")
    with torch.no_grad():
        target_score = s.gather(1, t[:, None])
        higher = (s > target_score).sum(dim=1)
        lower_index = torch.arange(n_items, device=s.device)[None, :] < t[:, None]
        tied_before = ((s == target_score) & lower_index).sum(dim=1)
        rank = (higher + tied_before).cpu().numpy().astype(np.float64)  # 0-based
    out: dict[str, np.ndarray] = {}
    for k in ks:
        inside = rank < k  # the one target is the one relevant item
        out[f"recall@{k}"] = recall_from_hits(inside.astype(np.float64), 1.0)
        out[f"mrr@{k}"] = mrr_from_first_hit(inside, rank)
    return out


def topk_scores(
    top: np.ndarray | torch.Tensor, n_items: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """Scores [rows, n_items] that rank each row's top-K list ``top`` [rows, K] (distinct item
    ids, best first) in its order ahead of every other item: K − i for the i-th, 0 elsewhere.
    With them, :func:`next_item_metrics` scores a ranking received as top-K lists; a target
    outside its list ranks ≥ K. On ``device``; by default ``top``'s for a tensor, torch's default
    device for a numpy array."""
    if device is None:
        device = top.device if isinstance(top, torch.Tensor) else torch.get_default_device()
    if not isinstance(top, torch.Tensor):
        top = np.asarray(top, dtype=np.int64)
    top = to_device(top, device, torch.int64)
    if top.dim() != 2:
        raise ValueError(f"top: expected [rows, K], got shape {tuple(top.shape)}")
    if top.numel() and (int(top.min()) < 0 or int(top.max()) >= n_items):
        raise ValueError(f"top: item ids must lie in [0, {n_items})")
    rows, k = top.shape
    values = torch.arange(k, 0, -1, dtype=torch.float32, device=device).expand(rows, k)
    scores = torch.zeros(rows, n_items, dtype=torch.float32, device=device)
    return scores.scatter_(1, top, values)


# --------------------------------------------------------------------------- baseline


def popularity_scores(
    train_items: np.ndarray | list[np.ndarray],
    n_items: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Item scores of the popularity baseline: how often each item occurs in training.

    ``train_items`` is a flat array of item ids (one per interaction) or a per-user list of
    item arrays (then an item's score is the number of users that have it). float32 [n_items],
    on ``device`` (default: the CPU).
    """
    if not isinstance(n_items, (int, np.integer)) or n_items < 1:
        raise ValueError(f"n_items must be a positive integer, got {n_items!r}")
    if isinstance(train_items, list):
        _, items = _flatten_lists(train_items, len(train_items), "train_items")
    else:
        items = _int_vector(train_items, "train_items")
    if items.size and (items.min() < 0 or items.max() >= n_items):
        raise ValueError(f"train_items: item ids must lie in [0, {n_items})")
    counts = np.bincount(items, minlength=int(n_items))
    return to_device(counts.astype(np.float32), device)
