"""FedPerGNN's LightGCN backbone (``backbone = "lightgcn"``, the FedLightGCN thesis): what the
sampled users of one host compute in a round (``train_users``) and at evaluation
(``evaluate_held_out``). The model is models/lightgcn.py's (``build_local_graphs``,
``local_forward``).

Round (step 3 of protocols/fedpergnn/protocol.py): the user receives E; on its local subgraph
u – I_u – U_u it computes h_u (K layers, mean of layers), pairs each of |Ĩ_u| sampled negatives
with a random positive and takes BPR + α L2 with s_ui = h_u·e_i; it updates
e_u ← e_u − η ∂L_u/∂e_u locally (``user_steps`` steps: the first S − 1 with E fixed on the same
pairs, the last one beside the item gradients) and uploads ``item_grads``: ∂L_u/∂e_i for its
positives and negatives plus M pseudo items, every coordinate clipped to [−clip, clip] plus
Laplace(0, b) noise (b: ``upload_laplace``), rows sorted by item id (privacy/ldp.py
``perturbed_upload``).

All the host's users run in one stacked pass: their local graphs are disjoint, so row b of every
gradient is user b's alone (tests/protocols/fedpergnn/test_protocol.py checks it against one user alone).
"""

from __future__ import annotations

import numpy as np
import torch

from cluster import wire
from cluster.device import to_device
from models.bpr import neg_log_sigmoid
from models.lightgcn import build_local_graphs, local_forward
from nodes.node import decode_shared, expect_kinds
from privacy.ldp import choose_pseudo_items, perturbed_upload
from protocols import evaluation
from protocols.fedpergnn import messages as msg
from protocols.fedpergnn.config import upload_laplace

EVAL_CHUNK = 512  # users ranked in one pass at evaluation


def train_users(nodes: list, inboxes: list, server: str) -> None:
    """Step 3 for every sampled user of this host (one stacked autograd graph)."""
    for n, inbox in zip(nodes, inboxes):
        expect_kinds(inbox, "item_embeddings", node=n.id)
    e_list = decode_shared(inboxes, "item_embeddings", wire.decode_dense)
    c, n_items, dev = nodes[0].config, nodes[0].public.n_items, nodes[0].device
    gens, negs, pairs_pos = [], [], []
    for n in nodes:  # each user's own random draws, in its own stream
        # which rows the upload carries (negatives, pseudo items) and its noise: the node's noise
        # generator (seeded by default; --secure-rng: the secure one, privacy/noise.py)
        g = n.noise_generator()
        n_neg, _ = msg.upload_counts(len(n.train_items), n_items, c.negatives, c.pseudo_items)
        neg = choose_pseudo_items(n_items, n.train_items, n_neg, g).numpy()
        negs.append(np.sort(neg))
        # each sampled negative is paired with a random positive (FedLightGCN's sampler)
        pairs_pos.append(n.rng.integers(0, len(n.train_items), size=len(neg)))
        gens.append(g)
    # h_u: LightGCN on the local subgraphs (stacked: they are disjoint), mean of layers 0..K;
    # the local graph's item nodes are the user's positives E[I_u]
    e = to_device(e_list[0], dev) if all(x is e_list[0] for x in e_list) else None
    n_pos = [len(n.train_items) for n in nodes]
    pos_leaf = _gather_rows(e, e_list, [n.train_items for n in nodes], dev).requires_grad_(True)
    graphs = build_local_graphs(n_pos, [n.nbr_links for n in nodes], dev)
    nbr = torch.cat([n.nbr_emb for n in nodes])
    e_pos = pos_leaf.detach().split(n_pos)
    users = torch.stack([n.embedding for n in nodes])
    for _ in range(c.user_steps - 1):  # local steps on e_u alone, E fixed, the round's pairs
        leaf = users.requires_grad_(True)
        h_u = local_forward(graphs, leaf, pos_leaf.detach(), nbr, c.layers)
        h = h_u.detach()
        grad_h = torch.stack(
            [
                _pair_gradients(
                    h[b], e_pos[b], _rows(e, e_list[b], negs[b], dev), _pairs(pos, dev)
                )[3]
                for b, pos in enumerate(pairs_pos)
            ]
        )
        h_u.backward(grad_h)
        users = (leaf - c.lr_user * (leaf.grad + c.l2 * leaf.detach())).detach()
    user_leaf = users.requires_grad_(True)
    h_u = local_forward(graphs, user_leaf, pos_leaf, nbr, c.layers)
    h = h_u.detach()
    # BPR over the user's pairs (its k-th negative with its positive pairs_pos[b][k]), with the
    # gradients written out per user (a cache-sized [|Ĩ_u|, d] block each, no [Σ pairs, d]
    # autograd tensors): x_k = h_u·e_i − h_u·e_j, L_u = mean_k[−ln σ(x_k)
    # + α/2 (‖e_i‖² + ‖e_j‖²)] + α/2 ‖e_u‖²; g_k = ∂L_u/∂x_k = −σ(−x_k)/|pairs|
    grad_h = torch.zeros_like(h)
    per_user = []  # (g_k, Σ_k g_k per positive, pairs per positive, L_u)
    for b in range(len(nodes)):
        e_neg = _rows(e, e_list[b], negs[b], dev)
        k = _pairs(pairs_pos[b], dev)
        count = max(len(k), 1)
        x, g, g_pos, grad_h[b] = _pair_gradients(h[b], e_pos[b], e_neg, k)
        c_pos = torch.bincount(k, minlength=n_pos[b]).to(g.dtype)
        norm = (c_pos @ e_pos[b].pow(2).sum(-1) + e_neg.pow(2).sum()) / count
        loss = (neg_log_sigmoid(x).sum() / count + 0.5 * c.l2 * norm).item()
        own = 0.5 * c.l2 * users[b].detach().pow(2).sum().item()
        per_user.append((g, g_pos, c_pos, loss + own))
    h_u.backward(grad_h)  # through the local graphs: ∂L/∂e_u and ∂L/∂E[I_u] of the graph
    user_grad = user_leaf.grad + c.l2 * user_leaf.detach()
    new_users = (user_leaf - c.lr_user * user_grad).detach()  # e_u ← e_u − η ∂L/∂e_u
    graph_grads = pos_leaf.grad.split(n_pos)
    for b, n in enumerate(nodes):
        g, g_pos, c_pos, loss = per_user[b]
        e_neg = _rows(e, e_list[b], negs[b], dev)
        scale = c.l2 / max(len(g), 1)
        # ∂L_u/∂e_i = Σ_k g_k h_u + α c_i e_i/|pairs| (+ the graph's); ∂L_u/∂e_j = −g_k h_u + α e_j/|pairs|
        pos_grad = graph_grads[b] + torch.outer(g_pos, h[b]) + (scale * c_pos)[:, None] * e_pos[b]
        neg_grad = torch.outer(-g, h[b]).add_(e_neg, alpha=scale)
        ids_real = np.concatenate([n.train_items, negs[b]])
        real = torch.cat([pos_grad, neg_grad])
        _, m = msg.upload_counts(len(n.train_items), n_items, c.negatives, c.pseudo_items)
        ids, noisy, n.last_pseudo_items = perturbed_upload(
            n_items, ids_real, real, m, c.clip, upload_laplace(c), gens[b]
        )
        rows = noisy.cpu().numpy()  # leaves the device here: the upload as sent
        ids, rows = n.tamper_upload(ids, rows, e_list[b])  # an adversary's change, if any
        n.send("item_grads", server, msg.encode_item_grads(ids, rows))
        n.last_upload_ids = ids  # for measuring attacks (never sent apart from the upload)
        if n.secure_aggregation:  # the server cannot count the rows: the user tells the driver
            n.report(f"upload_coords/{n.id}", rows.size)
        n.embedding = new_users[b].clone()
        n.report("loss", loss)


