"""Centralized HyperGNN: DGREC's model (protocols/dgrec/model.py) trained by a curator who holds everything.

The gap baseline of the DGREC issue: the same stage 2 — each user's inner-item hypergraph (its own
training items ∪ its inter-user neighbours' items, tags as hyperedges), interests, interest
attention, ŷ = MLP(e_u ‖ e_i), eq. 3 — but with ONE shared copy of the item table and weights,
exact gradients and Adam, no sharing mechanism. Its Recall@20 is the ceiling of the per-user model
on a dataset; DGREC (one-bit gossip, per-user copies) can at best approach it.

    epoch: users in a random order, ``batch_users`` at a time; for each user ``pairs`` (positive,
    negative) pairs; loss = mean_b L_b (eq. 3, BPR mean over the pairs) → one Adam step.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

from cluster.device import build, to_device
from models.bpr import sample_pairs
from models.metrics import ranking_metrics, topk_excluding
from models.trainer import Trainer
from protocols.dgrec.batched import (
    HypergraphBatch,
    encode_batch,
    loss_batch,
    score_batch,
    shared_parameters,
)
from protocols.dgrec.model import DGRECUserModel, build_user_hypergraph


class HyperGNNTrainer(Trainer):
    """DGREC's model behind the centralized trainers' interface (models/trainer.py)."""

    def __init__(
        self,
        train_items: Sequence[np.ndarray],
        test_items: Sequence[np.ndarray],
        neighbours: Sequence[np.ndarray],
        item_tags: sp.spmatrix | sp.sparray,
        *,
        dim: int = 16,
        n_interests: int = 6,
        hidden: int = 32,
        pairs: int = 64,
        batch_users: int = 64,
        lr: float = 1e-3,
        seed: int = 0,
        eval_k: int = 20,
        device: torch.device | str = "cpu",
        **model_flags,
    ) -> None:
        if not len(train_items) == len(test_items) == len(neighbours):
            raise ValueError("train_items, test_items and neighbours need one entry per user")
        if pairs < 1 or batch_users < 1 or lr <= 0:
            raise ValueError("pairs and batch_users must be ≥ 1 and lr > 0")
        if item_tags is None or not (sp.issparse(item_tags) or hasattr(item_tags, "shape")):
            # sp.csr_matrix(None) is an object array scipy refuses with a dtype error
            raise ValueError("no item tags: DGREC's hyperedges need an [n_items, n_tags] matrix")
        item_tags = sp.csr_matrix(item_tags)
        self.n_items, n_tags = item_tags.shape
        self.train_items = [np.asarray(t, dtype=np.int64) for t in train_items]
        self.test_items = [np.asarray(t, dtype=np.int64) for t in test_items]
        self.users = [u for u, t in enumerate(self.train_items) if len(t)]
        self.graphs = {  # ρ = 1: a neighbour's whole training set is public to the user
            u: build_user_hypergraph(
                self.train_items[u], [self.train_items[v] for v in neighbours[u]], item_tags
            )
            for u in self.users
        }
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.model = build(  # initialised on the CPU: the same numbers on every device
            lambda: DGRECUserModel(self.n_items, n_tags, dim, n_interests, hidden, **model_flags),
            self.device,
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.rng = np.random.default_rng(seed)
        self.pairs, self.batch_users, self.eval_k = pairs, batch_users, eval_k

    def _batch(self, users: Sequence[int]) -> HypergraphBatch:
        return HypergraphBatch.collate(
            [self.graphs[u] for u in users], self.model.n_tags, self.n_items, self.device
        )

    def train_epoch(self) -> dict[str, float]:
        order = self.rng.permutation(self.users)
        losses = []
        for start in range(0, len(order), self.batch_users):
            chunk = order[start : start + self.batch_users]
            pairs = [
                sample_pairs(self.rng, self.n_items, self.train_items[u], self.pairs) for u in chunk
            ]
            pos = to_device(np.stack([p for p, _ in pairs]), self.device)
            neg = to_device(np.stack([n for _, n in pairs]), self.device)
            total, _ = loss_batch(
                self.model, shared_parameters(self.model), self._batch(chunk), pos, neg
            )
            self.optimizer.zero_grad()
            total.mean().backward()
            self.optimizer.step()
            losses.append(float(total.mean().detach()))
        self.epochs_done += 1
        return {"loss": float(np.mean(losses))}

    def random_streams(self) -> dict[str, np.random.Generator]:
        return {"rng": self.rng}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Recall/NDCG@K over all items not in each user's training set (users with test items)."""
        judged = [u for u in self.users if len(self.test_items[u])]
        sums: dict[str, float] = {}
        params = shared_parameters(self.model)
        all_items = torch.arange(self.n_items, device=self.device)
        for start in range(0, len(judged), 128):
            chunk = judged[start : start + 128]
            e_u = encode_batch(self.model, params, self._batch(chunk)).e_u
            scores = score_batch(self.model, params, e_u, all_items.expand(len(chunk), -1))
            top = topk_excluding(scores, [self.train_items[u] for u in chunk], self.eval_k)
            metrics = ranking_metrics(top, [self.test_items[u] for u in chunk], ks=(self.eval_k,))
            for name, values in metrics.items():
                sums[name] = sums.get(name, 0.0) + float(np.sum(values))
        return {name: total / len(judged) for name, total in sums.items()}
