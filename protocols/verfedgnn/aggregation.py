"""VerFedGNN party-side computations (Mai & Pang, ICML 2023, §4), pure torch, no Ray.

Party p holds all N users, its own M_p items (local ids 0..M_p−1) and the rating edges
(u, v) with v among them. For layer k it computes the N×D neighbour aggregation X_p^k that it
projects (Y = Φ X_p^k, privacy/projection.py) and sends to the other parties:

    GCN  (eqs. 12–13):  X_p[u] = Σ_{v∈N_u^p} e_v / √(E_p(N_u) · N_v),  E_p(N_u) = N_u^p · M/M_p
    GAT  (eqs. 14–15):  X_p[u] = Σ_{v∈N_u^p} exp(s_uv) / E_p(Z_u) · e_v,
                        E_p(Z_u) = exp(s_uu) + (M/M_p) Σ_{j∈N_u^p} exp(s_uj)
    GGNN (eq. 16):      X_p[u] = Σ_{v∈N_u^p} e_v / E_p(N_u)

Passing the exact normaliser (``user_degree`` = N_u, ``user_denominator`` = Z_u) makes
Σ_p X_p equal the centralized aggregation over all items exactly, for all three kinds. With
the estimates (what a party can actually compute) the sum is approximate: E_p(N_u) is
unbiased for N_u over random item splits, but 1/√E_p and 1/E_p are not unbiased for 1/√N_u
and 1/N_u (Jensen), so the party sum is a biased, consistent approximation.

Server side, eq. 21 (partial participation): when only S of the P parties report a gradient
in a round, the server scales their sum so that it estimates the full-participation sum.

The arithmetic lives in models/rating_gnn/aggregation.py, shared with the centralized
RatingGNN (models never import protocols); this module adds the party view, eq. 21, and the
party's model: which layers' aggregates can travel together (``exchange_schedule``), its public
parameters θ, the sum Φᵀ Σ_q Y_q of the projected aggregates it received, and its loss (eq. 5).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from cluster.device import to_device
from models.rating_gnn import RatingGNN
from models.rating_gnn import aggregation as agg
from privacy.projection import Projection, reconstruct


def _party_edges(
    user_emb: torch.Tensor, item_emb_p: torch.Tensor, edge_user, edge_item
) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(user_emb, torch.Tensor) or user_emb.dim() != 2:
        raise ValueError("user_emb must be a 2-D tensor [N, D]")
    if not isinstance(item_emb_p, torch.Tensor) or item_emb_p.dim() != 2:
        raise ValueError("item_emb_p must be a 2-D tensor [M_p, D]")
    if user_emb.shape[1] != item_emb_p.shape[1]:
        raise ValueError(
            f"user and item embeddings differ in width: {user_emb.shape[1]} vs "
            f"{item_emb_p.shape[1]}"
        )
    return agg.as_edge_tensors(
        edge_user, edge_item, user_emb.shape[0], item_emb_p.shape[0], user_emb.device
    )


def _user_degree(
    eu: torch.Tensor, n_users: int, n_party_items: int, n_total_items: int, given
) -> torch.Tensor:
    if given is not None:
        if not isinstance(given, torch.Tensor) or given.shape != (n_users,):
            raise ValueError(f"user_degree must be a tensor of shape ({n_users},)")
        return given.to(eu.device, torch.float32)
    local = agg.node_degree(eu, n_users)
    return agg.estimate_user_degree(local, n_party_items, n_total_items)


def gcn_party_aggregate(
    user_emb: torch.Tensor,
    item_emb_p: torch.Tensor,
    edge_user: np.ndarray | torch.Tensor,
    edge_item: np.ndarray | torch.Tensor,
    *,
    n_total_items: int,
    user_degree: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eqs. 12–13: X_p [N, D]. ``user_degree`` None → the estimate E_p(N_u) = N_u^p·M/M_p;
    pass the true N_u for the exact decomposition. Item degrees are local (exact)."""
    eu, ei = _party_edges(user_emb, item_emb_p, edge_user, edge_item)
    n_users, m_p = user_emb.shape[0], item_emb_p.shape[0]
    du = _user_degree(eu, n_users, m_p, n_total_items, user_degree)
    return agg.gcn_user_aggregate(item_emb_p, eu, ei, du, agg.node_degree(ei, m_p), n_users)


