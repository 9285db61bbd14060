"""DGREC's parameters (protocols/dgrec/protocol.py runs them).

Step size (the paper does not state it). The decoded one-bit mean estimates the mean of *clipped*
gradients, so in expectation a step moves an element by at most lr·δ, while its noise has standard
deviation lr·δ·coth(β/2)/√k (k gradients; 0.216/√k at δ = 0.1, β = 1). The item-embedding
gradients of eq. 3 are far below δ per element (BPR summed over ``pairs`` pairs), so lr must be
large. Defaults: lr 0.5, 64 pairs, 12 neighbourhoods a round (most users train every round); δ, β,
H, n_u keep the paper's values. ``model = "lightgcn"`` (protocols/dgrec/model.py ``DLGNNUserModel``) is the
DLGNN baseline (protocols/dlgnn/).

Ablations (the paper's Table 3): ``use_hypergraph``, ``use_bipartite``, ``interest_attention``,
``pearson`` (protocols/dgrec/model.py), ``use_public`` (no neighbours' publicized items), and
``mechanism = "laplace"`` (clip + Laplace(λ) float gradients instead of one-bit; λ = 2δ/β by default,
the same per-element ε) or ``"float"`` (raw float gradients, no privacy).

The end of a run (not in the paper; both off by default, which is the paper's DGREC). Each user's own
copy over-fits its own pairs after a while. ``validation = f``: each user holds out a fraction f of
its own training items (drawn with its own RNG; never trained on, never publicized), scores them
with its current model every ``validate_every`` rounds and keeps a copy of the model whenever its
NDCG@K on them is at least its best so far; evaluation ranks with the kept copy. ``lr_decay = c``:
step size lr / (1 + c·t) in round t. ``lr_cooldown_rounds = L`` from round ``lr_cooldown_at = a``:
the step falls linearly to zero over the run's last L rounds (warmup-stable-decay, Hägele et al.
2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"):

    η_t = lr / (1 + c·t) · min(1, max(0, 1 − (t − a) / L))      (a + L = the run's rounds)

All are local to the user: no message, no privacy spent. The step-size fields may change when a
run is resumed (``RESUMABLE``): a run resumed at round a with a cooldown from a makes the rounds a
run with that cooldown from the start would have made.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import scipy.sparse as sp

from protocols.base import ProtocolConfig, require

MECHANISMS = ("onebit", "laplace", "float")
MODELS = ("dgrec", "lightgcn")
PAPER_RDP = (1.5, 0.54)  # the paper's stated (α, ε) RDP guarantee


@dataclasses.dataclass
class DGRECConfig(ProtocolConfig):
    RESUMABLE: ClassVar[tuple[str, ...]] = (
        *ProtocolConfig.RESUMABLE,
        *("lr", "lr_decay", "lr_cooldown_at", "lr_cooldown_rounds"),
    )

    # model (stage 2); "lightgcn" is the DLGNN baseline (protocols/dgrec/model.py DLGNNUserModel)
    model: str = "dgrec"  # dgrec (the paper) | lightgcn (the DLGNN baseline)
    layers: int = 2  # LightGCN layers (model = "lightgcn")
    dim: int = 16  # d, embedding size
    n_interests: int = 6  # interests per user (the hypergraph model's heads)
    hidden: int = 32  # width of the MLP scorer
    scorer: str = "mlp"  # the paper's MLP(e_u ‖ e_i); "dot": e_u · e_i (a departure, for diagnosis)
    pearson_weight: float = 0.1  # weight of the Pearson interest-independence loss
    l2: float = 1e-5  # L2 weight of the loss
    init_std: float = 0.1  # std of the normal initialisation
    # stage 1
    public_ratio: float = 1.0  # ρ
    neighbours: int = 10  # k of data/graphs.py
    # stage 3
    hops: int = 4  # H
    n_u: int = 3  # n_u: neighbours a node forwards to per hop
    neighbourhoods: float = 12.0  # expected seeds per round (most users train every round)
    pairs: int = 64  # BPR (positive, negative) pairs per user and round
    loss_reduction: str = "sum"  # eq. 3 sums BPR over the user's pairs ("mean": average)
    lr: float = 0.5  # the decoded step is ≤ δ per element in expectation (module docstring)
    clip: float = 0.1  # δ, clip bound
    beta: float = 1.0  # β, one-bit strength (ε per element)
    mechanism: str = "onebit"  # onebit | laplace | float (the shared gradients)
    laplace_scale: float = 0.0  # λ for mechanism="laplace"; 0 → 2δ/β (same per-element ε as β)
    # ablations (Table 3)
    use_hypergraph: bool = True  # ablation: false drops the item-tag hypergraph
    use_bipartite: bool = False  # ablation: true adds the user-item bipartite graph
    interest_attention: bool = True  # ablation: false averages the interests instead of attending
    pearson: bool = True  # ablation: false drops the Pearson loss
    use_public: bool = True  # ablation: false ignores the neighbours' publicized items
    # the end of a run (module docstring; 0 = the paper)
    validation: float = 0.0  # fraction of its own training items a user holds out
    validate_every: int = 10  # rounds between a user's validation checks
    lr_decay: float = 0.0  # lr / (1 + lr_decay·t) in round t
    lr_cooldown_at: int = 0  # first round of the linear cooldown
    lr_cooldown_rounds: int = 0  # its length L: η falls to 0 over L rounds (0: no cooldown)
    # accounting
    privacy_delta: float = 1e-5  # δ of the rigorous (ε, δ) figure
    # runtime: a host computes its users' training and evaluation in one batched pass
    batch_users: bool = True  # a host trains and ranks its users in one batched pass (same results)

    def check(self) -> None:
        super().check()
        for name in ("dim", "n_interests", "hidden", "neighbours", "hops", "n_u", "pairs"):
            require(getattr(self, name) >= 1, name, "must be >= 1")
        require(0.0 <= self.public_ratio <= 1.0, "public_ratio", "must be in [0, 1]")
        require(self.neighbourhoods > 0, "neighbourhoods", "must be > 0")
        require(self.lr > 0, "lr", "must be > 0")
        require(math.isfinite(self.clip) and self.clip > 0, "clip", "must be > 0")
        require(math.isfinite(self.beta) and self.beta > 0, "beta", "must be > 0")
        require(self.mechanism in MECHANISMS, "mechanism", f"must be one of {MECHANISMS}")
        require(self.model in MODELS, "model", f"must be one of {MODELS}")
        require(self.layers >= 0, "layers", "must be >= 0")
        require(self.scorer in ("mlp", "dot"), "scorer", "must be mlp or dot")
        require(self.loss_reduction in ("sum", "mean"), "loss_reduction", "must be sum or mean")
        require(self.laplace_scale >= 0, "laplace_scale", "must be >= 0")
        require(self.pearson_weight >= 0, "pearson_weight", "must be >= 0")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.init_std > 0, "init_std", "must be > 0")
        require(0 < self.privacy_delta < 1, "privacy_delta", "must be in (0, 1)")
        require(0.0 <= self.validation < 1.0, "validation", "must be in [0, 1)")
        require(self.validate_every >= 1, "validate_every", "must be >= 1")
        require(self.lr_decay >= 0, "lr_decay", "must be >= 0")
        require(self.lr_cooldown_at >= 0, "lr_cooldown_at", "must be >= 0")
        require(self.lr_cooldown_rounds >= 0, "lr_cooldown_rounds", "must be >= 0")

    def step_size(self, t: int) -> float:
        """η_t, the step of round t (module docstring)."""
        lr = self.lr / (1.0 + self.lr_decay * max(t, 0))
        if self.lr_cooldown_rounds > 0 and t >= self.lr_cooldown_at:
            lr *= max(0.0, 1.0 - (t - self.lr_cooldown_at) / self.lr_cooldown_rounds)
        return lr

    def resolved_laplace_scale(self) -> float:
        """λ of ``mechanism = "laplace"``: ``laplace_scale``, or 2δ/β when it is 0."""
        return self.laplace_scale if self.laplace_scale > 0 else 2 * self.clip / self.beta


@dataclasses.dataclass(frozen=True, eq=False)
class DGRECPublic:
    """The public values every user receives besides the Config: sizes, the public item
    catalogue (item → tag incidence, the hyperedges), the probability that a user seeds a
    neighbourhood in a round, and the Laplace scale λ of ``mechanism = "laplace"``."""

    n_users: int
    n_items: int
    n_tags: int
    item_tags: sp.csr_matrix  # [n_items, n_tags], the public catalogue
    seed_probability: float  # expected seeds per round / #users (Algorithm 1)
    laplace_scale: float  # λ of mechanism = "laplace" (resolved: never 0)
