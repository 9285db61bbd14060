"""The de-anonymization attack (Mai & Pang §4.1, §6.2.3, Appendix I) set up against one
victim party: adversarial users, what the attacker observes under each exchange, the truth.

The attack logic is privacy/leakage/deanonymization.py; this module builds its inputs from a
party's state (item embeddings e_v^0, rating edges) with the party's own aggregation
(protocols/verfedgnn/aggregation.py), so that the same world can be attacked

* through VerFedGNN's exchange: X̂_p^1 = ΦᵀΦ X_p^1 (GCN eq. 13 / GGNN eq. 16 with the E_p(N_u)
  estimate of eq. 12), Φ q×N with entries N(0, 1/q), or the sparse Φ of the authors' code;
* through the same exchange without projection (X_p^1 itself), which isolates what the
  aggregation alone hides;
* through a FedPerGNN-style exchange: every neighbour embedding e_v sent individually.

``simulate`` runs all three on a given victim (used by tests and benchmarks/verfedgnn.py);
the protocol mounts the VerFedGNN one on the messages it really sends
(``VerFedGNNConfig.deanonymization``: ``register_adversaries`` / ``add_ratings`` before the run, the
attacking party's ``get_deanonymization`` (``infer_victim_items``), then
``score_protocol_attack``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from data.types import Interactions
from privacy.leakage.deanonymization import (
    DEGREE_POWER,
    AttackScore,
    choose_adversarial_items,
    match_aggregates,
    match_neighbour_embeddings,
    score,
)
from privacy.projection import (
    GaussianProjection,
    SparseProjection,
    default_projection_dim,
    project,
    reconstruct,
)
from protocols.verfedgnn.aggregation import gcn_party_aggregate, ggnn_party_aggregate

AGGREGATES = {"gcn": gcn_party_aggregate, "ggnn": ggnn_party_aggregate}


def items_by_user(edge_user: np.ndarray, edge_item: np.ndarray, users: np.ndarray) -> list:
    """Sorted item ids of each listed user."""
    edge_user, edge_item = np.asarray(edge_user), np.asarray(edge_item)
    order = np.lexsort((edge_item, edge_user))
    eu, ei = edge_user[order], edge_item[order]
    lo, hi = np.searchsorted(eu, users, "left"), np.searchsorted(eu, users, "right")
    return [np.unique(ei[a:b]).astype(np.int64) for a, b in zip(lo, hi)]


def with_adversaries(
    edge_user: np.ndarray, edge_item: np.ndarray, n_users: int, adversarial_items: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges with one adversarial user per adversarial item appended (ids n_users, n_users+1, …):
    (edge_user, edge_item, adversarial user ids)."""
    adv_users = n_users + np.arange(len(adversarial_items), dtype=np.int64)
    eu = np.concatenate([np.asarray(edge_user, np.int64), adv_users])
    ei = np.concatenate([np.asarray(edge_item, np.int64), np.asarray(adversarial_items, np.int64)])
    return eu, ei, adv_users


def simulate(
    item_emb: torch.Tensor,
    edge_user: np.ndarray,
    edge_item: np.ndarray,
    n_users: int,
    *,
    n_total_items: int,
    p_ad: float,
    kind: str = "gcn",
    projection_reduction: int = 5,
    max_items: int = 3,
    beam: int = 32,
    seed: int = 0,
) -> dict[str, AttackScore]:
    """Attack the victim (its M_p item embeddings and honest edges among ``n_users`` users)
    through the three exchanges; scores over the honest users with at least one edge."""
    if kind not in AGGREGATES:
        raise ValueError(f"kind must be one of {tuple(AGGREGATES)}, got {kind!r}")
    if not isinstance(item_emb, torch.Tensor) or item_emb.dim() != 2:
        raise ValueError("item_emb must be a 2-D tensor [M_p, D]")
    rng = np.random.default_rng(seed)
    m_p = item_emb.shape[0]
    adv_items = choose_adversarial_items(m_p, p_ad, rng)
    eu, ei, adv_users = with_adversaries(edge_user, edge_item, n_users, adv_items)
    n_all = n_users + len(adv_users)
    user_emb = torch.zeros(n_all, item_emb.shape[1], device=item_emb.device)  # X^1: e_v^0 only
    x = AGGREGATES[kind](user_emb, item_emb, eu, ei, n_total_items=n_total_items).double()
    targets = np.unique(np.asarray(edge_user, np.int64))
    truth = items_by_user(edge_user, edge_item, targets)
    q = default_projection_dim(n_all, projection_reduction)
    phi_seed = int(rng.integers(0, 2**62))
    seen_by = {}
    for name, phi in (
        ("verfedgnn", GaussianProjection(q, n_all, phi_seed)),
        ("verfedgnn_sparse", SparseProjection(q, n_all, phi_seed)),  # the authors' code
    ):
        seen_by[name] = reconstruct(phi, project(phi, x))  # X̂ = ΦᵀΦX
    seen_by["verfedgnn_unprojected"] = x
    power = DEGREE_POWER[kind]
    out = {}
    for name, seen in seen_by.items():
        inferred = match_aggregates(
            seen[targets],
            seen[adv_users],
            adv_items,
            max_items=max_items,
            degree_power=power,
            beam=beam,
        )
        out[name] = score(inferred, truth, m_p)
    neighbours = [item_emb[t].double() for t in truth]
    inferred = match_neighbour_embeddings(neighbours, item_emb[adv_items].double(), adv_items)
    out["fedpergnn_style"] = score(inferred, truth, m_p)
    return out


