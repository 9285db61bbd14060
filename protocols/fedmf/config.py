"""fedmf parameters and the public values every node receives (symbols of protocol.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from protocols.base import ProtocolConfig, require


@dataclasses.dataclass
class FedMFConfig(ProtocolConfig):
    RESUMABLE: ClassVar[tuple[str, ...]] = (*ProtocolConfig.RESUMABLE, "lr_user")  # read each step

    dim: int = 64  # d, size of the user and item factors
    users_per_round: int = 256  # |Ū|; 0 = every user every round
    pairs: int = 32  # P (positive, negative) pairs per sampled user per round
    lr_user: float = 0.5  # local SGD on p_u
    user_steps: int = 1  # local SGD steps on p_u per participation (the last one uploads)
    lr_item: float = 0.02  # server Adam on Q
    l2: float = 1e-4  # α
    init_std: float = 0.1  # std of the normal initialisation of the factors

    def check(self) -> None:
        super().check()
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.users_per_round >= 0, "users_per_round", "must be >= 0")
        require(self.pairs >= 1, "pairs", "must be >= 1")
        require(self.lr_user > 0 and self.lr_item > 0, "lr_user/lr_item", "must be > 0")
        require(self.user_steps >= 1, "user_steps", "must be >= 1")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.init_std > 0, "init_std", "must be > 0")


@dataclasses.dataclass(frozen=True)
class FedMFPublic:
    """The catalogue's size, known to everyone."""

    n_users: int
    n_items: int
