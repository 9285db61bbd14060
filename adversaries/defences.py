"""Robust aggregation: the defences of the aggregating role (``--defence NAME --defence-param
key=value``), as pure functions of the updates, and their application to the row-sparse uploads
of fedmf and FedPerGNN/FedLightGCN (:func:`aggregate_rows`).

Rules on m update vectors ``x`` [m, d]:

- ``norm_bound(x, c)``: every update scaled to an L2 norm ≤ c, then averaged (Sun et al., "Can
  you really backdoor federated learning?", 2019);
- ``coordinate_median(x)``: the median of each coordinate (Yin et al., ICML 2018);
- ``trimmed_mean(x, beta)``: each coordinate's mean after dropping its ⌊β m⌋ largest and ⌊β m⌋
  smallest values (Yin et al., ICML 2018);
- ``krum(x, f, select)``: the ``select`` updates whose summed squared distance to their
  m − f − 2 nearest others is smallest, averaged (Krum: select = 1; Multi-Krum: select > 1;
  Blanchard et al., NeurIPS 2017).

**Row-sparse uploads** (an upload is item ids with one gradient row each, ids sampled per user):
``norm-bound`` bounds each *upload* (the whole vector of its rows; c = ``bound``, or the median
norm of the round's uploads when ``bound`` is 0), then the server averages as usual. The other
rules work *per item row*, over the users who uploaded that row (rows of one upload with the same
id are summed first): the row's robust centre stands in for the mean of its contributors, times
their number over the number of uploads — the same scale as the plain mean (sum over uploads /
uploads), which it equals when the rule is the mean. Krum's f is a share of a row's contributors
(⌈f m⌉, at most (m − 3)/2 so that a neighbour is left; rows with fewer than 3 contributors take
the coordinate median).

**Decentralized peers** (dmf, DGREC, DLGNN; :func:`combine`, :func:`combine_shares`): there is
no aggregating role; each honest peer applies the rule to the shares it combines — a dmf peer to
the gradients new to it at one hop (each a dense update, 0 where it has no row), a DGREC/DLGNN
member to the k shares it holds after the gossip (eq. 6 over the ±1 codes: the median is a
majority vote; every code has the norm √n_s, so ``norm-bound`` changes nothing there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


def norm_bound(x: np.ndarray, c: float) -> np.ndarray:
    """Every row of ``x`` scaled to an L2 norm of at most ``c`` (rows below are unchanged)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x.reshape(len(x), -1), axis=1)
    scale = np.minimum(1.0, c / np.maximum(norms, 1e-12))
    return x * scale.reshape((-1,) + (1,) * (x.ndim - 1))


def coordinate_median(x: np.ndarray) -> np.ndarray:
    return np.median(np.asarray(x, dtype=np.float64), axis=0)


