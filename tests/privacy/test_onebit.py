"""DGREC one-bit secure gradient sharing (eq. 5, 6): unbiasedness, ε = β, clipping, ±1 codes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privacy.onebit import (
    decode_onebit_mean,
    encode_onebit,
    onebit_epsilon,
    onebit_probability,
    onebit_scale,
)


@pytest.mark.parametrize("beta", [0.5, 1.0, 3.0])
def test_decoded_mean_is_unbiased_for_mean_of_clipped_gradients(beta: float) -> None:
    rng = np.random.default_rng(7)
    clip, k, n = 0.3, 4000, 64
    centres = np.linspace(-0.4, 0.4, n)  # many elements lie outside [−δ, δ]
    grads = rng.normal(centres, 0.25, size=(k, n))
    bits = encode_onebit(grads, clip, beta, rng)
    estimate = decode_onebit_mean(bits, clip, beta).astype(np.float64)
    clipped = np.clip(grads, -clip, clip)
    target = clipped.mean(axis=0)
    # Var of one decoded element given g is scale² − g²; the k sources are independent.
    scale = onebit_scale(clip, beta)
    std_err = np.sqrt((scale**2 - clipped**2).sum(axis=0)) / k
    z = (estimate - target) / std_err
    assert np.abs(z).max() < 4.0
    assert abs(z.mean()) < 4.0 / math.sqrt(n)
    # it estimates the *clipped* mean: near the edges it is far from the raw mean
    assert (np.abs(estimate - grads.mean(axis=0)) / std_err).max() > 8.0


def test_torch_path_is_unbiased_and_keeps_device_and_dtype() -> None:
    gen = torch.Generator().manual_seed(3)
    clip, beta, k = 1.0, 1.0, 20000
    g = torch.tensor([-2.0, -0.5, 0.0, 0.25, 0.9, 5.0])
    bits = encode_onebit(g.expand(k, -1).contiguous(), clip, beta, gen)
    assert bits.dtype == torch.int8 and bits.shape == (k, 6)
    est = decode_onebit_mean(bits, clip, beta)
    assert est.dtype == torch.float32
    clipped = g.clamp(-clip, clip)
    se = torch.sqrt(onebit_scale(clip, beta) ** 2 - clipped**2) / math.sqrt(k)
    assert (torch.abs(est - clipped) / se).max() < 4.0


def test_bits_are_plus_minus_one_only() -> None:
    rng = np.random.default_rng(0)
    bits = encode_onebit(rng.normal(size=(50, 30)) * 10, 0.1, 0.2, rng)
    assert bits.dtype == np.int8
    assert set(np.unique(bits).tolist()) == {-1, 1}
    tbits = encode_onebit(torch.randn(500), 0.1, 0.2, torch.Generator().manual_seed(1))
    assert set(torch.unique(tbits).tolist()) == {-1, 1}


@pytest.mark.parametrize("beta", [0.1, 1.0, 4.0])
def test_epsilon_equals_beta_and_bounds_every_probability_ratio(beta: float) -> None:
    clip = 0.5
    assert onebit_epsilon(beta) == beta
    extremes = onebit_probability(np.array([-clip, clip]), clip, beta)
    # the extreme inputs attain the bound exactly, for both outputs
    assert extremes[1] / extremes[0] == pytest.approx(math.exp(beta), rel=1e-12)
    assert (1 - extremes[0]) / (1 - extremes[1]) == pytest.approx(math.exp(beta), rel=1e-12)
    # no pair of inputs (including ones outside the clip range) exceeds it
    g = np.linspace(-3 * clip, 3 * clip, 301)
    p = onebit_probability(g, clip, beta)
    for out in (p, 1 - p):
        ratio = out[:, None] / out[None, :]
        assert ratio.max() <= math.exp(onebit_epsilon(beta)) * (1 + 1e-12)


def test_empirical_frequencies_match_eq5_at_the_extremes() -> None:
    rng = np.random.default_rng(11)
    clip, beta, k = 1.0, 1.5, 40000
    bits = encode_onebit(np.array([[clip, -clip]]).repeat(k, axis=0), clip, beta, rng)
    freq_plus = (bits == 1).mean(axis=0)
    expected = np.array([math.exp(beta), 1.0]) / (math.exp(beta) + 1.0)
    se = np.sqrt(expected * (1 - expected) / k)
    assert np.all(np.abs(freq_plus - expected) < 4 * se)


def test_clipping_makes_large_gradients_indistinguishable_from_the_bound() -> None:
    clip, beta = 0.2, 1.0
    p = onebit_probability(np.array([clip, 7.0, -clip, -1e6]), clip, beta)
    assert p[0] == p[1] and p[2] == p[3]
    assert p[0] == pytest.approx(math.exp(beta) / (math.exp(beta) + 1))


def test_bad_input_gives_clear_errors() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="clip"):
        encode_onebit(np.zeros(3), 0.0, 1.0, rng)
    with pytest.raises(ValueError, match="beta"):
        encode_onebit(np.zeros(3), 1.0, -1.0, rng)
    with pytest.raises(ValueError, match="NaN"):
        encode_onebit(np.array([0.0, np.nan]), 1.0, 1.0, rng)
    with pytest.raises(ValueError, match="torch.Generator"):
        encode_onebit(torch.zeros(3), 1.0, 1.0, 42)  # not a generator
    with pytest.raises(ValueError, match="-1 and \\+1"):
        decode_onebit_mean(np.array([[1, 0, -1]]), 1.0, 1.0)
    with pytest.raises(ValueError, match="shape"):
        decode_onebit_mean(np.ones((2, 2, 2)), 1.0, 1.0)
