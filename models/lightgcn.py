"""LightGCN (He et al., SIGIR 2020) on the full training graph and on users' local subgraphs.

Propagation on a user–item graph with symmetric normalisation (LightGCN eq. 3):

    x_v^(k+1) = Σ_{w ∈ N(v)}  x_w^(k) / √(|N(v)|·|N(w)|)        k = 0..K−1

and the final representation is the mean of the layers (eq. 4, α_k = 1/(K+1)):

    h_v = (x_v^(0) + x_v^(1) + … + x_v^(K)) / (K + 1)

Training is BPR with L2 on the ego (layer-0) embeddings of the batch (eq. 15):

    L = mean_pairs −ln σ(s_ui − s_uj) + α/2 · (‖e_u‖² + mean_pairs(‖e_i‖² + ‖e_j‖²))

Embeddings start Xavier-uniform (d = 64 in the thesis).

Two uses:

* **central** (:class:`LightGCN`, trained by :class:`RankingTrainer`): one graph of all users
  and items; score ``h_u·h_i`` (``item_side="propagated"``, the LightGCN paper) or ``h_u·e_i``
  (``"ego"``).
* **local** (:func:`build_local_graphs`, :func:`local_forward`): FedLightGCN. User u sees only its
  second-order subgraph u – I_u – U_u: its own embedding, the embeddings of its items, and the
  anonymous neighbour embeddings that the matcher returned, each linked to the items it shares
  with u. Degrees are local. The score is ``h_u·e_i`` with the item's ego embedding (items to
  rank lie outside the subgraph). Several users' subgraphs are stacked as one disjoint graph;
  propagation is an ``index_add`` over edges sorted by (destination, source), so every node's sum
  runs over its own edges in the same order whether its user is alone or in a batch: batched
  results equal one-by-one results exactly (on CPU).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from cluster.device import build, to_device
from models.bpr import neg_log_sigmoid, sample_negatives
from models.metrics import full_ranking_metrics
from models.trainer import Trainer


def xavier_embeddings(n: int, dim: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """[n, dim] float32 Xavier-uniform: U(−a, a), a = √(6/(n + dim)) (as torch's xavier_uniform_)."""
    bound = (6.0 / (n + dim)) ** 0.5
    device = None if generator is None else generator.device  # torch's default without one
    return (torch.rand((n, dim), generator=generator, device=device) * 2.0 - 1.0) * bound


def xavier_rows(rng: np.random.Generator, n: int, fan: int, dim: int) -> np.ndarray:
    """n rows of a Xavier-uniform table of ``fan`` rows, drawn from a numpy generator:
    U(−a, a), a = √(6/(fan + d)) (float32)."""
    bound = math.sqrt(6.0 / (fan + dim))
    return rng.uniform(-bound, bound, size=(n, dim)).astype(np.float32)


def edge_weights(src: torch.Tensor, dst: torch.Tensor, n_nodes: int) -> torch.Tensor:
    """1/√(deg(src)·deg(dst)) for a symmetric edge list (both directions present)."""
    deg = torch.bincount(dst, minlength=n_nodes).to(torch.float64)
    return (deg[src] * deg[dst]).rsqrt()


def sort_edges(src: torch.Tensor, dst: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    order = np.lexsort((src.cpu().numpy(), dst.cpu().numpy()))
    order = to_device(order, src.device)
    return src[order], dst[order]


def propagate(
    x0: torch.Tensor, src: torch.Tensor, dst: torch.Tensor, weight: torch.Tensor, layers: int
) -> torch.Tensor:
    """Mean of layers 0..K of LightGCN propagation (eqs. 3–4) over a directed edge list."""
    w = weight[:, None].to(x0.dtype)
    return mean_of_layers(
        x0, lambda x: torch.zeros_like(x0).index_add(0, dst, x.index_select(0, src) * w), layers
    )


def mean_of_layers(x0: torch.Tensor, step, layers: int) -> torch.Tensor:
    """(x⁰ + x¹ + … + x^K) / (K + 1) with x^{k+1} = step(x^k) (eq. 4's layer combination)."""
    total = x0
    x = x0
    for _ in range(layers):
        x = step(x)
        total = total + x
    return total / (layers + 1)


class _SymmetricSpMM(torch.autograd.Function):
    """y = Â x for a symmetric sparse Â; the backward pass is Âᵀ g = Â g (no transpose built)."""

    @staticmethod
    def forward(ctx, adjacency: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ctx.adjacency = adjacency
        return adjacency @ x

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return None, ctx.adjacency @ grad


def propagate_sparse(x0: torch.Tensor, adjacency: torch.Tensor, layers: int) -> torch.Tensor:
    """Mean of layers 0..K of LightGCN propagation (eqs. 3–4), x^{k+1} = Â x^k with Â the
    symmetric normalised adjacency as a sparse CSR matrix (one multi-threaded product per layer
    instead of a gather and a scatter over the edge list)."""
    return mean_of_layers(x0, lambda x: _SymmetricSpMM.apply(adjacency, x), layers)


def bpr_loss(
    h_user: torch.Tensor,
    e_user: torch.Tensor,
    pos: torch.Tensor,
    neg: torch.Tensor,
    l2: float,
    s_pos: torch.Tensor | None = None,
    s_neg: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-user BPR + ``l2`` × L2 (eq. 15). ``h_user``/``e_user`` [B, d]; ``pos``/``neg`` [B, P, d] are the
    embeddings the scores use (when ``s_pos``/``s_neg`` are not given) and the ego embeddings
    that the L2 term regularises. Returns [B]."""
    if s_pos is None:
        s_pos = (h_user[:, None, :] * pos).sum(-1)
        s_neg = (h_user[:, None, :] * neg).sum(-1)
    rank = neg_log_sigmoid(s_pos - s_neg).mean(1)
    norm = e_user.pow(2).sum(-1) + (pos.pow(2).sum(-1) + neg.pow(2).sum(-1)).mean(1)
    return rank + 0.5 * l2 * norm


# --------------------------------------------------------------------------- central


class LightGCN(torch.nn.Module):
    """LightGCN on the whole training graph (users 0..U−1 then items U..U+I−1)."""

    def __init__(
        self,
        n_users: int,
        n_items: int,
        dim: int = 64,
        layers: int = 2,
        item_side: str = "propagated",
        generator: torch.Generator | None = None,
    ):
        super().__init__()
        if item_side not in ("propagated", "ego"):
            raise ValueError(f"item_side must be 'propagated' or 'ego', got {item_side!r}")
        self.n_users, self.n_items, self.layers, self.item_side = (
            n_users,
            n_items,
            layers,
            item_side,
        )
        self.user = torch.nn.Parameter(xavier_embeddings(n_users, dim, generator))
        self.item = torch.nn.Parameter(xavier_embeddings(n_items, dim, generator))
        self.register_buffer("src", torch.zeros(0, dtype=torch.int64), persistent=False)
        self.register_buffer("dst", torch.zeros(0, dtype=torch.int64), persistent=False)
        self.register_buffer("w", torch.zeros(0), persistent=False)
        self.adjacency: torch.Tensor | None = None  # Â, set by set_graph

    def set_graph(self, users: np.ndarray, items: np.ndarray) -> None:
        """The training interactions (duplicates collapse) as a symmetric normalised graph."""
        pairs = np.unique(np.stack([users, items], 1), axis=0)
        u = to_device(pairs[:, 0], "cpu").long()
        i = to_device(pairs[:, 1], "cpu").long() + self.n_users
        src, dst = sort_edges(torch.cat([u, i]), torch.cat([i, u]))
        dev = self.user.device
        self.src, self.dst = src.to(dev), dst.to(dev)
        n = self.n_users + self.n_items
        self.w = edge_weights(self.src, self.dst, n)
        # Â as CSR: edges are sorted by (dst, src), so row pointers are the cumulative in-degrees
        crow = torch.zeros(n + 1, dtype=torch.int64, device=dev)
        crow[1:] = torch.bincount(self.dst, minlength=n).cumsum(0)
        with warnings.catch_warnings():  # "sparse CSR support is in beta"
            warnings.simplefilter("ignore", UserWarning)
            self.adjacency = torch.sparse_csr_tensor(
                crow,
                self.src,
                self.w.to(self.user.dtype),
                size=(n, n),
                device=dev,
                check_invariants=True,
            )

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(h_users [U, d], item representations used for scoring [I, d])."""
        x0 = torch.cat([self.user, self.item])
        h = propagate_sparse(x0, self.adjacency, self.layers)
        h_items = h[self.n_users :] if self.item_side == "propagated" else self.item
        return h[: self.n_users], h_items

    def loss(
        self, users: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor, l2: float
    ) -> torch.Tensor:
        """Mean BPR + ``l2`` × L2 over a batch of (user, pos, neg) triples (one pair per row)."""
        h_u, h_i = self()
        s_pos = (h_u[users] * h_i[pos]).sum(-1)[:, None]
        s_neg = (h_u[users] * h_i[neg]).sum(-1)[:, None]
        e_u = self.user[users]
        out = bpr_loss(
            h_u[users], e_u, self.item[pos][:, None], self.item[neg][:, None], l2, s_pos, s_neg
        )
        return out.mean()


class RankingTrainer(Trainer):
    """Central LightGCN trained epoch by epoch (models/trainer.py's interface): Adam on one
    (user, pos, neg) triple per training interaction and epoch (LightGCN's sampler: a uniform
    negative outside the user's training items), mean BPR + L2 of eq. 15 per minibatch.
    ``layers=0`` is BPR-MF (eq. 4 with K = 0 gives h = e, so s_ui = e_u·e_i: Rendle et al.'s
    matrix factorisation with the same BPR loss).

    ``train_epoch()`` runs one epoch and returns its mean loss; ``evaluate()`` ranks, for every
    user with test items, all items outside its training set and returns the mean Recall/NDCG/
    Precision/Hit/MRR@``eval_k``. Deterministic for a seed (on CPU)."""

    def __init__(
        self,
        dataset,
        *,
        dim: int = 64,
        layers: int = 2,
        lr: float = 1e-3,
        l2: float = 1e-4,
        batch_size: int = 2048,
        seed: int = 0,
        device: str | torch.device = "cpu",
        item_side: str = "propagated",
        eval_k: int = 20,
    ):
        if dim < 1 or layers < 0 or batch_size < 1 or not lr > 0 or l2 < 0 or eval_k < 1:
            raise ValueError(
                "need dim >= 1, layers >= 0, batch_size >= 1, lr > 0, l2 >= 0, eval_k >= 1; got "
                f"{dim}, {layers}, {batch_size}, {lr}, {l2}, {eval_k}"
            )
        if len(dataset.train) == 0:
            raise ValueError(f"dataset {dataset.name!r} has no training interactions")
        self.dataset, self.device = dataset, torch.device(device)
        self.l2, self.batch_size, self.eval_k = l2, batch_size, eval_k
        gen = torch.Generator(device="cpu").manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.model = build(
            lambda: LightGCN(dataset.n_users, dataset.n_items, dim, layers, item_side, gen),
            self.device,
        )
        self.model.set_graph(dataset.train.user, dataset.train.item)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)
        self.eval_users = [u for u in range(dataset.n_users) if len(self.test_items[u])]
        self.users_all = np.asarray(dataset.train.user, dtype=np.int64)
        self.pos_all = np.asarray(dataset.train.item, dtype=np.int64)
        # each user's training rows in ascending order (the order negatives are drawn in)
        by_user = np.argsort(self.users_all, kind="stable")
        bounds = np.searchsorted(self.users_all[by_user], np.arange(dataset.n_users + 1))
        self.rows_of = [
            (u, by_user[bounds[u] : bounds[u + 1]])
            for u in range(dataset.n_users)
            if bounds[u + 1] > bounds[u]
        ]
        self.epochs_done = 0

    def random_streams(self) -> dict:
        return {"rng": self.rng}  # the epoch order and the negatives

    def _negatives(self) -> np.ndarray:
        neg = np.empty(len(self.users_all), dtype=np.int64)
        for u, rows in self.rows_of:
            neg[rows] = sample_negatives(
                self.rng, self.dataset.n_items, self.train_items[u], len(rows)
            )
        return neg

    def train_epoch(self) -> dict[str, float]:
        """One pass over the training interactions in a random order; the mean loss (eq. 15)."""
        self.model.train()
        order = self.rng.permutation(len(self.users_all))
        neg_all = self._negatives()
        total = 0.0
        for start in range(0, len(order), self.batch_size):
            b = order[start : start + self.batch_size]
            u, i, j = (
                to_device(a[b], self.device) for a in (self.users_all, self.pos_all, neg_all)
            )
            loss = self.model.loss(u, i, j, self.l2)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += float(loss.detach()) * len(b)
        self.epochs_done += 1
        return {"loss": total / len(order)}

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Mean ranking metrics@eval_k over the users with test items (training items excluded)."""
        if not self.eval_users:
            raise ValueError(f"dataset {self.dataset.name!r}: no user has test items")
        h_u, h_i = self.model()
        m = full_ranking_metrics(
            h_u[self.eval_users].cpu(),
            h_i.cpu(),
            [self.train_items[u] for u in self.eval_users],
            [self.test_items[u] for u in self.eval_users],
            ks=(self.eval_k,),
        )
        return {k: float(np.mean(v)) for k, v in m.items()}


def train_central(
    dataset,
    *,
    epochs: int = 50,
    dim: int = 64,
    layers: int = 2,
    lr: float = 1e-3,
    l2: float = 1e-4,
    batch_size: int = 2048,
    seed: int = 0,
    device: str | torch.device = "cpu",
    item_side: str = "propagated",
    eval_k: int = 20,
    eval_every: int = 0,
    log=None,
) -> tuple[LightGCN, dict[str, float]]:
    """Central LightGCN for ``epochs`` epochs (:class:`RankingTrainer`, L2 weight α = ``l2``);
    returns the model and its mean Recall/NDCG@k on the test set. ``log(epoch, metrics)`` every
    ``eval_every`` epochs."""
    trainer = RankingTrainer(
        dataset,
        dim=dim,
        layers=layers,
        lr=lr,
        l2=l2,
        batch_size=batch_size,
        seed=seed,
        device=device,
        item_side=item_side,
        eval_k=eval_k,
    )
    for epoch in range(epochs):
        trainer.train_epoch()
        if log is not None and eval_every and (epoch + 1) % eval_every == 0:
            log(epoch + 1, trainer.evaluate())
    return trainer.model, trainer.evaluate()


# --------------------------------------------------------------------------- local subgraphs


@dataclass
class LocalGraphs:
    """B users' local subgraphs stacked as one disjoint graph.

    Node layout: the B users first, then every user's items (user 0's |I_0| items, user 1's, …),
    then every user's neighbours. ``item_block[b]`` / ``nbr_block[b]`` are the (start, stop) rows
    of user b's items / neighbours within the item / neighbour sections."""

    n_users: int
    item_block: list[tuple[int, int]]
    nbr_block: list[tuple[int, int]]
    src: torch.Tensor
    dst: torch.Tensor
    weight: torch.Tensor

    @property
    def n_item_nodes(self) -> int:
        return self.item_block[-1][1] if self.item_block else 0

    @property
    def n_nbr_nodes(self) -> int:
        return self.nbr_block[-1][1] if self.nbr_block else 0


def build_local_graphs(
    item_counts: list[int], nbr_links: list[tuple[np.ndarray, np.ndarray]], device="cpu"
) -> LocalGraphs:
    """``item_counts[b]`` = |I_u| of user b; ``nbr_links[b]`` = (neighbour index, local item
    index) pairs: neighbour v of user b shares user b's item at that position of I_u. The edges
    and their weights are computed on the CPU (numpy's sort) and placed on ``device``."""
    b_count = len(item_counts)
    item_off = np.concatenate([[0], np.cumsum(item_counts)]).astype(np.int64)
    n_nbrs = [int(v.max()) + 1 if len(v) else 0 for v, _ in nbr_links]
    nbr_off = np.concatenate([[0], np.cumsum(n_nbrs)]).astype(np.int64)
    n_items_total = int(item_off[-1])
    base_item, base_nbr = b_count, b_count + n_items_total
    src_parts, dst_parts = [], []
    for b in range(b_count):
        items = base_item + np.arange(item_off[b], item_off[b + 1])
        users = np.full(len(items), b)
        v, i = nbr_links[b]
        nv = base_nbr + nbr_off[b] + np.asarray(v, dtype=np.int64)
        ni = base_item + item_off[b] + np.asarray(i, dtype=np.int64)
        src_parts += [users, items, nv, ni]
        dst_parts += [items, users, ni, nv]
    src = to_device(np.concatenate(src_parts).astype(np.int64), "cpu")
    dst = to_device(np.concatenate(dst_parts).astype(np.int64), "cpu")
    src, dst = sort_edges(src, dst)
    weight = edge_weights(src, dst, base_nbr + int(nbr_off[-1]))
    return LocalGraphs(
        b_count,
        [(int(item_off[b]), int(item_off[b + 1])) for b in range(b_count)],
        [(int(nbr_off[b]), int(nbr_off[b + 1])) for b in range(b_count)],
        src.to(device),
        dst.to(device),
        weight.to(device),
    )


def local_forward(
    graphs: LocalGraphs,
    user_emb: torch.Tensor,
    item_emb: torch.Tensor,
    nbr_emb: torch.Tensor,
    layers: int,
) -> torch.Tensor:
    """h_u [B, d]: mean of layers 0..K of propagation on the stacked local subgraphs.
    ``item_emb`` [Σ|I_u|, d] and ``nbr_emb`` [Σ|U_u|, d] in the layout of :class:`LocalGraphs`."""
    x0 = torch.cat([user_emb, item_emb, nbr_emb.to(user_emb.dtype)])
    w = graphs.weight.to(x0.device)  # a no-op for graphs built on x0's device
    h = propagate(x0, graphs.src.to(x0.device), graphs.dst.to(x0.device), w, layers)
    return h[: graphs.n_users]