def trimmed_mean(x: np.ndarray, beta: float) -> np.ndarray:
    """The mean of each coordinate without its ⌊β m⌋ largest and ⌊β m⌋ smallest values."""
    x = np.sort(np.asarray(x, dtype=np.float64), axis=0)
    m = len(x)
    b = min(int(math.floor(beta * m)), (m - 1) // 2)
    return x[b : m - b].mean(axis=0)


def krum(x: np.ndarray, f: int, select: int = 1) -> np.ndarray:
    """(Multi-)Krum: the mean of the ``select`` rows with the smallest Krum score (sum of squared
    distances to the m − f − 2 nearest other rows; at least 1). Ties go to the lower index."""
    x = np.asarray(x, dtype=np.float64)
    m = len(x)
    if m == 1:
        return x[0].copy()
    flat = x.reshape(m, -1)
    sq = (flat**2).sum(1)
    d = np.maximum(sq[:, None] + sq[None, :] - 2 * flat @ flat.T, 0.0)
    np.fill_diagonal(d, np.inf)
    nearest = max(1, m - f - 2)
    scores = np.sort(d, axis=1)[:, :nearest].sum(1)
    chosen = np.argsort(scores, kind="stable")[: max(1, min(select, m))]
    return x[chosen].mean(axis=0)


@dataclass(frozen=True)
class Defence:
    summary: str
    params: Mapping[str, tuple[type, Any, str]]  # name -> (type, default, meaning)
    per: str  # "upload" or "item row"


DEFENCES: dict[str, Defence] = {
    "norm-bound": Defence(
        "every upload scaled to L2 norm <= bound",
        {"bound": (float, 0.0, "L2 bound of an upload (0: the median norm of the round's)")},
        "upload",
    ),
    "median": Defence("coordinate-wise median of each item row's contributors", {}, "item row"),
    "trimmed-mean": Defence(
        "coordinate-wise trimmed mean of each item row's contributors",
        {"beta": (float, 0.1, "share trimmed at each end")},
        "item row",
    ),
    "krum": Defence(
        "Krum: the contribution to each item row closest to its neighbours",
        {"f": (float, 0.2, "assumed share of Byzantine contributors")},
        "item row",
    ),
    "multi-krum": Defence(
        "Multi-Krum: mean of the m - f contributions with the best Krum score, per item row",
        {"f": (float, 0.2, "assumed share of Byzantine contributors")},
        "item row",
    ),
}


def defence_params(name: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` typed and checked against defence ``name``'s parameters, defaults filled in."""
    from adversaries.condition import AdversaryError

    spec = DEFENCES[name].params
    unknown = sorted(set(values) - set(spec))
    if unknown:
        known = ", ".join(spec) or "none"
        raise AdversaryError(f"defence_params: {name} has no {unknown[0]!r} (known: {known})")
    out = {}
    for key, (kind, default, _) in spec.items():
        try:
            out[key] = kind(values.get(key, default))
        except (TypeError, ValueError):
            raise AdversaryError(f"defence_params: {key}: expected a number") from None
        if out[key] < 0 or (key in ("beta", "f") and out[key] >= 0.5):
            raise AdversaryError(f"defence_params: {key} out of range: {out[key]}")
    return out


def describe() -> str:
    """One line per defence, for --help."""
    lines = []
    for name, d in DEFENCES.items():
        ps = ", ".join(f"{k}={v[1]:g}" for k, v in d.params.items())
        lines.append(f"  {name:<13} {d.summary} (per {d.per}){'; ' + ps if ps else ''}")
    return "\n".join(lines)


def _robust_centre(x: np.ndarray, name: str, p: Mapping[str, Any]) -> np.ndarray:
    m = len(x)
    if name == "median" or (name in ("krum", "multi-krum") and m < 3):
        return coordinate_median(x)
    if name == "trimmed-mean":
        return trimmed_mean(x, p["beta"])
    f = min(math.ceil(p["f"] * m), (m - 3) // 2)
    return krum(x, f, 1 if name == "krum" else m - f)


def aggregate_rows(
    uploads: list[tuple[np.ndarray, np.ndarray]],
    shape: tuple[int, int],
    name: str = "",
    params: Mapping[str, Any] | None = None,
) -> np.ndarray:
    """The aggregated gradient [n_items, d] (float64) of row-sparse ``uploads`` (ids, rows), in
    their order: the plain mean over uploads (``name`` ""), or defence ``name`` (module
    docstring). Deterministic: the same uploads in the same order give the same result."""
    p = dict(params or {})
    total = np.zeros(shape, dtype=np.float64)
    if not uploads:
        return total
    n = len(uploads)
    if name in ("", "norm-bound"):
        scales = np.ones(n)
        if name == "norm-bound":
            norms = np.array([np.linalg.norm(r.astype(np.float64)) for _, r in uploads])
            bound = p.get("bound", 0.0) or float(np.median(norms))
            scales = np.minimum(1.0, bound / np.maximum(norms, 1e-12))
        for (ids, rows), s in zip(uploads, scales):
            np.add.at(total, ids, rows.astype(np.float64) * s)
        return total / n
    # per item row: each upload's rows summed by id, then grouped by item over the uploads
    all_ids, all_rows = [], []
    for ids, rows in uploads:
        uniq, inv = np.unique(ids, return_inverse=True)
        summed = np.zeros((len(uniq), shape[1]), dtype=np.float64)
        np.add.at(summed, inv, rows.astype(np.float64))
        all_ids.append(uniq)
        all_rows.append(summed)
    ids = np.concatenate(all_ids)
    rows = np.concatenate(all_rows)
    order = np.argsort(ids, kind="stable")  # upload order kept within an item
    ids, rows = ids[order], rows[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    ends = np.r_[starts[1:], len(ids)]
    for a, b in zip(starts, ends):
        group = rows[a:b]
        centre = group[0] if b - a == 1 else _robust_centre(group, name, p)
        total[ids[a]] = centre * (b - a) / n
    return total


def combine(x: np.ndarray, name: str = "", params: Mapping[str, Any] | None = None) -> np.ndarray:
    """The combination of m *dense* updates ``x`` [m, ...] (float64 [...]): their mean (``name``
    ""), or defence ``name`` applied to whole updates — ``norm-bound`` scales each update to the
    bound (``bound``, or the median of their norms when 0) and averages; ``median``,
    ``trimmed-mean``, ``krum`` and ``multi-krum`` are the rules of the module docstring over the
    m updates (Krum's f a share of m, as per item row; fewer than 3 updates take the median).
    The decentralized protocols' peers (dmf, DGREC, DLGNN) combine the shares they receive with
    it; a share that does not touch a coordinate counts as 0 there (its gradient is 0 there)."""
    x = np.asarray(x, dtype=np.float64)
    p = dict(params or {})
    if len(x) == 0:
        raise ValueError("combine: no update")
    if name in ("", "norm-bound"):
        if name == "norm-bound":
            norms = np.linalg.norm(x.reshape(len(x), -1), axis=1)
            x = norm_bound(x, p.get("bound", 0.0) or float(np.median(norms)))
        return x.mean(axis=0)
    if len(x) == 1:
        return x[0].copy()
    return _robust_centre(x, name, p)


def combine_shares(
    shares: list[tuple[np.ndarray, np.ndarray]], name: str, params: Mapping[str, Any] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A dmf peer's defended combination of the row-sparse gradients (ids, rows) that reached it
    in one hop: each share as a dense update over the union of their ids (rows of one share with
    the same id summed; 0 where it has no row), combined with :func:`combine`, times their number
    (the plain rule gives their sum, what an undefended peer applies). Returns (ids, rows float32)
    in increasing id order."""
    ids = np.unique(np.concatenate([s[0] for s in shares]))
    dense = np.zeros((len(shares), len(ids), shares[0][1].shape[1]), dtype=np.float64)
    for k, (i, r) in enumerate(shares):
        np.add.at(dense[k], np.searchsorted(ids, i), r.astype(np.float64))
    total = combine(dense, name, params) * len(shares)
    return ids, total.astype(np.float32)


def defended_vectors(vectors: list[np.ndarray], name: str = "", params=None) -> list[np.ndarray]:
    """Dense updates (one vector each, e.g. VerFedGNN's parties' gradients of θ) as the
    aggregating role combines them under defence ``name``: a list whose plain *sum* stands for
    the sum of ``vectors``. Without a defence the vectors themselves; ``norm-bound`` bounds each
    (c = ``bound``, or the median norm when 0); the other rules give m copies of the robust
    centre (coordinate median, trimmed mean, (Multi-)Krum with f a share of m as in
    :func:`aggregate_rows`), so that the sum is m × centre (the plain sum when the rule is the
    mean)."""
    p = dict(params or {})
    if not name or not vectors:
        return list(vectors)
    x = np.stack([np.asarray(v, dtype=np.float64) for v in vectors])
    if name == "norm-bound":
        norms = np.linalg.norm(x, axis=1)
        bound = p.get("bound", 0.0) or float(np.median(norms))
        return list(norm_bound(x, bound))
    centre = x[0] if len(x) == 1 else _robust_centre(x, name, p)
    return [centre] * len(x)
