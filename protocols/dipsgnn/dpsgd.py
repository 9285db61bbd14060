"""DP-SGD on all of DIPSGNN's gradients — the private baseline "DPSGD at the same (ε2, δ)" — free
of Ray. The network is the same (eqs. 4–13) with σ = 0 in the aggregation; the privacy comes from
the optimizer (Abadi et al. 2016), per step:

    B ⊂ users, |B| = b, drawn uniformly without replacement          (fixed-size batch)
    g_u = ∇_θ (1/|P_u|) Σ_{j ∈ P_u} L_j(θ)                            one user's training prefixes
    ḡ_u = g_u · min(1, C / ‖g_u‖₂)                                    per-user clipping
    g̃   = (Σ_{u ∈ B} ḡ_u + N(0, (z · 2C)² I)) / b                     z from privacy.calibration
    θ  ← Adam(θ, g̃)                                                   (post-processing)

The per-user gradients g_u are computed with ``torch.func`` (vmap of grad over users, each user's
prefixes padded to the batch's largest count with weight 0). The unit is one user's whole
training sequence replaced (sensitivity 2C), which covers any single edge and the labels; z is
calibrated for the real sampling rate b / n and the number of steps (privacy/calibration.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, grad_and_value, vmap

from data.sequences import PrefixExamples, pad_behaviour_graphs
from models.gated_session_gnn import DIPSGNN, batch_tensors
from privacy.noise import normal_tensor


def prefixes_by_user(examples: PrefixExamples, n_users: int) -> list[np.ndarray]:
    """Indices of ``examples`` per user row 0..n_users-1 (empty for a user without prefixes)."""
    if len(examples) and (examples.user.min() < 0 or examples.user.max() >= n_users):
        raise ValueError(f"example users must lie in [0, {n_users})")
    order = np.argsort(examples.user, kind="stable")
    bounds = np.searchsorted(examples.user[order], np.arange(n_users + 1))
    return [order[bounds[u] : bounds[u + 1]] for u in range(n_users)]


def _padded_user_batch(
    examples: PrefixExamples,
    by_user: list[np.ndarray],
    rows: np.ndarray,
    fallback: list[np.ndarray],
    max_weight: float,
    device: torch.device,
) -> tuple[dict[str, Tensor], Tensor, Tensor]:
    """Inputs [b, P, ...], targets [b, P] and weights [b, P] on ``device`` for the users
    ``rows``: each user's prefixes padded to P = the largest count among them; padding repeats a
    prefix with weight 0 (``fallback[row]`` is a one-item prefix for users without training
    prefixes)."""
    width = max(1, max(len(by_user[r]) for r in rows))
    prefixes, targets, weights = [], [], []
    for r in rows:
        idx = by_user[r]
        for j in range(width):
            if j < len(idx):
                prefixes.append(examples.prefixes[idx[j]])
                targets.append(int(examples.target[idx[j]]))
                weights.append(1.0)
            else:
                prefixes.append(examples.prefixes[idx[0]] if len(idx) else fallback[r])
                targets.append(0)
                weights.append(0.0)
    flat = batch_tensors(pad_behaviour_graphs(prefixes, max_weight=max_weight), device)
    b = len(rows)
    tensors = {k: v.reshape(b, width, *v.shape[1:]) for k, v in flat.items()}
    return (
        tensors,
        torch.tensor(targets, dtype=torch.long, device=device).reshape(b, width),
        torch.tensor(weights, dtype=torch.float32, device=device).reshape(b, width),
    )


def per_user_gradients(
    model: DIPSGNN,
    examples: PrefixExamples,
    by_user: list[np.ndarray],
    rows: np.ndarray,
    features: Tensor | None,
    fallback: list[np.ndarray],
    *,
    max_weight: float,
) -> tuple[dict[str, Tensor], Tensor]:
    """(g_u, loss_u) for every user row in ``rows``: name -> [b, *param.shape] and [b] (vmap of
    grad over users; a user's loss is the mean cross-entropy over its training prefixes, eq. 13)."""
    if not model.use_features and model.user_map is not None:
        raise ValueError("DP-SGD supports the feature and the no-user-part networks, not user ids")
    device = next(model.parameters()).device
    tensors, targets, weights = _padded_user_batch(
        examples, by_user, rows, fallback, max_weight, device
    )
    params = {k: v.detach() for k, v in model.named_parameters()}
    width = targets.shape[1]
    if model.use_features:
        feats = features[torch.as_tensor(rows, device=device)]
        feats = feats[:, None, :].expand(-1, width, -1)
    else:
        feats = torch.zeros(len(rows), width, 1, device=device)

    def user_loss(p, items, a_in, a_out, alias, seq_mask, user_feats, target, weight):
        extra = {"user_features": user_feats} if model.use_features else {}
        scores = functional_call(
            model, p, (items, a_in, a_out, alias, seq_mask), {**extra, "validate": False}
        )
        losses = torch.nn.functional.cross_entropy(scores, target, reduction="none")
        return (losses * weight).sum() / weight.sum().clamp(min=1.0)

    batched = vmap(grad_and_value(user_loss), in_dims=(None, 0, 0, 0, 0, 0, 0, 0, 0))
    t = tensors
    return batched(
        params,
        t["items"],
        t["a_in"],
        t["a_out"],
        t["alias"],
        t["seq_mask"],
        feats,
        targets,
        weights,
    )


def clip_per_user(grads: dict[str, Tensor], clip_norm: float) -> dict[str, Tensor]:
    """ḡ_u = g_u · min(1, C / ‖g_u‖₂), the norm over all parameters of one user."""
    if not clip_norm > 0:
        raise ValueError(f"clip_norm must be positive, got {clip_norm}")
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(dim=1) for g in grads.values()))
    scale = (clip_norm / (norms + 1e-12)).clamp(max=1.0)
    return {k: g * scale.view(-1, *([1] * (g.dim() - 1))) for k, g in grads.items()}


