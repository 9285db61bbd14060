"""DGREC local model of one user (Zheng et al., CIKM 2023, stage 2 "local gradient calculation").

User u's local hypergraph has the m items it knows (its own interactions plus the publicized ones
of its neighbours) as nodes and the tags as hyperedges; A_u ∈ {0,1}^{m×t} is the item×tag
incidence, D_v = diag(A_u 1) the item degrees, D_t = diag(A_uᵀ 1) the hyperedge degrees, and
E_u ∈ R^{m×d} the items' embeddings (rows of the shared item table). Shapes: d = dim,
n_i = n_interests.

    op   = D_v^{−1/2} A_u D_t^{−1} A_uᵀ D_v^{−1/2}                      [m, m]  hypergraph operator
    E'_u = op E_u W1                                                    [m, d]  hypergraph convolution
    S_u  = softmax_row(std(op E_u W2))                                  [m, n_i] soft interest assignment
    Ē_u  = S_uᵀ E'_u                                                    [n_i, d] interest condensation
    Ā_u  = S_uᵀ op S_u                                                  [n_i, n_i] interest adjacency
    L_P  = Σ_{i<j} |pearson(Ē_u,i, Ē_u,j)|   (eq. 1; Pearson over the d coordinates)
    P_u,i = Ē_u,i W3 + Σ_j Â_u(i, j) (Ē_u,i W4 − Ē_u,j W5)              [n_i]   W3, W4, W5 ∈ R^{d×1}
            Â_u = Ā_u · n_i / Σ_{k,l} Ā_u(k, l)                          (Ā scaled to unit mean row sum)
    e_u  = softmax(P_uᵀ) Ē_u                                            [d]     interest attention
    ŷ_ui = MLP(e_u ‖ e_i),  MLP = Linear(2d, hidden) → ReLU → Linear(hidden, 1)
    L    = −mean ln σ(ŷ_ui − ŷ_uj) + λ_P L_P + λ_2 ‖Θ‖²                 eq. 3 (BPR + Pearson + L2)

Two departures from the paper, both needed for the interest layer to learn at all (switch them off
with ``standardise_assignment=False`` / ``normalise_interest_adjacency=False``):
``std`` standardises each column of the assignment logits over the user's m items,
(z − mean_m z) / std_m z. op averages over hyperedges of hundreds of items, so op E W2 is ≈ 0.004
at the initialisation (E ~ N(0, 0.1²)); S_u is then uniform (1/n_i ± 0.0006), the n_i interests
coincide and |pearson| = 1 for every pair (L_P stuck at C(n_i, 2)). No reading of eq. 1 helps there:
pearson(x, y) is at its maximum when y = x, so any function of it (|ρ|, ρ², with eps) has zero
gradient at identical interests; the symmetry must be broken in S_u. The scaling of Ā: its entries
sum to 1ᵀ op 1 ≈ m, so the raw P_u differences are ≈ m·|Ē W| and the interest softmax saturates
(one interest gets weight 1, W3…W5 get no gradient). With both, S_u's rows span ≈ 0.3 at
initialisation, L_P falls from ≈ 12 to ≈ 2 in tens of SGD steps and W2…W5 get gradients of
1e-3…1 (1e-5, the L2 term alone, without them).

"op" in S_u and Ā_u is read as the normalised hypergraph operator above (DiffPool-style pooling
S = softmax(GNN(A, X)), Ā = Sᵀ A S). ‖Θ‖² covers the item-embedding rows the loss touches and
every dense weight.

op is applied as two scatter sums over the (item, tag) pairs, never as an m×m matrix; PyG's
``HypergraphConv`` is not used directly because it normalises as D_v^{−1} A D_t^{−1} Aᵀ (not the
paper's symmetric D_v^{−1/2} … D_v^{−1/2}) and the model also needs op for S_u and Ā_u without a
linear map (the tests check op X = D_v^{1/2} HypergraphConv(D_v^{−1/2} X) with Θ = I).

Ablations: ``use_hypergraph=False`` drops the propagation (op = I: E' = E W1, S = softmax(E W2),
Ā = SᵀS); ``use_bipartite=True`` (takes precedence) replaces the hyperedges by tag *nodes* with
their own learned embeddings T ∈ R^{n_tags×d} on the item–tag bipartite graph:
E' = D_v^{−1/2} A_u D_t^{−1/2} T W1 (op unchanged for S and Ā, it is the bipartite graph's
normalised two-hop item–item operator); ``interest_attention=False`` uses e_u = mean_i Ē_u,i;
``pearson=False`` drops L_P. ``scorer="dot"`` (not in the paper) replaces the MLP by ŷ = e_u · e_i
(the MLP's parameters then get no gradient).

DLGNN baseline (:class:`DLGNNUserModel`, decentralised LightGCN): user u runs LightGCN (He et al.
2020, eqs. 3–4, models/lightgcn.py) on its ego graph u – I_u (its own training items), K layers,

    h_u = mean_{k=0..K} x_u^(k),   ŷ_ui = h_u · e_i,   L = Σ_pairs −ln σ(ŷ_ui − ŷ_uj) + λ_2 ‖Θ‖²

with a private user embedding e_u (updated from u's own gradient only, never sent) and a copy of
the item table whose gradients are shared with the neighbourhood as DGREC shares its gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from cluster.device import to_device
from protocols.dgrec.batched import (
    HypergraphBatch,
    encode_batch,
    loss_batch,
    score_batch,
    shared_parameters,
)
from protocols.dgrec.hypergraph import (  # noqa: F401  (re-exported: the model's primitives)
    Incidence,
    bipartite_tag_to_item,
    build_user_hypergraph,
    hyperedge_index,
    hypergraph_propagate,
    pearson_interest_loss,
    standardise_columns,
)


# ----------------------------------------------------------------------------------- the model
@dataclass
class UserEncoding:
    """Everything stage 2 computes for one user (shapes in the module docstring)."""

    e_u: torch.Tensor  # [d]
    interests: torch.Tensor  # Ē_u [n_i, d]
    interest_adjacency: torch.Tensor  # Ā_u [n_i, n_i]
    assignment: torch.Tensor  # S_u [m, n_i]
    item_repr: torch.Tensor  # E'_u [m, d]
    attention: torch.Tensor  # softmax(P_u) [n_i]


def _bpr(pos_scores: torch.Tensor, neg_scores: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    pair_losses = -F.logsigmoid(pos_scores - neg_scores)
    return pair_losses.mean() if reduction == "mean" else pair_losses.sum()


class DGRECUserModel(nn.Module):
    """One user's DGREC model (module docstring). The item table, W1…W5 and the MLP (and the tag
    table in the bipartite ablation) are the shared parameters whose gradients are gossiped."""

    private_parameter_names: tuple[str, ...] = ()  # every parameter's gradient is shared

    def __init__(
        self,
        n_items: int,
        n_tags: int,
        dim: int,
        n_interests: int,
        hidden: int,
        use_hypergraph: bool = True,
        use_bipartite: bool = False,
        interest_attention: bool = True,
        pearson: bool = True,
        *,
        scorer: str = "mlp",
        pearson_weight: float = 0.1,
        l2: float = 1e-5,
        init_std: float = 0.1,
        standardise_assignment: bool = True,
        normalise_interest_adjacency: bool = True,
    ) -> None:
        super().__init__()
        for name, value in (
            ("n_items", n_items),
            ("n_tags", n_tags),
            ("dim", dim),
            ("n_interests", n_interests),
            ("hidden", hidden),
        ):
            if int(value) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {value}")
        if pearson_weight < 0 or l2 < 0:
            raise ValueError("loss weights must be non-negative")
        if scorer not in ("mlp", "dot"):
            raise ValueError(f"scorer must be 'mlp' or 'dot', got {scorer!r}")
        self.scorer = scorer
        self.n_items, self.n_tags, self.dim, self.n_interests = (
            int(n_items),
            int(n_tags),
            int(dim),
            int(n_interests),
        )
        self.graph = "bipartite" if use_bipartite else ("hypergraph" if use_hypergraph else "none")
        self.interest_attention, self.pearson = bool(interest_attention), bool(pearson)
        self.pearson_weight, self.l2 = float(pearson_weight), float(l2)
        self.standardise_assignment = bool(standardise_assignment)
        self.normalise_interest_adjacency = bool(normalise_interest_adjacency)

        self.item_emb = nn.Embedding(self.n_items, self.dim)
        nn.init.normal_(self.item_emb.weight, std=init_std)
        self.tag_emb: nn.Embedding | None = None
        if self.graph == "bipartite":
            self.tag_emb = nn.Embedding(self.n_tags, self.dim)
            nn.init.normal_(self.tag_emb.weight, std=init_std)
        self.w1 = nn.Linear(self.dim, self.dim, bias=False)  # hypergraph convolution
        self.w2 = nn.Linear(self.dim, self.n_interests, bias=False)  # soft assignment
        self.w3 = nn.Linear(self.dim, 1, bias=False)  # interest attention, own term
        self.w4 = nn.Linear(self.dim, 1, bias=False)  # … neighbour difference, self side
        self.w5 = nn.Linear(self.dim, 1, bias=False)  # … neighbour difference, other side
        self.mlp = nn.Sequential(
            nn.Linear(2 * self.dim, int(hidden)), nn.ReLU(), nn.Linear(int(hidden), 1)
        )

    # ---------------------------------------------------------------------------------- encode
    def _item_ids(
        self, item_ids: torch.Tensor | np.ndarray | Sequence[int], what: str
    ) -> torch.Tensor:
        """``item_ids`` checked (1-D, integer, non-empty, in the catalogue), as a LongTensor where
        it was (a numpy array or a list: on the CPU)."""
        ids = to_device(item_ids, None)
        if ids.dtype.is_floating_point or ids.dim() != 1:
            raise ValueError(
                f"{what} must be a 1-D integer array, got {ids.dtype} of shape {tuple(ids.shape)}"
            )
        if ids.numel() == 0:
            raise ValueError(f"{what} is empty")
        if int(ids.min()) < 0 or int(ids.max()) >= self.n_items:
            raise ValueError(f"{what} must lie in 0..{self.n_items - 1}")
        return ids.to(torch.long)

    def _check_items(
        self, item_ids: torch.Tensor | np.ndarray | Sequence[int], what: str
    ) -> torch.Tensor:
        """:meth:`_item_ids` on the model's device."""
        return self._item_ids(item_ids, what).to(self.item_emb.weight.device)

    def _graphs(self, node_item_ids, incidence: Incidence) -> HypergraphBatch:
        ids = self._item_ids(node_item_ids, "node_item_ids")
        return HypergraphBatch.collate(
            [(ids, incidence)], self.n_tags, self.n_items, self.item_emb.weight.device
        )

    def encode(
        self, node_item_ids: torch.Tensor | np.ndarray, incidence: Incidence
    ) -> UserEncoding:
        """All of stage 2 for one user's hypergraph (``incidence`` items×tags, [m, n_tags]);
        protocols/dgrec/batched.py's ``encode_batch`` with B = 1."""
        enc = encode_batch(self, shared_parameters(self), self._graphs(node_item_ids, incidence))
        return UserEncoding(
            enc.e_u[0],
            enc.interests[0],
            enc.interest_adjacency[0],
            enc.assignment,
            enc.item_repr,
            enc.attention[0],
        )

    def forward(
        self, node_item_ids: torch.Tensor | np.ndarray, incidence: Incidence
    ) -> torch.Tensor:
        """e_u [d] of the user whose local hypergraph is (node_item_ids [m], incidence [m, n_tags])."""
        return self.encode(node_item_ids, incidence).e_u

    # ----------------------------------------------------------------------------- predict/loss
    def score(self, e_u: torch.Tensor, item_ids: torch.Tensor | np.ndarray) -> torch.Tensor:
        """ŷ = MLP(e_u ‖ e_i) (or e_u · e_i) for every item in ``item_ids`` [B]: logits [B]."""
        ids = self._check_items(item_ids, "item_ids")
        if e_u.shape != (self.dim,):
            raise ValueError(f"e_u must have shape ({self.dim},), got {tuple(e_u.shape)}")
        return score_batch(self, shared_parameters(self), e_u[None], ids[None])[0]

    def loss(
        self,
        pos_items: torch.Tensor | np.ndarray,
        neg_items: torch.Tensor | np.ndarray,
        node_item_ids: torch.Tensor | np.ndarray,
        incidence: Incidence,
        reduction: str = "mean",
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 3 over aligned (positive, negative) pairs: BPR + λ_P·Pearson + λ_2·L2.
        ``reduction``: the BPR term is the mean over the pairs (default) or, as eq. 3's
        Σ_{(u,i,j)} reads, their sum. Returns (total, {"bpr", "pearson", "l2", "total"} as floats)."""
        pos = self._check_items(pos_items, "pos_items")
        neg = self._check_items(neg_items, "neg_items")
        if pos.shape != neg.shape:
            raise ValueError(
                f"pos_items and neg_items must pair up, got {tuple(pos.shape)} and {tuple(neg.shape)}"
            )
        total, parts = loss_batch(
            self,
            shared_parameters(self),
            self._graphs(node_item_ids, incidence),
            pos[None],
            neg[None],
            reduction,
        )
        return total[0], {k: float(v[0]) for k, v in parts.items()}


# ------------------------------------------------------------------------------ DLGNN baseline
class DLGNNUserModel(nn.Module):
    """One user's decentralised LightGCN (module docstring): a private user embedding ``user_emb``
    [d] and a copy of the item table ``item_emb`` [n_items, d] (the shared parameters)."""

    private_parameter_names: tuple[str, ...] = ("user_emb",)

    def __init__(
        self,
        n_items: int,
        dim: int,
        layers: int = 2,
        *,
        l2: float = 1e-5,
        init_std: float = 0.1,
    ) -> None:
        super().__init__()
        for name, value in (("n_items", n_items), ("dim", dim), ("layers", layers + 1)):
            if int(value) < 1:
                raise ValueError(f"{name} must be ≥ {1 if name != 'layers' else 0}, got {value}")
        if l2 < 0:
            raise ValueError("l2 must be non-negative")
        self.n_items, self.dim, self.layers = int(n_items), int(dim), int(layers)
        self.l2 = float(l2)
        self.item_emb = nn.Embedding(self.n_items, self.dim)
        nn.init.normal_(self.item_emb.weight, std=init_std)
        self.user_emb = nn.Parameter(torch.randn(self.dim) * init_std)
        self._graph_key: tuple | None = None
        self._graph = None

    _item_ids = DGRECUserModel._item_ids
    _check_items = DGRECUserModel._check_items

    def _ego_graph(self, n_own: int):
        """The ego graph u – I_u of ``n_own`` items on the model's device (kept for the next call)."""
        from models.lightgcn import build_local_graphs

        device = self.item_emb.weight.device
        if self._graph_key != (n_own, str(device)):
            empty = np.zeros(0, dtype=np.int64)
            self._graph = build_local_graphs([n_own], [(empty, empty)], device)
            self._graph_key = (n_own, str(device))
        return self._graph

    def forward(self, own_items: torch.Tensor | np.ndarray, incidence: Incidence | None = None):
        """h_u [d] on the ego graph u – ``own_items`` (``incidence`` is ignored: no tags)."""
        from models.lightgcn import local_forward

        ids = self._check_items(own_items, "own_items")
        graph = self._ego_graph(ids.numel())
        empty = self.item_emb.weight.new_zeros((0, self.dim))
        return local_forward(graph, self.user_emb[None], self.item_emb(ids), empty, self.layers)[0]

    def score(self, h_u: torch.Tensor, item_ids: torch.Tensor | np.ndarray) -> torch.Tensor:
        """ŷ = h_u · e_i for every item in ``item_ids`` [B]."""
        if h_u.shape != (self.dim,):
            raise ValueError(f"h_u must have shape ({self.dim},), got {tuple(h_u.shape)}")
        return self.item_emb(self._check_items(item_ids, "item_ids")) @ h_u

    def loss(
        self,
        pos_items: torch.Tensor | np.ndarray,
        neg_items: torch.Tensor | np.ndarray,
        own_items: torch.Tensor | np.ndarray,
        incidence: Incidence | None = None,
        reduction: str = "mean",
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """BPR (mean or sum over the pairs) + λ_2 ‖Θ‖² over e_u and the item rows touched."""
        pos = self._check_items(pos_items, "pos_items")
        neg = self._check_items(neg_items, "neg_items")
        if pos.shape != neg.shape:
            raise ValueError(
                f"pos_items and neg_items must pair up, got {tuple(pos.shape)} and {tuple(neg.shape)}"
            )
        h_u = self(own_items)
        bpr = _bpr(self.score(h_u, pos), self.score(h_u, neg), reduction)
        own = self._check_items(own_items, "own_items")
        touched = torch.unique(torch.cat([own, pos, neg]))
        norm = self.item_emb(touched).pow(2).sum() + self.user_emb.pow(2).sum()
        total = bpr + self.l2 * norm
        parts = {k: float(v.detach()) for k, v in (("bpr", bpr), ("l2", norm), ("total", total))}
        return total, parts
