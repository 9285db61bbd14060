"""Piecewise mechanism and OUE: range, unbiasedness and variance against the closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.oue import (
    oue_debias,
    oue_estimate_counts,
    oue_estimate_frequencies,
    oue_perturb,
    oue_q,
    oue_variance,
)
from privacy.piecewise import piecewise, piecewise_bound, piecewise_variance, to_unit_interval

N_SAMPLES = 200_000


@pytest.mark.parametrize("eps", [0.5, 2.0, 5.0])
@pytest.mark.parametrize("t", [-1.0, -0.3, 0.0, 0.7, 1.0])
def test_piecewise_unbiased_with_closed_form_variance(t: float, eps: float) -> None:
    rng = np.random.default_rng(1234)
    y = piecewise(np.full(N_SAMPLES, t), eps, rng)
    big_c = piecewise_bound(eps)
    assert np.all(np.abs(y) <= big_c + 1e-12)
    var = float(piecewise_variance(t, eps))
    assert abs(y.mean() - t) < 5 * math.sqrt(var / N_SAMPLES)
    sq = (y - t) ** 2
    assert abs(sq.mean() - var) < 5 * sq.std() / math.sqrt(N_SAMPLES)


def test_piecewise_centre_probability_and_density_ratio() -> None:
    eps, t = 1.5, 0.4
    s = math.exp(eps / 2)
    big_c = piecewise_bound(eps)
    left = (big_c + 1) / 2 * t - (big_c - 1) / 2
    right = left + big_c - 1
    y = piecewise(np.full(N_SAMPLES, t), eps, np.random.default_rng(7))
    in_centre = (y >= left) & (y <= right)
    p = s / (s + 1)
    assert abs(in_centre.mean() - p) < 5 * math.sqrt(p * (1 - p) / N_SAMPLES)
    # density ratio centre : tail is e^eps (the LDP guarantee is tight there)
    centre_density = in_centre.mean() / (right - left)
    tail_density = (~in_centre).mean() / (2 * big_c - (right - left))
    assert centre_density / tail_density == pytest.approx(math.exp(eps), rel=0.03)


def test_piecewise_rejects_bad_input() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        piecewise(np.array([1.5]), 1.0, rng)
    with pytest.raises(ValueError, match="epsilon"):
        piecewise(np.array([0.0]), 0.0, rng)
    with pytest.raises(ValueError, match="epsilon"):
        piecewise(np.array([0.0]), math.inf, rng)


def test_to_unit_interval_maps_public_range_and_clips() -> None:
    out = to_unit_interval(np.array([10.0, 30.0, 50.0, -5.0, 99.0]), 10.0, 50.0)
    np.testing.assert_allclose(out, [-1.0, 0.0, 1.0, -1.0, 1.0])
    with pytest.raises(ValueError, match="low < high"):
        to_unit_interval(1.0, 5.0, 5.0)
    with pytest.raises(ValueError, match="NaN"):
        to_unit_interval(np.nan, 0.0, 1.0)


def test_oue_bit_probabilities() -> None:
    eps = 1.2
    onehot = np.zeros((50_000, 6), dtype=np.uint8)
    onehot[:, 2] = 1
    bits = oue_perturb(onehot, eps, np.random.default_rng(3))
    assert bits.shape == onehot.shape and bits.dtype == np.uint8
    q = oue_q(eps)
    assert q == pytest.approx(1 / (math.exp(eps) + 1))
    n = onehot.shape[0]
    assert abs(bits[:, 2].mean() - 0.5) < 5 * math.sqrt(0.25 / n)
    others = bits[:, [0, 1, 3, 4, 5]].mean(axis=0)
    assert np.all(np.abs(others - q) < 5 * math.sqrt(q * (1 - q) / n))


def test_oue_count_estimator_unbiased_with_exact_variance() -> None:
    eps, n_users, trials = 1.0, 400, 2000
    freqs = np.array([0.6, 0.25, 0.1, 0.05, 0.0])
    values = np.repeat(np.arange(5), (freqs * n_users).astype(int))
    onehot = np.eye(5, dtype=np.uint8)[values]
    rng = np.random.default_rng(11)
    reports = oue_perturb(np.broadcast_to(onehot, (trials, *onehot.shape)), eps, rng)
    counts = oue_debias(reports, eps).sum(axis=1)  # [trials, 5]
    true_counts = freqs * n_users
    var_exact = oue_variance(eps, n_users, freqs)
    se_mean = np.sqrt(var_exact / trials)
    assert np.all(np.abs(counts.mean(axis=0) - true_counts) < 5 * se_mean)
    # sample variance of a (near-)Gaussian estimate has relative SE sqrt(2/(trials-1))
    rel_err = counts.var(axis=0, ddof=1) / var_exact - 1
    assert np.all(np.abs(rel_err) < 5 * math.sqrt(2 / (trials - 1)))
    # the single-trial estimators agree with the per-report debiasing
    np.testing.assert_allclose(oue_estimate_counts(reports[0], eps), counts[0])
    np.testing.assert_allclose(oue_estimate_frequencies(reports[0], eps), counts[0] / n_users)


def test_oue_variance_closed_forms() -> None:
    eps = 2.0
    approx = float(oue_variance(eps, 1000))
    assert approx == pytest.approx(1000 * 4 * math.exp(eps) / (math.exp(eps) - 1) ** 2)
    assert float(oue_variance(eps, 1000, 0.0)) == pytest.approx(approx)
    assert float(oue_variance(eps, 1000, 0.5)) > approx


def test_oue_rejects_non_onehot() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="one-hot"):
        oue_perturb(np.array([1, 1, 0]), 1.0, rng)
    with pytest.raises(ValueError, match="0/1"):
        oue_perturb(np.array([2, 0, 0]), 1.0, rng)
    with pytest.raises(ValueError, match="epsilon"):
        oue_perturb(np.array([1, 0, 0]), -1.0, rng)
