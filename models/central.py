"""The centralized baselines by model name: which trainer of models/trainer.py's family trains
which model.

* ranking (``lightgcn``, ``bprmf`` = LightGCN with K = 0): models/lightgcn.py
  :class:`RankingTrainer`; Recall/NDCG/Precision/Hit/MRR@eval_k over all items outside the
  user's training set.
* rating (``gcn``, ``gat``, ``ggnn``, ``mf``): models/rating_gnn :class:`RatingTrainer`
  (VerFedGNN's layers, eq. 5, Adagrad); RMSE on the test ratings (and on validation ratings
  when there are any).
* sequential (``dipsgnn``): models/sequential.py :class:`SequentialTrainer`; Recall/MRR@K over
  all test positions.
"""

from __future__ import annotations

import torch

from data.types import RecDataset
from models.lightgcn import RankingTrainer
from models.rating_gnn.training import RatingTrainer
from models.sequential import SequentialTrainer
from models.trainer import Trainer

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


def build_trainer(
    dataset: RecDataset,
    model: str,
    *,
    dim: int,
    layers: int,
    lr: float,
    l2: float,
    batch_size: int,
    eval_k: int,
    seed: int,
    device: str | torch.device = "cpu",
    **options,
) -> Trainer:
    """The trainer of ``model`` on ``dataset`` with the hyper-parameters every model has and its
    task's ``options`` (ranking: item_side; rating: thd, activation, init_std, use_bias,
    val_fraction; sequential: use_features, features, user_dim, clip_norm, max_edge_weight,
    max_len, train_fraction)."""
    task = TASK_OF_MODEL.get(model)
    common = {"dim": dim, "layers": layers, "lr": lr, "l2": l2, "batch_size": batch_size}
    common.update(seed=seed, device=device)
    if task == RANKING:
        return RankingTrainer(dataset, eval_k=eval_k, **common, **options)
    if task == RATING:
        return RatingTrainer.from_dataset(dataset, kind=model, **common, **options)
    if task == SEQUENTIAL:
        return SequentialTrainer(dataset, eval_k=eval_k, **common, **options)
    raise ValueError(f"unknown model {model!r} (known: {', '.join(TASK_OF_MODEL)})")
