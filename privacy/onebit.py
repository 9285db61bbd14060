"""DGREC secure gradient sharing: one-bit randomized response on clipped gradients
(Zheng et al., "Decentralized Graph Neural Network for Privacy-Preserving Recommendation",
CIKM 2023, §3.3, eq. 5 and eq. 6).

Every element g of a gradient is clipped to [−C, C] (C: the ``clip`` argument; the paper writes
it δ) and sent as one bit x* ∈ {−1, +1} with (eq. 5, binary randomized response with strength β)

    P[x* = +1 | g] = 1/2 + (g / C) · (e^β − 1) / (2 (e^β + 1)),      g ← clamp(g, −C, C)
    P[x* = −1 | g] = 1 − P[x* = +1 | g],

so that P ranges over [1/(e^β + 1), e^β/(e^β + 1)] and E[x* | g] = (g / C)(e^β − 1)/(e^β + 1).
The receiver decodes k bit vectors of the same coordinates with (eq. 6)

    ḡ = C (e^β + 1) / (e^β − 1) · (1/k) Σ_k x*_k,

an unbiased estimate of the mean of the k *clipped* gradients, with per-element variance
(scale² − g²)/k for one source, scale = C(e^β + 1)/(e^β − 1).

Privacy: for any two inputs g, g' and any output b, P[b | g] / P[b | g'] ≤
(e^β/(e^β + 1)) / (1/(e^β + 1)) = e^β, so each element is β-LDP (ε = β, DP δ = 0); a vector of
n_s elements costs n_s·β by basic composition (see DESIGN.md, "Privacy accounting").
"""

from __future__ import annotations

import math

import numpy as np
import torch

from privacy.noise import uniform_tensor

ArrayLike = np.ndarray | torch.Tensor


def _check_params(clip: float, beta: float) -> tuple[float, float]:
    clip, beta = float(clip), float(beta)
    if not math.isfinite(clip) or clip <= 0.0:
        raise ValueError(f"clip bound must be a finite positive number, got {clip!r}")
    if not math.isfinite(beta) or beta <= 0.0:
        raise ValueError(f"privacy strength beta must be a finite positive number, got {beta!r}")
    return clip, beta


def onebit_scale(clip: float, beta: float) -> float:
    """Decoding scale clip·(e^β + 1) / (e^β − 1) of eq. 6 (also the magnitude of one decoded bit)."""
    clip, beta = _check_params(clip, beta)
    return clip / math.tanh(beta / 2.0)  # (e^β + 1)/(e^β − 1) = coth(β/2), stable for small β


def onebit_epsilon(beta: float) -> float:
    """Per-element LDP budget of the encoder: ε = β (ratio of output probabilities ≤ e^β)."""
    _check_params(1.0, beta)
    return float(beta)


def onebit_probability(grad: ArrayLike, clip: float, beta: float) -> ArrayLike:
    """P[x* = +1 | g] of eq. 5 for every element of ``grad`` (after clipping to [−clip, clip]);
    same container type as ``grad`` (float64 for numpy, the input's float dtype for torch)."""
    clip, beta = _check_params(clip, beta)
    half_gap = math.tanh(beta / 2.0) / 2.0  # (e^β − 1) / (2 (e^β + 1))
    if isinstance(grad, torch.Tensor):
        if not torch.is_floating_point(grad):
            raise ValueError(f"gradient must be a float tensor, got {grad.dtype}")
        if not torch.isfinite(grad).all():
            raise ValueError("gradient contains NaN or infinity")
        return 0.5 + grad.clamp(-clip, clip) / clip * half_gap
    arr = np.asarray(grad, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise ValueError("gradient contains NaN or infinity")
    return 0.5 + np.clip(arr, -clip, clip) / clip * half_gap


def encode_onebit(
    grad: ArrayLike,
    clip: float,
    beta: float,
    generator: np.random.Generator | torch.Generator | None,
) -> ArrayLike:
    """Eq. 5: clip every element of ``grad`` to [−clip, clip] and replace it by +1 with
    probability 1/2 + (g/clip)(e^β − 1)/(2(e^β + 1)), else −1. Returns int8 ±1 of ``grad``'s shape: a numpy
    array for numpy input (``generator`` must be a ``np.random.Generator``), a torch tensor on
    ``grad``'s device for torch input (``generator`` a ``torch.Generator``, None, or a
    ``np.random.Generator`` — e.g. the secure one of ``--secure-rng``, privacy/noise.py — whose
    uniforms are drawn on the CPU and converted)."""
    p_plus = onebit_probability(grad, clip, beta)
    if isinstance(p_plus, torch.Tensor):
        if isinstance(generator, np.random.Generator):
            u = uniform_tensor(generator, p_plus.shape, p_plus.dtype, p_plus.device)
        elif generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(
                "a torch gradient needs a torch.Generator, a np.random.Generator or None"
            )
        else:
            u = torch.rand(
                p_plus.shape, generator=generator, device=p_plus.device, dtype=p_plus.dtype
            )
        return torch.where(u < p_plus, 1, -1).to(torch.int8)
    if not isinstance(generator, np.random.Generator):
        raise ValueError("a numpy gradient needs a np.random.Generator")
    u = generator.random(p_plus.shape)
    return np.where(u < p_plus, 1, -1).astype(np.int8)


def decode_onebit_mean(bits: ArrayLike, clip: float, beta: float) -> ArrayLike:
    """Eq. 6: from ``bits`` [k, n] (k encoded vectors of the same n coordinates, entries ±1; a
    1-D [n] input is one vector) return float32 [n] = clip·(e^β+1)/(e^β−1) · mean over k, the
    unbiased estimate of the mean of the k clipped gradients. Same container type as ``bits``."""
    scale = onebit_scale(clip, beta)
    if isinstance(bits, torch.Tensor):
        b = bits if bits.dim() == 2 else bits.reshape(1, -1)
        if bits.dim() not in (1, 2) or b.shape[0] == 0:
            raise ValueError(
                f"bits must be [k, n] with k ≥ 1 or [n], got shape {tuple(bits.shape)}"
            )
        if not ((b == 1) | (b == -1)).all():
            raise ValueError("one-bit codes must contain only -1 and +1")
        return b.to(torch.float32).mean(dim=0) * scale
    arr = np.asarray(bits)
    b = arr if arr.ndim == 2 else arr.reshape(1, -1)
    if arr.ndim not in (1, 2) or b.shape[0] == 0:
        raise ValueError(f"bits must be [k, n] with k ≥ 1 or [n], got shape {arr.shape}")
    if not np.isin(b, (-1, 1)).all():
        raise ValueError("one-bit codes must contain only -1 and +1")
    return (b.astype(np.float64).mean(axis=0) * scale).astype(np.float32)
