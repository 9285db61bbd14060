"""A DGREC user's ranking on its own device: evaluation (``eval``) and the choice of the model it
keeps (``validate``, config ``validation``). A host ranks all its users in one batched pass of
protocols/dgrec/batched.py (``batch_users``), each with its own parameters. No traffic."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from models.metrics import ranking_metrics, target_exposure, topk_excluding
from nodes.node import expect_kinds
from protocols.dgrec.batched import HypergraphBatch, all_item_scores

if TYPE_CHECKING:
    from protocols.dgrec.roles import DGRECUser


def hypergraphs(users: list[DGRECUser], device) -> HypergraphBatch:
    """The users' local hypergraphs as one batch on ``device`` (their host's)."""
    public = users[0].public
    return HypergraphBatch.collate(
        [(u.node_item_ids, u.incidence) for u in users], public.n_tags, public.n_items, device
    )


def scores(users: list[DGRECUser], models: list[torch.nn.Module]) -> torch.Tensor:
    """Every item's score for each user under ``models`` (one each): [B, n_items]."""
    n_items, c = users[0].public.n_items, users[0].config
    with torch.no_grad():
        if c.model == "dgrec" and c.batch_users:
            return all_item_scores(models, hypergraphs(users, users[0].device), n_items)
        items = np.arange(n_items)
        return torch.cat(
            [m.score(m(u.node_item_ids, u.incidence), items)[None] for u, m in zip(users, models)]
        )


def rank(users: list[DGRECUser], inboxes, phase: str, chunk: int = 128) -> None:
    """``eval``: each user ranks every item it does not hold (training ∪ held-out items) with its
    kept model (its current one without ``validation``) and reports Recall/NDCG@K on its test items.
    ``validate``: each user ranks the items it does not train on with its current model and keeps
    that model if its NDCG@K on the held-out items is at least its best so far."""
    for u, inbox in zip(users, inboxes, strict=True):
        expect_kinds(inbox, node=u.id)
    evaluating = phase == "eval"
    judged = [u for u in users if len(u.test_items if evaluating else u.valid_items)]
    if not judged:
        return
    for u in judged:
        u._ensure_graph()
    k = judged[0].config.eval_k
    for start in range(0, len(judged), chunk):
        part = judged[start : start + chunk]
        if evaluating:
            models = [u.model if u.best_model is None else u.best_model for u in part]
            exclude = [np.concatenate([u.train_items, u.valid_items]) for u in part]
            targets = [u.test_items for u in part]
        else:
            models = [u.model for u in part]
            exclude = [u.train_items for u in part]
            targets = [u.valid_items for u in part]
        part_scores = scores(part, models)
        metrics = ranking_metrics(topk_excluding(part_scores, exclude, k), targets, (k,))
        for b, u in enumerate(part):
            if evaluating:
                for name, values in metrics.items():
                    u.report(name, float(values[b]))
            else:
                u.keep_if_best(float(metrics[f"ndcg@{k}"][b]))
        threat = part[0].threat
        if evaluating and threat is not None and threat.targets:  # the attack's target items
            kt = threat.er_k
            ranked = topk_excluding(part_scores, exclude, kt)
            er, hr, counted = target_exposure(ranked, exclude, threat.targets)
            for u, e, h, c in zip(part, er, hr, counted):
                if c:  # users who interacted with every target are left out
                    u.report(f"target_er@{kt}", float(e))
                    u.report(f"target_hr@{kt}", float(h))
