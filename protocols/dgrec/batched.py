"""DGREC's stage 2 (protocols/dgrec/model.py) for B users in one pass.

The B users' hypergraphs are stacked into one disjoint graph (user b's nodes contiguous, its tags
renumbered b·n_tags + t), so op, the degrees and every sum stay per user:

    E'   = op (E W1_b)              per node, W1_b the weights of the node's user
    S    = softmax_row(std_b(op E W2_b))   std over the user's own nodes
    Ē_b  = Σ_{n ∈ b} S_nᵀ ⊗ E'_n     [B, n_i, d]         Ā_b = Σ_{n ∈ b} S_nᵀ ⊗ (op S)_n
    P_b, e_b, L_P(b)                 as protocols/dgrec/model.py, batched over b

The parameters are a dict ``name → tensor [B or 1, *shape]`` keyed like
``DGRECUserModel.named_parameters()``: leading dimension B gives every user its own copy (the
decentralised protocol: each user's gradient is the slice b of the gradient of Σ_b L_b, since
user b's loss touches only its slice), leading dimension 1 shares one copy (the centralized
HyperGNN baseline, ``shared_parameters``). ``DGRECUserModel`` itself runs through these functions
with B = 1, so one code path computes the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.utils import scatter

from cluster.device import to_device
from protocols.dgrec.hypergraph import (
    Incidence,
    bipartite_tag_to_item,
    hyperedge_index,
    hypergraph_propagate,
    pearson_interest_loss,
    standardise_columns,
)

Params = dict[str, torch.Tensor]  # name → [B or 1, *shape]


@dataclass
class HypergraphBatch:
    """B users' local hypergraphs as one disjoint graph."""

    item_ids: torch.Tensor  # [N] the item of every node; user b's nodes are contiguous
    user_of_node: torch.Tensor  # [N] sorted
    edge_index: torch.Tensor  # [2, E]: (node position, b·n_tags + tag)
    n_users: int
    n_tags: int  # per user

    @classmethod
    def collate(
        cls,
        graphs: Sequence[tuple[np.ndarray | torch.Tensor, Incidence | None]],
        n_tags: int,
        n_items: int,
        device: torch.device | str = "cpu",
    ) -> HypergraphBatch:
        """``graphs``: one (node_item_ids [m_b], incidence [m_b, n_tags]) per user. The batch is
        assembled on the CPU and lands on ``device`` in one move."""
        if not graphs:
            raise ValueError("a hypergraph batch needs at least one user")
        ids, users, edges = [], [], []
        offset = 0
        for b, (node_ids, incidence) in enumerate(graphs):
            node_ids = to_device(node_ids, "cpu")
            if node_ids.dtype.is_floating_point or node_ids.dim() != 1 or node_ids.numel() == 0:
                raise ValueError(
                    f"user {b}: node_item_ids must be a non-empty 1-D integer array, "
                    f"got {node_ids.dtype} of shape {tuple(node_ids.shape)}"
                )
            if int(node_ids.min()) < 0 or int(node_ids.max()) >= n_items:
                raise ValueError(f"user {b}: node_item_ids must lie in 0..{n_items - 1}")
            m = node_ids.numel()
            idx = hyperedge_index(incidence, m, n_tags).cpu()
            edges.append(idx + torch.tensor([[offset], [b * n_tags]], device="cpu"))
            ids.append(node_ids.long())
            users.append(torch.full((m,), b, dtype=torch.long, device="cpu"))
            offset += m
        return cls(
            torch.cat(ids).to(device),
            torch.cat(users).to(device),
            torch.cat(edges, dim=1).to(device),
            len(graphs),
            int(n_tags),
        )


@dataclass
class BatchEncoding:
    """Stage 2's outputs for B users (``UserEncoding`` per row b)."""

    e_u: torch.Tensor  # [B, d]
    interests: torch.Tensor  # Ē [B, n_i, d]
    interest_adjacency: torch.Tensor  # Ā [B, n_i, n_i]
    assignment: torch.Tensor  # S [N, n_i]
    item_repr: torch.Tensor  # E' [N, d]
    attention: torch.Tensor  # softmax(P) [B, n_i]


# --------------------------------------------------------------------------------- parameters
def shared_parameters(model: torch.nn.Module) -> Params:
    """One copy for every user: views [1, *shape] of ``model``'s parameters (gradients flow back)."""
    return {name: p.unsqueeze(0) for name, p in model.named_parameters()}


def stacked_parameters(models: Sequence[torch.nn.Module]) -> Params:
    """Every user its own copy: leaves [B, *shape] holding each model's current values."""
    names = [name for name, _ in models[0].named_parameters()]
    return {
        name: torch.stack([m.get_parameter(name).detach() for m in models]).requires_grad_(True)
        for name in names
    }


