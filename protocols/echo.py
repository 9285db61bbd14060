"""echo — a FedAvg-shaped workload with nothing to learn, for measuring the runtime against other
federated-learning frameworks (benchmarks/vs_flower.py).

The server holds a vector ``w`` of ``dim`` float32 (zeros at the start). One round:

1. ``download``  the server sends ``w`` (dense fp32) to every user.
2. ``echo``      user ``u`` returns ``w + δ_u`` with the fixed client-specific scalar
                 ``δ_u = increment · ((u mod 100) + 1)``; all users of a host in one vectorised pass.
3. ``aggregate`` the server sets ``w`` to the mean of the vectors that arrived (summed in sender
                 order). Offline users never answer; with fewer than ``min_participants`` uploads
                 the server keeps ``w`` and reports ``skipped``.

With every user online, after ``r`` rounds each entry of ``w`` is ``r · mean_u δ_u`` (up to float32
rounding): the figure ``global_mean`` that evaluation reports, a cross-check against other
frameworks running the same workload.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cluster import validate as v
from cluster import wire
from cluster.message import node_id
from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec
from nodes.node import Node, NodeContext, Shared, decode_shared, expect_kinds
from protocols.base import Protocol, ProtocolConfig, require

SERVER = node_id("server", 0)
_CHUNK = 256  # users a host echoes in one vectorised pass


def client_delta(user: int, increment: float) -> float:
    """The scalar user ``user`` adds to every entry of the vector it received."""
    return increment * ((user % 100) + 1)


@dataclasses.dataclass
class EchoConfig(ProtocolConfig):
    dim: int = 10000  # length of the echoed vector
    increment: float = 1e-3  # δ_u = increment · ((u mod 100) + 1)

    def check(self) -> None:
        super().check()
        require(self.dim >= 1, "dim", "must be >= 1")


@dataclasses.dataclass(frozen=True)
class EchoPublic:
    n_users: int  # users 0..n_users-1 take part


def check_vector(payload: bytes, shared) -> None:
    """A finite vector of length dim (the download and every echo)."""
    v.dense(payload, (shared.config.dim,), what="vector")


class EchoServer(Node):
    role = "server"
    READS_IN_PLACE = True  # it sums the echoes as they stand in the received batch
    ACCEPTS = {"echo": v.Accept(("user",), ("aggregate",), check_vector)}

    def __init__(self, nid: str, ctx: NodeContext):
        super().__init__(nid, ctx)
        self.vector = np.zeros(self.config.dim, dtype=np.float32)

    def handle(self, phase: str, inbox) -> None:
        if phase == "download":
            expect_kinds(inbox, node=self.id)
            payload = wire.encode_dense(self.vector)  # one bytes object, sent to each user
            for u in range(self.public.n_users):
                self.send("vector", node_id("user", u), payload)
        elif phase == "aggregate":
            expect_kinds(inbox, "echo", node=self.id)
            if len(inbox) < max(1, self.min_participants):
                self.report("skipped", 1.0)
                return
            total = np.zeros(self.vector.shape, dtype=np.float64)
            for m in inbox:  # sorted by sender: the same sum whatever the placement
                total += wire.decode_dense(m.payload)
            self.vector = (total / len(inbox)).astype(np.float32)
            self.report("uploads", len(inbox))
        else:
            super().handle(phase, inbox)

    def get_vector(self) -> np.ndarray:
        return self.vector.copy()


class EchoUser(Node):
    role = "user"
    ACCEPTS = {"vector": v.Accept(("server",), ("echo",), check_vector)}

    def __init__(self, nid: str, ctx: NodeContext, user: int):
        super().__init__(nid, ctx)
        self.delta = np.float32(client_delta(user, self.config.increment))

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        if phase != "echo":
            raise ValueError(f"{cls.__name__}: no handler for phase {phase!r}")
        for n, inbox in zip(nodes, inboxes):
            expect_kinds(inbox, "vector", node=n.id)
        vecs = decode_shared(inboxes, "vector", wire.decode_dense)
        deltas = np.array([n.delta for n in nodes], dtype=np.float32)[:, None]
        broadcast = all(v is vecs[0] for v in vecs)
        for a in range(0, len(nodes), _CHUNK):  # a chunk of users at a time: vectorised, and
            b = min(a + _CHUNK, len(nodes))  # no host-sized matrix beside the replies
            if broadcast:  # one broadcast: the chunk's users in one pass
                out = vecs[0][None, :] + deltas[a:b]
            else:
                out = np.stack(vecs[a:b]) + deltas[a:b]
            for n, row in zip(nodes[a:b], out):
                n.send("echo", SERVER, wire.encode_dense(row))


class Echo(Protocol):
    name = "echo"
    Config = EchoConfig

    def __init__(self, dataset: RecDataset, config: EchoConfig, seed: int):
        super().__init__(dataset, config, seed)

    def shared(self) -> Shared:
        return Shared(self.config, EchoPublic(self.dataset.n_users))

    def node_specs(self) -> list[NodeSpec]:
        return [NodeSpec(EchoServer, SERVER)] + [
            NodeSpec(EchoUser, node_id("user", u), {"user": u}, packable=True)
            for u in range(self.dataset.n_users)
        ]

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "download", activate=[SERVER])
        dep.superstep(round_, "echo")
        agg = dep.superstep(round_, "aggregate", activate=[SERVER])  # runs even with no echo
        return {
            "uploads": sum(agg.reports.get("uploads", [])),
            "skipped": len(agg.reports.get("skipped", [])),
        }

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        return {"global_mean": float(np.mean(dep.call(SERVER, "get_vector"), dtype=np.float64))}
