"""σ for DIPSGNN's noisy aggregation (eq. 7), calibrated on the release pattern with dp-accounting.

This module only calibrates: it solves the noise (σ, or DP-SGD's multiplier z) for a target
(ε2, δ) before the run, evaluating candidates with dp-accounting (``spent_epsilon``,
``dpsgd_epsilon``). What a run has spent is counted by the one accountant
(privacy/accountant.py), to which protocols/dipsgnn/protocol.py reports every release as a
dp-accounting event (``gaussian_event``, ``sampled_gaussian_event``).

Release pattern. In every GNN propagation step the server releases the two noisy aggregates

    M_in = A_in · H̄ + N(0, σ² I),      M_out = A_out · H̄ + N(0, σ² I)           (eq. 7)

where every row of H̄ has L2 norm C (eq. 6). Privacy unit: one directed transition a → b of one
user's training sequence, with its weight w ≤ w_max (the count of a → b in that sequence). Removing
it changes row a of A_out·H̄ by w·H̄_b and row b of A_in·H̄ by w·H̄_a, so the pair (M_in, M_out) is
one Gaussian mechanism with L2 sensitivity

    Δ = √2 · w_max · C.                                                      (edge_sensitivity)

The edge is released again in every propagation step (T), in every training prefix whose graph
contains it, and in every epoch. With the prefixes of ``data.sequences.training_prefixes``
(s[:j] → s[j], j < n_tr, n_tr = ⌊0.8 L⌋) the first transition s_0 → s_1 of a sequence lies in the
n_tr - 2 prefixes s[:2] .. s[:n_tr-1], the most of any edge, hence

    n_releases = max_u (n_tr(u) - 2) · T · epochs.                          (releases_per_edge)

Every prefix is used in every epoch (no subsampling), so there is no amplification: the total is
a plain n-fold composition of Gaussian mechanisms with noise multiplier z = σ/Δ, accounted with
dp-accounting's PLD accountant (or RDP), and σ is found by root search on that accountant
(``dp_accounting.calibrate_dp_mechanism``). Where ε is beyond any useful budget (composed
multiplier z/√n < 0.25, ε ≳ 25) ``spent_epsilon`` uses dp-accounting's exact analytic Gaussian
formula instead of the PLD grid, which grows slow and overflows there.

The paper's closed form (``theorem_4_2_sigma``) is the zero-concentrated-DP route, as in the
authors' released code (``cal_sigma`` in main_dipsgnn.py): a Gaussian release with sensitivity Δ is
ρ = Δ²/(2σ²)-zCDP, n releases compose to ρ = nΔ²/(2σ²), and ρ-zCDP implies
(ρ + 2√(ρ ln(1/δ)), δ)-DP (Bun & Steinke 2016, Prop. 1.3). Solving

    n Δ² / (2σ²) + (Δ/σ) √(2 n ln(1/δ)) = ε                                  (Theorem 4.2 form)

for σ is valid but looser (larger σ) than the PLD calibration. The released code applies it per
epoch with Δ = C and n = T (``released_code_sigma``), i.e. without the √2, w_max, prefix and epoch
factors above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp

from data.sequences import train_length
from privacy.accountant import sampled_gaussian_event

PLD_DISCRETIZATION = 1e-3  # PLD value grid; its ε error is ~1e-5 here, far below the 1e-3 we need
PLD_ANALYTIC_BELOW = 0.25  # composed multiplier below which (ε ≳ 25 at δ = 1e-5) ε is analytic


def _check_eps_delta(eps: float, delta: float) -> None:
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"epsilon must be a finite positive number, got {eps!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")


def _check_releases_sensitivity(n_releases: int, sensitivity: float) -> None:
    if int(n_releases) != n_releases or n_releases < 0:
        raise ValueError(f"n_releases must be a non-negative integer, got {n_releases!r}")
    if not math.isfinite(sensitivity) or sensitivity <= 0:
        raise ValueError(f"sensitivity must be a finite positive number, got {sensitivity!r}")


def edge_sensitivity(clip_norm: float, max_edge_weight: float = 1.0) -> float:
    """Δ = √2 · w_max · C: L2 sensitivity of one step's (A_in·H̄, A_out·H̄) to one edge."""
    if not clip_norm > 0 or not max_edge_weight > 0:
        raise ValueError(
            f"clip_norm and max_edge_weight must be positive, got {clip_norm}, {max_edge_weight}"
        )
    return math.sqrt(2.0) * float(max_edge_weight) * float(clip_norm)


