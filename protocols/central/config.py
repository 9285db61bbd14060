"""central's parameters: the model, the hyper-parameters every model has (unset: the model's
paper defaults) and each task's own options; and the check that a model fits a dataset."""

from __future__ import annotations

import dataclasses

from data.features import FeatureSelectionError, public_ranges, select_features
from data.types import RecDataset
from models.central import RANKING, RATING, SEQUENTIAL, TASK_OF_MODEL
from models.rating_gnn.model import ACTIVATIONS
from protocols.base import ConfigError, ProtocolConfig, require
from protocols.dipsgnn.config import DIPSGNNConfig

_DIPS = DIPSGNNConfig()

# model -> its paper's (dim, layers, lr, l2, batch_size)
MODEL_DEFAULTS: dict[str, tuple[int, int, float, float, int]] = {
    "lightgcn": (64, 2, 1e-3, 1e-4, 2048),
    "bprmf": (64, 0, 1e-3, 1e-4, 2048),
    **{kind: (6, 2, 0.05, 1e-3, 1024) for kind in ("gcn", "gat", "ggnn", "mf")},
    "dipsgnn": (_DIPS.hidden_dim, _DIPS.steps, _DIPS.lr, _DIPS.l2, _DIPS.batch_size),
}

# the fields of CentralConfig that go to the trainer of each task (models/central.py)
TASK_OPTIONS: dict[str, tuple[str, ...]] = {
    RANKING: ("item_side",),
    RATING: ("thd", "activation", "init_std", "use_bias", "val_fraction"),
    SEQUENTIAL: (
        "use_features",
        "features",
        "feature_ranges",
        "user_dim",
        "clip_norm",
        "max_edge_weight",
        "max_len",
        "train_fraction",
    ),
}


@dataclasses.dataclass
class CentralConfig(ProtocolConfig):
    model: str = "lightgcn"  # lightgcn | bprmf | gcn | gat | ggnn | mf | dipsgnn
    dim: int | None = None  # embedding size d / D / hidden d
    layers: int | None = None  # K propagation layers (DIPSGNN: T steps)
    lr: float | None = None  # step size (default: the model's own)
    l2: float | None = None  # L2: LightGCN α, rating λ, DIPSGNN weight decay
    batch_size: int | None = None  # training batch (default: the model's own)
    # ranking
    item_side: str = "propagated"  # score h_u·h_i (LightGCN paper) or h_u·e_i ("ego")
    # rating
    thd: float = 4.0  # ratings ≥ thd are graph edges
    activation: str = "sigmoid"  # rating models: output activation (sigmoid | none)
    init_std: float = 0.1  # std of the normal initialisation
    use_bias: bool = False  # rating models: user and item biases
    val_fraction: float = 0.0  # per-user share of training ratings held out for validation
    # sequential (DIPSGNN network, as protocols/dipsgnn)
    use_features: bool = _DIPS.use_features  # dipsgnn model: use the user features
    features: str = _DIPS.features  # dipsgnn model: which user features
    feature_ranges: str = _DIPS.feature_ranges  # dipsgnn model: numeric features' public domains
    user_dim: int = _DIPS.user_dim  # dipsgnn model: d', size of the user part
    clip_norm: float = _DIPS.clip_norm  # dipsgnn model: C, norm clip of hidden states
    max_edge_weight: float = _DIPS.max_edge_weight  # dipsgnn model: w_max, cap on edge counts
    max_len: int = _DIPS.max_len  # dipsgnn model: most recent items kept per user
    train_fraction: float = (
        _DIPS.train_fraction
    )  # dipsgnn model: share of each sequence's prefixes used for training

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

    def trainer_options(self) -> dict:
        """The options of this model's task, as models/central.py ``build_trainer`` takes them."""
        return {name: getattr(self, name) for name in TASK_OPTIONS[TASK_OF_MODEL[self.model]]}


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
            try:
                public_ranges(dataset, select_features(dataset, c.features), c.feature_ranges)
            except FeatureSelectionError as e:
                raise ConfigError(str(e)) from None
