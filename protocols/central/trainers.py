"""One trainer interface over the centralized models: ``train_epoch() -> figures`` (with "loss")
and ``evaluate() -> metrics``. No Ray: the curator node wraps one of these.

* ranking (lightgcn, bprmf): models/lightgcn.py ``CentralTrainer`` (bprmf = K = 0);
  Recall/NDCG/Precision/Hit/MRR@eval_k over all items outside the user's training set.
* rating (gcn, gat, ggnn, mf): models/rating_gnn ``RatingTrainer`` (VerFedGNN's layers, eq. 5,
  Adagrad); RMSE on the test ratings (and on validation ratings when there are any).
* sequential (dipsgnn): protocols/central/sequential.py ``SequentialTrainer``.
"""

from __future__ import annotations

import math
from typing import Protocol as TypingProtocol

import torch

from data.splits import random_split
from data.types import RecDataset
from models.lightgcn import CentralTrainer
from models.rating_gnn import build_rating_gnn, global_mean_rmse
from models.rating_gnn.training import RatingTrainer
from protocols.central.sequential import SequentialTrainer

RANKING, RATING, SEQUENTIAL = "ranking", "rating", "sequential"
TASK_OF_MODEL = {
    "lightgcn": RANKING,
    "bprmf": RANKING,
    "gcn": RATING,
    "gat": RATING,
    "ggnn": RATING,
    "mf": RATING,
    "dipsgnn": SEQUENTIAL,
}


class Trainer(TypingProtocol):
    def train_epoch(self) -> dict[str, float]: ...

    def evaluate(self) -> dict[str, float]: ...


class RankingTrainer:
    def __init__(self, dataset: RecDataset, c, seed: int, device: torch.device):
        self.inner = CentralTrainer(
            dataset,
            dim=c.dim,
            layers=c.layers,
            lr=c.lr,
            reg=c.l2,
            batch_size=c.batch_size,
            seed=seed,
            device=device,
            item_side=c.item_side,
            eval_k=c.eval_k,
        )

    def train_epoch(self) -> dict[str, float]:
        return {"loss": self.inner.train_epoch()}

    def evaluate(self) -> dict[str, float]:
        return self.inner.evaluate()


class RatingPredictionTrainer:
    """Train on the dataset's training ratings (less a per-user ``val_fraction`` held out for
    validation, or the dataset's own val); test RMSE on its test ratings."""

    def __init__(self, dataset: RecDataset, c, seed: int, device: torch.device):
        train, val = (
            dataset.train,
            dataset.val if dataset.val is not None and len(dataset.val) else None,
        )
        if val is None and c.val_fraction > 0:
            train, val = random_split(dataset.train, dataset.n_users, c.val_fraction, seed)
        self.test = dataset.test
        self.global_mean_rmse = global_mean_rmse(train, self.test)
        model = build_rating_gnn(
            dataset.n_users,
            dataset.n_items,
            train,
            thd=c.thd,
            kind=c.model,
            dim=c.dim,
            n_layers=c.layers,
            activation=c.activation,
            use_bias=c.use_bias,
            init_std=c.init_std,
            seed=seed,
        ).to(device)
        self.inner = RatingTrainer(
            model, train, val, lr=c.lr, batch_size=c.batch_size, l2=c.l2, seed=seed
        )

    def train_epoch(self) -> dict[str, float]:
        entry = self.inner.train_epoch()
        out = {"loss": entry["train_loss"], "train_rmse": entry["train_rmse"]}
        if not math.isnan(entry["val_rmse"]):
            out["val_rmse"] = entry["val_rmse"]
        return out

    def evaluate(self) -> dict[str, float]:
        test = self.inner.evaluate(self.test)
        out = {"rmse": test, "test_rmse": test, "global_mean_rmse": self.global_mean_rmse}
        if self.inner.val is not None:
            out["val_rmse"] = self.inner.evaluate(self.inner.val)
        return out


class SequenceTrainer:
    def __init__(self, dataset: RecDataset, c, seed: int, device: torch.device):
        self.inner = SequentialTrainer(
            dataset,
            use_features=c.use_features,
            features=c.features,
            hidden_dim=c.dim,
            user_dim=c.user_dim,
            steps=c.layers,
            clip_norm=c.clip_norm,
            max_edge_weight=c.max_edge_weight,
            max_len=c.max_len,
            train_fraction=c.train_fraction,
            batch_size=c.batch_size,
            lr=c.lr,
            l2=c.l2,
            seed=seed,
            device=device,
            eval_k=c.eval_k,
        )

    def train_epoch(self) -> dict[str, float]:
        return {"loss": self.inner.train_epoch()}

    def evaluate(self) -> dict[str, float]:
        return self.inner.evaluate()


def build_trainer(dataset: RecDataset, config, seed: int, device: torch.device) -> Trainer:
    """The trainer of ``config.model`` (a protocols.central.CentralConfig) on ``dataset``."""
    task = TASK_OF_MODEL[config.model]
    cls = {
        RANKING: RankingTrainer,
        RATING: RatingPredictionTrainer,
        SEQUENTIAL: SequenceTrainer,
    }[task]
    return cls(dataset, config, seed, device)