# ----------------------------------------------------------------------------- in the protocol


@dataclass(frozen=True)
class Adversaries:
    """The attacker's fake users (raw user ids) and the victim item (global id) each rated."""

    users: np.ndarray
    items: np.ndarray


def register_adversaries(
    owner: np.ndarray, victim: int, p_ad: float, first_user: int, seed: tuple[int, ...]
) -> Adversaries:
    """One adversarial user (ids first_user, first_user+1, …) per item of a random fraction
    p_ad of the victim's items (``owner``: party of each global item)."""
    victim_items = np.flatnonzero(np.asarray(owner) == victim)
    rng = np.random.default_rng(np.random.SeedSequence([*map(int, seed), 0xDEA7]))
    items = victim_items[choose_adversarial_items(len(victim_items), p_ad, rng)]
    return Adversaries(first_user + np.arange(len(items), dtype=np.int64), items)


def add_ratings(train: Interactions, adversaries: Adversaries, rating: float) -> Interactions:
    """Training ratings with each adversarial user's one rating appended."""
    n = len(adversaries.users)
    return Interactions(
        user=np.concatenate([train.user, adversaries.users]).astype(np.int64),
        item=np.concatenate([train.item, adversaries.items]).astype(np.int64),
        rating=np.concatenate([train.rating, np.full(n, rating, np.float32)]),
        timestamp=None
        if train.timestamp is None
        else np.concatenate([train.timestamp, np.zeros(n, train.timestamp.dtype)]),
    )


def infer_victim_items(
    observed: torch.Tensor, aligned_users: np.ndarray, adversaries: Adversaries, config
) -> dict:
    """Eq. (I.1) on the victim's first-layer aggregate X̂ the attacker received (rows: aligned
    users): for every honest aligned user (raw id), the victim items (global ids) inferred, with
    ``config``'s (a VerFedGNNConfig) GNN kind, ``attack_max_items`` and ``attack_beam``."""
    position = {int(u): j for j, u in enumerate(aligned_users)}
    adv_rows = np.array([position[int(u)] for u in adversaries.users], dtype=np.int64)
    honest = np.setdiff1d(np.arange(len(aligned_users)), adv_rows)
    x_hat = observed.double().cpu()  # the attacker's search runs on the CPU (deanonymization.py)
    inferred = match_aggregates(
        x_hat[honest],
        x_hat[adv_rows],
        adversaries.items,
        max_items=config.attack_max_items,
        degree_power=DEGREE_POWER[config.gnn],
        beam=config.attack_beam,
    )
    return {"users": aligned_users[honest].copy(), "items": inferred}


def score_protocol_attack(
    inference: dict,
    victim_item_emb: np.ndarray,
    victim_items: np.ndarray,
    train: Interactions,
    adversaries: Adversaries,
    *,
    n_honest: int,
    n_items: int,
    thd: float,
) -> dict[str, float]:
    """Score the attacker's inference (``{"users": raw ids, "items": [global ids]}``) against
    the victim's edges (training ratings ≥ thd of honest users), over the honest users with at
    least one; and score the FedPerGNN-style attack on the victim's item embeddings."""
    victim_items = np.asarray(victim_items, dtype=np.int64)
    keep = np.isin(train.item, victim_items) & (train.rating >= thd) & (train.user < n_honest)
    eu, ei = train.user[keep].astype(np.int64), train.item[keep].astype(np.int64)
    targets = np.unique(eu)
    truth = items_by_user(eu, ei, targets)
    claimed = dict(zip((int(u) for u in inference["users"]), inference["items"]))
    missing = [int(u) for u in targets if int(u) not in claimed]
    if missing:
        raise ValueError(f"the attacker's inference lacks users {missing[:5]}")
    verfed = score([claimed[int(u)] for u in targets], truth, n_items)
    local = np.searchsorted(victim_items, np.asarray(adversaries.items))
    emb = torch.tensor(np.array(victim_item_emb), dtype=torch.float64)
    neighbours = [emb[np.searchsorted(victim_items, t)] for t in truth]
    inferred = match_neighbour_embeddings(neighbours, emb[local], adversaries.items)
    fedper = score(inferred, truth, n_items)
    return {
        **verfed.as_dict("attack_verfedgnn_"),
        **fedper.as_dict("attack_fedpergnn_style_"),
        "attack_adversarial_users": float(len(adversaries.users)),
    }
