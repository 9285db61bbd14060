"""Evaluation on the users' devices, shared by the protocols whose users rank items themselves
(fedmf, dmf, FedLightGCN): each user ranks all items it has not trained on and reports its own
metrics; the driver averages the reports."""

from __future__ import annotations

import numpy as np
import torch

from models.metrics import own_table_ranking_metrics, own_table_target_exposure
from nodes.node import Node


def evaluate_users(
    nodes: list[Node], user_vecs: torch.Tensor, item_mats: list[np.ndarray], k: int
) -> None:
    """Node b (with ``train_items`` and non-empty ``test_items``) scores with ``user_vecs[b]``
    against its item table ``item_mats[b]`` and reports Recall/NDCG/Precision/Hit/MRR@k; with a
    run's target items (``threat.targets``, adversaries/condition.py) also ``target_er@K`` and
    ``target_hr@K`` (K = ``threat.er_k``). Adversaries are never passed here (they hold no
    held-out items)."""
    metrics = own_table_ranking_metrics(
        user_vecs, item_mats, [n.train_items for n in nodes], [n.test_items for n in nodes], k
    )
    for name, values in metrics.items():
        for n, v in zip(nodes, values):
            n.report(name, v)
    threat = nodes[0].threat if nodes else None
    if threat is not None and threat.targets:  # the exposure of the attack's target items
        kt = threat.er_k
        er, hr, counted = own_table_target_exposure(
            user_vecs, item_mats, [n.train_items for n in nodes], threat.targets, kt
        )
        for n, e, h, c in zip(nodes, er, hr, counted):
            if c:  # users who interacted with every target are left out
                n.report(f"target_er@{kt}", e)
                n.report(f"target_hr@{kt}", h)
