"""VerFedGNN's parameters (Mai & Pang, 2023), with the paper's symbols in the comments."""

from __future__ import annotations

import dataclasses

from models.rating_gnn import KINDS
from protocols.base import ProtocolConfig, require

MECHANISMS = ("ternary", "laplace", "none")
PROJECTIONS = ("gaussian", "sparse", "none")


@dataclasses.dataclass
class VerFedGNNConfig(ProtocolConfig):
    parties: int = 4  # P
    participation: float = 1.0  # α: S = max(1, round(α·P)) parties per iteration
    gnn: str = "gcn"  # gcn | gat | ggnn | mf
    dim: int = 6  # D
    layers: int = 2  # K
    activation: str = "sigmoid"  # output activation of the rating model (sigmoid | none)
    thd: float = 4.0  # ratings ≥ thd are graph edges
    # Φ of Y = Φ X (privacy/projection.py): gaussian (the paper, fresh each iteration), sparse
    # (the authors' code: CountSketch, fixed for the run), none (X_p^k travels in the clear)
    projection: str = "gaussian"  # gaussian | sparse | none (see above)
    projection_reduction: int = 5  # N/q
    projection_dim: int = 0  # q; 0 = N // projection_reduction
    mechanism: str = "ternary"  # ternary | laplace | none (on the public-parameter gradients)
    clip: float = 0.5  # B: gradients clipped to [−B, B]
    ternary_r: float = 3.0  # r (paper: 1/r = 1/3)
    laplace_scale: float = 0.5  # b of Laplace(0, b) when mechanism = "laplace"
    privacy_delta: float = 1e-5  # δ of the rigorous (ε, δ) figure
    lr: float = 0.05  # Adagrad, server (θ) and parties (item embeddings)
    l2: float = 1e-3  # λ of eq. 5
    batch_size: int = 256  # ratings per party per iteration (0 = all)
    loss_reduction: str = "sum"  # sum | mean over the party's minibatch
    init_std: float = 0.1  # std of the normal initialisation
    estimator: str = "uniform"  # eq. 21: uniform (P/S)Σ | items (M/Σ_S M_p)Σ
    psi: bool = True  # align users by OPRF-PSI in round 0
    psi_key_bits: int = 2048  # RSA modulus of the PSI's OPRF (bits)
    psi_extra_users: int = 0  # ids only one party knows (PSI must drop them)
    split_seed: int = 0  # item partition and validation split
    # de-anonymization attack (§4.1, App. I): party attack_party registers one adversarial user
    # for each of a fraction attack_p_ad of attack_victim's items and infers honest users' items
    deanonymization: bool = False  # run the de-anonymization attack (see above)
    attack_party: int = 0  # the attacking party
    attack_victim: int = 1  # the party whose items are attacked
    attack_p_ad: float = 0.5  # share of the victim's items with an adversarial user
    attack_max_items: int = 3  # c: inferred subsets have 1..c items
    attack_beam: int = 32  # beam width of the subset search

    def check(self) -> None:
        super().check()
        require(self.parties >= 1, "parties", "must be >= 1")
        require(0 < self.participation <= 1, "participation", "must be in (0, 1]")
        require(self.gnn in KINDS, "gnn", f"must be one of {KINDS}")
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.layers >= 0, "layers", "must be >= 0")
        require(self.projection in PROJECTIONS, "projection", f"must be one of {PROJECTIONS}")
        require(self.projection_reduction >= 1, "projection_reduction", "must be >= 1")
        require(self.projection_dim >= 0, "projection_dim", "must be >= 0")
        require(self.mechanism in MECHANISMS, "mechanism", f"must be one of {MECHANISMS}")
        require(self.clip > 0, "clip", "must be > 0")
        require(self.ternary_r >= self.clip, "ternary_r", "must be >= clip")
        require(self.laplace_scale > 0, "laplace_scale", "must be > 0")
        require(0 < self.privacy_delta < 1, "privacy_delta", "must lie in (0, 1)")
        require(self.lr > 0, "lr", "must be > 0")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.batch_size >= 0, "batch_size", "must be >= 0")
        require(self.loss_reduction in ("sum", "mean"), "loss_reduction", "must be sum or mean")
        require(self.init_std > 0, "init_std", "must be > 0")
        require(self.estimator in ("uniform", "items"), "estimator", "must be uniform or items")
        require(
            self.psi_key_bits >= 1024 and self.psi_key_bits % 16 == 0,
            "psi_key_bits",
            "must be >= 1024 and a multiple of 16",
        )
        require(self.psi_extra_users >= 0, "psi_extra_users", "must be >= 0")
        if self.deanonymization:
            require(0 <= self.attack_party < self.parties, "attack_party", "must be a party")
            require(0 <= self.attack_victim < self.parties, "attack_victim", "must be a party")
            require(
                self.attack_victim != self.attack_party, "attack_victim", "must not be the attacker"
            )
            require(0 < self.attack_p_ad <= 1, "attack_p_ad", "must be in (0, 1]")
            require(self.attack_max_items >= 1, "attack_max_items", "must be >= 1")
            require(self.attack_beam >= 1, "attack_beam", "must be >= 1")
            require(self.gnn in ("gcn", "ggnn", "gat"), "gnn", "the attack needs a GNN, not mf")


@dataclasses.dataclass(frozen=True)
class VerFedGNNPublic:
    """Public values every node receives beside the Config (nodes read them as ``self.public``)."""

    n_users: int  # N: honest users, then the adversarial ones (attack)
    n_items: int  # M: items of all parties
    party_items: tuple[int, ...]  # M_p of every party (partial-participation scaling, eq. 21)
    rating_min: float  # the training ratings' range: predictions are clamped to it
    rating_max: float


def n_participants(parties: int, participation: float) -> int:
    """S = max(1, round(α·P)): the parties of A_t (at most P)."""
    return max(1, min(parties, int(round(participation * parties))))


def projection_rows(config: VerFedGNNConfig, n_users: int) -> int:
    """Rows of what travels per layer: q with projection (``projection_dim``, or N/5 by
    default), N without."""
    if config.projection == "none":
        return n_users
    if config.projection_dim:
        return min(config.projection_dim, n_users)
    return max(1, n_users // config.projection_reduction)
