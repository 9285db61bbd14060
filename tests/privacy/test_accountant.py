"""The project-wide privacy accountant (privacy/accountant.py): event helpers give the right ε,
composition is valid (≤ basic composition, ≥ the exact optimum) and tight, RDP of binary
randomized response, and the per-unit bookkeeping."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib
from scipy import stats

from privacy.accountant import (
    PrivacyAccountant,
    approx_dp_event,
    bound_used,
    epsilon_of,
    gaussian_event,
    laplace_vector_event,
    randomized_response_event,
    rdp_of_randomized_response,
    sampled_gaussian_event,
)


def exact_rr_composition_epsilon(beta: float, k: int, delta: float) -> float:
    """Exact ε(δ) of k-fold binary randomized response (= optimal composition of k β-DP
    mechanisms, Kairouz et al. 2015): privacy loss L = β(k − 2i), i ~ Bin(k, 1/(1+e^β)),
    δ(ε) = E[(1 − e^{ε−L})₊]; solved by bisection."""
    i = np.arange(k + 1)
    p_i = stats.binom.pmf(i, k, 1 / (1 + math.exp(beta)))
    loss = beta * (k - 2 * i)

    def delta_of(eps: float) -> float:
        return float(np.sum(p_i * (1 - np.exp(np.minimum(eps - loss, 0.0)))))

    lo, hi = 0.0, beta * k
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_of(mid) > delta else (lo, mid)
    return hi


def test_rdp_of_binary_rr_reproduces_design_figure():
    assert rdp_of_randomized_response(1.0, 1.5) == pytest.approx(0.627, abs=5e-4)
    event = randomized_response_event(1.0)
    for order in (1.1, 1.5, 2.0, 8.0, 64.0):
        ref = rdp_lib._compute_randomized_response_rdp(
            event.noise_parameter, 2, [order], dp_accounting.NeighboringRelation.REPLACE_ONE
        )[0]
        assert rdp_of_randomized_response(1.0, order) == pytest.approx(ref, rel=1e-9)
    orders = [1.0, 1.5, 3.0, 30.0, 1e4]
    values = [rdp_of_randomized_response(1.0, a) for a in orders]
    assert values == sorted(values)  # Rényi divergence grows with the order
    assert values[0] == pytest.approx(math.tanh(0.5) * 1.0)  # KL = (2p − 1)β
    assert rdp_of_randomized_response(1.0, math.inf) == 1.0
    assert values[-1] == pytest.approx(1.0, abs=1e-3)


def test_single_release_epsilon_equals_the_pure_epsilon():
    # Laplace vector: ε = 2δn/λ; RR: ε = β. At δ → 0 the rigorous ε is the pure ε.
    assert epsilon_of(laplace_vector_event(0.1, 0.2, 10), 1, 1e-12) == pytest.approx(10, abs=1e-3)
    assert epsilon_of(laplace_vector_event(0.1, 0.2, 10), 1, 1e-12) <= 10
    assert epsilon_of(randomized_response_event(0.7), 1, 1e-12) == pytest.approx(0.7, abs=1e-3)
    assert epsilon_of(randomized_response_event(0.7), 1, 1e-12) <= 0.7


@pytest.mark.parametrize("k", [2, 10, 100, 1000])
def test_rr_composition_is_valid_and_tight(k):
    eps = epsilon_of(randomized_response_event(1.0), k, 1e-5)
    exact = exact_rr_composition_epsilon(1.0, k, 1e-5)
    assert exact - 1e-6 <= eps <= k * 1.0  # an upper bound, never above basic composition
    assert eps <= exact * 1.01 + 1e-3  # and within 1% of the exact optimum


def test_laplace_composition_is_below_basic_and_monotone():
    event = dp_accounting.LaplaceDpEvent(noise_multiplier=1.0)  # ε = 1 per release
    values = [epsilon_of(event, k, 1e-5) for k in (1, 10, 100, 1000)]
    assert all(v <= k for v, k in zip(values, (1, 10, 100, 1000), strict=True))
    assert values == sorted(values)
    assert values[2] < 75  # advanced composition actually helps (≈ 68)


def test_laplace_is_not_a_valid_stand_in_for_rr_under_composition():
    beta, k = 1.0, 100
    rr = epsilon_of(randomized_response_event(beta), k)
    lap = epsilon_of(dp_accounting.LaplaceDpEvent(noise_multiplier=1 / beta), k)
    assert lap < rr - 5  # Laplace with the same ε under-reports RR's composed ε


def test_gaussian_matches_dp_accounting_pld_accountant():
    sigma, sens, k = 3.0, 1.5, 10
    ours = epsilon_of(gaussian_event(sigma, sens), k, 1e-6)
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(dp_accounting.GaussianDpEvent(sigma / sens), k)
    assert ours == pytest.approx(pld.get_epsilon(1e-6), rel=1e-2)
    assert ours <= pld.get_epsilon(1e-6) + 1e-9  # analytic Gaussian is exact, PLD pessimistic
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.GaussianDpEvent(sigma / sens), k)
    assert ours < rdp.get_epsilon(1e-6)
    assert bound_used(gaussian_event(sigma, sens), k, 1e-6) == "gaussian"


def test_large_compositions_stay_fast_and_finite():
    event = laplace_vector_event(0.1, 0.2, 6400)  # ε = 6400 per upload
    eps = epsilon_of(event, 300)
    assert 0.99 * 6400 * 300 < eps <= 6400 * 300
    assert epsilon_of(randomized_response_event(1.0), 20_000) < 20_000


def test_mixed_and_degenerate_events():
    mixed = dp_accounting.ComposedDpEvent(
        [randomized_response_event(0.5), laplace_vector_event(0.1, 0.2, 2), gaussian_event(5, 1)]
    )
    eps = epsilon_of(mixed, 3)
    parts = [
        epsilon_of(randomized_response_event(0.5), 3),
        epsilon_of(laplace_vector_event(0.1, 0.2, 2), 3),
    ]
    assert max(parts) < eps
    assert epsilon_of(dp_accounting.NoOpDpEvent(), 5) == 0.0
    assert epsilon_of(dp_accounting.NonPrivateDpEvent()) == math.inf
    assert epsilon_of(laplace_vector_event(0.1, 0.0, 3)) == math.inf
    assert epsilon_of(randomized_response_event(1.0), 0) == 0.0
    # (0, δ') releases: finite only while their δ' sum stays below the target δ
    assert epsilon_of(approx_dp_event(0.0, 1e-7), 10, 1e-5) == 0.0
    assert epsilon_of(approx_dp_event(0.0, 1e-3), 10, 1e-5) == math.inf
    assert epsilon_of(approx_dp_event(0.5, 0.0), 4, 1e-5) <= 2.0
    # δ' = 1 bounds nothing (VerFedGNN's ternary release when Δ₁ ≥ r): no finite ε, once or more
    assert epsilon_of(approx_dp_event(0.0, 1.0), 1, 1e-5) == math.inf
    assert epsilon_of(approx_dp_event(0.0, 1.0), 2, 1e-5) == math.inf


def test_accountant_counts_units_and_composes():
    acc = PrivacyAccountant(delta=1e-5)
    upload = laplace_vector_event(0.1, 1.0, 5)  # ε = 1 per round
    rr = randomized_response_event(0.5)
    for r in range(6):
        acc.spend(range(10) if r % 2 == 0 else [0, 1], upload, "upload")
    acc.spend(np.array([3, 3, 4]), rr, "gossip")  # unit 3 twice
    assert acc.n_units == 10
    assert acc.count(0) == 6 and acc.count(5) == 3 and acc.count(3, "gossip") == 2
    assert acc.epsilon(5) == pytest.approx(epsilon_of(upload, 3))
    assert acc.epsilon(0) == pytest.approx(epsilon_of(upload, 6))
    both = dp_accounting.ComposedDpEvent(
        [dp_accounting.SelfComposedDpEvent(upload, 3), dp_accounting.SelfComposedDpEvent(rr, 2)]
    )
    assert acc.epsilon(3) == pytest.approx(epsilon_of(both))
    assert acc.epsilon("never seen") == 0.0
    worst = max(acc.epsilon(u) for u in range(10))
    assert acc.worst_epsilon() == pytest.approx(worst)
    summary = json.loads(json.dumps(acc.summary()))
    assert summary["worst_epsilon"] == pytest.approx(worst)
    up = summary["labels"]["upload"]
    assert (up["units"], up["max_count"], up["median_count"]) == (10, 6, 3.0)
    assert up["worst_epsilon"] == pytest.approx(epsilon_of(upload, 6))
    assert summary["labels"]["gossip"]["max_count"] == 2


def test_worst_epsilon_over_incomparable_profiles():
    acc = PrivacyAccountant()
    small, big = laplace_vector_event(1, 4, 1), randomized_response_event(2.0)
    for _ in range(3):
        acc.spend(["a"], small, "x")
    acc.spend(["b"], big, "y")
    acc.spend(["c"], small, "x")
    assert acc.worst_epsilon() == pytest.approx(max(acc.epsilon("a"), acc.epsilon("b")))
    assert acc.epsilon("b") > acc.epsilon("a") > acc.epsilon("c")


def test_many_units_many_rounds_is_fast():
    rng = np.random.default_rng(0)
    acc = PrivacyAccountant()
    event = laplace_vector_event(0.1, 0.2, 10)
    for _ in range(50):
        acc.spend(rng.choice(30_000, 3_000, replace=False), event, "upload")
    counts = [acc.count(u) for u in range(0, 30_000, 7)]
    assert acc.worst_epsilon() >= acc.epsilon(int(np.argmax(counts)) * 7)
    assert acc.summary()["labels"]["upload"]["max_count"] >= max(counts)


@pytest.mark.parametrize(
    "call",
    [
        lambda: PrivacyAccountant(delta=0.0),
        lambda: PrivacyAccountant().spend([1], dp_accounting.LaplaceDpEvent(1.0), ""),
        lambda: PrivacyAccountant().spend([1], "laplace", "x"),
        lambda: PrivacyAccountant().spend(
            [1], dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.0)), "x"
        ),
        lambda: epsilon_of(dp_accounting.LaplaceDpEvent(1.0), -1),
        lambda: epsilon_of(dp_accounting.LaplaceDpEvent(1.0), 1, 1.5),
        lambda: laplace_vector_event(0.0, 1.0, 3),
        lambda: randomized_response_event(0.0),
        lambda: randomized_response_event(1e4),
        lambda: gaussian_event(-1.0, 1.0),
        lambda: approx_dp_event(1.0, 2.0),
        lambda: rdp_of_randomized_response(1.0, 0.5),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_restricted_bounds_and_orders_reproduce_the_dp_accounting_accountant():
    """``bounds=("rdp",)`` is dp-accounting's RDP accountant; the unrestricted accountant takes
    the exact analytic ε for Gaussians, below the RDP figure."""
    event, k, delta = gaussian_event(3.0, 1.0), 40, 1e-5
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(event, k)
    assert epsilon_of(event, k, delta, bounds=("rdp",)) == rdp.get_epsilon(delta)
    assert bound_used(event, k, delta) == "gaussian"
    assert epsilon_of(event, k, delta) == dp_accounting.get_epsilon_gaussian(
        3.0 / math.sqrt(k), delta
    )
    assert epsilon_of(event, k, delta) < epsilon_of(event, k, delta, bounds=("rdp",))
    with pytest.raises(ValueError, match="bounds"):
        PrivacyAccountant(bounds=("nope",))


def test_sampled_gaussian_steps_are_accounted_by_rdp_on_the_given_orders():
    """DP-SGD with fixed-size batches (REPLACE_ONE): the accountant's ε is dp-accounting's RDP
    of the same composition on the same orders, whether charged step by step or at once."""
    orders = (1.5, 2, 3, 4, 8, 16, 32)
    step, steps, delta = sampled_gaussian_event(1.1, 100, 10), 25, 1e-5
    rdp = dp_accounting.rdp.RdpAccountant(
        orders=orders, neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    rdp.compose(dp_accounting.SelfComposedDpEvent(step, steps))
    want = rdp.get_epsilon(delta)
    acc = PrivacyAccountant(delta, rdp_orders=orders)
    acc.spend(np.repeat([7, 8], steps), step, "dpsgd")
    acc.spend([8], step, "dpsgd")
    assert acc.count(7) == steps and acc.epsilon(7) == want
    assert acc.worst_epsilon() == acc.epsilon(8) > want
    assert bound_used(step, steps, delta, rdp_orders=orders) == "rdp"
    assert isinstance(sampled_gaussian_event(0.0, 100, 10), dp_accounting.NonPrivateDpEvent)
    with pytest.raises(ValueError):
        sampled_gaussian_event(1.0, 10, 11)
