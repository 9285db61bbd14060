"""FedPerGNN / FedLightGCN parameters (Wu et al., 2022; the FedLightGCN thesis), with the papers'
symbols in the comments."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from protocols.base import ProtocolConfig, require


@dataclasses.dataclass
class FedPerGNNConfig(ProtocolConfig):
    RESUMABLE: ClassVar[tuple[str, ...]] = (*ProtocolConfig.RESUMABLE, "lr_user")  # read each step

    backbone: str = "lightgcn"  # lightgcn (FedLightGCN) | gat (FedPerGNN, rating prediction)
    dim: int = 64  # d
    layers: int = 2  # K
    users_per_round: int = 512  # |Ū|; 0 = every user every round
    negatives: int = 2048  # |Ĩ_u| sampled negatives per user and round
    pseudo_items: int = 64  # M pseudo-interacted items per upload
    lr_item: float = 1e-3  # server Adam on E
    lr_user: float = 0.5  # local SGD on e_u
    user_steps: int = 1  # local SGD steps on e_u per participation (LightGCN backbone)
    l2: float = 1e-3  # α
    clip: float = 5e-4  # clipping bound of every uploaded coordinate (the paper's δ)
    laplace_scale: float = 1e-5  # scale of the Laplace noise (the paper's λ; 0: no noise)
    # where the Laplace noise goes: "thesis" — each user perturbs every uploaded coordinate,
    # clip(·, −δ, δ) + Laplace(0, λ) (the thesis's ε = 2δ/λ per coordinate, local DP against the
    # server); "authors_code" — as the authors' code: uploads are only clipped, and after each
    # update the server adds Laplace(0, η·2δ/(√B·ε)) = Laplace(0, η·λ/√B) to every weight of E
    # (and θ), B the round's uploads, η = lr_item, at the same claimed ε = 2δ/λ
    calibration: str = "thesis"  # thesis | authors_code: where the Laplace noise goes (see above)
    max_neighbors: int = 100  # most anonymous neighbours the matcher returns per user
    key_bits: int = 2048  # RSA modulus of the blind-signature OPRF (bits)
    # An honest user asks the key server once for each of its items (tokens are cached), again
    # only after a lost reply. 8192 is about twice the largest training profile of the bundled
    # datasets (epinions 4286 items; ciao 1241, gowalla 811, ml-100k 685) and bounds an online
    # dictionary attack to 8192 item ids per identity; a run whose largest profile exceeds the
    # budget is refused before it starts (honest users would get no tokens)
    oprf_budget: int = 8192  # values the key server signs per user over the run; more: refused
    expand_every: int = 0  # rounds between graph expansions; 0 = one epoch ⌈N/|Ū|⌉
    privacy_delta: float = 1e-5  # δ of the rigorous (ε, δ) figure
    key_servers: int = 1  # R key-server replicas (same key); user u uses replica u mod R
    attack_gradient_inference: bool = False  # measure the server's positive-item inference
    attack_dictionary: bool = False  # measure the matcher's dictionary attack on the tokens

    def check(self) -> None:
        super().check()
        require(self.backbone in ("lightgcn", "gat"), "backbone", "must be lightgcn or gat")
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.layers >= 0, "layers", "must be >= 0")
        require(self.users_per_round >= 0, "users_per_round", "must be >= 0")
        require(self.negatives >= 1, "negatives", "must be >= 1")
        require(self.pseudo_items >= 0, "pseudo_items", "must be >= 0")
        require(self.lr_item > 0, "lr_item", "must be > 0")
        require(self.lr_user > 0, "lr_user", "must be > 0")
        require(self.user_steps >= 1, "user_steps", "must be >= 1")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.clip > 0, "clip", "must be > 0")
        require(self.laplace_scale >= 0, "laplace_scale", "must be >= 0")
        require(
            self.calibration in ("thesis", "authors_code"),
            "calibration",
            "must be thesis or authors_code",
        )
        require(self.max_neighbors >= 0, "max_neighbors", "must be >= 0")
        require(self.key_bits in (1024, 2048, 3072, 4096), "key_bits", "must be 1024..4096")
        require(self.expand_every >= 0, "expand_every", "must be >= 0")
        require(0 < self.privacy_delta < 1, "privacy_delta", "must be in (0, 1)")
        require(self.key_servers >= 1, "key_servers", "must be >= 1")
        require(self.oprf_budget >= 1, "oprf_budget", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class FedPerGNNPublic:
    """Public values every node receives beside the Config (nodes read them as ``self.public``)."""

    n_users: int  # N (fan of the Xavier initialisation of e_u)
    n_items: int  # |I|: rows of E
    expand_period: int  # P: rounds between graph expansions; a user's graph is stale after it
    rating_min: float = 0.0  # the training ratings' range (gat backbone: predictions clamped)
    rating_max: float = 0.0


def upload_laplace(config: FedPerGNNConfig) -> float:
    """λ of the Laplace noise a user adds to its upload: the config's in the thesis's
    calibration, none in the authors' code (whose noise the server adds to the model)."""
    return config.laplace_scale if config.calibration == "thesis" else 0.0


def model_laplace(config: FedPerGNNConfig, uploads: int) -> float:
    """Scale of the Laplace noise the server adds to every weight after an update of ``uploads``
    users in the authors' code's calibration: η·λ/√B (= η·2δ/(√B·ε) with ε = 2δ/λ); 0 else."""
    if config.calibration != "authors_code" or uploads < 1:
        return 0.0
    return config.lr_item * config.laplace_scale / math.sqrt(uploads)
