"""The server's inference of a user's positive items from one upload of item-embedding
gradients (the leakage FedPerGNN's LDP noise and pseudo items are meant to stop).

With BPR, L = −log σ(e_u·e_i − e_u·e_j) for a positive i and a sampled negative j, so

    ∂L/∂e_i = −c·e_u,    ∂L/∂e_j = +c·e_u,    c = 1 − σ(e_u·e_i − e_u·e_j) > 0:

positive rows point along −e_u and negative rows along +e_u. The attack

  1. takes the principal direction v of the (uncentered) gradient rows — the top right
     singular vector, ±e_u for clean BPR gradients;
  2. splits the rows by the sign of their projection g·v;
  3. decides which side is positive:
       * with ``user_signal`` (any estimate of e_u's direction, e.g. a leaked user embedding):
         the side whose gradients point against it, g·e_u < 0;
       * without it: the smaller side (a user samples ≥ 1 negative per positive, and pseudo
         items add more rows), ties broken by the larger mean |g·v| (a positive collects one
         gradient term per negative paired with it).
     With exactly one negative per positive and no ``user_signal`` the two sides are mirror
     images (−c·e_u vs +c·e_u): the split is still right but which side is positive is a
     coin flip, so F1 is then either ≈ 1 or ≈ 0.
"""

from __future__ import annotations

import numpy as np
import torch

ArrayLike = np.ndarray | torch.Tensor


def _as_numpy(x: ArrayLike) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def infer_positive_items(
    item_ids: ArrayLike,
    item_grads: ArrayLike,
    user_signal: ArrayLike | None = None,
) -> torch.Tensor:
    """Predicted positive mask (bool [n], aligned with ``item_ids`` / the rows of
    ``item_grads`` [n, d]) by the rule in the module docstring."""
    grads = torch.from_numpy(np.array(_as_numpy(item_grads), dtype=np.float64))
    if grads.dim() != 2:
        raise ValueError(f"item_grads must be 2-D [n_items, dim], got shape {tuple(grads.shape)}")
    ids = _as_numpy(item_ids).reshape(-1)
    if len(ids) != grads.shape[0]:
        raise ValueError(f"{len(ids)} item ids but {grads.shape[0]} gradient rows")
    n = grads.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.bool)
    if not torch.isfinite(grads).all():
        raise ValueError("item_grads contains non-finite values")
    _, _, vh = torch.linalg.svd(grads, full_matrices=False)
    direction = vh[0]
    if user_signal is not None:
        signal = torch.from_numpy(np.array(_as_numpy(user_signal), dtype=np.float64)).reshape(-1)
        if signal.shape[0] != grads.shape[1]:
            raise ValueError(
                f"user_signal has {signal.shape[0]} dims, gradients have {grads.shape[1]}"
            )
        if torch.dot(direction, signal) < 0:
            direction = -direction
        return grads @ direction < 0  # positives point against e_u
    proj = grads @ direction
    side_a, side_b = proj < 0, proj >= 0
    na, nb = int(side_a.sum()), int(side_b.sum())
    if na != nb:
        return side_a if na < nb else side_b
    mean_a = proj[side_a].abs().mean() if na else torch.tensor(0.0)
    mean_b = proj[side_b].abs().mean() if nb else torch.tensor(0.0)
    return side_a if mean_a >= mean_b else side_b


def precision_recall_f1(pred_mask: ArrayLike, true_mask: ArrayLike) -> tuple[float, float, float]:
    """(precision, recall, F1) of a predicted positive mask against the true one; a ratio with
    an empty denominator is 0."""
    pred = _as_numpy(pred_mask).astype(bool).reshape(-1)
    true = _as_numpy(true_mask).astype(bool).reshape(-1)
    if pred.shape != true.shape:
        raise ValueError(f"masks differ in length: {pred.shape[0]} vs {true.shape[0]}")
    tp = int(np.sum(pred & true))
    precision = tp / int(pred.sum()) if pred.any() else 0.0
    recall = tp / int(true.sum()) if true.any() else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def infer_real_rows(item_grads: ArrayLike, rank: int = 1) -> torch.Tensor:
    """Predicted mask of the real (not pseudo) rows of one upload [n, d]: real item gradients
    share a low-rank structure (each is the user's error times a few directions set by e_u and
    the model), pseudo rows are drawn independently per coordinate. The rows' residual norms off
    the top-``rank`` right singular subspace are split in two by 1-D 2-means (Otsu's threshold);
    the low-residual side is called real. For FedPerGNN's rating backbone, where every real row
    is a rated item, this is the positive-item inference."""
    grads = torch.from_numpy(np.array(_as_numpy(item_grads), dtype=np.float64))
    if grads.dim() != 2:
        raise ValueError(f"item_grads must be 2-D [n_items, dim], got shape {tuple(grads.shape)}")
    if not 1 <= rank < grads.shape[1]:
        raise ValueError(f"rank must be in [1, {grads.shape[1]}), got {rank}")
    n = grads.shape[0]
    if n < 2:
        return torch.ones(n, dtype=torch.bool)
    if not torch.isfinite(grads).all():
        raise ValueError("item_grads contains non-finite values")
    _, _, vh = torch.linalg.svd(grads, full_matrices=False)
    basis = vh[:rank]
    residual = (grads - grads @ basis.T @ basis).norm(dim=1)
    order = torch.argsort(residual)
    r = residual[order]
    best, cut = -1.0, 1
    for k in range(1, n):  # Otsu: the split maximising the between-class variance
        a, b = r[:k], r[k:]
        score = k * (n - k) * float((a.mean() - b.mean()) ** 2)
        if score > best:
            best, cut = score, k
    mask = torch.zeros(n, dtype=torch.bool)
    mask[order[:cut]] = True
    return mask
