"""Bayesian personalised ranking for matrix factorisation, with explicit gradients.

For a user u with factor p_u, a positive item i and a negative item j (factors q_i, q_j):

    x_uij = p_u · (q_i − q_j),    L = −ln σ(x_uij) + α(‖p_u‖² + ‖q_i‖² + ‖q_j‖²)/2      (Rendle et al. 2009)

    ∂L/∂p_u = −σ(−x)(q_i − q_j) + α p_u,   ∂L/∂q_i = −σ(−x) p_u + α q_i,   ∂L/∂q_j = σ(−x) p_u + α q_j

Averaged over a user's P sampled pairs. The gradients are written out (no autograd) so that many
users are computed in one vectorised pass whose rows depend only on their own inputs.

Bit-for-bit, too: ATen evaluates element-wise ops in SIMD blocks and, for some ops (``softplus``,
``sigmoid``, ``log1p``, ``elu``), the elements left over after the last block by a scalar formula
that can differ in the last bit. An element's result would then depend on where it sits in the
batch, i.e. on which other users share the pass. ``logsigmoid`` and ``exp`` use the SIMD code
for the remainder as well, so −ln σ(x) and σ(x) are written with them (tests/models/test_kernels.py
checks this on the machine that runs the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


def sample_negatives(
    rng: np.random.Generator, n_items: int, positives: np.ndarray, count: int
) -> np.ndarray:
    """``count`` items drawn uniformly from those not in ``positives`` (sorted array)."""
    if len(positives) >= n_items:
        raise ValueError("user has interacted with every item: no negative to sample")
    out = np.empty(0, dtype=np.int64)
    while len(out) < count:
        cand = rng.integers(0, n_items, size=2 * (count - len(out)) + 4)
        cand = cand[~np.isin(cand, positives, assume_unique=False)]
        out = np.concatenate([out, cand])
    return out[:count]


def hold_out(
    rng: np.random.Generator, items: np.ndarray, fraction: float
) -> tuple[np.ndarray, np.ndarray]:
    """Split one user's items into (kept, held out): round(fraction·n) drawn without replacement,
    at most n − 1 so that something is left to train on; both sorted."""
    items = np.asarray(items, dtype=np.int64)
    n_out = min(int(round(fraction * len(items))), max(len(items) - 1, 0))
    out = np.zeros(len(items), dtype=bool)
    out[rng.choice(len(items), size=n_out, replace=False)] = True
    return np.sort(items[~out]), np.sort(items[out])


def sample_pairs(
    rng: np.random.Generator, n_items: int, positives: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray]:
    """``count`` (positive, negative) pairs: positives uniformly with replacement from the user's
    items, negatives uniformly from the rest."""
    if len(positives) == 0:
        raise ValueError("user has no positive item to train on")
    pos = positives[rng.integers(0, len(positives), size=count)]
    return pos, sample_negatives(rng, n_items, positives, count)


def neg_log_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """−ln σ(x) = softplus(−x), element-wise, with the same bits wherever x sits in its tensor."""
    return -F.logsigmoid(x)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """σ(x) = exp(ln σ(x)), element-wise, with the same bits wherever x sits in its tensor."""
    return torch.exp(F.logsigmoid(x))


@dataclass
class BPRGrads:
    loss: torch.Tensor  # [B]
    user: torch.Tensor  # [B, d]
    pos_items: torch.Tensor  # [B, P, d]
    neg_items: torch.Tensor  # [B, P, d]


def bpr_grads(user: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, l2: float) -> BPRGrads:
    """Per-user BPR loss and gradients (L2 weight ``l2``). ``user`` [B, d]; ``pos``/``neg`` item
    factors [B, P, d]."""
    diff = pos - neg
    x = (user[:, None, :] * diff).sum(-1)  # [B, P]
    n_pairs = x.shape[1]
    loss = neg_log_sigmoid(x).mean(1)
    coef = (-sigmoid(-x) / n_pairs)[:, :, None]  # dL/dx per pair, averaged over pairs
    g_user = (coef * diff).sum(1) + l2 * user
    g_pos = coef * user[:, None, :] + (l2 / n_pairs) * pos
    g_neg = -coef * user[:, None, :] + (l2 / n_pairs) * neg
    return BPRGrads(loss, g_user, g_pos, g_neg)
