"""FedPerGNN's GAT backbone on one user's local subgraph (Wu et al., Nat. Commun. 2022, "model
training"): a rating predictor over PyG ``GATConv`` layers.

Local subgraph of user u (built from what the matcher returned, see protocols/fedpergnn):
nodes are u, its rated items I_u and its anonymous neighbours U_u; edges are u ↔ i for i ∈ I_u
and v ↔ i for every item i that neighbour v shares with u. Items are scored as candidate nodes
c attached by the directed edge u → c only (u's representation does not see them), in training
(c = each i ∈ I_u again) and at prediction (c = a held-out item) alike, so that a rated and an
unrated item are represented the same way. Node features x⁰ = [e_u; E[I_u]; e_{U_u}; E[c]].

Layer k = 1..K (``GATConv``, one head, self-loops, LeakyReLU slope 0.2):

    α_nm^k = softmax_{m ∈ N(n) ∪ {n}} LeakyReLU(a_srcᵀ W^k x_m^{k−1} + a_dstᵀ W^k x_n^{k−1})
    x_n^k  = σ_k( Σ_{m ∈ N(n) ∪ {n}} α_nm^k W^k x_m^{k−1} + b^k ),   σ_k = ELU (k < K), id (k = K)

Readout and loss (rating = dot product, MSE on explicit ratings):

    r̂_uc = h_u · h_c,   h = x^K
    L_u  = (1/|I_u|) Σ_{i ∈ I_u} (r_ui − r̂_ui)² + α (‖e_u‖² + (1/|I_u|) Σ_{i ∈ I_u} ‖e_i‖²)

K = 0 is plain MF (h = x⁰). Every user's forward/backward is its own autograd graph, so the
gradient of the shared GAT weights is that user's alone (what it uploads).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from cluster.device import to_device


@dataclass
class LocalGATGraph:
    """One user's local subgraph: node 0 is the user, then ``n_items`` items, ``n_nbrs``
    neighbours and ``n_candidates`` candidate items; ``edge_index`` [2, E] (source, target)."""

    n_items: int
    n_nbrs: int
    n_candidates: int
    edge_index: torch.Tensor

    @property
    def n_nodes(self) -> int:
        return 1 + self.n_items + self.n_nbrs + self.n_candidates

    @property
    def item_nodes(self) -> torch.Tensor:
        return torch.arange(1, 1 + self.n_items, device=self.edge_index.device)

    @property
    def candidate_nodes(self) -> torch.Tensor:
        start = 1 + self.n_items + self.n_nbrs
        return torch.arange(start, start + self.n_candidates, device=self.edge_index.device)


def build_local_gat_graph(
    n_items: int, nbr_links: tuple[np.ndarray, np.ndarray], n_candidates: int = 0, device="cpu"
) -> LocalGATGraph:
    """``nbr_links`` = (neighbour index, local item index) pairs: neighbour v shares the item at
    that position of I_u; the edges on ``device``. Raises ValueError on links outside the
    graph."""
    if n_items < 0 or n_candidates < 0:
        raise ValueError(f"n_items and n_candidates must be >= 0, got {n_items}, {n_candidates}")
    v = np.asarray(nbr_links[0], dtype=np.int64)
    i = np.asarray(nbr_links[1], dtype=np.int64)
    if v.shape != i.shape or v.ndim != 1:
        raise ValueError("nbr_links must be two 1-D arrays of equal length")
    if len(i) and (i.min() < 0 or i.max() >= n_items or v.min() < 0):
        raise ValueError(f"nbr_links: item positions must lie in [0, {n_items}), neighbours >= 0")
    n_nbrs = int(v.max()) + 1 if len(v) else 0
    items = 1 + np.arange(n_items)
    nbrs = 1 + n_items + v
    linked = 1 + i
    cand = 1 + n_items + n_nbrs + np.arange(n_candidates)
    zeros_i, zeros_c = np.zeros(n_items, np.int64), np.zeros(n_candidates, np.int64)
    src = np.concatenate([zeros_i, items, nbrs, linked, zeros_c])
    dst = np.concatenate([items, zeros_i, linked, nbrs, cand])
    edge_index = to_device(np.stack([src, dst]).astype(np.int64), device)
    return LocalGATGraph(n_items, n_nbrs, n_candidates, edge_index)


class LocalGAT(nn.Module):
    """K one-head ``GATConv(d, d)`` layers (ELU between layers, none after the last)."""

    def __init__(self, dim: int, layers: int, seed: int = 0, negative_slope: float = 0.2):
        from torch_geometric.nn import GATConv  # on first use: PyG costs a host process ~2.5 s

        super().__init__()
        if dim < 1 or layers < 0:
            raise ValueError(f"need dim >= 1 and layers >= 0, got {dim}, {layers}")
        fork = torch.random.fork_rng(devices=[])
        with fork:  # deterministic initialisation without touching the global RNG's state
            torch.manual_seed(seed)
            self.convs = nn.ModuleList(
                GATConv(dim, dim, heads=1, negative_slope=negative_slope) for _ in range(layers)
            )
        self.dim = dim

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for k, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if k < len(self.convs) - 1:
                x = torch.nn.functional.elu(x)
        return x

    # --- the weights as one flat vector (what travels on the wire) ------------------------------
    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flat(self, device=None) -> torch.Tensor:
        """The weights as one vector, on the parameters' device (K = 0, no parameters: an empty
        vector on ``device``)."""
        params = [p.detach().reshape(-1) for p in self.parameters()]
        return torch.cat(params) if params else torch.zeros(0, device=device)

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """{name: tensor} views of ``flat`` in this module's parameter order and shapes."""
        if flat.dim() != 1 or flat.numel() != self.n_parameters():
            raise ValueError(
                f"flat weights: expected a vector of {self.n_parameters()}, got {tuple(flat.shape)}"
            )
        out, start = {}, 0
        for name, p in self.named_parameters():
            out[name] = flat[start : start + p.numel()].view_as(p)
            start += p.numel()
        return out


