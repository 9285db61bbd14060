"""The one interface of the centralized trainers (the non-private baselines): a trainer owns a
model, its optimizer and its random streams, and goes one epoch at a time.

* ``train_epoch()`` — one pass over the training data; figures with at least ``"loss"``;
* ``evaluate()`` — the test metrics (ranking: Recall/NDCG/…@k, rating: RMSE, sequential:
  Recall/MRR@k);
* ``state_dict()`` / ``load_state_dict()`` — everything that decides the next epochs (model,
  optimizer, random streams, epochs done), so that a trainer restored from a state continues
  exactly as the saved one would.

Implementations: models/lightgcn.py ``RankingTrainer`` (LightGCN, BPR-MF), models/rating_gnn
``RatingTrainer`` (GCN/GAT/GGNN/MF rating models), models/sequential.py ``SequentialTrainer``
(the DIPSGNN network), protocols/dgrec/central.py ``HyperGNNTrainer`` (DGREC's model, its ceiling);
models/central.py picks one of the first three by model name. No Ray.
"""

from __future__ import annotations

import copy

import numpy as np
import torch


class Trainer:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    epochs_done: int = 0

    def train_epoch(self) -> dict[str, float]:
        raise NotImplementedError

    def evaluate(self) -> dict[str, float]:
        raise NotImplementedError

    # the random streams a subclass draws from, by name
    def random_streams(self) -> dict[str, np.random.Generator | torch.Generator]:
        return {}

    def state_dict(self) -> dict:
        streams = {
            name: g.bit_generator.state if isinstance(g, np.random.Generator) else g.get_state()
            for name, g in self.random_streams().items()
        }
        return copy.deepcopy(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "random": streams,
                "epochs_done": self.epochs_done,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        state = copy.deepcopy(state)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        for name, g in self.random_streams().items():
            if isinstance(g, np.random.Generator):
                g.bit_generator.state = state["random"][name]
            else:
                g.set_state(state["random"][name])
        self.epochs_done = state["epochs_done"]
