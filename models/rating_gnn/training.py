"""Centralized training of RatingGNN: Adagrad (paper: lr 0.05) on minibatches of ratings,
each step a full-graph propagation; RMSE with predictions clamped to the rating range."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from cluster.device import build
from data.splits import random_split
from data.types import Interactions, RecDataset
from models.rating_gnn.model import RatingGNN, rating_edges
from models.trainer import Trainer

RatingTriples = Interactions | tuple[np.ndarray, np.ndarray, np.ndarray]


def as_triples(data: RatingTriples, name: str = "data") -> tuple[np.ndarray, ...]:
    """(user, item, rating) arrays from an Interactions with ratings or a 3-tuple."""
    if isinstance(data, Interactions):
        if data.rating is None:
            raise ValueError(f"{name} has no rating column")
        user, item, rating = data.user, data.item, data.rating
    elif isinstance(data, tuple) and len(data) == 3:
        user, item, rating = data
    else:
        raise ValueError(f"{name} must be Interactions or a (user, item, rating) tuple")
    user, item = np.asarray(user, dtype=np.int64), np.asarray(item, dtype=np.int64)
    rating = np.asarray(rating, dtype=np.float32)
    if not (user.shape == item.shape == rating.shape) or user.ndim != 1:
        raise ValueError(f"{name}: user, item, rating must be 1-D arrays of equal length")
    if not np.isfinite(rating).all():
        raise ValueError(f"{name}: ratings contain NaN or infinite values")
    return user, item, rating


def build_rating_gnn(
    n_users: int, n_items: int, train: RatingTriples, *, thd: float = 4.0, **kwargs: Any
) -> RatingGNN:
    """RatingGNN whose graph is the training ratings ≥ thd (kwargs go to RatingGNN)."""
    user, item, rating = as_triples(train, "train")
    edge_user, edge_item = rating_edges(user, item, rating, thd)
    return RatingGNN(n_users, n_items, edge_user, edge_item, **kwargs)


def adagrad(params, lr: float) -> torch.optim.Adagrad:
    """Adagrad as the paper uses it (accumulators start at 1e-8). Made under the CPU device:
    torch's (non-fused) Adagrad keeps its step counters as CPU scalars, which would otherwise
    follow torch's default device (``meta`` in a checked run, cluster/device.py)."""
    with torch.device("cpu"):
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=1e-8)


def _check_ids(model: RatingGNN, user: np.ndarray, item: np.ndarray, name: str) -> None:
    if len(user) and (user.min() < 0 or user.max() >= model.n_users):
        raise ValueError(f"{name}: user ids outside [0, {model.n_users})")
    if len(item) and (item.min() < 0 or item.max() >= model.n_items):
        raise ValueError(f"{name}: item ids outside [0, {model.n_items})")


@torch.no_grad()
def evaluate_rmse(
    model: RatingGNN, data: RatingTriples, rating_range: tuple[float, float] | None = None
) -> float:
    """RMSE of r̂ (clamped to rating_range when given) on data."""
    user, item, rating = as_triples(data)
    _check_ids(model, user, item, "data")
    if len(user) == 0:
        raise ValueError("cannot compute RMSE on an empty set")
    dev = model.user_emb.weight.device
    was_training = model.training
    model.eval()
    prop = model.propagate()
    pred = model.predict(prop, torch.as_tensor(user, device=dev), torch.as_tensor(item, device=dev))
    model.train(was_training)
    if rating_range is not None:
        pred = pred.clamp(*rating_range)
    target = torch.as_tensor(rating, device=dev)
    return float(torch.sqrt((pred - target).pow(2).mean()))


def global_mean_rmse(train: RatingTriples, test: RatingTriples) -> float:
    """RMSE of predicting the training mean for every test rating (the trivial baseline)."""
    _, _, r_train = as_triples(train, "train")
    _, _, r_test = as_triples(test, "test")
    return float(np.sqrt(np.mean((r_test - r_train.mean()) ** 2)))


