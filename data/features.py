"""The user features a model uses, chosen by name from a dataset, and their public description.

``select_features`` is the one reading of a ``features`` parameter ("all", or names separated by
commas) against a dataset's ``feature_kinds``; ``feature_cardinality`` and ``public_ranges`` are
what a receiver of encoded feature vectors needs to know (the layout of the categorical ones, the
public domain of the numeric ones, mapped to [-1, 1] with it); ``feature_values`` one user's raw
values. No privacy here: privacy/feature_perturbation.py encodes and perturbs the values.

A numeric feature's domain is public and fixed before the run: a ``feature_ranges`` parameter
(``"age=0:100"``), else the domain the dataset's documentation or generator gives
(:data:`DOCUMENTED_DOMAINS`, each with its source). It is never a statistic of the users' values:
the min and max over users are private data, and publishing them (every node receives the
domain) would be a release outside DIPSGNN's ε1. A value outside the domain is clipped to it
(privacy/piecewise.py ``to_unit_interval``), as LDP mechanisms over a public range do.
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


# The public domain of each numeric user feature of the datasets privrec knows, fixed before any
# run from the data's documentation or generator, never from the users' values:
# (dataset name, feature) -> (low, high, where the domain comes from). A dataset not listed here
# (a folder of the user's own files) names its numeric features' domains with ``feature_ranges``.
DOCUMENTED_DOMAINS: dict[tuple[str, str], tuple[float, float, str]] = {
    ("synthetic", "age"): (
        16.0,
        80.0,
        "data/synthetic.py: age is drawn as rint(38 + 11·z + 6·noise) and clipped to [16, 80]",
    ),
    ("ml-100k", "age"): (
        0.0,
        100.0,
        "ml-100k's README lists u.user's fields (user id | age | gender | occupation | zip "
        "code) and gives age no range: [0, 100] years, a person's age, set without looking at "
        "the values",
    ),
}


def parse_ranges(text: str) -> dict[str, tuple[float, float]]:
    """A ``feature_ranges`` parameter, ``"name=LOW:HIGH,..."``, as {name: (low, high)}; ``""``:
    none. Each range must be finite with LOW < HIGH."""
    out: dict[str, tuple[float, float]] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, bounds = (x.strip() for x in part.partition("="))
        low, colon, high = bounds.partition(":")
        try:
            lo, hi = float(low), float(high)
        except ValueError:
            lo = hi = float("nan")
        if not (name and eq and colon and np.isfinite(lo) and np.isfinite(hi) and lo < hi):
            raise FeatureSelectionError(
                "feature_ranges",
                f"{part!r} is not NAME=LOW:HIGH with finite LOW < HIGH (e.g. 'age=0:100')",
            )
        out[name] = (lo, hi)
    return out


def public_ranges(
    dataset: RecDataset, kinds: dict[str, str], given: str = ""
) -> dict[str, tuple[float, float]]:
    """(low, high) of each chosen numeric feature: its public domain, fixed before the run —
    ``given`` (a ``feature_ranges`` parameter, see :func:`parse_ranges`) where it names the
    feature, else the dataset's documented domain (:data:`DOCUMENTED_DOMAINS`). Never computed
    from the users' values; a numeric feature with no public domain is refused
    (:class:`FeatureSelectionError` naming ``feature_ranges``)."""
    ranges = parse_ranges(given)
    numeric = [n for n, k in kinds.items() if k == "numeric"]
    unknown = sorted(set(ranges) - set(numeric))
    if unknown:
        raise FeatureSelectionError(
            "feature_ranges",
            f"{unknown} not among the chosen numeric features {numeric}",
        )
    out = {}
    for name in numeric:
        if name in ranges:
            out[name] = ranges[name]
        elif (dataset.name, name) in DOCUMENTED_DOMAINS:
            out[name] = DOCUMENTED_DOMAINS[dataset.name, name][:2]
        else:
            raise FeatureSelectionError(
                "feature_ranges",
                f"numeric feature {name!r} of dataset {dataset.name!r} has no documented public "
                f"domain: give one, e.g. feature_ranges = '{name}=LOW:HIGH' (fixed before the "
                "run, not the users' min and max)",
            )
    return out


def feature_values(dataset: RecDataset, user: int, kinds: dict[str, str]) -> dict:
    """User ``user``'s raw values of the chosen features: float (numeric) or int (categorical)."""
    return {
        n: float(dataset.user_features[n][user])
        if k == "numeric"
        else int(dataset.user_features[n][user])
        for n, k in kinds.items()
    }
