"""Local perturbation of one user's side features (DIPSGNN, Hu & Fang, Algorithms 1–3; the
sampling scheme is Wang et al. ICDE 2019, Algorithm 4).

A user holds n features (numeric or categorical) and a budget ε1. On the device:

    k = max(1, min(n, ⌊ε1 / 2.5⌋))                      features are sampled uniformly without
                                                         replacement, afresh for EVERY user;
    numeric j sampled:      x'_j = (n/k) · PM(t_j, ε1/k)          t_j ∈ [-1, 1] (public min–max map)
    categorical j sampled:  x'_j = (n/k) · (b_j - q)/(p - q),     b_j = OUE(onehot_j, ε1/k)
    feature not sampled:    x'_j = 0   (all its slots)

Each sampled feature costs ε1/k and at most k are touched, so the report is ε1-LDP by
composition; the choice of features is data-independent. Every slot is unbiased:
E[x'] = encode(x) (t_j for numeric, the one-hot for categorical), because a feature is sampled with
probability k/n and the (n/k) factor undoes it. The OUE bits are debiased on the device
((b - q)/(p - q) is post-processing, so it costs no privacy) so that the vector fed to the model's
linear user map (eq. 5) is an unbiased estimate of the clean encoding.

The concatenated vector follows :func:`feature_vector_layout`: features in sorted name order, one
slot per numeric feature, ``card`` slots per categorical feature.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from privacy.oue import OUE_P, oue_perturb, oue_q
from privacy.piecewise import piecewise, to_unit_interval

NUMERIC = "numeric"
CATEGORICAL = "categorical"
EPS_PER_SAMPLED_FEATURE = 2.5  # Algorithm 3: k = ⌊ε1 / 2.5⌋ (from Wang et al. ICDE 2019, §IV)


@dataclass(frozen=True)
class FeatureSlot:
    """Where one feature lives in the concatenated vector: ``vector[start:stop]``."""

    name: str
    kind: str
    start: int
    stop: int


def feature_vector_layout(
    kinds: Mapping[str, str], cardinalities: Mapping[str, int]
) -> list[FeatureSlot]:
    """Slots of the concatenated feature vector, features in sorted name order."""
    if not kinds:
        raise ValueError("no features given (kinds is empty)")
    layout: list[FeatureSlot] = []
    start = 0
    for name in sorted(kinds):
        kind = kinds[name]
        if kind == NUMERIC:
            width = 1
        elif kind == CATEGORICAL:
            if name not in cardinalities:
                raise ValueError(f"categorical feature {name!r} has no cardinality")
            width = int(cardinalities[name])
            if width < 1:
                raise ValueError(f"feature {name!r}: cardinality must be >= 1, got {width}")
        else:
            raise ValueError(
                f"feature {name!r}: kind must be 'numeric' or 'categorical', got {kind!r}"
            )
        layout.append(FeatureSlot(name, kind, start, start + width))
        start += width
    return layout


def feature_vector_length(layout: Sequence[FeatureSlot]) -> int:
    """Length of the concatenated vector."""
    return layout[-1].stop if layout else 0


def sampled_feature_count(n_features: int, eps1: float) -> int:
    """k = max(1, min(n, ⌊ε1 / 2.5⌋))."""
    if n_features < 1:
        raise ValueError(f"need at least one feature, got {n_features}")
    if not math.isfinite(eps1) or eps1 <= 0:
        raise ValueError(f"eps1 must be a finite positive number, got {eps1!r}")
    return max(1, min(n_features, int(math.floor(eps1 / EPS_PER_SAMPLED_FEATURE))))


def sample_feature_subset(
    layout: Sequence[FeatureSlot], eps1: float, generator: np.random.Generator
) -> list[str]:
    """The k feature names one user perturbs (uniform without replacement), in layout order."""
    k = sampled_feature_count(len(layout), eps1)
    picked = np.sort(generator.choice(len(layout), size=k, replace=False))
    return [layout[i].name for i in picked]


def _check_user(
    features: Mapping[str, float | int],
    layout: Sequence[FeatureSlot],
    public_ranges: Mapping[str, tuple[float, float]],
) -> None:
    names = {s.name for s in layout}
    missing = names - set(features)
    extra = set(features) - names
    if missing or extra:
        raise ValueError(
            f"user features do not match kinds: missing {sorted(missing)}, unknown {sorted(extra)}"
        )
    for slot in layout:
        value = features[slot.name]
        if slot.kind == NUMERIC:
            if slot.name not in public_ranges:
                raise ValueError(f"numeric feature {slot.name!r} has no public range")
        else:
            card = slot.stop - slot.start
            if int(value) != value or not 0 <= int(value) < card:
                raise ValueError(
                    f"categorical feature {slot.name!r}: code must be an integer in [0, {card}), got {value!r}"
                )


def _clean_slot_values(
    slot: FeatureSlot, value: float | int, public_ranges: Mapping[str, tuple[float, float]]
) -> np.ndarray:
    if slot.kind == NUMERIC:
        low, high = public_ranges[slot.name]
        return np.atleast_1d(to_unit_interval(float(value), low, high))
    onehot = np.zeros(slot.stop - slot.start, dtype=np.float64)
    onehot[int(value)] = 1.0
    return onehot


def encode_user_features(
    features: Mapping[str, float | int],
    kinds: Mapping[str, str],
    cardinalities: Mapping[str, int],
    public_ranges: Mapping[str, tuple[float, float]],
) -> np.ndarray:
    """The clean (unperturbed) vector: numeric mapped to [-1, 1], categorical one-hot; float32.
    This is what :func:`perturb_user_features` estimates without bias (non-private baseline)."""
    layout = feature_vector_layout(kinds, cardinalities)
    _check_user(features, layout, public_ranges)
    out = np.zeros(feature_vector_length(layout), dtype=np.float64)
    for slot in layout:
        out[slot.start : slot.stop] = _clean_slot_values(slot, features[slot.name], public_ranges)
    return out.astype(np.float32)


def perturb_user_features(
    features: Mapping[str, float | int],
    kinds: Mapping[str, str],
    cardinalities: Mapping[str, int],
    public_ranges: Mapping[str, tuple[float, float]],
    eps1: float,
    generator: np.random.Generator,
) -> np.ndarray:
    """Algorithm 3 for ONE user: ε1-LDP, unbiased perturbed feature vector (float32).

    ``features`` maps every name in ``kinds`` to this user's value (a number for numeric, an
    integer code for categorical); ``public_ranges`` gives (low, high) for each numeric feature.
    """
    layout = feature_vector_layout(kinds, cardinalities)
    _check_user(features, layout, public_ranges)
    n = len(layout)
    sampled = set(sample_feature_subset(layout, eps1, generator))
    k = len(sampled)
    eps_each = eps1 / k
    scale = n / k
    out = np.zeros(feature_vector_length(layout), dtype=np.float64)
    for slot in layout:
        if slot.name not in sampled:
            continue  # unsampled features travel as zeros
        clean = _clean_slot_values(slot, features[slot.name], public_ranges)
        if slot.kind == NUMERIC:
            noisy = piecewise(clean, eps_each, generator)
        else:
            q = oue_q(eps_each)
            bits = oue_perturb(clean.astype(np.uint8), eps_each, generator)
            noisy = (bits - q) / (OUE_P - q)
        out[slot.start : slot.stop] = scale * noisy
    return out.astype(np.float32)


def in_output_range(
    x: np.ndarray,
    kinds: Mapping[str, str],
    cardinalities: Mapping[str, int],
    eps1: float,
    atol: float = 1e-4,
) -> bool:
    """Whether ``x`` is a possible output of Algorithm 3 (what a validator of the curator could
    check): the public layout's length; at most k = ``sampled_feature_count`` features non-zero
    (unsampled ones are zeros); a sampled numeric slot in (n/k)·[−C, C] (C of the
    piecewise mechanism at ε1/k); a sampled categorical slot with every entry (n/k)·(b − q)/(p −
    q), b ∈ {0, 1} (OUE at ε1/k)."""
    from privacy.piecewise import piecewise_bound

    layout = feature_vector_layout(kinds, cardinalities)
    x = np.asarray(x, dtype=np.float64)
    if x.shape != (feature_vector_length(layout),) or not np.all(np.isfinite(x)):
        return False
    n = len(layout)
    k = sampled_feature_count(n, eps1)
    scale, eps_each = n / k, eps1 / k
    q = oue_q(eps_each)
    bits = scale * (np.array([0.0, 1.0]) - q) / (OUE_P - q)
    used = 0
    for slot in layout:
        v = x[slot.start : slot.stop]
        if not np.any(v):
            continue
        used += 1
        if slot.kind == NUMERIC:
            if np.abs(v).max() > scale * piecewise_bound(eps_each) + atol:
                return False
        elif not np.all(np.min(np.abs(v[:, None] - bits[None, :]), axis=1) <= atol):
            return False
    return used <= k