def releases_per_edge(
    seqs: Sequence[np.ndarray], epochs: int, steps: int = 1, train_fraction: float = 0.8
) -> int:
    """Worst-case number of noisy releases containing one edge: max_u (n_tr(u) - 2) · T · epochs
    for the training prefixes of ``data.sequences.training_prefixes`` (full sequences in)."""
    if epochs < 0 or steps < 0:
        raise ValueError(f"epochs and steps must be non-negative, got {epochs}, {steps}")
    worst_prefixes = 0
    for seq in seqs:
        worst_prefixes = max(worst_prefixes, train_length(len(seq), train_fraction) - 2)
    return int(worst_prefixes) * int(steps) * int(epochs)


def _accountant(kind: str) -> dp_accounting.PrivacyAccountant:
    if kind == "pld":
        return pld.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    if kind == "rdp":
        return rdp.RdpAccountant()
    raise ValueError(f"accountant must be 'pld' or 'rdp', got {kind!r}")


def _event(noise_multiplier: float, n_releases: int) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier), int(n_releases)
    )


def spent_epsilon(
    sigma: float, sensitivity: float, n_releases: int, delta: float, accountant: str = "pld"
) -> float:
    """ε at ``delta`` of ``n_releases`` Gaussian releases of std ``sigma`` and L2 sensitivity
    ``sensitivity`` (dp-accounting); inf when sigma is 0 and something was released."""
    _check_releases_sensitivity(n_releases, sensitivity)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if sigma < 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be a finite non-negative number, got {sigma!r}")
    if n_releases == 0:
        return 0.0
    if sigma == 0:
        return math.inf
    z_single = sigma / sensitivity / math.sqrt(n_releases)
    if accountant == "pld" and z_single < PLD_ANALYTIC_BELOW:
        # ε far above any useful budget: the PLD grid grows with ε (slow) and overflows. n identical
        # Gaussians compose EXACTLY to one Gaussian with multiplier z/√n, whose ε the analytic
        # Gaussian mechanism (Balle & Wang 2018, in dp-accounting) gives.
        return float(dp_accounting.get_epsilon_gaussian(z_single, delta))
    acc = _accountant(accountant)
    acc.compose(_event(sigma / sensitivity, n_releases))
    return float(acc.get_epsilon(delta))


def theorem_4_2_epsilon(sigma: float, delta: float, n_releases: int, sensitivity: float) -> float:
    """The closed form's ε: n Δ²/(2σ²) + (Δ/σ) √(2 n ln(1/δ))."""
    _check_releases_sensitivity(n_releases, sensitivity)
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma!r}")
    x = sensitivity / sigma
    return n_releases * x * x / 2.0 + x * math.sqrt(2.0 * n_releases * math.log(1.0 / delta))


def theorem_4_2_sigma(eps2: float, delta: float, n_releases: int, sensitivity: float) -> float:
    """Smallest σ with theorem_4_2_epsilon(σ) = eps2 (closed form of the quadratic in Δ/σ)."""
    _check_eps_delta(eps2, delta)
    _check_releases_sensitivity(n_releases, sensitivity)
    if n_releases == 0:
        return 0.0
    n = float(n_releases)
    b = math.sqrt(2.0 * n * math.log(1.0 / delta))
    # n x²/2 + b x - ε = 0  →  x = (√(b² + 2nε) - b) / n, written to avoid cancellation.
    x = 2.0 * eps2 / (math.sqrt(b * b + 2.0 * n * eps2) + b)
    return sensitivity / x


AUTHORS_CODE_DELTA = 2.5e-7  # main_dipsgnn.py's default δ "of every epoch update"


def released_code_sigma(eps_per_epoch: float, delta: float, steps: int, clip_norm: float) -> float:
    """σ as the authors' code solves it (``cal_sigma`` in main_dipsgnn.py):
    T·C²/(2σ²) + C·√(2T·ln(1/δ))/σ = ε per epoch — Theorem 4.2's form with Δ = C, n = T."""
    return theorem_4_2_sigma(eps_per_epoch, delta, steps, clip_norm)


