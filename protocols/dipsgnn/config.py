"""DIPSGNN's configuration (validated by ``check``) and the constants its roles share.

The switches that select a baseline with the same network (``private_graph``,
``private_features``, ``use_features``, ``mechanism``, ``graph_messages``) are described with the
algorithm in protocols/dipsgnn/protocol.py.
"""

from __future__ import annotations

import dataclasses

from cluster.message import node_id
from protocols.base import ProtocolConfig, require

SERVER = node_id("server", 0)  # the curator
CALIBRATIONS = ("rigorous", "paper", "authors_code")


@dataclasses.dataclass
class DIPSGNNConfig(ProtocolConfig):
    eps1: float = 20.0  # feature LDP budget per user (Algorithm 3)
    eps2: float = 5.0  # edge-level central DP budget of the whole training run
    privacy_delta: float = 1e-5  # δ of the (ε2, δ) guarantee
    epochs: int = 10  # epochs the noise is calibrated for; one round = one epoch
    private_features: bool = True  # False: the clean encoding is uploaded (non-private baseline)
    private_graph: bool = True  # False: σ = 0 (the non-private network)
    use_features: bool = True  # False: no user part (SR-GNN-style network), no feature upload
    features: str = "age,gender,occupation"  # the paper's ml sensitive features; "all": every one
    # public domain of numeric features, "name=LOW:HIGH,..." (data/features.py); "": the data's
    # documented domain. Fixed before the run: never the users' min and max
    feature_ranges: str = ""  # numeric features' public domains "age=0:100,..."; "": documented
    hidden_dim: int = 100  # d
    user_dim: int = 50  # d'
    steps: int = 1  # T
    clip_norm: float = 0.5  # C
    max_edge_weight: float = 1.0  # w_max: public cap on edge counts (1 = binary A)
    max_len: int = 100  # most recent items kept per user (public)
    train_fraction: float = 0.8  # share of each user's sequence prefixes used for training
    batch_size: int = 100  # sequences per step
    lr: float = 1e-3  # Adam step size
    l2: float = 1e-5  # Adam weight decay
    # σ is calibrated with dp-accounting's PLD ("pld") or RDP ("rdp") accountant; the spent ε is
    # the one accountant's (privacy/accountant.py): exact for Gaussians, or RDP's with "rdp"
    accountant: str = "pld"  # pld | rdp (see above)
    # "aggregate": DIPSGNN's noise on A·H̄ (eq. 7); "edgerand": the EdgeRand baseline, Gaussian
    # noise on every entry of each training prefix's adjacency, once, at the same (ε2, δ)
    # "dpsgd": DP-SGD on all gradients at the same (ε2, δ) (σ = 0 in the aggregation)
    mechanism: str = "aggregate"  # aggregate | edgerand | dpsgd (see above)
    # how σ of eq. 7 is set (privacy/calibration.py ``noise_sigma``): "rigorous" (every release
    # of an edge over the run, Δ = √2·w_max·C, eps2 for the whole run); "paper" (Theorem 4.2 for
    # one release per epoch, Δ = C, eps2 per epoch); "authors_code" (their main_dipsgnn.py:
    # Theorem 4.2's form with T releases per epoch, Δ = C, δ = 2.5e-7, eps2 per epoch, and σ²
    # applied as the noise's standard deviation). The spent ε is the accountant's in every mode.
    calibration: str = "rigorous"  # rigorous | paper | authors_code (see above)
    dpsgd_batch_users: int = 64  # b: users per DP-SGD step (fixed size, without replacement)
    dpsgd_clip: float = 1.0  # C of DP-SGD's per-user gradient clipping
    # False: M_in = M_out = 0, the network without its graph (diagnostic ablation; spends nothing
    # on the graph, but the readout still sees the sequence)
    graph_messages: bool = True  # false: the network without its graph (see above)

    def check(self) -> None:
        super().check()
        require(self.eps1 > 0, "eps1", "must be > 0")
        require(self.eps2 > 0, "eps2", "must be > 0")
        require(0 < self.privacy_delta < 1, "privacy_delta", "must lie in (0, 1)")
        require(self.epochs >= 1, "epochs", "must be >= 1")
        require(self.hidden_dim >= 1, "hidden_dim", "must be >= 1")
        require(self.user_dim >= 1, "user_dim", "must be >= 1")
        require(self.steps >= 1, "steps", "must be >= 1")
        require(self.clip_norm > 0, "clip_norm", "must be > 0")
        require(self.max_edge_weight > 0, "max_edge_weight", "must be > 0")
        require(self.max_len >= 3, "max_len", "must be >= 3")
        require(0 < self.train_fraction < 1, "train_fraction", "must lie in (0, 1)")
        require(self.batch_size >= 1, "batch_size", "must be >= 1")
        require(self.lr > 0, "lr", "must be > 0")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.accountant in ("pld", "rdp"), "accountant", "must be 'pld' or 'rdp'")
        require(
            self.mechanism in ("aggregate", "edgerand", "dpsgd"),
            "mechanism",
            "must be 'aggregate', 'edgerand' or 'dpsgd'",
        )
        require(self.calibration in CALIBRATIONS, "calibration", f"must be one of {CALIBRATIONS}")
        require(
            self.calibration == "rigorous" or self.mechanism == "aggregate",
            "calibration",
            "the paper's calibrations are for the noisy aggregation (mechanism = 'aggregate')",
        )
        require(self.dpsgd_batch_users >= 1, "dpsgd_batch_users", "must be >= 1")
        require(self.dpsgd_clip > 0, "dpsgd_clip", "must be > 0")


@dataclasses.dataclass(frozen=True)
class DIPSGNNPublic:
    """The public values every node receives besides the Config: the catalogue size, the public
    layout of the feature vector (data/features.py: the chosen features' kinds, categories and
    numeric domains), and the noise calibrated before the run for (ε2, δ)."""

    n_items: int
    n_feature_slots: int  # length of the encoded feature vector (0: no user part)
    feature_kinds: dict[str, str]  # name -> "numeric" | "categorical"
    feature_cardinality: dict[str, int]  # categorical name -> number of categories
    public_ranges: dict[str, tuple[float, float]]  # numeric name -> (low, high), fixed pre-run
    sigma: float  # σ of eq. 7 (EdgeRand: σ_A of the adjacency noise); 0: none
    dpsgd_noise_multiplier: float  # z of DP-SGD (mechanism "dpsgd"); 0 otherwise
