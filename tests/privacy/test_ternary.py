"""Ternary quantizer (privacy/ternary.py, VerFedGNN eqs. 19–20): support, unbiasedness,
sparsity, and the (0, Δ₁/r) privacy bound checked against exact total variation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from privacy.ternary import (
    expected_nonzeros,
    ternary_delta,
    ternary_l1_sensitivity,
    ternary_nonzero_probability,
    ternary_quantize,
)


def _grad(d: int = 40, seed: int = 0) -> torch.Tensor:
    # spans beyond the clip bound 0.5 so clipping is exercised
    return torch.empty(d, dtype=torch.float64).uniform_(
        -0.8, 0.8, generator=torch.Generator().manual_seed(seed)
    )


def test_values_are_ternary_and_scale_is_r() -> None:
    g = _grad()
    values, scale = ternary_quantize(g, r=3.0, generator=torch.Generator().manual_seed(1))
    assert scale == 3.0
    assert values.shape == g.shape and values.dtype == g.dtype
    assert set(values.unique().tolist()) <= {-3.0, 0.0, 3.0}
    # a non-zero never has the opposite sign of g
    assert bool((values * g >= 0).all())


def test_unbiased_for_the_clipped_gradient() -> None:
    r, trials = 3.0, 20_000
    g = _grad()
    clipped = g.clamp(-0.5, 0.5)
    values, _ = ternary_quantize(
        g.expand(trials, -1).contiguous(), r, generator=torch.Generator().manual_seed(2)
    )
    mean = values.mean(0)
    se = torch.sqrt((clipped.abs() * r - clipped.pow(2)) / trials)  # Var = |g| r − g²
    assert bool(((mean - clipped).abs() <= 5 * se + 1e-12).all())
    # the unclipped gradient is NOT what it estimates where |g| > 0.5
    outside = g.abs() > 0.6
    assert bool(((mean - g).abs()[outside] > 5 * se[outside]).all())


def test_sparsity_matches_formula() -> None:
    r, trials = 3.0, 20_000
    g = _grad(seed=3)
    p = ternary_nonzero_probability(g, r)
    assert torch.allclose(p, g.clamp(-0.5, 0.5).abs() / r)
    values, _ = ternary_quantize(
        g.expand(trials, -1).contiguous(), r, generator=torch.Generator().manual_seed(4)
    )
    freq = (values != 0).double().mean(0)
    assert bool(((freq - p).abs() <= 5 * torch.sqrt(p * (1 - p) / trials) + 1e-12).all())
    counts = (values != 0).sum(1).double()
    exp_nnz = expected_nonzeros(g, r)
    assert exp_nnz == pytest.approx(float(p.sum()))
    assert abs(float(counts.mean()) - exp_nnz) < 5 * float(counts.std()) / np.sqrt(trials)


def test_same_generator_seed_gives_same_output() -> None:
    g = _grad()
    a, _ = ternary_quantize(g, 3.0, torch.Generator().manual_seed(7))
    b, _ = ternary_quantize(g, 3.0, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)


def _output_law(g: np.ndarray, r: float) -> dict[tuple[int, ...], float]:
    """Exact law of sign pattern of the quantized vector (coordinates independent)."""
    law = {}
    for pattern in itertools.product((-1, 0, 1), repeat=len(g)):
        prob = 1.0
        for s, gi in zip(pattern, g, strict=True):
            p_nz = abs(gi) / r
            prob *= (1 - p_nz) if s == 0 else (p_nz if s == np.sign(gi) else 0.0)
        law[pattern] = prob
    return law


def test_delta_bounds_exact_total_variation() -> None:
    r = 3.0
    rng = np.random.default_rng(0)
    for _ in range(200):
        g, g2 = rng.uniform(-0.5, 0.5, size=(2, 3))
        a, b = _output_law(g, r), _output_law(g2, r)
        tv = 0.5 * sum(abs(a[k] - b[k]) for k in a)  # = smallest δ of (0, δ)-DP for this pair
        bound = ternary_delta(float(np.abs(g - g2).sum()), r)
        assert bound.epsilon == 0.0
        assert tv <= bound.delta + 1e-12
    # tight for one coordinate with a sign-preserving change
    a, b = _output_law(np.array([0.1]), r), _output_law(np.array([0.4]), r)
    tv = 0.5 * sum(abs(a[k] - b[k]) for k in a)
    assert tv == pytest.approx(ternary_delta(0.3, r).delta)


def test_delta_values_and_paper_statement() -> None:
    priv = ternary_delta(1.0, r=3.0)
    assert priv.delta == pytest.approx(1 / 3) and priv.paper_delta == pytest.approx(1 / 3)
    # a 6-coordinate clipped gradient: worst case Δ₁ = 6, δ saturates at 1 (vacuous)
    assert ternary_l1_sensitivity(6, clip=0.5) == 6.0
    assert ternary_delta(ternary_l1_sensitivity(6), r=3.0).delta == 1.0
    assert ternary_delta(0.6, r=3.0).delta == pytest.approx(0.2)


def test_bad_input_raises_value_error() -> None:
    g = _grad()
    with pytest.raises(ValueError, match="r must be > 0"):
        ternary_quantize(g, r=0.0)
    with pytest.raises(ValueError, match="exceeds r"):
        ternary_quantize(g, r=0.3)  # clip 0.5 > r
    with pytest.raises(ValueError, match="clip first"):
        ternary_quantize(g * 10, r=3.0, clip=None)
    with pytest.raises(ValueError, match="NaN"):
        ternary_quantize(torch.tensor([float("nan")]), r=3.0)
    with pytest.raises(ValueError, match="floating-point"):
        ternary_quantize(torch.tensor([1, 2]), r=3.0)
    with pytest.raises(ValueError, match="l1_sensitivity"):
        ternary_delta(-1.0)
