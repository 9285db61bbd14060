"""Stochastic ternary quantization of gradients (VerFedGNN, Mai & Pang, ICML 2023, eqs. 19–20).

Each party clips the gradient g of a public parameter to [−B, B] (B = 0.5) and sends

    ternary(g_i) = r · sign(g_i) · b_i,     b_i ~ Bernoulli(|g_i| / r)   independent,   (19–20)

with r ≥ B (paper default r = 3, i.e. 1/r = 1/3; the authors' code calls r ``clip``).
Values are in {−r, 0, +r}; E[ternary(g_i)] = g_i (unbiased); P(ternary(g_i) ≠ 0) = |g_i|/r,
so the expected number of non-zeros is ‖g‖₁/r and the message is sparse.

Privacy. For one coordinate, changing g_i to g_i' moves at most |g_i − g_i'|/r probability
mass, so the total-variation distance between the output laws is ≤ |g_i − g_i'|/r; for the
vector (independent coordinates) it is ≤ ‖g − g'‖₁/r. Hence one release is (0, δ)-DP with

    δ = min(1, Δ₁ / r),     Δ₁ = sup ‖g − g'‖₁ over neighbouring inputs,

and no finite ε (a coordinate that is 0 under g can be non-zero under g'). The paper states
(0, 1/r): that is the Δ₁ = 1 case, e.g. a single coordinate clipped to [−0.5, 0.5]. For a
d-coordinate gradient the worst case Δ₁ = 2·B·d and δ quickly reaches 1 (vacuous) — see
`ternary_l1_sensitivity`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from privacy.noise import uniform_tensor

DEFAULT_CLIP = 0.5  # B: gradients are clipped to [−B, B] before quantization
DEFAULT_R = 3.0  # r: the paper's 1/r = 1/3


def clip_gradient(g: torch.Tensor, bound: float = DEFAULT_CLIP) -> torch.Tensor:
    """Coordinate-wise clipping to [−bound, bound]."""
    if not isinstance(g, torch.Tensor):
        raise ValueError(f"gradient must be a torch.Tensor, got {type(g).__name__}")
    if not bound > 0:
        raise ValueError(f"clip bound must be > 0, got {bound}")
    return g.clamp(-bound, bound)


def _prepared(g: torch.Tensor, r: float, clip: float | None) -> torch.Tensor:
    if not isinstance(g, torch.Tensor) or not g.is_floating_point():
        raise ValueError("gradient must be a floating-point torch.Tensor")
    if not r > 0:
        raise ValueError(f"r must be > 0, got {r}")
    if not bool(torch.isfinite(g).all()):
        raise ValueError("gradient contains NaN or infinite values")
    if clip is not None:
        if clip > r:
            raise ValueError(f"clip bound {clip} exceeds r={r}: |g|/r would not be a probability")
        return clip_gradient(g, clip)
    if g.numel() and float(g.abs().max()) > r:
        raise ValueError(f"max |g| = {float(g.abs().max()):.4g} exceeds r={r}; clip first")
    return g


def ternary_quantize(
    g: torch.Tensor,
    r: float = DEFAULT_R,
    generator: torch.Generator | np.random.Generator | None = None,
    *,
    clip: float | None = DEFAULT_CLIP,
) -> tuple[torch.Tensor, float]:
    """Eqs. 19–20: returns (values in {−r, 0, +r} with g's shape and dtype, scale s = r).

    ``g`` is first clipped to [−clip, clip] (``clip=None``: no clipping, then |g| ≤ r is
    required). A torch generator must live on g's device (CPU generator for CPU tensors); a
    numpy one (e.g. the secure generator of ``--secure-rng``, privacy/noise.py) draws the
    uniforms on the CPU.
    """
    gc = _prepared(g, r, clip)
    if isinstance(generator, np.random.Generator):
        u = uniform_tensor(generator, gc.shape, gc.dtype, gc.device)
    else:
        u = torch.rand(gc.shape, generator=generator, dtype=gc.dtype, device=gc.device)
    keep = u < gc.abs() / r  # b_i ~ Bernoulli(|g_i| / r)
    values = torch.where(keep, torch.sign(gc) * r, torch.zeros_like(gc))
    return values, float(r)


def ternary_nonzero_probability(
    g: torch.Tensor, r: float = DEFAULT_R, *, clip: float | None = DEFAULT_CLIP
) -> torch.Tensor:
    """P(ternary(g_i) ≠ 0) = |clip(g_i)| / r, coordinate-wise."""
    return _prepared(g, r, clip).abs() / r


def expected_nonzeros(
    g: torch.Tensor, r: float = DEFAULT_R, *, clip: float | None = DEFAULT_CLIP
) -> float:
    """E[#non-zeros of the quantized vector] = ‖clip(g)‖₁ / r."""
    return float(ternary_nonzero_probability(g, r, clip=clip).sum())


def ternary_l1_sensitivity(n_coordinates: int, clip: float = DEFAULT_CLIP) -> float:
    """Worst-case ‖g − g'‖₁ for d clipped coordinates: 2·clip·d."""
    if n_coordinates < 0 or not clip > 0:
        raise ValueError(f"need n_coordinates >= 0 and clip > 0, got {n_coordinates}, {clip}")
    return 2.0 * clip * n_coordinates


class TernaryPrivacy(NamedTuple):
    """(ε, δ) of one ternary release: rigorous δ = min(1, Δ₁/r) and the paper's 1/r."""

    epsilon: float
    delta: float
    paper_delta: float


def ternary_delta(l1_sensitivity: float, r: float = DEFAULT_R) -> TernaryPrivacy:
    """Privacy of one release: (0, min(1, Δ₁/r))-DP; the paper states (0, 1/r)."""
    if not l1_sensitivity >= 0:
        raise ValueError(f"l1_sensitivity must be >= 0, got {l1_sensitivity}")
    if not r > 0:
        raise ValueError(f"r must be > 0, got {r}")
    return TernaryPrivacy(
        epsilon=0.0, delta=min(1.0, l1_sensitivity / r), paper_delta=min(1.0, 1.0 / r)
    )
