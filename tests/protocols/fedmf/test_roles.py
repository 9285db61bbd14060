"""fedmf's ``user_steps``: local steps on p_u before the step that uploads (no Ray: the user
nodes' batched train handler is called directly)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cluster.message import Message
from data.synthetic import synthetic
from nodes.node import NodeContext
from protocols.base import ConfigError, build_config
from protocols.fedmf import messages as msg
from protocols.fedmf.protocol import FedMF
from protocols.fedmf.roles import FedMFUser

N_USERS, N_ITEMS, DIM = 24, 50, 8


def _train(steps: int, batched: bool = True):
    ds = synthetic(n_users=N_USERS, n_items=N_ITEMS, avg_interactions=8, seed=0)
    cfg = build_config(FedMF.Config, {"dim": DIM, "pairs": 6, "user_steps": steps})
    ctx = NodeContext(5, torch.device("cpu"), FedMF(ds, cfg, 5).shared())
    train = ds.train.items_by_user(ds.n_users)
    q = np.random.default_rng(1).normal(size=(N_ITEMS, DIM)).astype(np.float32)
    payload = msg.encode_item_factors(q)
    nodes = [
        FedMFUser(f"user/{u}", ctx, train[u], np.zeros(0, dtype=np.int64))
        for u in range(N_USERS)
        if len(train[u])
    ]
    for n in nodes:  # as the host does before a handler runs
        n.round, n.phase = 0, "train"
    boxes = [[Message(msg.ITEM_FACTORS, "server/0", n.id, 0, "train", payload)] for n in nodes]
    if batched:
        FedMFUser.handle_batch(nodes, "train", boxes)
    else:
        for n, box in zip(nodes, boxes):
            FedMFUser.handle_batch([n], "train", [box])
    drained = [n._drain() for n in nodes]
    losses = [rep["loss"][0] for _, rep in drained]
    uploads = [[m.payload for m in out] for out, _ in drained]
    return nodes, losses, uploads


def test_user_steps_lower_each_users_own_loss_and_keep_upload_shape():
    """S = 4: each user's BPR loss on its round's pairs (reported at the uploading step) is below
    the one-step figure, the upload names the same item slots, and a user's result does not
    depend on its batch."""
    _, one, up_one = _train(1)
    nodes, many, up_many = _train(4)
    assert all(b < a for a, b in zip(one, many))
    for a, b in zip(up_one, up_many):
        (pa,), (pb,) = a, b
        ids_a, rows_a = msg.decode_item_grads(pa, N_ITEMS)
        ids_b, rows_b = msg.decode_item_grads(pb, N_ITEMS)
        assert np.array_equal(ids_a, ids_b) and len(pa) == len(pb)
        assert not np.array_equal(rows_a, rows_b)  # gradients at the moved p_u
    alone_nodes, alone, up_alone = _train(4, batched=False)
    assert alone == many and up_alone == up_many
    assert all(torch.equal(a.factor, b.factor) for a, b in zip(nodes, alone_nodes))


def test_user_steps_must_be_positive():
    with pytest.raises(ConfigError, match="user_steps"):
        build_config(FedMF.Config, {"user_steps": 0})