def dpsgd_step(
    model: DIPSGNN,
    optimizer: torch.optim.Optimizer,
    examples: PrefixExamples,
    by_user: list[np.ndarray],
    rows: np.ndarray,
    features: Tensor | None,
    fallback: list[np.ndarray],
    *,
    clip_norm: float,
    noise_multiplier: float,
    max_weight: float,
    noise: torch.Generator | np.random.Generator,
) -> float:
    """One DP-SGD step on the users ``rows`` (see the module docstring); noise std z · 2C.
    Returns the users' mean loss before the step."""
    grads, losses = per_user_gradients(
        model, examples, by_user, rows, features, fallback, max_weight=max_weight
    )
    grads = clip_per_user(grads, clip_norm)
    std = noise_multiplier * 2.0 * clip_norm
    optimizer.zero_grad(set_to_none=True)
    for name, param in model.named_parameters():
        total = grads[name].sum(dim=0)
        if std > 0:
            if isinstance(noise, np.random.Generator):  # --secure-rng (privacy/noise.py)
                z = normal_tensor(noise, total.shape, total.dtype, total.device)
            else:
                z = torch.randn(
                    total.shape, generator=noise, device=total.device, dtype=total.dtype
                )
            total = total + std * z
        param.grad = total / len(rows)
    optimizer.step()
    return float(losses.mean())


def dpsgd_steps_per_epoch(population: int, batch_users: int) -> int:
    """⌈n / b⌉ steps make one epoch (each user is seen once per epoch in expectation)."""
    if population < 1 or not 1 <= batch_users <= population:
        raise ValueError(f"need 1 <= batch_users <= population, got {batch_users}, {population}")
    return -(-population // batch_users)


def train_epoch_dpsgd(
    model: DIPSGNN,
    optimizer: torch.optim.Optimizer,
    examples: PrefixExamples,
    features: Tensor | None,
    train_seqs: list[np.ndarray],
    *,
    batch_users: int,
    clip_norm: float,
    noise_multiplier: float,
    max_weight: float,
    sample_rng: np.random.Generator,
    noise: torch.Generator | np.random.Generator,
) -> tuple[int, float]:
    """⌈n / b⌉ DP-SGD steps, each on b users drawn uniformly without replacement (independently
    per step: the sampling the accountant assumes). ``train_seqs[row]`` is user row's uploaded
    training sequence (its first item pads users without prefixes). Returns (steps, mean loss)."""
    model.train()
    n = len(train_seqs)
    by_user = prefixes_by_user(examples, n)
    fallback = [np.asarray(s[:1] if len(s) else [0], dtype=np.int64) for s in train_seqs]
    steps = dpsgd_steps_per_epoch(n, batch_users)
    total = 0.0
    for _ in range(steps):
        rows = np.sort(sample_rng.choice(n, size=batch_users, replace=False))
        total += dpsgd_step(
            model,
            optimizer,
            examples,
            by_user,
            rows,
            features,
            fallback,
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            max_weight=max_weight,
            noise=noise,
        )
    return steps, total / steps
