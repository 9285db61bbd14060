"""central — the non-private centralized baselines the papers compare against, as a protocol.

One participant: ``curator/0`` (a dedicated host actor; it computes on the GPU share Ray gives
its host when ``--gpus-per-host`` > 0) holds the whole training data — by definition of the
baseline, nothing is private and nothing travels: **the ledger shows 0 protocol bytes**.

    python launch.py --protocol central --model lightgcn --dataset ml-100k --rounds 100

One round = one training epoch: ``train`` activates the curator, which runs one epoch and reports
its loss; evaluation (``eval``) asks it for the test metrics. Models (``model``):

* ``lightgcn`` — LightGCN (He et al. 2020, eqs. 3–4, BPR + L2 of eq. 15, Adam; d = 64, K = 2,
  lr 1e-3, α = 1e-4, batch 2048); ``bprmf`` — the same with K = 0, i.e. BPR-MF (s_ui = e_u·e_i).
  Implicit ranking: Recall/NDCG@eval_k over all items not in the user's training set (ratings,
  if the dataset has any, are ignored: every training interaction is a positive).
* ``gcn``, ``gat``, ``ggnn``, ``mf`` — VerFedGNN's rating models (models/rating_gnn, eqs. 5 and
  13–16; D = 6, K = 2, Adagrad lr 0.05, λ = 1e-3, graph edges = ratings ≥ thd = 4); RMSE on the
  held-out test ratings (predictions clamped to the training rating range). Needs ratings.
* ``dipsgnn`` — the DIPSGNN network without noise and with clean user features (the
  non-private sequential baseline; protocols/central/sequential.py, paper settings d = 100,
  d' = 50, T = ``layers`` = 1, Adam 1e-3, weight decay 1e-5, batch 100); Recall/MRR@5/10/20
  over all test positions. Needs timestamps (and user features unless ``use_features=false``).

``dim``, ``layers``, ``lr``, ``l2`` (LightGCN α, rating λ, DIPSGNN weight decay) and
``batch_size`` left unset take the chosen model's defaults above; the resolved values are what
``config.json`` records. The curator's trainer is seeded with the run's seed, so
``--protocol central --model lightgcn`` reproduces models.lightgcn.train_central(seed=…) exactly.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from cluster.message import node_id
from data.types import RecDataset
from models.rating_gnn.model import ACTIVATIONS
from nodes.deployment import Deployment, NodeSpec, mean_report
from nodes.node import Node, NodeContext, expect_kinds
from protocols.base import ConfigError, Protocol, ProtocolConfig, require
from protocols.central.trainers import RATING, SEQUENTIAL, TASK_OF_MODEL, build_trainer
from protocols.dipsgnn.config import DIPSGNNConfig

CURATOR = node_id("curator", 0)
_DIPS = DIPSGNNConfig()

# model -> its paper's (dim, layers, lr, l2, batch_size)
MODEL_DEFAULTS: dict[str, tuple[int, int, float, float, int]] = {
    "lightgcn": (64, 2, 1e-3, 1e-4, 2048),
    "bprmf": (64, 0, 1e-3, 1e-4, 2048),
    **{kind: (6, 2, 0.05, 1e-3, 1024) for kind in ("gcn", "gat", "ggnn", "mf")},
    "dipsgnn": (_DIPS.hidden_dim, _DIPS.steps, _DIPS.lr, _DIPS.l2, _DIPS.batch_size),
}


@dataclasses.dataclass
class CentralConfig(ProtocolConfig):
    ALIASES: ClassVar[dict[str, str]] = {"reg": "l2"}

    model: str = "lightgcn"  # lightgcn | bprmf | gcn | gat | ggnn | mf | dipsgnn
    dim: int | None = None  # embedding size d / D / hidden d
    layers: int | None = None  # K propagation layers (DIPSGNN: T steps)
    lr: float | None = None
    l2: float | None = None  # L2: LightGCN α, rating λ, DIPSGNN weight decay
    batch_size: int | None = None
    # ranking
    item_side: str = "propagated"  # score h_u·h_i (LightGCN paper) or h_u·e_i ("ego")
    # rating
    thd: float = 4.0  # ratings ≥ thd are graph edges
    activation: str = "sigmoid"
    init_std: float = 0.1
    use_bias: bool = False
    val_fraction: float = 0.0  # per-user share of training ratings held out for validation
    # sequential (DIPSGNN network, as protocols/dipsgnn)
    use_features: bool = _DIPS.use_features
    features: str = _DIPS.features
    user_dim: int = _DIPS.user_dim
    clip_norm: float = _DIPS.clip_norm
    max_edge_weight: float = _DIPS.max_edge_weight
    max_len: int = _DIPS.max_len
    train_fraction: float = _DIPS.train_fraction

    def __post_init__(self) -> None:
        """Unset shared hyper-parameters take the chosen model's paper defaults."""
        if self.model in MODEL_DEFAULTS:
            names = ("dim", "layers", "lr", "l2", "batch_size")
            for name, default in zip(names, MODEL_DEFAULTS[self.model]):
                if getattr(self, name) is None:
                    setattr(self, name, default)

    def check(self) -> None:
        super().check()
        require(self.model in TASK_OF_MODEL, "model", f"must be one of {', '.join(TASK_OF_MODEL)}")
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.layers >= 0, "layers", "must be >= 0")
        require(self.model != "bprmf" or self.layers == 0, "layers", "bprmf has no layers (0)")
        require(self.model != "dipsgnn" or self.layers >= 1, "layers", "dipsgnn needs T >= 1")
        require(self.lr > 0, "lr", "must be > 0")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.batch_size >= 1, "batch_size", "must be >= 1")
        require(self.item_side in ("propagated", "ego"), "item_side", "propagated or ego")
        require(self.activation in ACTIVATIONS, "activation", f"one of {sorted(ACTIVATIONS)}")
        require(self.init_std > 0, "init_std", "must be > 0")
        require(0 <= self.val_fraction < 1, "val_fraction", "must lie in [0, 1)")
        require(self.user_dim >= 1, "user_dim", "must be >= 1")
        require(self.clip_norm > 0, "clip_norm", "must be > 0")
        require(self.max_edge_weight > 0, "max_edge_weight", "must be > 0")
        require(self.max_len >= 3, "max_len", "must be >= 3")
        require(0 < self.train_fraction < 1, "train_fraction", "must lie in (0, 1)")


