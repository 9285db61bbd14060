"""data/features.py: the one reading of a ``features`` parameter and the public description of the
chosen features."""

from __future__ import annotations

import numpy as np
import pytest

from data.features import (
    DOCUMENTED_DOMAINS,
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
    assert ranges == {"age": (16.0, 80.0)}  # the generator's documented domain
    values = feature_values(ds, 3, kinds)
    for name, kind in kinds.items():
        assert isinstance(values[name], float if kind == "numeric" else int)


def test_numeric_domains_are_fixed_before_the_run_not_read_from_the_users():
    """The public domain is a constant (documented, or the feature_ranges parameter): changing
    every user's private value changes nothing in it (the min and max were a release outside
    DIPSGNN's ε1)."""
    ds = synthetic(n_users=8, n_items=10, avg_interactions=3, seed=0)
    kinds = select_features(ds, "all")
    before = public_ranges(ds, kinds)
    ds.user_features["age"] = np.full(ds.n_users, 99.0, dtype=np.float32)
    assert public_ranges(ds, kinds) == before
    assert public_ranges(ds, kinds, "age=10:70") == {"age": (10.0, 70.0)}
    ml = synthetic(n_users=8, n_items=10, avg_interactions=3, seed=0)
    ml.name = "ml-100k"
    assert public_ranges(ml, kinds) == {"age": DOCUMENTED_DOMAINS["ml-100k", "age"][:2]}
    for low, high, _source in DOCUMENTED_DOMAINS.values():
        assert low < high
    mine = synthetic(n_users=8, n_items=10, avg_interactions=3, seed=0)
    mine.name = "my-folder"  # the user's own files: no documented domain
    with pytest.raises(FeatureSelectionError, match=r"^feature_ranges: .*'age'.*no documented"):
        public_ranges(mine, kinds)
    assert public_ranges(mine, kinds, " age = 0 : 120 ") == {"age": (0.0, 120.0)}
    assert public_ranges(mine, {"gender": "categorical"}) == {}  # only numeric ones need one
    for bad in ("age", "age=1", "age=5:1", "age=0:inf", "age=a:b", "=0:1"):
        with pytest.raises(FeatureSelectionError, match="^feature_ranges: .*NAME=LOW:HIGH"):
            public_ranges(mine, kinds, bad)
    with pytest.raises(FeatureSelectionError, match=r"^feature_ranges: \['gender'\] not among"):
        public_ranges(ds, kinds, "gender=0:1")
