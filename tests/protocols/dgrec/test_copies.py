"""A DGREC run's checkpoint holds every user's own copy of the shared parameters: read offline
(no Ray, the operator reading the nodes' state), ranking each user with its own copy gives the
Recall@K the run itself reported, and the users' copies differ (each took its own
neighbourhoods' noisy steps)."""

from __future__ import annotations

import pickle
import types

import numpy as np
import pytest
import torch

from data.synthetic import synthetic
from engine import RunSettings, run
from engine.checkpoint import load_checkpoint
from models.metrics import ranking_metrics, topk_excluding
from protocols.dgrec.ranking import scores

pytestmark = pytest.mark.ray


def users_of(run_dir):
    """(the checkpoint, every DGREC user node it holds, ready to rank)."""
    state = load_checkpoint(run_dir)
    protocol = state.protocol
    ctx = types.SimpleNamespace(
        shared=protocol.shared(), device=torch.device("cpu"), seed=protocol.seed
    )
    users = []
    for blob in state.deployment["hosts"]:
        for nid, node in sorted(pickle.loads(blob)["nodes"].items()):
            if nid.startswith("user"):
                node.ctx = ctx
                users.append(node)
    return state, users


def recall(users, k: int) -> float:
    """Mean Recall@k over the users with test items, each ranked with its own copy."""
    judged = [u for u in users if len(u.test_items)]
    for u in judged:
        u._ensure_graph()
    exclude = [np.concatenate([u.train_items, u.valid_items]) for u in judged]
    top = topk_excluding(scores(judged, [u.model for u in judged]), exclude, k)
    return float(np.mean(ranking_metrics(top, [u.test_items for u in judged], (k,))[f"recall@{k}"]))


def test_own_copies_reproduce_the_runs_recall(ray_local, tmp_path):
    data = synthetic(n_users=30, n_items=40, seed=5)
    params = {"dim": 8, "hidden": 8, "n_interests": 2, "pairs": 8}
    settings = RunSettings(
        protocol="dgrec",
        rounds=3,
        seed=1,
        hosts=2,
        out=str(tmp_path),
        params=params,
        progress=False,
        checkpoint_every=3,
    )
    run_dir, summary = run(settings, data)
    state, users = users_of(run_dir)
    assert state.next_round == 3 and len(users) == data.n_users
    assert recall(users, k=20) == pytest.approx(summary["metrics"]["recall@20"], abs=1e-9)
    a, b = (dict(u.model.named_parameters())["item_emb.weight"] for u in users[:2])
    assert not bool((a == b).all())  # each user's copy took its own neighbourhoods' steps
