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
    """Have each user node rank the items on its device and report its own metrics.

    Node b scores every item with ``user_vecs[b]`` against its own item table ``item_mats[b]``,
    leaves out its training items, and reports Recall/NDCG/Precision/Hit/MRR@k (:meth:`Node.report
    <nodes.node.Node.report>`; the driver averages them). With a run's target items
    (``threat.targets``, adversaries/condition.py) each node also reports ``target_er@K`` and
    ``target_hr@K`` (K = ``threat.er_k``), unless it has interacted with every target.
    Adversaries are never passed here (they hold no held-out items).

    Args:
        nodes: The user nodes, each with ``train_items`` and non-empty ``test_items``.
        user_vecs: One user vector per node, [len(nodes), d].
        item_mats: One item table per node, [n_items, d]; the same array for every node where
            one table was broadcast (then scored in one product).
        k: K of the ranking metrics.
    """
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
