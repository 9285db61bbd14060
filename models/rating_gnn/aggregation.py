"""Neighbour aggregation on a user–item rating graph (VerFedGNN, Mai & Pang, ICML 2023, §3–4).

Edges are (user u, item v) pairs with rating ≥ thd. For layer k and embeddings e^{k−1}:

    GCN  (eq. 13):   X[u] = Σ_{v∈N_u} e_v / √(N_u · N_v)
                     Y[v] = Σ_{u∈N_v} e_u / √(N_u · N_v)
    GAT  (eq. 14):   X[u] = Σ_{v∈N_u} α_uv e_v,  α_uv = exp(s_uv) / Z_u,
                     s_uv = LeakyReLU(a_dstᵀ W e_u + a_srcᵀ W e_v),
                     Z_u  = exp(s_uu) + Σ_{j∈N_u} exp(s_uj)       (self-loop included)
                     (items symmetric: Y[v] = Σ_{u∈N_v} α_vu e_u)
    GGNN (eq. 16):   X[u] = Σ_{v∈N_u} e_v / N_u,   Y[v] = Σ_{u∈N_v} e_u / N_v

The user-side normalisers N_u and Z_u are arguments: centrally they are exact; in VerFedGNN a
party p sees only its own items and uses the estimates of eqs. 12 and 15,

    E_p(N_u) = N_u^p · M / M_p,        E_p(Z_u) = exp(s_uu) + (M / M_p) · Σ_{j∈N_u^p} exp(s_uj),

(M items in all, M_p at party p; the authors' code scales by M / M_p the same way). With the
exact normalisers every X[u] is a sum over edges, so the parties' X_p add up to the central X.
Item-side normalisers are always exact: all edges of an item live at the party owning it.

Aggregates are of the raw embeddings e; the layer applies W^k afterwards (σ(W(…)) is linear in
the aggregate, so this equals aggregating W e). Everything is vectorised with PyG's scatter.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from cluster.device import to_device

MAX_LOGIT = 60.0  # attention logits are clamped here so that exp() stays finite in float32


def scatter(src: torch.Tensor, index: torch.Tensor, dim: int, dim_size: int, reduce: str):
    """PyG's ``scatter``, imported on first use: loading torch_geometric costs every host process
    about 2.5 s, and most hosts never aggregate a rating graph."""
    from torch_geometric.utils import scatter as pyg_scatter

    return pyg_scatter(src, index, dim=dim, dim_size=dim_size, reduce=reduce)


def as_edge_tensors(
    edge_user: np.ndarray | torch.Tensor,
    edge_item: np.ndarray | torch.Tensor,
    n_users: int,
    n_items: int,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validated int64 edge endpoint tensors (user ids in [0, n_users), items in [0, n_items)) on
    ``device`` (None: where tensors given are, the CPU for arrays)."""
    eu = edge_user if torch.is_tensor(edge_user) else to_device(edge_user, "cpu")
    ei = edge_item if torch.is_tensor(edge_item) else to_device(edge_item, "cpu")
    if eu.dim() != 1 or ei.dim() != 1 or eu.shape != ei.shape:
        raise ValueError(
            f"edge_user and edge_item must be 1-D of equal length, got {tuple(eu.shape)} "
            f"and {tuple(ei.shape)}"
        )
    if eu.numel() and (eu.is_floating_point() or ei.is_floating_point()):
        raise ValueError("edge endpoints must be integer ids")
    eu, ei = eu.long(), ei.long()
    if eu.numel():
        if int(eu.min()) < 0 or int(eu.max()) >= n_users:
            raise ValueError(f"edge user ids must lie in [0, {n_users})")
        if int(ei.min()) < 0 or int(ei.max()) >= n_items:
            raise ValueError(f"edge item ids must lie in [0, {n_items})")
    return eu.to(device), ei.to(device)