def local_gat_forward(
    model: LocalGAT,
    flat_weights: torch.Tensor,
    graph: LocalGATGraph,
    user_emb: torch.Tensor,
    item_emb: torch.Tensor,
    nbr_emb: torch.Tensor,
    candidate_emb: torch.Tensor | None = None,
) -> torch.Tensor:
    """x^K [n_nodes, d] of one local subgraph with the given flat GAT weights (a leaf of this
    user's autograd graph, so its gradient is this user's alone)."""
    parts = [user_emb.reshape(1, -1), item_emb, nbr_emb.to(user_emb.dtype)]
    if graph.n_candidates:
        if candidate_emb is None or candidate_emb.shape[0] != graph.n_candidates:
            raise ValueError(f"need {graph.n_candidates} candidate embeddings")
        parts.append(candidate_emb)
    x0 = torch.cat(parts)
    if x0.shape[0] != graph.n_nodes:
        raise ValueError(f"{x0.shape[0]} node features for a graph of {graph.n_nodes} nodes")
    return functional_call(model, model.unflatten(flat_weights), (x0, graph.edge_index))


def rating_loss(
    pred: torch.Tensor,
    ratings: torch.Tensor,
    user_emb: torch.Tensor,
    item_emb: torch.Tensor,
    l2: float,
) -> torch.Tensor:
    """L_u of the module docstring: MSE of the predictions r̂ over I_u plus ``l2`` × the L2 term."""
    if ratings.shape != pred.shape or ratings.shape != (item_emb.shape[0],):
        raise ValueError(
            f"need one rating and prediction per item: {tuple(ratings.shape)} ratings, "
            f"{tuple(pred.shape)} predictions, {item_emb.shape[0]} items"
        )
    mse = (ratings - pred).pow(2).mean()
    norm = user_emb.pow(2).sum() + item_emb.pow(2).sum(-1).mean()
    return mse + l2 * norm


def predict_candidates(h: torch.Tensor, graph: LocalGATGraph) -> torch.Tensor:
    """r̂_uc = h_u·h_c for the candidate items [n_candidates]."""
    return h[graph.candidate_nodes] @ h[0]
