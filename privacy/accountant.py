"""The project's one privacy accountant, built on Google's ``dp_accounting``.

Protocols call ``PrivacyAccountant.spend(units, event, label)`` once per round and mechanism:
each listed privacy unit (a user for local DP, an edge for central DP) took part once in a
release described by a ``dp_accounting.DpEvent``. The accountant counts identical events per
unit (no accountant object per unit) and evaluates the composition

    unit u spent  E_1^{k_1} ∘ E_2^{k_2} ∘ …   →   ε_u(δ) = smallest ε with (ε, δ)-DP

once per distinct count profile (k_1, k_2, …), with caching.

How ε(δ) is computed (``epsilon_of``): every available rigorous upper bound is evaluated and
the smallest is returned (the minimum of valid bounds is a valid bound):

  * PLD — dp_accounting's privacy-loss-distribution library (pessimistic discretisation):
    tight for Laplace, Gaussian and randomized response. Its discretisation interval aims at
    k·interval ≤ 0.1% of the best cheap bound (≥ 1e-6, aligned on the smallest release's
    loss, coarse enough that the composed loss fits 2^18 grid points). Measured against the
    exact composition of binary RR (β ∈ {1, 0.1, 0.01}, δ = 1e-5) the result is ≤ 0.1% above
    it for k ≤ 100, ≤ 1% for k ≤ 1000, 0.4–8% at k = 10^4 (there RDP may win). Skipped when a
    single release has ε > 700 (the library underflows to ∞ there).
  * RDP — dp_accounting's ``RdpAccountant`` (orders 1.1 … 1024): O(#orders) for any count, so
    it stays cheap where the PLD grid would be coarse (very many compositions).
  * basic — Σ k_i·ε_i for pure-ε events (Laplace, RR, discrete Laplace, (ε, 0) events); exact
    for one release at δ → 0.
  * Gaussian — compositions of Gaussians are a Gaussian with σ = (Σ k_i/σ_i²)^(−1/2); the
    analytic ε of Balle & Wang (2018) via ``dp_accounting.get_epsilon_gaussian``.

A caller may restrict the bounds (``bounds``, e.g. ``("rdp",)`` for a run configured to account
with RDP) and choose the RDP orders (``rdp_orders``). Subsampled Gaussians
(``SampledWithoutReplacementDpEvent`` of a Gaussian: DP-SGD with fixed-size batches, REPLACE_ONE)
are accounted by RDP only.

Neighbouring relation. Events carry the sensitivity of *their* unit's neighbouring relation:
for LDP any input of a user may be replaced by any other (coordinates clipped to [−clip, clip]
differ by ≤ 2·clip, ``laplace_vector_event``); for edge-level central DP the caller states the
sensitivity of its edge relation. Laplace and Gaussian releases are then the pair "noise vs
noise shifted by the sensitivity" whatever the relation; randomized response is analysed under
REPLACE_ONE.

Randomized response with ε = β is represented as ``RandomizedResponseDpEvent(p = 2/(1+e^β),
2 buckets)``. A ``LaplaceDpEvent`` with ε = β has the same single-release ε but is *not* a
valid stand-in under composition: RR is the worst case among β-DP mechanisms and composes to a
larger ε (e.g. 100 × β = 1 at δ = 1e-5: RR 79.8, Laplace 68.3).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable

import attr
import dp_accounting
import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.special import logsumexp

_REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
BOUNDS = ("gaussian", "basic", "rdp", "pld")
_PLD_GRID_POINTS = 2**18
_PLD_MIN_INTERVAL = 1e-6
_PLD_MAX_SINGLE_EPSILON = 700.0  # beyond this the PLD library underflows to ε = ∞


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ApproxDpEvent(dp_event.DpEvent):
    """A release known only to be (ε, δ)-DP (e.g. VerFedGNN's ternary quantizer, (0, Δ₁/r)).
    Composed through the PLD of a generic (ε, δ) mechanism."""

    epsilon: float
    delta: float


_LEAF_TYPES = (
    dp_event.LaplaceDpEvent,
    dp_event.GaussianDpEvent,
    dp_event.RandomizedResponseDpEvent,
    dp_event.DiscreteLaplaceDpEvent,
    ApproxDpEvent,
    dp_event.NonPrivateDpEvent,
    dp_event.SampledWithoutReplacementDpEvent,
)
_RDP_TYPES = (
    dp_event.LaplaceDpEvent,
    dp_event.GaussianDpEvent,
    dp_event.RandomizedResponseDpEvent,
    dp_event.SampledWithoutReplacementDpEvent,
)
_RDP_ONLY_TYPES = (dp_event.SampledWithoutReplacementDpEvent,)
SUPPORTED_EVENTS = ", ".join(
    t.__name__ for t in (*_LEAF_TYPES, dp_event.NoOpDpEvent, dp_event.SelfComposedDpEvent)
)


# ---------------------------------------------------------------------------- event helpers


def laplace_vector_event(clip: float, laplace_scale: float, n_coords: int) -> dp_event.DpEvent:
    """Laplace(0, b) noise (b = ``laplace_scale``) on n coordinates each clipped to
    [−clip, clip]: L1 sensitivity 2·clip·n, so
    ``LaplaceDpEvent(noise_multiplier = b / (2·clip·n))`` and ε = 2·clip·n/b."""
    clip, laplace_scale, n_coords = float(clip), float(laplace_scale), int(n_coords)
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"clip must be finite and positive, got {clip!r}")
    if not (math.isfinite(laplace_scale) and laplace_scale >= 0):
        raise ValueError(f"laplace_scale must be finite and >= 0, got {laplace_scale!r}")
    if n_coords < 0:
        raise ValueError(f"n_coords must be >= 0, got {n_coords}")
    if n_coords == 0:
        return dp_event.NoOpDpEvent()
    if laplace_scale == 0:
        return dp_event.NonPrivateDpEvent()
    return dp_event.LaplaceDpEvent(noise_multiplier=laplace_scale / (2.0 * clip * n_coords))


def randomized_response_event(beta: float) -> dp_event.DpEvent:
    """Binary randomized response with ε = β (keeps the bit with probability e^β/(1+e^β)):
    ``RandomizedResponseDpEvent(noise_parameter = 2/(1+e^β), num_buckets = 2)``."""
    beta = float(beta)
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"randomized-response strength beta must be finite and > 0, got {beta!r}")
    noise = 2.0 * math.exp(-beta) / (1.0 + math.exp(-beta))  # = 2/(1+e^β), stable
    if noise == 0.0:
        raise ValueError(f"beta={beta} is too large to represent (flip probability underflows)")
    return dp_event.RandomizedResponseDpEvent(noise_parameter=noise, num_buckets=2)


def gaussian_event(sigma: float, sensitivity: float) -> dp_event.DpEvent:
    """Gaussian noise of standard deviation σ on a query of L2 sensitivity Δ:
    ``GaussianDpEvent(noise_multiplier = σ/Δ)``."""
    sigma, sensitivity = float(sigma), float(sensitivity)
    if not (math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}")
    if not (math.isfinite(sensitivity) and sensitivity >= 0):
        raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
    if sensitivity == 0:
        return dp_event.NoOpDpEvent()
    if sigma == 0:
        return dp_event.NonPrivateDpEvent()
    return dp_event.GaussianDpEvent(noise_multiplier=sigma / sensitivity)


def sampled_gaussian_event(
    noise_multiplier: float, population: int, batch_size: int
) -> dp_event.DpEvent:
    """One step of DP-SGD with a fixed-size batch: ``batch_size`` of ``population`` units drawn
    uniformly without replacement, Gaussian noise of ``noise_multiplier`` × the L2 sensitivity of
    the sum (REPLACE_ONE: 2C for per-unit clipping to C); NonPrivate when the multiplier is 0."""
    noise_multiplier, population, batch_size = (
        float(noise_multiplier),
        int(population),
        int(batch_size),
    )
    if not (math.isfinite(noise_multiplier) and noise_multiplier >= 0):
        raise ValueError(f"noise_multiplier must be finite and >= 0, got {noise_multiplier!r}")
    if population < 1 or not 1 <= batch_size <= population:
        raise ValueError(f"need 1 <= batch_size <= population, got {batch_size}, {population}")
    if noise_multiplier == 0:
        return dp_event.NonPrivateDpEvent()
    return dp_event.SampledWithoutReplacementDpEvent(
        population, batch_size, dp_event.GaussianDpEvent(noise_multiplier)
    )


def approx_dp_event(epsilon: float, delta: float) -> ApproxDpEvent:
    """A release that is (ε, δ)-DP and nothing more is known about it."""
    epsilon, delta = float(epsilon), float(delta)
    if not (math.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be finite and >= 0, got {epsilon!r}")
    if not 0 <= delta <= 1:
        raise ValueError(f"delta must be in [0, 1], got {delta!r}")
    return ApproxDpEvent(epsilon=epsilon, delta=delta)


def rdp_of_randomized_response(beta: float, order: float) -> float:
    """Rényi DP of binary randomized response with ε = β at order α (REPLACE_ONE):
    D_α = 1/(α−1)·log( p^α (1−p)^{1−α} + (1−p)^α p^{1−α} ),  p = e^β/(1+e^β);
    α = 1 gives the KL divergence (2p−1)β, α = ∞ gives β."""
    beta, order = float(beta), float(order)
    if not (math.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be finite and >= 0, got {beta!r}")
    if math.isnan(order) or order < 1:
        raise ValueError(f"Rényi order must be >= 1, got {order!r}")
    if math.isinf(order):
        return beta
    log_p = -math.log1p(math.exp(-beta))  # log e^β/(1+e^β)
    log_q = -beta + log_p  # log 1/(1+e^β)
    if order == 1.0:
        return (math.exp(log_p) - math.exp(log_q)) * beta
    terms = [order * log_p + (1 - order) * log_q, order * log_q + (1 - order) * log_p]
    return float(logsumexp(terms)) / (order - 1)


# ---------------------------------------------------------------------------- ε of a composition


def _flatten(event: dp_event.DpEvent, count: int, into: dict[dp_event.DpEvent, int]) -> None:
    """Accumulate leaf events with their total multiplicity."""
    if count == 0 or isinstance(event, dp_event.NoOpDpEvent):
        return
    if isinstance(event, dp_event.SelfComposedDpEvent):
        _flatten(event.event, count * int(event.count), into)
    elif isinstance(event, dp_event.ComposedDpEvent):
        for sub in event.events:
            _flatten(sub, count, into)
    elif isinstance(event, dp_event.SampledWithoutReplacementDpEvent) and not isinstance(
        event.event, dp_event.GaussianDpEvent
    ):
        raise ValueError("the privacy accountant samples only Gaussian events without replacement")
    elif isinstance(event, _LEAF_TYPES):
        into[event] = into.get(event, 0) + count
    else:
        raise ValueError(
            f"the privacy accountant does not support {type(event).__name__}; "
            f"supported events: {SUPPORTED_EVENTS}, ComposedDpEvent"
        )


def _pure_epsilon(event: dp_event.DpEvent) -> float:
    """ε of one release of a pure-DP leaf (∞ for events that are not pure ε-DP)."""
    if isinstance(event, dp_event.LaplaceDpEvent):
        return math.inf if event.noise_multiplier == 0 else 1.0 / event.noise_multiplier
    if isinstance(event, dp_event.RandomizedResponseDpEvent):
        p, k = event.noise_parameter, event.num_buckets
        if k == 1 or p == 1:
            return 0.0
        return math.inf if p == 0 else math.log1p(k * (1 - p) / p)
    if isinstance(event, dp_event.DiscreteLaplaceDpEvent):
        return event.noise_parameter * event.sensitivity
    if isinstance(event, ApproxDpEvent):
        return event.epsilon if event.delta == 0 else math.inf
    return math.inf


def _basic_bound(leaves: dict, delta: float) -> float:
    total_eps, total_delta = 0.0, 0.0
    for ev, k in leaves.items():
        if isinstance(ev, ApproxDpEvent):
            total_eps += k * ev.epsilon
            total_delta += k * ev.delta
        else:
            total_eps += k * _pure_epsilon(ev)
    return total_eps if total_delta <= delta else math.inf


def _gaussian_bound(leaves: dict, delta: float) -> float:
    if not all(isinstance(ev, dp_event.GaussianDpEvent) for ev in leaves):
        return math.inf
    precision = sum(k / ev.noise_multiplier**2 for ev, k in leaves.items())
    return float(dp_accounting.get_epsilon_gaussian(precision**-0.5, delta))


def _rdp_bound(leaves: dict, delta: float, orders: tuple | None = None) -> float:
    if not all(isinstance(ev, _RDP_TYPES) for ev in leaves):
        return math.inf
    options = {} if orders is None else {"orders": list(orders)}
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=_REPLACE_ONE, **options)
    for ev, k in leaves.items():
        acc.compose(ev, k)
    return float(acc.get_epsilon(delta))


def _loss_half_range(event: dp_event.DpEvent) -> float:
    """Rough half-width of one release's privacy-loss support (for the PLD grid size)."""
    if isinstance(event, dp_event.GaussianDpEvent):
        mu = 0.5 / event.noise_multiplier**2  # loss ~ N(μ, 2μ)
        return mu + 10.0 * math.sqrt(2.0 * mu)
    if isinstance(event, ApproxDpEvent):
        return max(event.epsilon, _PLD_MIN_INTERVAL)
    return _pure_epsilon(event)


def _leaf_pld(event: dp_event.DpEvent, interval: float) -> pld_lib.PrivacyLossDistribution:
    if isinstance(event, dp_event.LaplaceDpEvent):
        return pld_lib.from_laplace_mechanism(
            parameter=event.noise_multiplier, value_discretization_interval=interval
        )
    if isinstance(event, dp_event.GaussianDpEvent):
        return pld_lib.from_gaussian_mechanism(
            standard_deviation=event.noise_multiplier, value_discretization_interval=interval
        )
    if isinstance(event, dp_event.RandomizedResponseDpEvent):
        return pld_lib.from_randomized_response(
            noise_parameter=event.noise_parameter,
            num_buckets=event.num_buckets,
            value_discretization_interval=interval,
            neighboring_relation=_REPLACE_ONE,
        )
    if isinstance(event, dp_event.DiscreteLaplaceDpEvent):
        return pld_lib.from_discrete_laplace_mechanism(
            parameter=event.noise_parameter,
            sensitivity=event.sensitivity,
            value_discretization_interval=interval,
        )
    if isinstance(event, ApproxDpEvent):
        return pld_lib.from_privacy_parameters(
            pld_lib.common.DifferentialPrivacyParameters(event.epsilon, event.delta),
            value_discretization_interval=interval,
        )
    raise AssertionError(f"no PLD for {event!r}")  # unreachable: leaves are validated


def _pld_bound(leaves: dict, delta: float, reference: float) -> float:
    """PLD ε; ``reference`` is a cheaper upper bound already known (sets the grid)."""
    if all(isinstance(ev, dp_event.GaussianDpEvent) for ev in leaves):
        return math.inf  # the analytic Gaussian bound is exact
    if any(isinstance(ev, _RDP_ONLY_TYPES) for ev in leaves):
        return math.inf
    if any(_loss_half_range(ev) > _PLD_MAX_SINGLE_EPSILON for ev in leaves):
        return math.inf
    half_ranges = {ev: _loss_half_range(ev) for ev in leaves}
    # Grid: rounding every release's loss up by one interval moves ε by ≤ k·interval, so aim
    # for k·interval ≤ 0.1% of the reference ε (and ≤ 1% of each release's loss range), but
    # keep the composed loss distribution (≈ ±10 standard deviations) within the grid cap.
    total = sum(leaves.values())
    finest = min((r for r in half_ranges.values() if r > 0), default=1.0) / 100.0
    if math.isfinite(reference):
        finest = min(finest, 1e-3 * reference / total)
    spread = 20.0 * math.sqrt(sum(k * half_ranges[ev] ** 2 for ev, k in leaves.items()))
    interval = max(_PLD_MIN_INTERVAL, finest, spread / _PLD_GRID_POINTS)
    smallest = min((r for r in half_ranges.values() if r > 0), default=0.0)
    if smallest > interval:  # align the grid on the smallest release's loss (exact for RR)
        interval = smallest / math.floor(smallest / interval) * (1 + 1e-9)
    composed = None
    for ev, k in leaves.items():
        part = _leaf_pld(ev, interval)
        part = part.self_compose(k) if k > 1 else part
        composed = part if composed is None else composed.compose(part)
    return float(composed.get_epsilon_for_delta(delta))


_CHEAP_BOUNDS = {"gaussian": _gaussian_bound, "basic": _basic_bound, "rdp": _rdp_bound}


def _no_guarantee(event: dp_event.DpEvent) -> bool:
    """A non-private release, or an (ε, δ) one with δ = 1 (which bounds nothing)."""
    return isinstance(event, dp_event.NonPrivateDpEvent) or (
        isinstance(event, ApproxDpEvent) and event.delta >= 1
    )


@functools.lru_cache(maxsize=65536)
def _epsilon_of_leaves(
    key: tuple[tuple[dp_event.DpEvent, int], ...],
    delta: float,
    bounds: tuple[str, ...] = BOUNDS,
    rdp_orders: tuple | None = None,
) -> tuple:
    leaves = dict(key)
    if not leaves:
        return 0.0, "none"
    if any(_no_guarantee(ev) for ev in leaves):
        return math.inf, "non-private"
    best, how = math.inf, "none"
    for name, bound in _CHEAP_BOUNDS.items():
        if name not in bounds:
            continue
        eps = bound(leaves, delta, rdp_orders) if name == "rdp" else bound(leaves, delta)
        if eps < best:
            best, how = eps, name
    if "pld" in bounds and how != "gaussian" and best > 0:  # the analytic Gaussian is exact
        eps = _pld_bound(leaves, delta, reference=best)
        if eps < best:
            best, how = eps, "pld"
    return max(best, 0.0), how


def _leaves_key(event: dp_event.DpEvent, count: int) -> tuple:
    if not isinstance(event, dp_event.DpEvent):
        raise ValueError(f"expected a dp_accounting DpEvent, got {type(event).__name__}")
    if int(count) < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    leaves: dict = {}
    _flatten(event, int(count), leaves)
    return tuple(sorted(leaves.items(), key=lambda kv: repr(kv[0])))


def _check_delta(delta: float) -> float:
    delta = float(delta)
    if not 0 < delta < 1:
        raise ValueError(f"target delta must be in (0, 1), got {delta!r}")
    return delta


def _check_bounds(bounds, rdp_orders) -> tuple[tuple[str, ...], tuple | None]:
    bounds = BOUNDS if bounds is None else tuple(bounds)
    unknown = [b for b in bounds if b not in BOUNDS]
    if unknown or not bounds:
        raise ValueError(f"bounds must be a non-empty subset of {BOUNDS}, got {bounds!r}")
    orders = None if rdp_orders is None else tuple(rdp_orders)
    if orders is not None and (not orders or min(orders) <= 1):
        raise ValueError(f"RDP orders must be > 1, got {rdp_orders!r}")
    return bounds, orders


def epsilon_of(
    event: dp_event.DpEvent,
    count: int = 1,
    delta: float = 1e-5,
    bounds: Iterable[str] | None = None,
    rdp_orders: Iterable[float] | None = None,
) -> float:
    """Rigorous ε at ``delta`` of ``event`` composed ``count`` times (min over PLD, RDP, basic
    composition and the analytic Gaussian, or over ``bounds``; see the module docstring)."""
    key = _leaves_key(event, count)
    return _epsilon_of_leaves(key, _check_delta(delta), *_check_bounds(bounds, rdp_orders))[0]


def bound_used(
    event: dp_event.DpEvent,
    count: int = 1,
    delta: float = 1e-5,
    bounds: Iterable[str] | None = None,
    rdp_orders: Iterable[float] | None = None,
) -> str:
    """Which bound gave ``epsilon_of`` ("pld", "rdp", "basic", "gaussian", "none", "non-private")."""
    key = _leaves_key(event, count)
    return _epsilon_of_leaves(key, _check_delta(delta), *_check_bounds(bounds, rdp_orders))[1]


# ---------------------------------------------------------------------------- the accountant


class PrivacyAccountant:
    """Counts, per privacy unit, how many times it took part in each (label, event) release,
    and turns the counts into ε at ``self.delta`` (with ``bounds`` and ``rdp_orders`` as in
    :func:`epsilon_of`)."""

    def __init__(
        self,
        delta: float = 1e-5,
        bounds: Iterable[str] | None = None,
        rdp_orders: Iterable[float] | None = None,
    ) -> None:
        self.delta = _check_delta(delta)
        self._bounds, self._rdp_orders = _check_bounds(bounds, rdp_orders)
        self._unit_index: dict[Hashable, int] = {}
        self._streams: list[tuple[str, dp_event.DpEvent]] = []
        self._stream_index: dict[tuple[str, str], int] = {}
        self._counts: list[np.ndarray] = []  # per stream: int64 [capacity]
        self._capacity = 0

    # -- recording
    def _grow(self, n_units: int) -> None:
        if n_units <= self._capacity:
            return
        self._capacity = max(n_units, 2 * self._capacity, 64)
        for s, arr in enumerate(self._counts):
            grown = np.zeros(self._capacity, dtype=np.int64)
            grown[: len(arr)] = arr
            self._counts[s] = grown

    def _stream_of(self, label: str, event: dp_event.DpEvent) -> int:
        key = (label, repr(event))
        if key not in self._stream_index:
            _leaves_key(event, 1)  # validate the event type now, not at report time
            self._stream_index[key] = len(self._streams)
            self._streams.append((label, event))
            self._counts.append(np.zeros(self._capacity, dtype=np.int64))
        return self._stream_index[key]

    def spend(self, units: Iterable[Hashable], event: dp_event.DpEvent, label: str) -> None:
        """Each unit in ``units`` took part once in a release described by ``event`` (a unit
        listed twice is charged twice; numpy/torch id arrays are read as Python ints).
        ``label`` names the mechanism in the summary."""
        if not isinstance(label, str) or not label:
            raise ValueError(f"label must be a non-empty string, got {label!r}")
        if not isinstance(event, dp_event.DpEvent):
            raise ValueError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}")
        stream = self._stream_of(label, event)
        index = self._unit_index
        rows = []
        for u in units.tolist() if hasattr(units, "tolist") else units:  # numpy / torch ids
            i = index.get(u)
            if i is None:
                i = index[u] = len(index)
            rows.append(i)
        self._grow(len(index))
        np.add.at(self._counts[stream], np.asarray(rows, dtype=np.int64), 1)

    # -- queries
    @property
    def n_units(self) -> int:
        return len(self._unit_index)

    def count(self, unit: Hashable, label: str | None = None) -> int:
        """How many releases ``unit`` took part in (under ``label``, or in total)."""
        i = self._unit_index.get(unit)
        if i is None:
            return 0
        return int(sum(self._counts[s][i] for s in self._streams_of(label)))

    def _streams_of(self, label: str | None) -> list[int]:
        return [s for s, (lab, _) in enumerate(self._streams) if label is None or lab == label]

    def _profile_epsilon(self, streams: list[int], counts: np.ndarray) -> tuple[float, str]:
        event = dp_event.ComposedDpEvent(
            [
                dp_event.SelfComposedDpEvent(self._streams[s][1], int(k))
                for s, k in zip(streams, counts, strict=True)
                if k > 0
            ]
        )
        return _epsilon_of_leaves(_leaves_key(event, 1), self.delta, self._bounds, self._rdp_orders)

    def epsilon(self, unit: Hashable) -> float:
        """ε at ``self.delta`` of everything ``unit`` took part in (0 for an unknown unit)."""
        i = self._unit_index.get(unit)
        if i is None:
            return 0.0
        streams = self._streams_of(None)
        return self._profile_epsilon(streams, np.array([self._counts[s][i] for s in streams]))[0]

    def _worst(self, label: str | None = None) -> tuple[float, str]:
        """Max ε over units. Composing more releases never lowers the true ε, so only the
        Pareto-maximal count profiles need evaluating; the max of their bounds bounds all."""
        streams = self._streams_of(label)
        if not streams or self.n_units == 0:
            return 0.0, "none"
        matrix = np.stack([self._counts[s][: self.n_units] for s in streams], axis=1)
        profiles = np.unique(matrix, axis=0)
        profiles = profiles[np.lexsort(profiles.T[::-1])[::-1]]  # descending lexicographic
        frontier: list[np.ndarray] = []
        for row in profiles:
            if not any(np.all(f >= row) for f in frontier):
                frontier.append(row)
        return max((self._profile_epsilon(streams, row) for row in frontier), key=lambda t: t[0])

    def worst_epsilon(self) -> float:
        """max over units of ``epsilon(unit)`` (an upper bound on every unit's ε)."""
        return self._worst()[0]

    def summary(self) -> dict:
        """JSON-able report (non-finite ε stays a float ``inf``): per label the distinct events,
        how many units took part, max/median count per participating unit, and the worst ε of
        that label alone; plus the overall worst ε and which bound gave it."""
        labels: dict[str, dict] = {}
        for label in dict.fromkeys(lab for lab, _ in self._streams):
            streams = self._streams_of(label)
            per_unit = sum(self._counts[s][: self.n_units] for s in streams)
            taking_part = per_unit[per_unit > 0]
            eps, how = self._worst(label)
            labels[label] = {
                "events": [repr(self._streams[s][1]) for s in streams],
                "units": int(taking_part.size),
                "max_count": int(taking_part.max()) if taking_part.size else 0,
                "median_count": float(np.median(taking_part)) if taking_part.size else 0.0,
                "worst_epsilon": float(eps),
                "bound": how,
            }
        eps, how = self._worst()
        return {
            "delta": self.delta,
            "n_units": self.n_units,
            "worst_epsilon": float(eps),
            "bound": how,
            "labels": labels,
        }