def paper_sigma(eps_per_epoch: float, delta: float, clip_norm: float) -> float:
    """σ of the paper's Theorem 4.2 for a single release per epoch: Δ = C, n = 1, ε per epoch."""
    return theorem_4_2_sigma(eps_per_epoch, delta, 1, clip_norm)


def authors_code_noise_std(eps_per_epoch: float, steps: int, clip_norm: float) -> float:
    """The noise the authors' code adds: it solves σ with ``released_code_sigma`` at
    δ = AUTHORS_CODE_DELTA and draws N(0, σ²)·… with σ² passed as the standard deviation."""
    sigma = released_code_sigma(eps_per_epoch, AUTHORS_CODE_DELTA, steps, clip_norm)
    return sigma * sigma


def calibrate_sigma(
    eps2: float, delta: float, n_releases: int, sensitivity: float, accountant: str = "pld"
) -> float:
    """Smallest σ (a standard deviation) whose ``n_releases``-fold Gaussian composition with L2
    sensitivity ``sensitivity`` is (eps2, delta)-DP under dp-accounting's PLD (or RDP) accountant;
    root search with ``dp_accounting.calibrate_dp_mechanism`` on the noise multiplier σ/Δ."""
    _check_eps_delta(eps2, delta)
    _check_releases_sensitivity(n_releases, sensitivity)
    _accountant(accountant)  # validate the name before searching
    if n_releases == 0:
        return 0.0
    # Bracket: the closed form is valid, so its multiplier (slightly raised to absorb PLD
    # discretization) meets the budget; shrink the lower end until it no longer does.
    high = 1.05 * theorem_4_2_sigma(eps2, delta, n_releases, 1.0)
    while spent_epsilon(high, 1.0, n_releases, delta, accountant) > eps2:
        high *= 2.0  # RDP's finite order grid can be looser than the zCDP bound for tiny ε
    low = high / 2.0
    while spent_epsilon(low, 1.0, n_releases, delta, accountant) <= eps2:
        high, low = low, low / 2.0
    multiplier = dp_accounting.calibrate_dp_mechanism(
        lambda: _accountant(accountant),
        lambda z: _event(z, n_releases),
        eps2,
        delta,
        bracket_interval=dp_accounting.ExplicitBracketInterval(low, high),
        tol=1e-7 * high,
    )
    return float(multiplier) * float(sensitivity)


# --------------------------------------------------------------------------- DIPSGNN's noise


def calibrated_releases(config) -> int:
    """Public bound on the noisy releases of one edge over the whole run, from a DIPSGNNConfig:
    n = (⌊0.8·max_len⌋ - 2)·T·epochs (releases_per_edge of the longest sequence a user may
    have); EdgeRand perturbs each prefix graph once, whatever the epochs and steps."""
    c = config
    longest = np.zeros(c.max_len, dtype=np.int64)
    if c.mechanism == "edgerand":
        return releases_per_edge([longest], 1, 1, c.train_fraction)
    return releases_per_edge([longest], c.epochs, c.steps, c.train_fraction)


def graph_sensitivity(config) -> float:
    """Δ of one release: √2·w_max·C for the aggregates (eq. 7); w_max for one entry of A_out
    (EdgeRand, whose A_in is the transpose: post-processing)."""
    if config.mechanism == "edgerand":
        return float(config.max_edge_weight)
    return edge_sensitivity(config.clip_norm, config.max_edge_weight)


def noise_sigma(config) -> float:
    """σ of eq. 7 (or of EdgeRand's adjacency noise) for a DIPSGNNConfig: by its
    ``calibration``, ``calibrate_sigma`` for the counted releases at (eps2, privacy_delta)
    ("rigorous"), ``paper_sigma`` or ``authors_code_noise_std`` with eps2 per epoch; 0 for the
    non-private network and for DP-SGD (whose noise is on the gradients)."""
    c = config
    if not c.private_graph or c.mechanism == "dpsgd":
        return 0.0
    if c.calibration == "paper":
        return paper_sigma(c.eps2, c.privacy_delta, c.clip_norm)
    if c.calibration == "authors_code":
        return authors_code_noise_std(c.eps2, c.steps, c.clip_norm)
    return calibrate_sigma(
        c.eps2, c.privacy_delta, calibrated_releases(c), graph_sensitivity(c), c.accountant
    )