def ggnn_party_aggregate(
    user_emb: torch.Tensor,
    item_emb_p: torch.Tensor,
    edge_user: np.ndarray | torch.Tensor,
    edge_item: np.ndarray | torch.Tensor,
    *,
    n_total_items: int,
    user_degree: torch.Tensor | None = None,
) -> torch.Tensor:
    """Eq. 16 message: X_p [N, D] = Σ_{v∈N_u^p} e_v / E_p(N_u) (or / N_u when given)."""
    eu, ei = _party_edges(user_emb, item_emb_p, edge_user, edge_item)
    n_users, m_p = user_emb.shape[0], item_emb_p.shape[0]
    du = _user_degree(eu, n_users, m_p, n_total_items, user_degree)
    return agg.mean_user_aggregate(item_emb_p, eu, ei, du, n_users)


def gat_party_scores(
    user_emb: torch.Tensor,
    item_emb_p: torch.Tensor,
    edge_user: np.ndarray | torch.Tensor,
    edge_item: np.ndarray | torch.Tensor,
    *,
    weight: torch.Tensor,
    att_src: torch.Tensor,
    att_dst: torch.Tensor,
    negative_slope: float = 0.2,
) -> agg.GATScores:
    """exp of the eq. 14 attention logits on the party's edges and the self-loops."""
    eu, ei = _party_edges(user_emb, item_emb_p, edge_user, edge_item)
    return agg.gat_exp_scores(
        user_emb, item_emb_p, eu, ei, weight, att_src, att_dst, negative_slope
    )


def gat_party_aggregate(
    user_emb: torch.Tensor,
    item_emb_p: torch.Tensor,
    edge_user: np.ndarray | torch.Tensor,
    edge_item: np.ndarray | torch.Tensor,
    *,
    weight: torch.Tensor,
    att_src: torch.Tensor,
    att_dst: torch.Tensor,
    n_total_items: int,
    user_denominator: torch.Tensor | None = None,
    negative_slope: float = 0.2,
) -> torch.Tensor:
    """Eqs. 14–15: X_p [N, D] (neighbour part; the self term α_uu e_u is added once by the
    party updating the embedding). ``user_denominator`` None → E_p(Z_u); pass the exact Z_u
    (self + all parties' Σ exp) for the exact decomposition."""
    eu, ei = _party_edges(user_emb, item_emb_p, edge_user, edge_item)
    n_users, m_p = user_emb.shape[0], item_emb_p.shape[0]
    if not 0 < m_p <= n_total_items:
        raise ValueError(f"need 0 < party items <= total items, got {m_p}, {n_total_items}")
    scores = agg.gat_exp_scores(
        user_emb, item_emb_p, eu, ei, weight, att_src, att_dst, negative_slope
    )
    if user_denominator is None:
        z = agg.gat_user_denominator(scores, eu, n_total_items / m_p)
    else:
        if not isinstance(user_denominator, torch.Tensor) or user_denominator.shape != (n_users,):
            raise ValueError(f"user_denominator must be a tensor of shape ({n_users},)")
        z = user_denominator
    return agg.gat_user_aggregate(item_emb_p, eu, ei, scores.user_edge, z)


def partial_participation_aggregate(
    grads: Sequence[torch.Tensor],
    n_parties: int,
    n_participating: int | None = None,
    *,
    party_items: Sequence[int] | None = None,
    total_items: int | None = None,
) -> torch.Tensor:
    """Eq. 21: estimate of the full-participation sum Σ_{p=1}^P g_p from the S reports.

    Default (Horvitz–Thompson): (P / S) · Σ_{p∈S} g_p — unbiased when the S participants are
    a uniformly random S-subset of the P parties (each is included with probability S/P).

    With ``party_items`` (M_p of the reporting parties) and ``total_items`` (M): the
    authors' code's ratio form (M / Σ_{p∈S} M_p) · Σ_{p∈S} g_p. It equals the default when
    all M_p are equal; otherwise it is a ratio estimator (not exactly unbiased)."""
    if n_parties < 1:
        raise ValueError(f"n_parties must be >= 1, got {n_parties}")
    s = len(grads)
    if s == 0:
        raise ValueError("no gradients to aggregate")
    if n_participating is not None and n_participating != s:
        raise ValueError(f"n_participating={n_participating} but {s} gradients were given")
    if s > n_parties:
        raise ValueError(f"{s} gradients from only {n_parties} parties")
    shape = grads[0].shape
    if any(g.shape != shape for g in grads):
        raise ValueError("all gradients must have the same shape")
    total = torch.stack(list(grads)).sum(0)
    if party_items is None and total_items is None:
        return total * (n_parties / s)
    if party_items is None or total_items is None or len(party_items) != s:
        raise ValueError("party_items (one per gradient) and total_items must be given together")
    covered = float(sum(party_items))
    if covered <= 0 or covered > total_items or min(party_items) < 0:
        raise ValueError(f"party item counts {list(party_items)} do not fit total {total_items}")
    return total * (total_items / covered)


