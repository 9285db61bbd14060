"""Algorithm 3: per-user feature sampling, fixed layout, unbiased perturbed vector."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.feature_perturbation import (
    encode_user_features,
    feature_vector_layout,
    feature_vector_length,
    perturb_user_features,
    sample_feature_subset,
    sampled_feature_count,
)

KINDS = {
    "occupation": "categorical",
    "age": "numeric",
    "gender": "categorical",
    "income": "numeric",
}
CARDS = {"occupation": 5, "gender": 2}
RANGES = {"age": (0.0, 100.0), "income": (0.0, 1.0)}
USER = {"occupation": 3, "age": 70.0, "gender": 0, "income": 0.2}


def test_layout_is_sorted_by_name_with_one_hot_widths() -> None:
    layout = feature_vector_layout(KINDS, CARDS)
    assert [s.name for s in layout] == ["age", "gender", "income", "occupation"]
    assert [(s.start, s.stop) for s in layout] == [(0, 1), (1, 3), (3, 4), (4, 9)]
    assert feature_vector_length(layout) == 9
    clean = encode_user_features(USER, KINDS, CARDS, RANGES)
    np.testing.assert_allclose(clean, [0.4, 1, 0, -0.6, 0, 0, 0, 1, 0], atol=1e-6)


@pytest.mark.parametrize(("eps1", "n", "k"), [(1.0, 4, 1), (2.49, 4, 1), (5.0, 4, 2), (20.0, 4, 4)])
def test_sampled_feature_count(eps1: float, n: int, k: int) -> None:
    assert sampled_feature_count(n, eps1) == k


@pytest.mark.parametrize("eps1", [0.5, 5.0, 7.6, 30.0])
def test_output_has_fixed_length_and_zeros_outside_the_k_sampled_features(eps1: float) -> None:
    layout = feature_vector_layout(KINDS, CARDS)
    k = sampled_feature_count(len(layout), eps1)
    rng = np.random.default_rng(5)
    for _ in range(50):
        out = perturb_user_features(USER, KINDS, CARDS, RANGES, eps1, rng)
        assert out.dtype == np.float32 and out.shape == (9,)
        touched = [s.name for s in layout if np.any(out[s.start : s.stop] != 0)]
        assert len(touched) == k


def test_sampling_is_per_user_with_probability_k_over_n() -> None:
    layout = feature_vector_layout(KINDS, CARDS)
    eps1, n_users = 5.0, 4000
    k = sampled_feature_count(len(layout), eps1)
    rng = np.random.default_rng(21)
    subsets = [tuple(sample_feature_subset(layout, eps1, rng)) for _ in range(n_users)]
    assert len(set(subsets)) == math.comb(len(layout), k)  # every k-subset occurs
    p = k / len(layout)
    for slot in layout:
        freq = np.mean([slot.name in s for s in subsets])
        assert abs(freq - p) < 5 * math.sqrt(p * (1 - p) / n_users)
    # two users with their own generators usually perturb different features
    outs = [
        perturb_user_features(USER, KINDS, CARDS, RANGES, eps1, np.random.default_rng(seed)) != 0
        for seed in range(20)
    ]
    assert len({o.tobytes() for o in outs}) > 1


@pytest.mark.parametrize("eps1", [2.0, 10.0])
def test_perturbed_vector_is_unbiased(eps1: float) -> None:
    reps = 4000
    rng = np.random.default_rng(99)
    draws = np.stack(
        [perturb_user_features(USER, KINDS, CARDS, RANGES, eps1, rng) for _ in range(reps)]
    ).astype(np.float64)
    clean = encode_user_features(USER, KINDS, CARDS, RANGES)
    se = draws.std(axis=0) / math.sqrt(reps)
    assert np.all(np.abs(draws.mean(axis=0) - clean) < 5 * se)


def test_bad_input_gets_a_clear_error() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="missing"):
        perturb_user_features({"age": 3.0}, KINDS, CARDS, RANGES, 1.0, rng)
    with pytest.raises(ValueError, match="unknown"):
        perturb_user_features({**USER, "zip": 1}, KINDS, CARDS, RANGES, 1.0, rng)
    with pytest.raises(ValueError, match="occupation"):
        perturb_user_features({**USER, "occupation": 5}, KINDS, CARDS, RANGES, 1.0, rng)
    with pytest.raises(ValueError, match="public range"):
        perturb_user_features(USER, KINDS, CARDS, {"age": (0, 100)}, 1.0, rng)
    with pytest.raises(ValueError, match="kind"):
        feature_vector_layout({"a": "ordinal"}, {})
    with pytest.raises(ValueError, match="cardinality"):
        feature_vector_layout({"a": "categorical"}, {})
    with pytest.raises(ValueError, match="eps1"):
        perturb_user_features(USER, KINDS, CARDS, RANGES, 0.0, rng)