def user_rows(table: torch.Tensor, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
    """Rows ``items`` of each user's item table ([B or 1, n_items, d]): [*items.shape, d]."""
    if table.shape[0] == 1:
        return table[0][items]
    return table[users, items]


def per_user_linear(x: torch.Tensor, weight: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """x W_bᵀ for node rows ``x`` [N, in] with each node's user's weight ``weight`` [B or 1, out, in];
    ``sizes``: the users' node counts. Per-user copies are applied user by user (the same call as
    for that user alone, so a batch gives each user bit-for-bit its own result)."""
    if weight.shape[0] == 1:
        return F.linear(x, weight[0])
    return torch.cat([F.linear(xb, wb) for xb, wb in zip(x.split(sizes), weight, strict=True)])


# ---------------------------------------------------------------------------------- stage 2
def encode_batch(model, params: Params, graphs: HypergraphBatch) -> BatchEncoding:
    """Stage 2 (protocols/dgrec/model.py docstring) for every user of ``graphs``; ``model`` supplies the
    switches (``graph``, ``standardise_assignment``, ...) and sizes, ``params`` the weights."""
    batch, n_users, n = graphs.user_of_node, graphs.n_users, graphs.item_ids.numel()
    n_tags_all = n_users * graphs.n_tags
    edge_index = graphs.edge_index

    def op(x: torch.Tensor) -> torch.Tensor:  # identity when the graph is switched off
        if model.graph == "none":
            return x
        return hypergraph_propagate(x, edge_index, n_tags_all)

    sizes = torch.bincount(batch, minlength=n_users).tolist()

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        return per_user_linear(x, params[name], sizes)

    emb = user_rows(params["item_emb.weight"], batch, graphs.item_ids)  # E_u [N, d]
    if model.graph == "bipartite":
        tags = params["tag_emb.weight"].expand(n_users, -1, -1).reshape(n_tags_all, -1)
        item_repr = linear(bipartite_tag_to_item(tags, edge_index, n), "w1.weight")
    else:
        item_repr = op(linear(emb, "w1.weight"))  # op E W1
    assign_logits = op(linear(emb, "w2.weight"))  # op E W2
    if model.standardise_assignment:
        assign_logits = standardise_columns(assign_logits, batch, n_users)
    assignment = torch.softmax(assign_logits, dim=1)  # S [N, n_i]
    interests = scatter(  # Ē_b = S_bᵀ E'_b  [B, n_i, d]
        assignment.unsqueeze(2) * item_repr.unsqueeze(1), batch, dim=0, dim_size=n_users
    )
    interest_adj = scatter(  # Ā_b = S_bᵀ op S_b  [B, n_i, n_i]
        assignment.unsqueeze(2) * op(assignment).unsqueeze(1), batch, dim=0, dim_size=n_users
    )

    k = model.n_interests
    if model.interest_attention:
        own = (interests * params["w3.weight"]).sum(-1)  # Ē_i W3  [B, n_i]
        self_side = (interests * params["w4.weight"]).sum(-1)  # Ē_i W4
        other_side = (interests * params["w5.weight"]).sum(-1)  # Ē_j W5
        weights = interest_adj
        if model.normalise_interest_adjacency:  # Ā / mean row sum, per user
            total = interest_adj.sum(dim=(1, 2)).clamp(min=1e-12)
            weights = interest_adj * (k / total)[:, None, None]
        scores = (
            own + weights.sum(dim=2) * self_side - (weights @ other_side.unsqueeze(2)).squeeze(2)
        )
        attention = torch.softmax(scores, dim=1)
    else:
        attention = torch.full((n_users, k), 1.0 / k, device=emb.device, dtype=emb.dtype)
    e_u = (attention.unsqueeze(2) * interests).sum(1)
    return BatchEncoding(e_u, interests, interest_adj, assignment, item_repr, attention)


def score_batch(model, params: Params, e_u: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
    """ŷ = MLP_b(e_b ‖ e_i) (or e_b · e_i) for user b and each item of row b of ``item_ids``
    [B, K]: logits [B, K]."""
    n_users = e_u.shape[0]
    users = torch.arange(n_users, device=e_u.device).unsqueeze(1).expand_as(item_ids)
    items = user_rows(params["item_emb.weight"], users, item_ids)  # [B, K, d]
    if model.scorer == "dot":  # departure from the paper (scorer="dot")
        return (items * e_u.unsqueeze(1)).sum(-1)
    x = torch.cat([e_u.unsqueeze(1).expand(-1, item_ids.shape[1], -1), items], dim=2)
    hidden = torch.relu(
        x @ params["mlp.0.weight"].transpose(1, 2) + params["mlp.0.bias"].unsqueeze(1)
    )
    out = hidden @ params["mlp.2.weight"].transpose(1, 2) + params["mlp.2.bias"].unsqueeze(1)
    return out.squeeze(2)


def loss_batch(
    model,
    params: Params,
    graphs: HypergraphBatch,
    pos_items: torch.Tensor,
    neg_items: torch.Tensor,
    reduction: str = "mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Eq. 3 per user over its aligned (positive, negative) pairs, rows of ``pos_items`` /
    ``neg_items`` [B, P]: BPR (mean or sum over the pairs) + λ_P·Pearson + λ_2·‖Θ_b‖², where
    ‖Θ_b‖² covers the item rows user b touches (its nodes, positives, negatives) and every dense
    weight. Returns (total [B], {"bpr", "pearson", "l2", "total"} → detached [B])."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    n_users, n_items = graphs.n_users, model.n_items
    for what, ids in (("pos_items", pos_items), ("neg_items", neg_items)):
        if ids.dim() != 2 or ids.shape[0] != n_users or ids.dtype.is_floating_point:
            raise ValueError(
                f"{what} must be an integer array [{n_users}, P], got {tuple(ids.shape)}"
            )
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= n_items):
            raise ValueError(f"{what} must lie in 0..{n_items - 1}")
    if pos_items.shape != neg_items.shape:
        raise ValueError(
            f"pos_items and neg_items must pair up, got {tuple(pos_items.shape)} and "
            f"{tuple(neg_items.shape)}"
        )
    enc = encode_batch(model, params, graphs)
    pair_losses = -F.logsigmoid(
        score_batch(model, params, enc.e_u, pos_items)
        - score_batch(model, params, enc.e_u, neg_items)
    )
    bpr = pair_losses.mean(1) if reduction == "mean" else pair_losses.sum(1)
    pearson = pearson_interest_loss(enc.interests) if model.pearson else torch.zeros_like(bpr)

    users = torch.arange(n_users, device=bpr.device)
    keys = torch.cat(  # (user, item) of every row user b touches, once each
        [
            graphs.user_of_node * n_items + graphs.item_ids,
            (users.unsqueeze(1) * n_items + pos_items).reshape(-1),
            (users.unsqueeze(1) * n_items + neg_items).reshape(-1),
        ]
    ).unique()
    touched_users = keys // n_items
    rows = user_rows(params["item_emb.weight"], touched_users, keys % n_items)
    norm = scatter(rows.pow(2).sum(-1), touched_users, dim=0, dim_size=n_users)
    for name, p in params.items():
        if name != "item_emb.weight":
            norm = norm + p.pow(2).flatten(1).sum(1)  # [B] (or [1], the same for every user)
    total = bpr + model.pearson_weight * pearson + model.l2 * norm
    parts = {
        k: v.detach().expand(n_users)
        for k, v in (("bpr", bpr), ("pearson", pearson), ("l2", norm), ("total", total))
    }
    return total, parts


def per_user_gradients(
    models: Sequence[torch.nn.Module],
    graphs: HypergraphBatch,
    pos: np.ndarray,
    neg: np.ndarray,
    reduction: str = "sum",
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Each of B users' own model's gradient of its eq.-3 loss, in one pass: a flat vector per
    user (parameters in ``named_parameters`` order) and the users' loss values [B]. User b's loss
    touches only slice b of the stacked parameters, so slice b of the gradient of Σ_b L_b is g_b.
    ``pos``/``neg``: int [B, pairs]. Computed on the device of ``graphs`` and of the models."""
    model = models[0]
    params = stacked_parameters(models)
    device = graphs.item_ids.device
    total, parts = loss_batch(
        model,
        params,
        graphs,
        to_device(pos, device),
        to_device(neg, device),
        reduction=reduction,
    )
    total.sum().backward()
    names = [name for name, _ in model.named_parameters()]
    flat = torch.cat([params[name].grad.reshape(len(models), -1) for name in names], dim=1)
    return list(flat.unbind(0)), parts["total"].detach()


@torch.no_grad()
def all_item_scores(
    models: Sequence[torch.nn.Module], graphs: HypergraphBatch, n_items: int
) -> torch.Tensor:
    """Every item's score for each of B users under its own model: [B, n_items]."""
    model = models[0]
    params = stacked_parameters(models)
    e_u = encode_batch(model, params, graphs).e_u
    items = torch.arange(n_items, device=e_u.device)
    return score_batch(model, params, e_u, items.expand(len(models), -1))
