"""FedPerGNN upload mechanism (privacy/ldp.py): clipping, the Laplace noise's distribution,
the ε convention against the mechanism's density ratio, pseudo gradients and pseudo items."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from privacy.ldp import (
    choose_pseudo_items,
    clip_and_laplace,
    laplace_epsilon_per_coordinate,
    laplace_epsilon_vector,
    pseudo_item_gradients,
)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_zero_noise_is_plain_clipping():
    g = torch.tensor([[-3.0, -0.05, 0.0], [0.1, 0.2, 7.0]], dtype=torch.float64)
    out = clip_and_laplace(g, 0.1, 0.0, gen(0))
    assert torch.equal(out, g.clamp(-0.1, 0.1))
    assert out.dtype == torch.float64 and out.shape == g.shape


def test_laplace_noise_has_the_laplace_distribution():
    lam, n = 0.3, 200_000
    noise = clip_and_laplace(torch.zeros(n), 1.0, lam, gen(1)).double().numpy()
    se_mean = math.sqrt(2) * lam / math.sqrt(n)
    assert abs(noise.mean()) < 5 * se_mean
    var, se_var = 2 * lam**2, math.sqrt(20 * lam**4 / n)  # Var[X²] = E X⁴ − (E X²)² = 20λ⁴
    assert abs(noise.var() - var) < 5 * se_var
    assert stats.kstest(noise[:20_000], stats.laplace(scale=lam).cdf).pvalue > 1e-3


def test_clipping_happens_before_the_noise():
    delta, lam, n = 0.1, 0.05, 100_000
    out = clip_and_laplace(torch.full((n,), 5.0), delta, lam, gen(2)).double()
    assert abs(out.mean().item() - delta) < 5 * math.sqrt(2) * lam / math.sqrt(n)


def test_same_generator_seed_same_output_and_shape_kept():
    g = torch.randn(4, 3, 2, generator=gen(3))
    a = clip_and_laplace(g, 0.5, 0.2, gen(4))
    assert torch.equal(a, clip_and_laplace(g, 0.5, 0.2, gen(4)))
    assert not torch.equal(a, clip_and_laplace(g, 0.5, 0.2, gen(5)))
    assert a.shape == g.shape


def test_epsilon_convention_matches_the_density_ratio():
    delta, lam = 0.1, 0.2
    eps = laplace_epsilon_per_coordinate(delta, lam)
    assert eps == pytest.approx(2 * delta / lam)
    # worst-case log density ratio of the output over all outputs y, extreme inputs ±δ
    y = np.linspace(-3, 3, 6001)
    log_ratio = stats.laplace.logpdf(y, loc=delta, scale=lam) - stats.laplace.logpdf(
        y, loc=-delta, scale=lam
    )
    assert log_ratio.max() == pytest.approx(eps, rel=1e-9)
    assert laplace_epsilon_vector(delta, lam, 64) == pytest.approx(64 * eps)
    assert laplace_epsilon_vector(delta, lam, 0) == 0.0
    assert laplace_epsilon_per_coordinate(delta, 0.0) == math.inf


def test_pseudo_gradients_follow_the_fitted_gaussian():
    real = torch.randn(50, 4, generator=gen(6), dtype=torch.float64) * torch.tensor(
        [0.1, 1.0, 2.0, 0.5], dtype=torch.float64
    ) + torch.tensor([1.0, -2.0, 0.0, 3.0], dtype=torch.float64)
    m = 40_000
    fake = pseudo_item_gradients(real, m, gen(7))
    assert fake.shape == (m, 4) and fake.dtype == real.dtype
    mu, sd = real.mean(0), real.std(0, correction=0)
    assert torch.all((fake.mean(0) - mu).abs() < 5 * sd / math.sqrt(m))
    assert torch.all((fake.std(0) - sd).abs() < 5 * sd / math.sqrt(2 * m))
    assert pseudo_item_gradients(real, 0, gen(7)).shape == (0, 4)
    one = pseudo_item_gradients(real[:1], 3, gen(7))  # one real row: zero spread
    assert torch.allclose(one, real[:1].expand(3, 4))


@pytest.mark.parametrize("n_items,n_real,m", [(20, 5, 3), (20, 5, 12), (10_000, 30, 5)])
def test_pseudo_items_are_distinct_uninteracted_and_uniform(n_items, n_real, m):
    g = gen(8)
    real = torch.randperm(n_items, generator=g)[:n_real]
    free = np.setdiff1d(np.arange(n_items), real.numpy())
    counts = np.zeros(n_items)
    draws = 3000 if n_items <= 20 else 200
    for _ in range(draws):
        picked = choose_pseudo_items(n_items, real, m, g)
        assert picked.dtype == torch.int64 and len(picked) == m
        assert len(set(picked.tolist())) == m
        assert not set(picked.tolist()) & set(real.tolist())
        counts[picked.numpy()] += 1
    assert counts[real.numpy()].sum() == 0
    if n_items <= 20:  # every free item equally likely
        assert stats.chisquare(counts[free]).pvalue > 1e-3


def test_pseudo_items_depend_only_on_the_generator_state():
    a = choose_pseudo_items(1000, [1, 2, 3], 10, gen(9))
    assert torch.equal(a, choose_pseudo_items(1000, np.array([3, 2, 1]), 10, gen(9)))
    assert len(choose_pseudo_items(5, [0, 1], 0, gen(9))) == 0
    assert sorted(choose_pseudo_items(5, [0, 1], 3, gen(9)).tolist()) == [2, 3, 4]


@pytest.mark.parametrize(
    "call",
    [
        lambda: clip_and_laplace(torch.zeros(3), 0.0, 0.1, gen(0)),
        lambda: clip_and_laplace(torch.zeros(3), 0.1, -1.0, gen(0)),
        lambda: clip_and_laplace(torch.zeros(3, dtype=torch.int64), 0.1, 0.1, gen(0)),
        lambda: clip_and_laplace([0.0], 0.1, 0.1, gen(0)),
        lambda: clip_and_laplace(torch.zeros(3), 0.1, 0.1, 0),  # not a generator
        lambda: pseudo_item_gradients(torch.zeros(0, 3), 2, gen(0)),
        lambda: pseudo_item_gradients(torch.zeros(3), 2, gen(0)),
        lambda: pseudo_item_gradients(torch.zeros(2, 3), -1, gen(0)),
        lambda: choose_pseudo_items(5, [0, 1], 4, gen(0)),
        lambda: choose_pseudo_items(5, [7], 1, gen(0)),
        lambda: choose_pseudo_items(0, [], 1, gen(0)),
        lambda: laplace_epsilon_vector(0.1, 0.2, -1),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()
