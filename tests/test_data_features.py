"""data/features.py: the one reading of a ``features`` parameter and the public description of the
chosen features."""

from __future__ import annotations

import numpy as np
import pytest

from data.features import (
    FeatureSelectionError,
    feature_cardinality,
    feature_values,
    public_ranges,
    select_features,
)
from data.synthetic import synthetic


def test_select_features_all_names_and_errors():
    ds = synthetic(n_users=8, n_items=10, avg_interactions=3, seed=0)
    assert select_features(ds, "all") == dict(ds.feature_kinds)
    names = list(ds.feature_kinds)[:2]
    chosen = select_features(ds, " , ".join(reversed(names)))
    assert list(chosen) == list(reversed(names))  # in the order asked for
    with pytest.raises(FeatureSelectionError, match=r"^features: unknown feature\(s\) \['nope'\]"):
        select_features(ds, f"{names[0]},nope")
    with pytest.raises(FeatureSelectionError, match="^features"):
        select_features(ds, " , ")
    ds.feature_kinds = {}
    with pytest.raises(FeatureSelectionError, match="^use_features"):
        select_features(ds, "all")


def test_public_description_and_values():
    ds = synthetic(n_users=8, n_items=10, avg_interactions=3, seed=0)
    kinds = select_features(ds, "all")
    card = feature_cardinality(ds, kinds)
    ranges = public_ranges(ds, kinds)
    assert set(card) | set(ranges) == set(kinds) and not set(card) & set(ranges)
    for name, (lo, hi) in ranges.items():
        assert lo == np.min(ds.user_features[name]) and hi == np.max(ds.user_features[name])
    values = feature_values(ds, 3, kinds)
    for name, kind in kinds.items():
        assert isinstance(values[name], float if kind == "numeric" else int)
