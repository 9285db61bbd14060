"""The user features a model uses, chosen by name from a dataset, and their public description.

``select_features`` is the one reading of a ``features`` parameter ("all", or names separated by
commas) against a dataset's ``feature_kinds``; ``feature_cardinality`` and ``public_ranges`` are
what a receiver of encoded feature vectors needs to know (the layout of the categorical ones, the
public domain of the numeric ones, mapped to [-1, 1] with it); ``feature_values`` one user's raw
values. No privacy here: privacy/feature_perturbation.py encodes and perturbs the values.
"""

from __future__ import annotations

import numpy as np

from data.types import RecDataset


class FeatureSelectionError(ValueError):
    """The dataset has no user features, or lacks one asked for. ``parameter`` names the
    configuration parameter to blame: ``use_features`` or ``features``."""

    def __init__(self, parameter: str, why: str):
        super().__init__(f"{parameter}: {why}")
        self.parameter, self.why = parameter, why


def select_features(dataset: RecDataset, features: str) -> dict[str, str]:
    """Name → kind ("numeric" or "categorical") of the chosen user features, in the order asked
    for (``"all"``: every feature of the dataset, in its order)."""
    if not dataset.feature_kinds:
        raise FeatureSelectionError(
            "use_features", f"dataset {dataset.name!r} has no user features"
        )
    if features == "all":
        return dict(dataset.feature_kinds)
    names = [n.strip() for n in features.split(",") if n.strip()]
    missing = [n for n in names if n not in dataset.feature_kinds]
    if not names or missing:
        raise FeatureSelectionError(
            "features",
            f"unknown feature(s) {missing} (dataset has {sorted(dataset.feature_kinds)})",
        )
    return {n: dataset.feature_kinds[n] for n in names}


def feature_cardinality(dataset: RecDataset, kinds: dict[str, str]) -> dict[str, int]:
    """Number of categories of each chosen categorical feature."""
    return {n: dataset.feature_cardinality[n] for n, k in kinds.items() if k == "categorical"}


def public_ranges(dataset: RecDataset, kinds: dict[str, str]) -> dict[str, tuple[float, float]]:
    """(min, max) over the dataset of each chosen numeric feature: its domain, taken as public."""
    return {
        n: (float(np.min(dataset.user_features[n])), float(np.max(dataset.user_features[n])))
        for n, k in kinds.items()
        if k == "numeric"
    }


def feature_values(dataset: RecDataset, user: int, kinds: dict[str, str]) -> dict:
    """User ``user``'s raw values of the chosen features: float (numeric) or int (categorical)."""
    return {
        n: float(dataset.user_features[n][user])
        if k == "numeric"
        else int(dataset.user_features[n][user])
        for n, k in kinds.items()
    }
