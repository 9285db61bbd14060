"""Trivial reference points every ranking result is read against."""

from __future__ import annotations

import math

import numpy as np
import torch

from data.types import RecDataset
from models.metrics import popularity_scores, ranking_metrics, topk_excluding


def popularity_metrics(dataset: RecDataset, k: int = 20, chunk: int = 2048) -> dict[str, float]:
    """Rank every user's unseen items by training popularity; mean metrics over users with a test set."""
    train = dataset.train.items_by_user(dataset.n_users)
    test = dataset.test.items_by_user(dataset.n_users)
    users = [u for u in range(dataset.n_users) if len(test[u])]
    scores_row = popularity_scores(dataset.train.item, dataset.n_items).to(torch.float32)
    sums: dict[str, list[float]] = {}
    for start in range(0, len(users), chunk):
        batch = users[start : start + chunk]
        scores = scores_row.expand(len(batch), -1)
        top = topk_excluding(scores, [train[u] for u in batch], k)
        for name, values in ranking_metrics(top, [test[u] for u in batch], ks=(k,)).items():
            sums.setdefault(name, []).extend(np.asarray(values).tolist())
    return {name: math.fsum(v) / len(v) for name, v in sums.items()}


def mean_rating_metrics(dataset: RecDataset) -> dict[str, float]:
    """Predict every test rating by the mean training rating: the RMSE and MAE that a rating
    model must beat (the rating counterpart of :func:`popularity_metrics`)."""
    mean = float(np.mean(dataset.train.rating, dtype=np.float64))
    err = np.asarray(dataset.test.rating, dtype=np.float64) - mean
    return {"rmse": math.sqrt(float(np.mean(err**2))), "mae": float(np.mean(np.abs(err)))}


def trivial_baselines(dataset: RecDataset, k: int = 20) -> dict[str, dict[str, float]]:
    """The run report's trivial baselines: popularity ranking always, the mean rating too when
    the dataset has ratings."""
    out = {"popularity": popularity_metrics(dataset, k=k)}
    if dataset.has_ratings and dataset.test.rating is not None and len(dataset.test.rating):
        out["mean_rating"] = mean_rating_metrics(dataset)
    return out
