"""Evaluation on the users' devices, shared by the protocols whose users rank items themselves
(fedmf, dmf, FedLightGCN): each user ranks all items it has not trained on and reports its own
metrics; the driver averages the reports."""

from __future__ import annotations

import numpy as np
import torch

from models.metrics import own_table_ranking_metrics
from nodes.node import Node


def evaluate_users(
    nodes: list[Node], user_vecs: torch.Tensor, item_mats: list[np.ndarray], k: int
) -> None:
    """Node b (with ``train_items`` and non-empty ``test_items``) scores with ``user_vecs[b]``
    against its item table ``item_mats[b]`` and reports Recall/NDCG/Precision/Hit/MRR@k."""
    metrics = own_table_ranking_metrics(
        user_vecs, item_mats, [n.train_items for n in nodes], [n.test_items for n in nodes], k
    )
    for name, values in metrics.items():
        for n, v in zip(nodes, values):
            n.report(name, v)
