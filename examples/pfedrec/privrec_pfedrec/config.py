"""PFedRec's parameters and the public values every node receives (symbols of protocol.py).

Every field carries a trailing comment: privrec turns it into the field's ``--help`` line, so
``privrec --protocol pfedrec --help`` documents these parameters with nothing else to write.
Defaults are the authors' (github.com/Zhangcx19/IJCAI-23-PFedRec, train.py).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from protocols.base import ProtocolConfig, require


@dataclasses.dataclass
class PFedRecConfig(ProtocolConfig):
    # what a resumed run may change from the next round on: the step sizes and the reporting
    RESUMABLE: ClassVar[tuple[str, ...]] = ("eval_every", "lr", "lr_eta")

    dim: int = 32  # d, size of the item embeddings (the authors' latent_dim)
    users_per_round: int = 0  # |S_t| clients sampled per round; 0 = every client (the paper's)
    negatives: int = 4  # negative items drawn per positive for the local BCE loss
    batch_size: int = 256  # B, local mini-batch of (item, label) examples
    local_epochs: int = 1  # passes over the local examples per round
    lr: float = 0.1  # η, SGD step on the personal score function (eq. 2)
    lr_eta: float = 80.0  # the item step is η·|I|·lr_eta (eq. 3), as in the authors' code
    init_std: float = 1.0  # std of the normal initialisation of the item embeddings
    clip: float = 0.0  # LDP: clip each coordinate of the uploaded update to [-clip, clip] (0: off)
    laplace_scale: float = 0.0  # LDP: scale b of the Laplace noise on each uploaded coordinate
    privacy_delta: float = 1e-5  # δ at which the accountant states ε
    eval_negatives: int = (
        99  # paper's metric: rank each test item among this many sampled negatives (0: off)
    )

    def check(self) -> None:
        super().check()
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.users_per_round >= 0, "users_per_round", "must be >= 0")
        require(self.negatives >= 0, "negatives", "must be >= 0")
        require(self.batch_size >= 1, "batch_size", "must be >= 1")
        require(self.local_epochs >= 1, "local_epochs", "must be >= 1")
        require(self.lr > 0, "lr", "must be > 0")
        require(self.lr_eta >= 0, "lr_eta", "must be >= 0 (0 freezes the item embeddings)")
        require(self.init_std > 0, "init_std", "must be > 0")
        require(self.clip >= 0, "clip", "must be >= 0")
        require(self.laplace_scale >= 0, "laplace_scale", "must be >= 0")
        require(0 < self.privacy_delta < 1, "privacy_delta", "must lie in (0, 1)")
        require(self.eval_negatives >= 0, "eval_negatives", "must be >= 0")

    @property
    def ldp(self) -> bool:
        """Whether the privacy-enhanced variant is on (clipping or noise on the uploads)."""
        return self.clip > 0 or self.laplace_scale > 0


@dataclasses.dataclass(frozen=True)
class PFedRecPublic:
    """Public values: the catalogue's size, and the seed of the one initial score function every
    client starts from (the authors' clients all copy one initial model)."""

    n_users: int
    n_items: int
    init_seed: int
