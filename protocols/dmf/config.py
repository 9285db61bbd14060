"""dmf parameters and the public values every user receives (symbols of protocol.py)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from protocols.base import ProtocolConfig, require


@dataclasses.dataclass
class DMFConfig(ProtocolConfig):
    RESUMABLE: ClassVar[tuple[str, ...]] = (*ProtocolConfig.RESUMABLE, "lr")  # read each step

    dim: int = 32  # d, size of the user and item factors
    pairs: int = 32  # P (positive, negative) pairs per user and round
    lr: float = 0.05  # local SGD step size
    neighbour_weight: float = 1.0  # a gradient from h hops away is scaled by weight^h
    l2: float = 1e-4  # L2 weight of the loss
    init_std: float = 0.1  # std of the normal initialisation
    # k of data/graphs.py. On ml-100k with one hop, k=40 reaches recall@20 0.152 after 150 rounds
    # and k=10 0.126; k=10 with two hops reaches 0.146 after 60 rounds at four times the cost
    neighbours: int = 40  # k social/trust neighbours per user (see above)
    hops: int = 1  # how far a gradient travels
    participation: float = 1.0  # probability a user trains in a round

    def check(self) -> None:
        super().check()
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.pairs >= 1, "pairs", "must be >= 1")
        require(self.lr > 0, "lr", "must be > 0")
        require(self.neighbour_weight >= 0, "neighbour_weight", "must be >= 0")
        require(self.neighbours >= 1, "neighbours", "must be >= 1")
        require(1 <= self.hops <= 6, "hops", "must be in 1..6")
        require(0 < self.participation <= 1, "participation", "must be in (0, 1]")


@dataclasses.dataclass(frozen=True)
class DMFPublic:
    """The catalogue's size, known to everyone."""

    n_users: int
    n_items: int