class RatingTrainer(Trainer):
    """Centralized RatingGNN trained epoch by epoch (models/trainer.py's interface): Adagrad on
    eq. 5 over shuffled minibatches of the training ratings, each step a full-graph propagation.

    ``train_epoch()`` runs one epoch and returns {"loss", "train_rmse"} and "val_rmse" when there
    is a validation set; ``evaluate()`` returns the RMSE on ``test`` ("rmse" = "test_rmse"), the
    RMSE of predicting the training mean ("global_mean_rmse") and "val_rmse" when there is a
    validation set; ``rmse(data)`` is the RMSE on any ``data``. Predictions are clamped to
    ``rating_range`` (default: (min, max) of the training ratings, as the authors do).
    :meth:`from_dataset` builds the model and the split of a dataset."""

    def __init__(
        self,
        model: RatingGNN,
        train: RatingTriples,
        val: RatingTriples | None = None,
        *,
        test: RatingTriples | None = None,
        lr: float = 0.05,
        batch_size: int = 1024,
        l2: float = 1e-3,
        seed: int = 0,
        rating_range: tuple[float, float] | None = None,
    ):
        if batch_size < 1 or not lr > 0 or l2 < 0:
            raise ValueError(f"need batch_size >= 1, lr > 0, l2 >= 0; got {batch_size}, {lr}, {l2}")
        user, item, rating = as_triples(train, "train")
        if len(user) == 0:
            raise ValueError("train is empty")
        _check_ids(model, user, item, "train")
        for name, part in (("val", val), ("test", test)):
            if part is not None:
                pu, pi, _ = as_triples(part, name)
                _check_ids(model, pu, pi, name)
        if rating_range is None:
            rating_range = (float(rating.min()), float(rating.max()))
        self.model, self.val, self.test, self.l2, self.batch_size = model, val, test, l2, batch_size
        self.train_triples = (user, item, rating)
        self.rating_range = rating_range
        self.global_mean_rmse = None if test is None else global_mean_rmse(train, test)
        dev = model.user_emb.weight.device
        if model.use_bias:
            model.global_mean.fill_(float(rating.mean()))
        self.u_all = torch.as_tensor(user, device=dev)
        self.i_all = torch.as_tensor(item, device=dev)
        self.r_all = torch.as_tensor(rating, device=dev)
        self.optimizer = adagrad(model.parameters(), lr)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.epochs_done = 0

    @classmethod
    def from_dataset(
        cls,
        dataset: RecDataset,
        *,
        kind: str = "gcn",
        dim: int = 6,
        layers: int = 2,
        lr: float = 0.05,
        l2: float = 1e-3,
        batch_size: int = 1024,
        thd: float = 4.0,
        activation: str = "sigmoid",
        init_std: float = 0.1,
        use_bias: bool = False,
        val_fraction: float = 0.0,
        seed: int = 0,
        device: str | torch.device = "cpu",
    ) -> RatingTrainer:
        """Train on ``dataset``'s training ratings (less a per-user ``val_fraction`` held out for
        validation, or the dataset's own validation part); test on its test ratings. The graph
        is the training ratings ≥ ``thd``."""
        train = dataset.train
        val = dataset.val if dataset.val is not None and len(dataset.val) else None
        if val is None and val_fraction > 0:
            train, val = random_split(dataset.train, dataset.n_users, val_fraction, seed)
        model = build(
            lambda: build_rating_gnn(
                dataset.n_users,
                dataset.n_items,
                train,
                thd=thd,
                kind=kind,
                dim=dim,
                n_layers=layers,
                activation=activation,
                use_bias=use_bias,
                init_std=init_std,
                seed=seed,
            ),
            device,
        )
        return cls(
            model, train, val, test=dataset.test, lr=lr, batch_size=batch_size, l2=l2, seed=seed
        )

    def random_streams(self) -> dict:
        return {"generator": self.generator}  # the epoch order

    def train_epoch(self) -> dict[str, float]:
        model, n = self.model, len(self.u_all)
        model.train()
        order = torch.randperm(n, generator=self.generator, device="cpu").to(self.u_all.device)
        total, count = 0.0, 0
        for start in range(0, n, self.batch_size):
            idx = order[start : start + self.batch_size]
            self.optimizer.zero_grad()
            loss = model.loss(
                model.propagate(), self.u_all[idx], self.i_all[idx], self.r_all[idx], self.l2
            )
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        self.epochs_done += 1
        out = {"loss": total / count, "train_rmse": self.rmse(self.train_triples)}
        if self.val is not None:
            val_rmse = self.rmse(self.val)
            if not math.isnan(val_rmse):  # a diverged model reports no validation figure
                out["val_rmse"] = val_rmse
        return out

    def evaluate(self) -> dict[str, float]:
        if self.test is None:
            raise ValueError("RatingTrainer.evaluate: no test ratings were given")
        test = self.rmse(self.test)
        out = {"rmse": test, "test_rmse": test, "global_mean_rmse": self.global_mean_rmse}
        if self.val is not None:
            out["val_rmse"] = self.rmse(self.val)
        return out

    def rmse(self, data: RatingTriples) -> float:
        """RMSE on ``data`` (r̂ clamped to the rating range)."""
        return evaluate_rmse(self.model, data, self.rating_range)


def train_central(
    model: RatingGNN,
    train: RatingTriples,
    val: RatingTriples | None = None,
    *,
    epochs: int = 20,
    lr: float = 0.05,
    batch_size: int = 1024,
    l2: float = 1e-3,
    seed: int = 0,
    rating_range: tuple[float, float] | None = None,
) -> list[dict[str, float]]:
    """Adagrad on eq. 5 for ``epochs`` epochs (:class:`RatingTrainer`); returns the per-epoch
    history {"epoch", "train_loss", "train_rmse", "val_rmse"} (NaN without ``val``)."""
    if epochs < 0:
        raise ValueError(f"need epochs >= 0, got {epochs}")
    trainer = RatingTrainer(
        model,
        train,
        val,
        lr=lr,
        batch_size=batch_size,
        l2=l2,
        seed=seed,
        rating_range=rating_range,
    )
    history = []
    for _ in range(epochs):
        figures = trainer.train_epoch()
        history.append(
            {
                "epoch": float(trainer.epochs_done),
                "train_loss": figures["loss"],
                "train_rmse": figures["train_rmse"],
                "val_rmse": figures.get("val_rmse", math.nan),
            }
        )
    return history