def check_fits(dataset: RecDataset, c: CentralConfig) -> None:
    """Refuse a model the dataset cannot train or judge (ConfigError naming ``model``)."""
    task = TASK_OF_MODEL[c.model]
    name = dataset.name
    if len(dataset.train) == 0 or len(dataset.test) == 0:
        raise ConfigError(f"model: dataset {name!r} has an empty train or test part")
    if task == RATING and (dataset.train.rating is None or dataset.test.rating is None):
        raise ConfigError(
            f"model: {c.model!r} predicts ratings and dataset {name!r} has none (implicit "
            "feedback): use lightgcn or bprmf"
        )
    if task == SEQUENTIAL:
        parts = [p for p in (dataset.train, dataset.val, dataset.test) if p is not None]
        if any(p.timestamp is None for p in parts):
            raise ConfigError(
                f"model: 'dipsgnn' is sequential and dataset {name!r} has no timestamps"
            )
        if c.use_features:
            if not dataset.feature_kinds:
                raise ConfigError(
                    f"use_features: dataset {name!r} has no user features (set use_features = false)"
                )
            names = [n.strip() for n in c.features.split(",") if n.strip()]
            missing = [n for n in names if n not in dataset.feature_kinds]
            require(
                c.features == "all" or (bool(names) and not missing),
                "features",
                f"unknown feature(s) {missing} (dataset has {sorted(dataset.feature_kinds)})",
            )


class Curator(Node):
    """The trusted curator: the whole training data and the model, in one place."""

    role = "curator"

    def __init__(self, nid: str, ctx: NodeContext, dataset: RecDataset):
        super().__init__(nid, ctx)
        config = CentralConfig(**ctx.shared["config"])
        self.trainer = build_trainer(dataset, config, ctx.seed, self.device)

    def handle(self, phase: str, inbox) -> None:
        expect_kinds(inbox, node=self.id)  # no message ever arrives: there is no one else
        if phase == "train":
            figures = self.trainer.train_epoch()
        elif phase == "eval":
            figures = self.trainer.evaluate()
        else:
            super().handle(phase, inbox)
            return
        for name, value in figures.items():
            self.report(name, value)


class Central(Protocol):
    name = "central"
    Config = CentralConfig

    def __init__(self, dataset: RecDataset, config: CentralConfig, seed: int):
        super().__init__(dataset, config, seed)
        check_fits(dataset, config)

    def shared(self) -> dict:
        return {"config": dataclasses.asdict(self.config)}

    def node_specs(self) -> list[NodeSpec]:
        return [NodeSpec(Curator, CURATOR, {"dataset": self.dataset})]

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        res = dep.superstep(round_, "train", activate=[CURATOR])
        return {name: mean_report(res.reports, name) for name in sorted(res.reports)}

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        res = dep.superstep(round_, "eval", activate=[CURATOR])
        return {name: mean_report(res.reports, name) for name in sorted(res.reports)}

    def privacy(self) -> dict:
        return {
            "mechanism": "none",
            "epsilon": float("inf"),
            "note": "non-private baseline: one curator holds all training data; no protocol "
            "messages are exchanged (0 bytes on the ledger)",
        }


__all__ = ["CURATOR", "Central", "CentralConfig", "Curator", "MODEL_DEFAULTS", "check_fits"]
