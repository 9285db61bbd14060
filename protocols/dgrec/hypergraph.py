"""Hypergraph primitives of DGREC's local model (protocols/dgrec/model.py): a user's inner-item hypergraph
(items as nodes, tags as hyperedges, incidence A ∈ {0,1}^{m×t}, D_v = diag(A 1), D_t = diag(Aᵀ 1)),

    op x = D_v^{−1/2} A D_t^{−1} Aᵀ D_v^{−1/2} x                   (two scatter sums, never m×m)

the bipartite item–tag step D_v^{−1/2} A D_t^{−1/2} T, the Pearson interest loss of eq. 1 and the
per-column standardisation of the assignment logits. Every function works on a batch of users too:
node positions and tag ids of different users never overlap (protocols/dgrec/batched.py offsets
user b's tags by b·n_tags), so degrees and sums stay per user.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch
from torch_geometric.utils import scatter

from cluster.device import to_device

Incidence = sp.spmatrix | sp.sparray | np.ndarray | torch.Tensor


# ----------------------------------------------------------------------------- local hypergraph
def build_user_hypergraph(
    own_items: np.ndarray,
    neighbour_public_items: np.ndarray | Sequence[np.ndarray],
    item_tags: sp.spmatrix | sp.sparray,
) -> tuple[np.ndarray, sp.csr_matrix]:
    """User u's local hypergraph: nodes are the sorted distinct items among its own items and its
    neighbours' publicized items; hyperedges are tags. Returns ``node_item_ids`` int64 [m] and the
    binary incidence csr [m, n_tags] (rows of ``item_tags`` for those items, global tag columns)."""
    item_tags = sp.csr_matrix(item_tags)
    n_items = item_tags.shape[0]
    parts = [np.asarray(own_items, dtype=np.int64).reshape(-1)]
    if isinstance(neighbour_public_items, np.ndarray):
        parts.append(neighbour_public_items.astype(np.int64).reshape(-1))
    else:
        parts.extend(np.asarray(p, dtype=np.int64).reshape(-1) for p in neighbour_public_items)
    node_item_ids = np.unique(np.concatenate(parts))
    if node_item_ids.size == 0:
        raise ValueError("user hypergraph is empty: no own or neighbour-publicized items")
    if node_item_ids[0] < 0 or node_item_ids[-1] >= n_items:
        raise ValueError(f"item ids must lie in 0..{n_items - 1} (rows of item_tags)")
    incidence = item_tags[node_item_ids]
    incidence.data[:] = 1.0
    incidence.eliminate_zeros()
    return node_item_ids, incidence.astype(np.float32)


def hyperedge_index(incidence: Incidence, n_nodes: int, n_tags: int) -> torch.Tensor:
    """(item position, tag) pairs of a [n_nodes, n_tags] incidence (any nonzero = member) as a
    LongTensor [2, nnz] — PyG's ``hyperedge_index`` layout: on the incidence's device for a
    tensor, on the CPU for a scipy or numpy incidence."""
    if isinstance(incidence, torch.Tensor):
        shape = tuple(incidence.shape)
        if incidence.is_sparse:
            inc = incidence.coalesce()
            idx = inc.indices()[:, inc.values() != 0]
        else:
            idx = torch.nonzero(incidence, as_tuple=False).t()
    else:
        coo = sp.coo_matrix(incidence)
        shape = coo.shape
        keep = coo.data != 0
        idx = to_device(np.stack([coo.row[keep], coo.col[keep]]).astype(np.int64), "cpu")
    if shape != (n_nodes, n_tags):
        raise ValueError(f"incidence must be items×tags = ({n_nodes}, {n_tags}), got {shape}")
    return idx.to(torch.long)


def _inv_pow(deg: torch.Tensor, power: float) -> torch.Tensor:
    out = deg.clamp(min=1.0).pow(-power)
    return torch.where(deg > 0, out, torch.zeros_like(out))  # isolated items / empty tags → 0


def hypergraph_propagate(x: torch.Tensor, edge_index: torch.Tensor, n_tags: int) -> torch.Tensor:
    """op x = D_v^{−1/2} A D_t^{−1} Aᵀ D_v^{−1/2} x for x [m, c], via two scatter sums."""
    node, tag = edge_index[0], edge_index[1]
    ones = torch.ones(node.numel(), dtype=x.dtype, device=x.device)
    dv = scatter(ones, node, dim=0, dim_size=x.shape[0], reduce="sum")
    dt = scatter(ones, tag, dim=0, dim_size=n_tags, reduce="sum")
    xs = x * _inv_pow(dv, 0.5).unsqueeze(1)
    per_tag = scatter(xs[node], tag, dim=0, dim_size=n_tags, reduce="sum") * _inv_pow(
        dt, 1.0
    ).unsqueeze(1)
    return scatter(per_tag[tag], node, dim=0, dim_size=x.shape[0], reduce="sum") * _inv_pow(
        dv, 0.5
    ).unsqueeze(1)


def bipartite_tag_to_item(
    tag_x: torch.Tensor, edge_index: torch.Tensor, n_nodes: int
) -> torch.Tensor:
    """D_v^{−1/2} A D_t^{−1/2} T: one symmetric-normalised GCN step from tag nodes to items."""
    node, tag = edge_index[0], edge_index[1]
    ones = torch.ones(node.numel(), dtype=tag_x.dtype, device=tag_x.device)
    dv = scatter(ones, node, dim=0, dim_size=n_nodes, reduce="sum")
    dt = scatter(ones, tag, dim=0, dim_size=tag_x.shape[0], reduce="sum")
    msg = tag_x[tag] * (_inv_pow(dv, 0.5)[node] * _inv_pow(dt, 0.5)[tag]).unsqueeze(1)
    return scatter(msg, node, dim=0, dim_size=n_nodes, reduce="sum")


def pearson_interest_loss(interests: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Eq. 1: Σ_{i<j} |pearson(Ē_i, Ē_j)| over the rows of ``interests`` [n_i, d] (or one sum per
    user for a batch [B, n_i, d] → [B])."""
    centred = interests - interests.mean(dim=-1, keepdim=True)
    unit = centred / (centred.norm(dim=-1, keepdim=True) + eps)
    corr = unit @ unit.transpose(-1, -2)
    return torch.triu(corr, diagonal=1).abs().sum(dim=(-2, -1))


def standardise_columns(
    logits: torch.Tensor,
    batch: torch.Tensor | None = None,
    n_users: int = 1,
    eps: float = 1e-12,
) -> torch.Tensor:
    """(z − mean_m z) / √(var_m z + eps) per column of ``logits`` [m, n_i] over one user's m items
    (``batch`` [m] gives each row's user when several users' rows are stacked); eps inside the root
    keeps the gradient finite when a column is constant (e.g. every item of the user has the same
    tags), where the result is 0 (a uniform assignment)."""
    if batch is None:
        centred = logits - logits.mean(dim=0, keepdim=True)
        return centred * torch.rsqrt(centred.pow(2).mean(dim=0, keepdim=True) + eps)
    mean = scatter(logits, batch, dim=0, dim_size=n_users, reduce="mean")
    centred = logits - mean[batch]
    var = scatter(centred.pow(2), batch, dim=0, dim_size=n_users, reduce="mean")
    return centred * torch.rsqrt(var[batch] + eps)
