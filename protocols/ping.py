"""ping — a trivial protocol that measures the runtime's own cost.

Each round the server sends every user an 8-byte payload and every user answers with 8 bytes.
Nothing is learned; what is measured is the superstep machinery (scheduling, batching, codecs).
"""

from __future__ import annotations

import dataclasses
import struct

from cluster import validate as v
from cluster.message import node_id
from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec
from nodes.node import Node, Shared, expect_kinds
from protocols.base import Protocol, ProtocolConfig

SERVER = node_id("server", 0)


@dataclasses.dataclass
class PingConfig(ProtocolConfig):
    pass


@dataclasses.dataclass(frozen=True)
class PingPublic:
    n_users: int  # users 0..n_users-1 take part


def check_round(payload: bytes, shared) -> None:
    """The round number, 8 raw bytes."""
    if len(payload) != 8:
        raise v.Invalid("size", f"{len(payload)} bytes, expected 8")


class PingServer(Node):
    role = "server"
    ACCEPTS = {"pong": v.Accept(("user",), ("collect",), check_round)}

    def handle(self, phase, inbox):
        if phase == "ping":
            payload = struct.pack("<q", self.round)
            for u in range(self.public.n_users):
                self.send("ping", node_id("user", u), payload)
        elif phase == "collect":
            expect_kinds(inbox, "pong", node=self.id)
            self.report("pongs", len(inbox))
        else:
            super().handle(phase, inbox)


class PingUser(Node):
    role = "user"
    ACCEPTS = {"ping": v.Accept(("server",), ("reply",), check_round)}

    def handle(self, phase, inbox):
        expect_kinds(inbox, "ping", node=self.id)
        for m in inbox:
            self.send("pong", m.src, m.payload)


class Ping(Protocol):
    name = "ping"
    Config = PingConfig

    def __init__(self, dataset: RecDataset, config: PingConfig, seed: int):
        super().__init__(dataset, config, seed)

    def shared(self) -> Shared:
        return Shared(self.config, PingPublic(self.dataset.n_users))

    def node_specs(self) -> list[NodeSpec]:
        return [NodeSpec(PingServer, SERVER)] + [
            NodeSpec(PingUser, node_id("user", u), packable=True)
            for u in range(self.dataset.n_users)
        ]

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "ping", activate=[SERVER])
        dep.superstep(round_, "reply")
        res = dep.superstep(round_, "collect")
        return {"pongs": sum(res.reports.get("pongs", []))}

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        return {}
