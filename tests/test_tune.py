"""benchmarks.tune: the validation slice comes from the training rows alone, and the grid is the
product of the given values."""

from __future__ import annotations

import numpy as np

from benchmarks.tune import grid, validation_dataset
from data.synthetic import synthetic


def _pairs(inter) -> set[tuple[int, int]]:
    return set(zip(inter.user.tolist(), inter.item.tolist()))


def test_validation_slice_is_drawn_from_training_rows_only():
    ds = synthetic(n_users=40, n_items=80, avg_interactions=12, seed=2)
    val = validation_dataset(ds, 0.25, seed=0)
    fit, held = _pairs(val.train), _pairs(val.test)
    assert fit | held == _pairs(ds.train) and not fit & held
    assert not held & _pairs(ds.test)  # the test split is nowhere in it
    assert len(val.train) + len(val.test) == len(ds.train)
    n_train = np.bincount(ds.train.user, minlength=ds.n_users)
    n_held = np.bincount(val.test.user, minlength=ds.n_users)
    assert np.all(n_held[n_train >= 2] >= 1) and np.all(n_held < np.maximum(n_train, 1))
    again = validation_dataset(ds, 0.25, seed=0)
    assert _pairs(again.test) == held  # deterministic for a seed


def test_grid_is_the_product_of_the_values():
    points = grid(["lr=0.1,0.2", "steps=1,10", "mode=paper"])
    assert points == [
        {"lr": 0.1, "steps": 1, "mode": "paper"},
        {"lr": 0.1, "steps": 10, "mode": "paper"},
        {"lr": 0.2, "steps": 1, "mode": "paper"},
        {"lr": 0.2, "steps": 10, "mode": "paper"},
    ]