# --------------------------------------------------------------------------- DP-SGD baseline
#
# DP-SGD (Abadi et al. 2016) at the same (ε2, δ): each step samples a fixed-size batch of
# ``batch_size`` of the ``population`` users uniformly WITHOUT replacement, clips every user's
# gradient (over all its training prefixes) to L2 norm C, sums, and adds N(0, (z · 2C)² I).
# Privacy unit: one user's training data REPLACED arbitrarily (replace-one neighbours, population
# public), which covers any change of one edge — and of the next-item labels and order, which the
# noisy aggregation leaves unprotected. Under replace-one the clipped sum has sensitivity 2C, so z
# is σ / 2C. The composition of ``steps`` such steps is accounted with dp-accounting's RDP
# accountant for the sampled-without-replacement Gaussian (Wang, Balle & Kasiviswanathan 2019,
# Thm. 27: the only replace-one subsampled Gaussian dp-accounting supports).


def _dpsgd_event(
    noise_multiplier: float, population: int, batch_size: int, steps: int
) -> dp_accounting.DpEvent:
    return dp_accounting.SelfComposedDpEvent(
        sampled_gaussian_event(noise_multiplier, population, batch_size), int(steps)
    )


# RDP orders for DP-SGD: a coarser grid than dp-accounting's default (whose large orders make the
# sampled-without-replacement bound slow); every order gives a valid bound, this grid only picks
# among fewer of them (the optimum for ε ≈ 1–10 at δ = 1e-5 lies between 2 and 20).
DPSGD_RDP_ORDERS = (
    1.25,
    1.5,
    1.75,
    2,
    2.5,
    3,
    3.5,
    4,
    5,
    6,
    7,
    8,
    10,
    12,
    14,
    16,
    20,
    24,
    32,
    48,
    64,
)


def _dpsgd_accountant() -> dp_accounting.PrivacyAccountant:
    return rdp.RdpAccountant(
        orders=DPSGD_RDP_ORDERS,
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
    )


def _check_dpsgd(population: int, batch_size: int, steps: int) -> None:
    if int(population) != population or population < 1:
        raise ValueError(f"population must be a positive integer, got {population!r}")
    if int(batch_size) != batch_size or not 1 <= batch_size <= population:
        raise ValueError(f"batch_size must be an integer in [1, population], got {batch_size!r}")
    if int(steps) != steps or steps < 0:
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")


def dpsgd_epsilon(
    noise_multiplier: float, population: int, batch_size: int, steps: int, delta: float
) -> float:
    """ε at ``delta`` of ``steps`` DP-SGD steps (see above), z = σ / 2C; inf when z is 0."""
    _check_dpsgd(population, batch_size, steps)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if not math.isfinite(noise_multiplier) or noise_multiplier < 0:
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier!r}")
    if steps == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    acc = _dpsgd_accountant()
    acc.compose(_dpsgd_event(noise_multiplier, population, batch_size, steps))
    return float(acc.get_epsilon(delta))


def dpsgd_noise_multiplier(
    eps: float, delta: float, population: int, batch_size: int, steps: int
) -> float:
    """Smallest z = σ / 2C with dpsgd_epsilon(z, …) <= eps: root search with
    ``dp_accounting.calibrate_dp_mechanism`` on the RDP accountant."""
    _check_eps_delta(eps, delta)
    _check_dpsgd(population, batch_size, steps)
    if steps == 0:
        return 0.0
    high = 1.0
    while dpsgd_epsilon(high, population, batch_size, steps, delta) > eps:
        high *= 2.0
    low = high / 2.0
    while low > 1e-3 and dpsgd_epsilon(low, population, batch_size, steps, delta) <= eps:
        high, low = low, low / 2.0
    return float(
        dp_accounting.calibrate_dp_mechanism(
            _dpsgd_accountant,
            lambda z: _dpsgd_event(z, population, batch_size, steps),
            eps,
            delta,
            bracket_interval=dp_accounting.ExplicitBracketInterval(low, high),
            tol=1e-6 * high,
        )
    )
