"""fedmf — federated BPR matrix factorisation (FCF / FedeRank style).

The server keeps the item factors Q; every user keeps its own factor p_u and its interactions on
its device. One round:

1. ``download``  server samples |Ū| users and sends each the item factors Q (dense fp32).
2. ``train``     each sampled user draws P (positive, negative) pairs from its own data, computes the
                 BPR gradients (models/bpr.py), updates p_u locally with SGD and uploads the item
                 gradients of its 2P sampled slots: ids + rows. Uploads have a fixed size, so their
                 length says nothing about how many items the user has; the ids do reveal which items
                 were sampled — the known leak of this baseline, which FedPerGNN's pseudo items hide.
3. ``aggregate`` the server sums the uploads that arrived row by row (in a fixed order), averages
                 over them and takes an Adam step on Q. A sampled user who is offline never
                 uploads; with fewer than ``min_participants`` uploads (a run condition) the server
                 skips the round's update and reports it (``skipped``).

Evaluation (``eval_download``/``eval``): the server sends Q to every user, each user ranks all items
it has not trained on with p_u·Q and reports its Recall/NDCG/Precision/Hit@K; that traffic is
ledgered as evaluation, apart from protocol traffic.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import torch

from cluster import wire
from cluster.message import node_id
from data.types import RecDataset
from models.bpr import bpr_grads, sample_pairs
from models.metrics import ranking_metrics, topk_excluding
from nodes.deployment import Deployment, NodeSpec, mean_report
from nodes.node import Node, NodeContext, decode_shared, expect_kinds
from protocols.base import Protocol, ProtocolConfig, require, sample_participants
from protocols.sparse_rows import decode_rows, encode_rows, step_on_mean

SERVER = node_id("server", 0)


@dataclasses.dataclass
class FedMFConfig(ProtocolConfig):
    ALIASES: ClassVar[dict[str, str]] = {"reg": "l2"}

    dim: int = 64
    users_per_round: int = 256  # |Ū|; 0 = every user every round
    pairs: int = 32  # P (positive, negative) pairs per sampled user per round
    lr_user: float = 0.5  # local SGD on p_u
    lr_item: float = 0.02  # server Adam on Q
    l2: float = 1e-4  # α
    init_std: float = 0.1

    def check(self) -> None:
        super().check()
        require(self.dim >= 1, "dim", "must be >= 1")
        require(self.users_per_round >= 0, "users_per_round", "must be >= 0")
        require(self.pairs >= 1, "pairs", "must be >= 1")
        require(self.lr_user > 0 and self.lr_item > 0, "lr_user/lr_item", "must be > 0")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.init_std > 0, "init_std", "must be > 0")


class FedMFServer(Node):
    role = "server"

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        s = ctx.shared
        self.users = np.asarray(users, dtype=np.int64)  # the registered clients
        q = self.rng.normal(0.0, s["init_std"], size=(s["n_items"], s["dim"])).astype(np.float32)
        self.item_factors = torch.nn.Parameter(torch.from_numpy(q))
        self.optimizer = torch.optim.Adam([self.item_factors], lr=s["lr_item"])

    def handle(self, phase: str, inbox) -> None:
        s = self.shared
        if phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            users = self.users
            if phase == "download":
                users = sample_participants(self.rng, users, s["users_per_round"])
            payload = wire.encode_dense(
                self.item_factors.detach()
            )  # one bytes object, sent to each
            kind = "item_factors" if phase == "download" else "eval_item_factors"
            for u in users:
                self.send(kind, node_id("user", int(u)), payload)
        elif phase == "aggregate":
            expect_kinds(inbox, "item_grads", node=self.id)
            n_items = self.item_factors.shape[0]
            if len(inbox) < max(1, self.min_participants):
                self.report("skipped", 1.0)
                return
            uploads = [decode_rows(m.payload, n_items) for m in inbox]  # sorted by sender
            step_on_mean(self.item_factors, self.optimizer, uploads)
        else:
            super().handle(phase, inbox)

    def get_item_factors(self) -> np.ndarray:
        return self.item_factors.detach().numpy().copy()


class FedMFUser(Node):
    role = "user"

    def __init__(self, nid: str, ctx: NodeContext, train_items: np.ndarray, test_items: np.ndarray):
        super().__init__(nid, ctx)
        self.train_items = np.asarray(train_items, dtype=np.int64)
        self.test_items = np.asarray(test_items, dtype=np.int64)
        self.factor = torch.from_numpy(
            self.rng.normal(0.0, ctx.shared["init_std"], size=ctx.shared["dim"]).astype(np.float32)
        )

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        if phase == "train":
            cls._train(nodes, inboxes)
        elif phase == "eval":
            cls._evaluate(nodes, inboxes)
        else:
            raise ValueError(f"{cls.__name__}: no handler for phase {phase!r}")

    @staticmethod
    def _train(nodes: list[FedMFUser], inboxes) -> None:
        for n, inbox in zip(nodes, inboxes):
            expect_kinds(inbox, "item_factors", node=n.id)
        q_list = decode_shared(inboxes, "item_factors", wire.decode_dense)
        s = nodes[0].shared
        pairs = [sample_pairs(n.rng, s["n_items"], n.train_items, s["pairs"]) for n in nodes]
        # All sampled users of this host in one vectorised pass; row b depends on user b alone.
        q = torch.from_numpy(q_list[0])
        if any(x is not q_list[0] for x in q_list):  # not a shared broadcast: gather per user
            pos_f = torch.stack(
                [torch.from_numpy(x)[torch.from_numpy(p)] for x, (p, _) in zip(q_list, pairs)]
            )
            neg_f = torch.stack(
                [torch.from_numpy(x)[torch.from_numpy(g)] for x, (_, g) in zip(q_list, pairs)]
            )
        else:
            pos_f = q[torch.from_numpy(np.stack([p for p, _ in pairs]))]
            neg_f = q[torch.from_numpy(np.stack([g for _, g in pairs]))]
        users = torch.stack([n.factor for n in nodes])
        g = bpr_grads(users, pos_f, neg_f, s["l2"])
        new_users = users - s["lr_user"] * g.user
        for b, n in enumerate(nodes):
            n.factor = new_users[b].clone()
            ids = np.concatenate(pairs[b])
            rows = torch.cat([g.pos_items[b], g.neg_items[b]]).numpy()
            n.send("item_grads", SERVER, encode_rows(ids, rows))
            n.report("loss", g.loss[b].item())

    @staticmethod
    def _evaluate(nodes: list[FedMFUser], inboxes) -> None:
        q_list = decode_shared(inboxes, "eval_item_factors", wire.decode_dense)
        users = [(n, q) for n, q in zip(nodes, q_list) if len(n.test_items)]
        k = nodes[0].shared["eval_k"]
        for start in range(0, len(users), 1024):
            chunk = users[start : start + 1024]
            evaluate_users(
                [n for n, _ in chunk],
                torch.stack([n.factor for n, _ in chunk]),
                [q for _, q in chunk],
                k,
            )

    def get_factor(self) -> np.ndarray:
        return self.factor.numpy().copy()


def evaluate_users(
    nodes: list[Node], user_vecs: torch.Tensor, item_mats: list[np.ndarray], k: int
) -> None:
    """Each node ranks all items it has not trained on and reports its own ranking metrics."""
    if all(m is item_mats[0] for m in item_mats):
        scores = user_vecs @ torch.from_numpy(item_mats[0]).T
    else:
        scores = torch.stack([torch.from_numpy(m) @ u for u, m in zip(user_vecs, item_mats)])
    top = topk_excluding(scores, [n.train_items for n in nodes], k)
    metrics = ranking_metrics(top, [n.test_items for n in nodes], ks=(k,))
    for name, values in metrics.items():
        for n, v in zip(nodes, values):
            n.report(name, v)


class FedMF(Protocol):
    name = "fedmf"
    Config = FedMFConfig

    def __init__(self, dataset: RecDataset, config: FedMFConfig, seed: int):
        super().__init__(dataset, config, seed)
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)

    def shared(self) -> dict:
        c = self.config
        return {
            "n_users": self.dataset.n_users,
            "n_items": self.dataset.n_items,
            **dataclasses.asdict(c),
        }

    def node_specs(self) -> list[NodeSpec]:
        users = [
            u for u in range(self.dataset.n_users) if len(self.train_items[u])
        ]  # others take no part
        specs = [NodeSpec(FedMFServer, SERVER, {"users": np.array(users)})]
        for u in users:
            specs.append(
                NodeSpec(
                    FedMFUser,
                    node_id("user", u),
                    {"train_items": self.train_items[u], "test_items": self.test_items[u]},
                    packable=True,
                )
            )
        return specs

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "download", activate=[SERVER])
        res = dep.superstep(round_, "train")
        agg = dep.superstep(round_, "aggregate")
        return {
            "loss": mean_report(res.reports, "loss"),
            "participants": len(res.reports.get("loss", [])),
            "skipped": len(agg.reports.get("skipped", [])),
        }

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "eval_download", activate=[SERVER])
        res = dep.superstep(round_, "eval")
        return {name: mean_report(res.reports, name) for name in sorted(res.reports)}
