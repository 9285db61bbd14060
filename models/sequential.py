"""The DIPSGNN network without noise, trained centrally: the non-private sequential baseline
(APGNN-style with clean user features; SR-GNN-style with ``use_features=False``), a trainer of
models/trainer.py's family.

Data as the dipsgnn protocol prepares it (protocols/dipsgnn): every interaction (the dataset's
train, val and test parts pooled) ordered by time per user, the ``max_len`` most recent kept; users
with at least two items take part; a sequence s of length L splits at n_tr = ⌊0.8·L⌋:

    train:  s[:j] → s[j]   for j = 1 .. n_tr − 1
    test:   s[:j] → s[j]   for j = max(n_tr, 1) .. L − 1

One epoch = protocols/dipsgnn/training.py ``train_epoch`` with σ = 0 (eqs. 4–13, Adam); the
evaluation ranks all items for every test prefix (``rank_prefixes``, ties by the lower item id)
and reports Recall@K and MRR@K (models/metrics.py with the one target as the test set), K = 5,
10, 20 and ``eval_k``, averaged over all test positions (as the dipsgnn protocol's evaluate).
User features are the clean encoding (numeric mapped to [−1, 1] with the public domain the
dipsgnn protocol uses, data/features.py ``public_ranges``; categorical one-hot): what Algorithm 3
estimates without bias.
"""

from __future__ import annotations

import numpy as np
import torch

from cluster.device import build, to_device
from data.features import feature_cardinality, feature_values, public_ranges, select_features
from data.sequences import pooled_interactions, training_prefixes, user_sequences
from data.types import RecDataset
from models.gated_session_gnn import DIPSGNN, KS
from models.metrics import ranking_metrics
from models.session_training import rank_prefixes, train_epoch
from models.trainer import Trainer
from privacy.feature_perturbation import (
    encode_user_features,
    feature_vector_layout,
    feature_vector_length,
)


def clean_feature_matrix(
    dataset: RecDataset, users: np.ndarray, kinds: dict[str, str], feature_ranges: str = ""
) -> np.ndarray:
    """[len(users), slots] float32: each user's clean feature vector (rows in ``users`` order);
    ``feature_ranges`` as the dipsgnn protocol's parameter (data/features.py)."""
    cardinality = feature_cardinality(dataset, kinds)
    ranges = public_ranges(dataset, kinds, feature_ranges)
    rows = [
        encode_user_features(feature_values(dataset, u, kinds), kinds, cardinality, ranges)
        for u in users
    ]
    width = feature_vector_length(feature_vector_layout(kinds, cardinality))
    return np.stack(rows) if rows else np.zeros((0, width), dtype=np.float32)


class SequentialTrainer(Trainer):
    """The noiseless DIPSGNN network on the whole training data; ``train_epoch()`` → mean loss
    (eq. 13), ``evaluate()`` → Recall/MRR@5/10/20 (and @eval_k) over all test positions.
    ``dim`` is the hidden size d, ``layers`` the T propagation steps, ``l2`` Adam's weight
    decay."""

    def __init__(
        self,
        dataset: RecDataset,
        *,
        use_features: bool = True,
        features: str = "age,gender,occupation",
        feature_ranges: str = "",
        dim: int = 100,
        user_dim: int = 50,
        layers: int = 1,
        clip_norm: float = 0.5,
        max_edge_weight: float = 1.0,
        max_len: int = 100,
        train_fraction: float = 0.8,
        batch_size: int = 100,
        lr: float = 1e-3,
        l2: float = 1e-5,
        seed: int = 0,
        device: str | torch.device = "cpu",
        eval_k: int = 20,
    ):
        self.device = torch.device(device)
        seqs = user_sequences(pooled_interactions(dataset), dataset.n_users, max_len)
        self.users = np.array([u for u, s in enumerate(seqs) if len(s) >= 2], dtype=np.int64)
        # examples.user is the row of the user in self.users
        self.train, self.test = training_prefixes([seqs[u] for u in self.users], train_fraction)
        if len(self.train) == 0 or len(self.test) == 0:
            raise ValueError(
                f"dataset {dataset.name!r}: {len(self.train)} training and {len(self.test)} test "
                "prefixes; sequences are too short"
            )
        self.features = None
        n_slots = 0
        if use_features:
            kinds = select_features(dataset, features)
            feats = clean_feature_matrix(dataset, self.users, kinds, feature_ranges)
            n_slots = feats.shape[1]
            self.features = to_device(feats, self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = build(
                lambda: DIPSGNN(
                    dataset.n_items,
                    n_slots,
                    use_features=use_features,
                    hidden_dim=dim,
                    user_dim=user_dim,
                    steps=layers,
                    clip_norm=clip_norm,
                    sigma=0.0,
                ),
                self.device,
            )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr, weight_decay=l2)
        self.order_rng = np.random.default_rng(seed)
        self.noise = torch.Generator(device=self.device).manual_seed(seed)  # unused: σ = 0
        self.batch_size, self.max_edge_weight = batch_size, max_edge_weight
        self.ks = tuple(sorted(set(KS) | {eval_k}))
        self.epochs_done = 0

    def random_streams(self) -> dict:
        return {"order_rng": self.order_rng, "noise": self.noise}

    def train_epoch(self) -> dict[str, float]:
        loss = train_epoch(
            self.model,
            self.optimizer,
            self.train,
            self.features,
            batch_size=self.batch_size,
            max_weight=self.max_edge_weight,
            order_rng=self.order_rng,
            noise=self.noise,
        )
        self.epochs_done += 1
        return {"loss": loss}

    def evaluate(self) -> dict[str, float]:
        top = rank_prefixes(
            self.model,
            self.test.prefixes,
            self.test.user,
            self.features,
            k=max(self.ks),
            max_weight=self.max_edge_weight,
        )
        targets = list(self.test.target[:, None])  # one relevant item per test position
        metrics = ranking_metrics(top, targets, ks=self.ks)
        out = {
            f"{name}@{k}": float(metrics[f"{name}@{k}"].mean())
            for k in self.ks
            for name in ("recall", "mrr")
        }
        out["test_positions"] = float(len(self.test))
        return out