def _pairs(positions: np.ndarray, device) -> torch.Tensor:
    return to_device(positions.astype(np.int64), device)


def _pair_gradients(h: torch.Tensor, e_pos: torch.Tensor, e_neg: torch.Tensor, k: torch.Tensor):
    """One user's BPR over its pairs (negative j with positive k_j): x = h·e_k − h·e_j,
    g = ∂L/∂x = −σ(−x)/|pairs|, Σ g per positive, and ∂L/∂h (the L2 terms are added apart)."""
    x = (e_pos @ h).index_select(0, k) - e_neg @ h
    g = torch.sigmoid(-x).neg_().div_(max(len(k), 1))
    g_pos = torch.zeros(len(e_pos), dtype=g.dtype, device=g.device).index_add_(0, k, g)
    return x, g, g_pos, e_pos.T @ g_pos - e_neg.T @ g


def _rows(table: torch.Tensor | None, own: np.ndarray, ids: np.ndarray, device) -> torch.Tensor:
    """Rows ``ids`` of a user's copy of E (``table``: the copy every user of the host shares, on
    ``device``), on ``device``."""
    if table is None:
        return to_device(own[np.asarray(ids, dtype=np.int64)], device)
    return table.index_select(0, to_device(np.asarray(ids, dtype=np.int64), device))


def _gather_rows(
    table: torch.Tensor | None, tables: list[np.ndarray], ids: list[np.ndarray], device
) -> torch.Tensor:
    """The rows ``ids[b]`` of user b's copy of E, stacked over users, on ``device`` (one gather
    when every user holds the same copy ``table``: a broadcast decoded once)."""
    if table is not None:
        return table.index_select(0, to_device(np.concatenate(ids).astype(np.int64), device))
    return to_device(np.concatenate([t[i] for t, i in zip(tables, ids)]), device)


def representations(nodes: list, e_list: list[np.ndarray]) -> torch.Tensor:
    """h_u of every listed user (no gradient), given the item embeddings each holds."""
    graphs = build_local_graphs(
        [len(n.train_items) for n in nodes], [n.nbr_links for n in nodes], nodes[0].device
    )
    items = to_device(
        np.concatenate([e[n.train_items] for n, e in zip(nodes, e_list)]), nodes[0].device
    )
    nbr = torch.cat([n.nbr_emb for n in nodes])
    with torch.no_grad():
        user = torch.stack([n.embedding for n in nodes])
        return local_forward(graphs, user, items, nbr, nodes[0].config.layers)


def evaluate_held_out(nodes: list, inboxes: list) -> None:
    """Step 4: each user with held-out items ranks every item it has not trained on by h_u·e_i
    and reports its ranking metrics (protocols/evaluation.py ``evaluate_users``)."""
    e_list = decode_shared(inboxes, "eval_item_embeddings", wire.decode_dense)
    users = [(n, e) for n, e in zip(nodes, e_list) if len(n.test_items)]
    k = nodes[0].config.eval_k
    for start in range(0, len(users), EVAL_CHUNK):
        chunk = users[start : start + EVAL_CHUNK]
        h = representations([n for n, _ in chunk], [e for _, e in chunk])
        evaluation.evaluate_users([n for n, _ in chunk], h, [e for _, e in chunk], k)
