"""The de-anonymization attack on shared neighbour information (Mai & Pang, ICML 2023, §4.1,
§6.2.3, Appendix I), pure numpy/torch.

An adversary registers fake users, each of which rates exactly one item v of the victim (one
adversarial user per item of a fraction p_ad of the victim's items). Whatever the victim's
side of the protocol reveals about an adversarial user's neighbourhood is then a signature of
that single item, a_v. The adversary matches what it learns about each honest user u against
these signatures:

* **FedPerGNN-style exchange** (individual neighbour embeddings in the clear, anonymised):
  u's neighbours arrive one by one as e_v; each is matched to the adversarial signature
  closest in l1,  v̂ = argmin_j ‖e − a_j‖₁,  and accepted when that distance is (numerically)
  zero: ‖e − a_v̂‖₁ ≤ tol·‖e‖₁. An item without an adversarial user is never claimed.
* **VerFedGNN exchange** (a neighbour *aggregate*, reconstructed from its projection,
  X̂ = ΦᵀΦX): the items of u are inferred as the subset S of adversarial signatures, of size
  1 ≤ |S| ≤ c (c ≤ 3), whose combination is closest in l1 to u's row:

      Ŝ_u = argmin_{S, 1≤|S|≤c} ‖ X̂[u] − |S|^(−γ) Σ_{j∈S} X̂[a_j] ‖₁                  (I.1)

  γ is the degree normalisation of the aggregation the attacker knows: γ = ½ for GCN
  (X[u] = Σ_v e_v/√(N_u N_v), so an adversarial row is e_v/√N_v and X[u] = N_u^(−½) Σ a_v),
  γ = 1 for a mean (GGNN; also used for GAT, whose attention weights it approximates as
  uniform), 0 for a plain sum. The search is exact for |S| = 1 and a beam
  search (width ``beam``) for larger sets.

Scoring (micro-averaged over all (user, item) pairs of the victim): precision = |Ŝ ∩ T|/|Ŝ|,
recall = |Ŝ ∩ T|/|T| with T the user's true items at the victim (all of them, covered by an
adversarial user or not), F1 their harmonic mean. With exact matches the FedPerGNN-style
attack has precision 1 and recall ≈ p_ad, i.e. F1 ≈ 2p_ad/(1 + p_ad) (paper Table 3:
0.34–0.90 for p_ad = 0.2–0.8); the projected aggregate leaves F1 near chance (paper 0.01–0.02).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from cluster.device import to_device
from privacy.leakage.gradient_inference import precision_recall_f1

DEGREE_POWER = {"gcn": 0.5, "ggnn": 1.0, "gat": 1.0, "sum": 0.0}


@dataclass(frozen=True)
class AttackScore:
    precision: float
    recall: float
    f1: float
    n_targets: int  # honest users scored
    n_inferred: int  # (user, item) pairs claimed

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}precision": self.precision,
            f"{prefix}recall": self.recall,
            f"{prefix}f1": self.f1,
            f"{prefix}targets": float(self.n_targets),
            f"{prefix}inferred": float(self.n_inferred),
        }


def choose_adversarial_items(n_items: int, p_ad: float, rng: np.random.Generator) -> np.ndarray:
    """The victim's items (local ids, sorted) that get one adversarial user each: a uniformly
    random round(p_ad·M_p) of them, at least one."""
    if n_items < 1:
        raise ValueError(f"the victim needs at least one item, got n_items={n_items}")
    if not 0 < p_ad <= 1:
        raise ValueError(f"p_ad must be in (0, 1], got {p_ad}")
    k = max(1, int(round(p_ad * n_items)))
    return np.sort(rng.choice(n_items, size=k, replace=False)).astype(np.int64)


def _as_rows(x, name: str) -> torch.Tensor:
    """``x`` as a float64 [rows, D] tensor where it was (a numpy array or a list: on the CPU)."""
    t = to_device(x, None)
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D array [rows, D], got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return t.to(torch.float64)


def _check_signatures(signatures, signature_items) -> tuple[torch.Tensor, np.ndarray]:
    sig = _as_rows(signatures, "signatures")
    items = np.asarray(signature_items, dtype=np.int64)
    if items.shape != (sig.shape[0],):
        raise ValueError(f"signature_items must hold one item per signature ({sig.shape[0]})")
    if sig.shape[0] == 0:
        raise ValueError("no adversarial signatures: the attack needs at least one")
    return sig, items


def match_neighbour_embeddings(
    neighbours: Sequence[np.ndarray],
    signatures: np.ndarray | torch.Tensor,
    signature_items: np.ndarray,
    *,
    tol: float = 1e-6,
) -> list[np.ndarray]:
    """FedPerGNN-style: for each honest user, the list of individual neighbour embeddings it
    revealed ([n_u, D]); returns per user the sorted item ids whose adversarial signature one
    of them matches (l1 distance ≤ tol·‖e‖₁)."""
    sig, items = _check_signatures(signatures, signature_items)
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    out = []
    for u, emb in enumerate(neighbours):
        e = (
            _as_rows(emb, f"neighbours[{u}]")
            if len(emb)
            else torch.zeros(0, sig.shape[1], device=sig.device)
        )
        if e.shape[0] and e.shape[1] != sig.shape[1]:
            raise ValueError(f"neighbours[{u}] has width {e.shape[1]}, signatures {sig.shape[1]}")
        if e.shape[0] == 0:
            out.append(np.zeros(0, dtype=np.int64))
            continue
        e = e.to(sig.device)
        dist = torch.cdist(e, sig, p=1)  # [n_u, C]
        best, j = dist.min(1)
        ok = best <= tol * e.abs().sum(1).clamp_min(1e-300)
        out.append(np.unique(items[j[ok].cpu().numpy()]))
    return out


def match_aggregates(
    targets: np.ndarray | torch.Tensor,
    signatures: np.ndarray | torch.Tensor,
    signature_items: np.ndarray,
    *,
    max_items: int = 3,
    degree_power: float = 0.5,
    beam: int = 32,
    chunk: int = 64,
) -> list[np.ndarray]:
    """VerFedGNN: eq. (I.1) for every target row (an honest user's reconstructed aggregate);
    returns per user the sorted item ids of the best subset of signatures."""
    x = _as_rows(targets, "targets")
    sig, items = _check_signatures(signatures, signature_items)
    if x.shape[1] != sig.shape[1]:
        raise ValueError(f"targets have width {x.shape[1]}, signatures {sig.shape[1]}")
    x = x.to(sig.device)
    if max_items < 1:
        raise ValueError(f"max_items must be >= 1, got {max_items}")
    if beam < 1 or chunk < 1:
        raise ValueError(f"beam and chunk must be >= 1, got {beam}, {chunk}")
    c_count = sig.shape[0]
    every = torch.arange(c_count, device=sig.device)  # the signatures' indices
    max_items = min(max_items, c_count)
    out: list[np.ndarray] = []
    for lo in range(0, x.shape[0], chunk):
        xb = x[lo : lo + chunk]  # [T, D]
        t = xb.shape[0]
        # size 1, exact: every signature
        dist = (xb[:, None, :] - sig[None, :, :]).abs().sum(-1)  # [T, C]
        best_dist, best_idx = dist.min(1)
        best_sets = [[int(j)] for j in best_idx]
        width = min(beam, c_count)
        top_d, top_j = dist.topk(width, dim=1, largest=False)
        sets = top_j[:, :, None]  # [T, B, 1] members
        sums = sig[top_j]  # [T, B, D] Σ of members
        for size in range(2, max_items + 1):
            cand = sums[:, :, None, :] + sig[None, None, :, :]  # [T, B, C, D]
            d = (xb[:, None, None, :] - cand * size ** (-degree_power)).abs().sum(-1)
            member = (sets[:, :, :, None] == every[None, None, None, :]).any(2)
            d = d.masked_fill(member, float("inf")).reshape(t, -1)  # no item twice
            k = min(beam, int(torch.isfinite(d).sum(1).min()))
            if k < 1:
                break
            top_d, flat = d.topk(k, dim=1, largest=False)
            b, j = flat // c_count, flat % c_count
            kept = sets.gather(1, b[:, :, None].expand(-1, -1, size - 1))
            sets = torch.cat([kept, j[..., None]], 2)
            sums = sums.gather(1, b[:, :, None].expand(-1, -1, sums.shape[2])) + sig[j]
            better = top_d[:, 0] < best_dist
            for r in torch.nonzero(better).flatten().tolist():
                best_dist[r] = top_d[r, 0]
                best_sets[r] = sets[r, 0].tolist()
        out.extend(np.unique(items[np.asarray(s, dtype=np.int64)]) for s in best_sets)
    return out


def score(inferred: Sequence[np.ndarray], truth: Sequence[np.ndarray], n_items: int) -> AttackScore:
    """Micro-averaged precision / recall / F1 of the inferred item sets against the true ones
    (item ids in [0, n_items))."""
    if len(inferred) != len(truth):
        raise ValueError(f"{len(inferred)} inferred sets but {len(truth)} true sets")
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items}")
    pred = np.zeros((len(truth), n_items), dtype=bool)
    true = np.zeros_like(pred)
    for u, (p, t) in enumerate(zip(inferred, truth)):
        for name, ids in (("inferred", p), ("truth", t)):
            ids = np.asarray(ids, dtype=np.int64)
            if len(ids) and (ids.min() < 0 or ids.max() >= n_items):
                raise ValueError(f"{name}[{u}] has item ids outside [0, {n_items})")
        pred[u, np.asarray(p, dtype=np.int64)] = True
        true[u, np.asarray(t, dtype=np.int64)] = True
    precision, recall, f1 = precision_recall_f1(pred, true)
    return AttackScore(precision, recall, f1, len(truth), int(pred.sum()))