# ----------------------------------------------------------------------------- the party's model


def exchange_schedule(kind: str, n_layers: int) -> list[list[int]]:
    """Layers (0-based) whose aggregates travel in each exchange step.

    With the user aggregates of layers < ``known`` complete, e_u^j is exact for j ≤ known and
    e_v^k for k ≤ known + 1 (e_v^k needs e_u^{k−1}). X^k (layer k, from e^k) needs e_v^k (GCN,
    GGNN) and also e_u^k (GAT attention)."""
    if kind == "mf":
        return []
    steps, known = [], 0
    while known < n_layers:
        hi = min(known + (0 if kind == "gat" else 1), n_layers - 1)
        steps.append(list(range(known, hi + 1)))
        known = hi + 1
    return steps


def party_model(config, n_users: int, n_items: int, n_total_items: int, eu, ei, seed: int):
    """The RatingGNN of one party (``config``: a VerFedGNNConfig) on its rating edges."""
    return RatingGNN(
        n_users,
        n_items,
        eu,
        ei,
        kind=config.gnn,
        dim=config.dim,
        n_layers=config.layers,
        activation=config.activation,
        n_total_items=n_total_items,
        init_std=config.init_std,
        seed=seed,
    )


def public_parameters(model: RatingGNN) -> list[torch.nn.Parameter]:
    """θ: everything but the private item embeddings (fixed order)."""
    return [
        p
        for name, p in model.named_parameters()
        if not name.startswith(("item_emb", "item_bias", "user_bias"))
    ]


def flat_gradient(params: list[torch.nn.Parameter]) -> torch.Tensor:
    """The gradients of ``params`` as one vector (zeros where a parameter has none)."""
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    ).detach()


def exchange_senders(
    participants: list[int], me: int, received: dict[int, dict[int, torch.Tensor]], steps: int
) -> set[int]:
    """The other participants whose aggregates count after ``steps`` exchange steps: all of A_t
    but ``me`` before the first, then those heard from in every step so far (a sender missing
    from a later step is left out of the earlier ones too, so every layer sums over the same
    parties)."""
    if steps == 0:
        return {p for p in participants if p != me}
    senders = set(received.get(1, {}))
    for step in range(2, steps + 1):
        senders &= set(received.get(step, {}))
    return senders


def received_aggregates(
    received: dict[int, dict[int, torch.Tensor]],
    senders: set[int],
    schedule: list[list[int]],
    steps_done: int,
    phi: Projection | None,
    shape: tuple[int, int, int],
    device: torch.device | str = "cpu",
) -> list[torch.Tensor]:
    """Σ_{q∈senders} X̂_q^k per layer k (``shape``: layers, N, D) on ``device`` from the tensors
    Y_q of the exchange steps 1..steps_done (``received[step][q]``, one [L_j, q, D] tensor each):
    X̂ = Φᵀ Σ_q Y_q (linear: one reconstruction for all senders), or Σ_q Y_q without
    projection (``phi`` None)."""
    n_layers, n_users, dim = shape
    external = [torch.zeros(n_users, dim, device=device) for _ in range(n_layers)]
    for step in range(1, steps_done + 1):
        y_sum = None
        for p, y in received.get(step, {}).items():  # arrival order: sorted by sender
            if p in senders:
                y_sum = y if y_sum is None else y_sum + y
        if y_sum is None:
            continue
        for j, k in enumerate(schedule[step - 1]):
            x_hat = reconstruct(phi, y_sum[j]) if phi is not None else y_sum[j]
            external[k] = external[k] + x_hat
    return external


def party_loss(
    model: RatingGNN,
    prop,
    batch: tuple[np.ndarray, np.ndarray, np.ndarray],
    l2: float,
    reduction: str,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eq. 5 on the party's minibatch (users, local items, ratings): Σ (or mean) of (r̂ − r)²,
    plus the private L2 term λ‖E_p‖²/M_p of its item embeddings; and the squared errors (None
    for an empty minibatch)."""
    u, i, r = batch
    item_w = model.item_emb.weight
    dev = item_w.device
    sq = None
    if len(u):
        pred = model.predict(prop, to_device(u, dev), to_device(i, dev))
        sq = (pred - to_device(r, dev)).pow(2)
        loss = sq.sum() if reduction == "sum" else sq.mean()
    else:
        loss = torch.zeros((), device=dev)
    return loss + l2 * item_w.pow(2).sum() / item_w.shape[0], sq
