"""FedPerGNN / FedLightGCN upload mechanism (Wu et al. 2022, §"model training": local
differential privacy and pseudo-interacted item sampling).

Before upload, a user perturbs every gradient coordinate g (paper's eq. for LDP):

    g̃ = clip(g, −δ, δ) + n,        n ~ Laplace(0, λ)                     (clip_and_laplace)

Two inputs of one coordinate differ by at most 2δ after clipping, so one coordinate is
ε = 2δ/λ-LDP (the paper's convention, ``laplace_epsilon_per_coordinate``); a vector of n
clipped coordinates has L1 sensitivity 2δn and costs ε = 2δn/λ (``laplace_epsilon_vector``).

To hide which items it interacted with, the user also uploads gradients for M pseudo-
interacted items drawn uniformly among the items it did not interact with
(``choose_pseudo_items``); their gradients follow a Gaussian with the per-coordinate mean and
standard deviation of the real item gradients (``pseudo_item_gradients``):

    ĝ_j ~ N(μ, diag(σ²)),  μ = mean_i g_i,  σ = std_i g_i    (i over real items, j = 1..M)

Intended order: fit the pseudo gradients on the raw real gradients, then perturb real and
pseudo rows together with ``clip_and_laplace``, and upload the rows sorted by item id (or
shuffled) so that their position does not reveal which rows are real.

Every random draw here (Laplace noise, pseudo items, pseudo gradients) comes from ``generator``:
a torch ``Generator`` (the node's seeded stream, the default), or a numpy ``Generator`` — with
``--secure-rng`` the node's cryptographically secure one (privacy/noise.py), whose draws are
converted to torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from cluster.device import to_device
from privacy.noise import normal_tensor, uniform_tensor


def _check_clip_and_scale(clip: float, lam: float) -> tuple[float, float]:
    clip, lam = float(clip), float(lam)
    if math.isnan(clip) or clip <= 0.0:
        raise ValueError(f"clip bound must be positive, got {clip!r}")
    if not math.isfinite(lam) or lam < 0.0:
        raise ValueError(f"Laplace scale lam must be finite and >= 0, got {lam!r}")
    return clip, lam


Generator = torch.Generator | np.random.Generator


def _check_generator(generator: Generator) -> None:
    if not isinstance(generator, (torch.Generator, np.random.Generator)):
        raise ValueError(
            f"generator must be a torch.Generator or np.random.Generator, got "
            f"{type(generator).__name__}"
        )


def laplace_noise(
    shape: Sequence[int] | torch.Size, lam: float, generator: Generator
) -> torch.Tensor:
    """Laplace(0, λ) samples (float32, generator's device) from one float64 uniform U each:
    V = 2U mod 1 is uniform on [0, 1) (52 bits), E = −ln(1 − V) is Exp(1), and the sample is
    λE with the sign U ≥ ½ picks (vectorised; torch's ``exponential_`` draws one sample at a
    time, about 10x slower for the millions of coordinates of a round's uploads). A numpy
    ``generator`` draws U on the CPU."""
    _check_generator(generator)
    if isinstance(generator, np.random.Generator):
        u = uniform_tensor(generator, tuple(shape), torch.float64)
    else:
        u = torch.rand(
            tuple(shape), generator=generator, device=generator.device, dtype=torch.float64
        )
    u.mul_(2.0)
    upper = u >= 1.0
    u.sub_(upper.to(u.dtype))  # exact: 2U − 1 for U ≥ ½
    e = u.neg_().log1p_().to(torch.float32)  # −E ≤ 0
    return e.mul_(upper.to(torch.float32).mul_(-2.0 * float(lam)).add_(float(lam)))  # ∓λE


def clip_and_laplace(
    grad: torch.Tensor, clip: float, lam: float, generator: Generator
) -> torch.Tensor:
    """clip(g, −δ, δ) + Laplace(0, λ) noise on every coordinate (λ = 0: clipping only).
    Returns a new tensor with ``grad``'s shape, dtype and device."""
    if not isinstance(grad, torch.Tensor):
        raise ValueError(f"grad must be a torch.Tensor, got {type(grad).__name__}")
    if not grad.is_floating_point():
        raise ValueError(f"grad must be a floating-point tensor, got {grad.dtype}")
    clip, lam = _check_clip_and_scale(clip, lam)
    clipped = grad.clamp(-clip, clip)
    if lam == 0.0:
        return clipped
    noise = laplace_noise(grad.shape, lam, generator)
    return clipped + noise.to(device=grad.device, dtype=grad.dtype)


def pseudo_item_gradients(
    real_item_grads: torch.Tensor, m: int, generator: Generator
) -> torch.Tensor:
    """[m, d] gradients for pseudo-interacted items: N(μ, σ²) per coordinate with μ, σ the mean
    and (population) standard deviation of the n real rows [n, d]."""
    if not isinstance(real_item_grads, torch.Tensor) or real_item_grads.dim() != 2:
        raise ValueError("real_item_grads must be a 2-D torch.Tensor [n_items, dim]")
    if real_item_grads.shape[0] == 0:
        raise ValueError("need at least one real item gradient to fit the pseudo gradients")
    if int(m) < 0:
        raise ValueError(f"number of pseudo items m must be >= 0, got {m}")
    _check_generator(generator)
    grads = real_item_grads.detach()
    mean = grads.mean(dim=0)
    std = (grads - mean).pow_(2).mean(dim=0).sqrt_()  # two passes, ~15x faster than .std(0)
    if isinstance(generator, np.random.Generator):
        z = normal_tensor(generator, (int(m), grads.shape[1]), grads.dtype, grads.device)
    else:
        z = torch.randn(
            (int(m), grads.shape[1]),
            generator=generator,
            device=generator.device,
            dtype=grads.dtype,
        ).to(grads.device)
    return mean + std * z


def choose_pseudo_items(
    n_items: int,
    real_items: torch.Tensor | np.ndarray | Sequence[int],
    m: int,
    generator: Generator,
) -> torch.Tensor:
    """m distinct item ids (int64 on the CPU, random order) drawn uniformly among 0..n_items-1 minus
    ``real_items``. Exact: the first m distinct admissible values of an i.i.d. uniform stream
    form a uniform m-subset; when few items are free, a permutation of the complement is used."""
    _check_generator(generator)
    n_items, m = int(n_items), int(m)
    if isinstance(real_items, torch.Tensor):
        real = real_items.detach().cpu().to(torch.int64)
    else:
        real = torch.as_tensor(np.asarray(real_items, dtype=np.int64), device="cpu")
    real = real.reshape(-1).unique()
    if n_items <= 0:
        raise ValueError(f"n_items must be positive, got {n_items}")
    if len(real) and (real.min() < 0 or real.max() >= n_items):
        raise ValueError(f"real_items must lie in [0, {n_items}), got {real.min()}..{real.max()}")
    free = n_items - len(real)
    if not 0 <= m <= free:
        raise ValueError(f"cannot choose m={m} pseudo items: {free} items are not interacted")
    if m == 0:
        return torch.zeros(0, dtype=torch.int64, device="cpu")
    if 4 * m >= free:
        mask = torch.ones(n_items, dtype=torch.bool, device="cpu")
        mask[real] = False
        complement = mask.nonzero().flatten()
        if isinstance(generator, np.random.Generator):
            order = to_device(generator.permutation(free).astype(np.int64), "cpu")
        else:
            order = torch.randperm(free, generator=generator, device=generator.device).cpu()
        return complement[order[:m]]
    # the rejection loop, vectorised: each batch of draws keeps, in order, the first occurrence
    # of every value not taken yet, up to the number still needed (the values a one-at-a-time
    # rejection loop over the same stream keeps)
    taken = np.zeros(n_items, dtype=bool)
    taken[real.numpy()] = True
    picked: list[np.ndarray] = []
    need = m
    while need:
        if isinstance(generator, np.random.Generator):
            cand = generator.integers(0, n_items, size=2 * need + 8, dtype=np.int64)
        else:
            draws = torch.randint(
                n_items, (2 * need + 8,), generator=generator, device=generator.device
            )
            cand = draws.cpu().numpy()
        cand = cand[~taken[cand]]
        first = np.sort(np.unique(cand, return_index=True)[1])[:need]
        new = cand[first]
        taken[new] = True
        picked.append(new)
        need -= len(new)
    return to_device(np.concatenate(picked).astype(np.int64), "cpu")


def perturbed_upload(
    n_items: int,
    ids: np.ndarray,
    grads: torch.Tensor,
    m: int,
    clip: float,
    lam: float,
    generator: Generator,
) -> tuple[np.ndarray, torch.Tensor, np.ndarray]:
    """One user's item-gradient upload, in the intended order: M pseudo items among the items
    not in ``ids`` with gradients fitted to the real rows ``grads``, then clip(·, −δ, δ) +
    Laplace(0, λ) on real and pseudo rows together, rows sorted by item id (position says
    nothing). Returns (item ids, perturbed rows, the pseudo items sorted)."""
    pseudo_ids = choose_pseudo_items(n_items, ids, m, generator).numpy()
    pseudo = pseudo_item_gradients(grads, m, generator)
    all_ids = np.concatenate([ids, pseudo_ids])
    noisy = clip_and_laplace(torch.cat([grads, pseudo]), clip, lam, generator)
    order = np.argsort(all_ids, kind="stable")
    return all_ids[order], noisy[order], np.sort(pseudo_ids)


def laplace_epsilon_per_coordinate(clip: float, lam: float) -> float:
    """ε = 2δ/λ for one clipped coordinate (FedPerGNN's convention); inf when λ = 0."""
    clip, lam = _check_clip_and_scale(clip, lam)
    return math.inf if lam == 0.0 else 2.0 * clip / lam


def laplace_epsilon_vector(clip: float, lam: float, n: int) -> float:
    """ε = 2δn/λ for a vector of n clipped coordinates (L1 sensitivity 2δn)."""
    if int(n) < 0:
        raise ValueError(f"number of coordinates n must be >= 0, got {n}")
    return laplace_epsilon_per_coordinate(clip, lam) * int(n) if n else 0.0
