"""σ calibration for the noisy aggregation: calibrate ↔ account round trip, monotonicity, the
Theorem 4.2 closed form, and the release count against a brute-force count."""

from __future__ import annotations

import math
from collections import Counter

import dp_accounting
import numpy as np
import pytest

from data.sequences import behaviour_graph, training_prefixes
from privacy.calibration import (
    calibrate_sigma,
    edge_sensitivity,
    released_code_sigma,
    releases_per_edge,
    spent_epsilon,
    theorem_4_2_epsilon,
    theorem_4_2_sigma,
)

DELTA = 1e-5


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
@pytest.mark.parametrize(("eps2", "n"), [(0.5, 1), (2.0, 30), (5.0, 400)])
def test_calibrate_then_account_gives_eps_back(accountant: str, eps2: float, n: int) -> None:
    sens = edge_sensitivity(0.5, 2.0)
    sigma = calibrate_sigma(eps2, DELTA, n, sens, accountant)
    assert sigma > 0
    assert abs(spent_epsilon(sigma, sens, n, DELTA, accountant) - eps2) < 1e-3
    assert spent_epsilon(0.97 * sigma, sens, n, DELTA, accountant) > eps2  # smallest such σ


def test_more_releases_need_more_noise_and_sigma_scales_with_sensitivity() -> None:
    sigmas = [calibrate_sigma(1.0, DELTA, n, 1.0) for n in (1, 10, 100)]
    assert sigmas[0] < sigmas[1] < sigmas[2]
    assert calibrate_sigma(1.0, DELTA, 10, 3.0) == pytest.approx(3 * sigmas[1], rel=1e-5)


def test_pld_matches_exact_gaussian_composition() -> None:
    # n Gaussians of multiplier z compose exactly to one Gaussian of multiplier z / √n
    sigma, sens, n = 12.0, 1.5, 50
    exact = dp_accounting.get_epsilon_gaussian(sigma / (sens * math.sqrt(n)), DELTA)
    assert spent_epsilon(sigma, sens, n, DELTA) == pytest.approx(exact, abs=1e-3)
    assert spent_epsilon(sigma, sens, n, DELTA, "rdp") >= exact  # RDP is valid but looser
    # far outside any useful budget the PLD grid overflows; the answer must stay finite and exact
    tiny = dp_accounting.get_epsilon_gaussian(0.6 / (sens * math.sqrt(780)), DELTA)
    assert spent_epsilon(0.6, sens, 780, DELTA) == pytest.approx(tiny, rel=1e-3)


@pytest.mark.parametrize(("eps2", "n"), [(0.5, 1), (2.0, 30), (8.0, 1000)])
def test_theorem_4_2_closed_form_is_valid_but_looser(eps2: float, n: int) -> None:
    sens = edge_sensitivity(1.0)
    closed = theorem_4_2_sigma(eps2, DELTA, n, sens)
    assert theorem_4_2_epsilon(closed, DELTA, n, sens) == pytest.approx(eps2, rel=1e-9)
    assert closed > calibrate_sigma(eps2, DELTA, n, sens)
    assert spent_epsilon(closed, sens, n, DELTA) <= eps2


def test_released_code_sigma_uses_c_and_t_only() -> None:
    # the released code solves T C²/(2σ²) + C √(2T ln(1/δ)) / σ = ε per epoch
    sigma = released_code_sigma(5.0, 2.5e-7, 1, 0.5)
    lhs = 0.5**2 / (2 * sigma**2) + 0.5 * math.sqrt(2 * math.log(1 / 2.5e-7)) / sigma
    assert lhs == pytest.approx(5.0, rel=1e-9)


def test_edge_sensitivity() -> None:
    assert edge_sensitivity(0.5, 3.0) == pytest.approx(math.sqrt(2) * 1.5)
    with pytest.raises(ValueError, match="positive"):
        edge_sensitivity(0.0)


def test_releases_per_edge_matches_brute_force_count() -> None:
    rng = np.random.default_rng(4)
    seqs = [rng.integers(0, 6, size=int(n)) for n in rng.integers(1, 25, size=12)]
    train, _ = training_prefixes(seqs)
    in_prefixes: Counter[tuple[int, int, int]] = Counter()
    for user, prefix in zip(train.user, train.prefixes, strict=True):
        items, _, a_out = behaviour_graph(prefix)
        for i, j in zip(*np.nonzero(a_out), strict=True):
            in_prefixes[(int(user), int(items[i]), int(items[j]))] += 1
    worst = max(in_prefixes.values())
    assert releases_per_edge(seqs, epochs=3, steps=2) == worst * 3 * 2
    assert releases_per_edge([np.arange(2)], epochs=5) == 0


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="delta"):
        calibrate_sigma(1.0, 1.5, 10, 1.0)
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_sigma(0.0, DELTA, 10, 1.0)
    with pytest.raises(ValueError, match="n_releases"):
        spent_epsilon(1.0, 1.0, -1, DELTA)
    with pytest.raises(ValueError, match="accountant"):
        calibrate_sigma(1.0, DELTA, 10, 1.0, "moments")
    assert calibrate_sigma(1.0, DELTA, 0, 1.0) == 0.0
    assert spent_epsilon(0.0, 1.0, 3, DELTA) == math.inf


def test_paper_and_authors_code_calibrations() -> None:
    """The paper's σ: Theorem 4.2 for one release per epoch (Δ = C); the authors' code: the
    same form with T releases at δ = 2.5e-7, and σ² applied as the standard deviation."""
    from privacy.calibration import AUTHORS_CODE_DELTA, authors_code_noise_std, paper_sigma

    sigma = paper_sigma(5.0, DELTA, 0.5)
    assert theorem_4_2_epsilon(sigma, DELTA, 1, 0.5) == pytest.approx(5.0)
    solved = released_code_sigma(5.0, AUTHORS_CODE_DELTA, 2, 0.5)
    assert 2 * 0.25 / (2 * solved**2) + 0.5 * math.sqrt(
        4 * math.log(1 / AUTHORS_CODE_DELTA)
    ) / solved == pytest.approx(5.0)  # T·C²/(2σ²) + C·√(2T·ln(1/δ))/σ = ε
    assert authors_code_noise_std(5.0, 2, 0.5) == pytest.approx(solved**2)
    # at the defaults (ε = 5 per epoch, C = 0.5, T = 1) the applied std is below the solved σ
    assert authors_code_noise_std(5.0, 1, 0.5) == pytest.approx(0.353, abs=1e-3)