def node_degree(
    index: torch.Tensor, n_nodes: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Number of edges at each node: [n_nodes]."""
    return torch.bincount(index, minlength=n_nodes).to(dtype)


def estimate_user_degree(
    local_user_degree: torch.Tensor, n_party_items: int, n_total_items: int
) -> torch.Tensor:
    """Eq. 12: E_p(N_u) = N_u^p · M / M_p (unbiased when items are split at random)."""
    if not 0 < n_party_items <= n_total_items:
        raise ValueError(
            f"need 0 < party items <= total items, got {n_party_items}, {n_total_items}"
        )
    return local_user_degree * (n_total_items / n_party_items)


def _weighted_sum(
    src: torch.Tensor, src_index: torch.Tensor, dst_index: torch.Tensor, w: torch.Tensor, n: int
) -> torch.Tensor:
    return scatter(w.unsqueeze(1) * src[src_index], dst_index, dim=0, dim_size=n, reduce="sum")


def _check_emb(emb: torch.Tensor, name: str) -> None:
    if not isinstance(emb, torch.Tensor) or emb.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor [rows, D]")


def _check_norm(norm: torch.Tensor, n: int, name: str) -> None:
    if not isinstance(norm, torch.Tensor) or norm.shape != (n,):
        raise ValueError(f"{name} must be a tensor of shape ({n},)")


def gcn_user_aggregate(
    item_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    user_degree: torch.Tensor,
    item_degree: torch.Tensor,
    n_users: int,
) -> torch.Tensor:
    """Eq. 13, user side: X[u] = Σ_{v∈N_u} e_v / √(N_u N_v) → [n_users, D]."""
    _check_emb(item_emb, "item_emb")
    _check_norm(user_degree, n_users, "user_degree")
    _check_norm(item_degree, item_emb.shape[0], "item_degree")
    w = (user_degree[edge_user] * item_degree[edge_item]).clamp_min(1e-12).rsqrt()
    return _weighted_sum(item_emb, edge_item, edge_user, w, n_users)


def gcn_item_aggregate(
    user_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    user_degree: torch.Tensor,
    item_degree: torch.Tensor,
    n_items: int,
) -> torch.Tensor:
    """Eq. 13, item side: Y[v] = Σ_{u∈N_v} e_u / √(N_u N_v) → [n_items, D]."""
    _check_emb(user_emb, "user_emb")
    _check_norm(user_degree, user_emb.shape[0], "user_degree")
    _check_norm(item_degree, n_items, "item_degree")
    w = (user_degree[edge_user] * item_degree[edge_item]).clamp_min(1e-12).rsqrt()
    return _weighted_sum(user_emb, edge_user, edge_item, w, n_items)


def mean_user_aggregate(
    item_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    user_degree: torch.Tensor,
    n_users: int,
) -> torch.Tensor:
    """Eq. 16 message, user side: X[u] = Σ_{v∈N_u} e_v / N_u → [n_users, D]."""
    _check_emb(item_emb, "item_emb")
    _check_norm(user_degree, n_users, "user_degree")
    w = user_degree[edge_user].clamp_min(1e-12).reciprocal()
    return _weighted_sum(item_emb, edge_item, edge_user, w, n_users)


def mean_item_aggregate(
    user_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    item_degree: torch.Tensor,
    n_items: int,
) -> torch.Tensor:
    """Eq. 16 message, item side: Y[v] = Σ_{u∈N_v} e_u / N_v → [n_items, D]."""
    _check_emb(user_emb, "user_emb")
    _check_norm(item_degree, n_items, "item_degree")
    w = item_degree[edge_item].clamp_min(1e-12).reciprocal()
    return _weighted_sum(user_emb, edge_user, edge_item, w, n_items)


class GATScores(NamedTuple):
    """exp of the attention logits (eq. 14): per edge seen from the user and from the item
    side, and for the self-loops."""

    user_edge: torch.Tensor  # [E]  exp(s_uv), user u attends to item v
    item_edge: torch.Tensor  # [E]  exp(s_vu), item v attends to user u
    user_self: torch.Tensor  # [N]  exp(s_uu)
    item_self: torch.Tensor  # [M]  exp(s_vv)


def gat_exp_scores(
    user_emb: torch.Tensor,
    item_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    weight: torch.Tensor,
    att_src: torch.Tensor,
    att_dst: torch.Tensor,
    negative_slope: float = 0.2,
) -> GATScores:
    """exp(s) with s_xy = LeakyReLU(a_dstᵀ W e_x + a_srcᵀ W e_y) (x attends to y).

    ``weight`` is W as stored by nn.Linear ([D_out, D_in]); att_src/att_dst are [D_out]."""
    _check_emb(user_emb, "user_emb")
    _check_emb(item_emb, "item_emb")
    wu, wv = user_emb @ weight.T, item_emb @ weight.T
    u_dst, u_src = wu @ att_dst, wu @ att_src
    v_dst, v_src = wv @ att_dst, wv @ att_src

    def _exp(logit: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(logit, negative_slope).clamp(max=MAX_LOGIT).exp()

    return GATScores(
        user_edge=_exp(u_dst[edge_user] + v_src[edge_item]),
        item_edge=_exp(v_dst[edge_item] + u_src[edge_user]),
        user_self=_exp(u_dst + u_src),
        item_self=_exp(v_dst + v_src),
    )


def gat_user_denominator(
    scores: GATScores, edge_user: torch.Tensor, neighbour_scale: float = 1.0
) -> torch.Tensor:
    """Z_u = exp(s_uu) + scale · Σ_{j∈N_u} exp(s_uj); scale = M/M_p is the eq. 15 estimate."""
    n_users = scores.user_self.shape[0]
    local = scatter(scores.user_edge, edge_user, dim=0, dim_size=n_users, reduce="sum")
    return scores.user_self + neighbour_scale * local


def gat_item_denominator(scores: GATScores, edge_item: torch.Tensor) -> torch.Tensor:
    """Z_v = exp(s_vv) + Σ_{u∈N_v} exp(s_vu) (exact: all of v's edges are local)."""
    n_items = scores.item_self.shape[0]
    return scores.item_self + scatter(
        scores.item_edge, edge_item, dim=0, dim_size=n_items, reduce="sum"
    )


def gat_user_aggregate(
    item_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    user_edge_scores: torch.Tensor,
    user_denominator: torch.Tensor,
) -> torch.Tensor:
    """Eq. 14, user side without the self term: X[u] = Σ_{v∈N_u} exp(s_uv)/Z_u · e_v."""
    _check_emb(item_emb, "item_emb")
    n_users = user_denominator.shape[0]
    w = user_edge_scores / user_denominator[edge_user]
    return _weighted_sum(item_emb, edge_item, edge_user, w, n_users)


def gat_item_aggregate(
    user_emb: torch.Tensor,
    edge_user: torch.Tensor,
    edge_item: torch.Tensor,
    item_edge_scores: torch.Tensor,
    item_denominator: torch.Tensor,
) -> torch.Tensor:
    """Eq. 14, item side without the self term: Y[v] = Σ_{u∈N_v} exp(s_vu)/Z_v · e_u."""
    _check_emb(user_emb, "user_emb")
    n_items = item_denominator.shape[0]
    w = item_edge_scores / item_denominator[edge_item]
    return _weighted_sum(user_emb, edge_user, edge_item, w, n_items)
