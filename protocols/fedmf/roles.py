"""fedmf's nodes: the server (holds Q, samples users, averages their item gradients) and the user
(holds p_u and its interactions, trains locally, evaluates on its device). Steps refer to
protocol.py.

What arrives is untrusted: the host's screen checks each payload against the public records
(protocols/fedmf/messages.py); a handler drops (:meth:`Node.reject`, counted under the run's
``rejected``) rather than uses a message from another round (``order``), an upload from a user
the server did not sample this round (``peer``), or a second message of one kind from one sender
in one step (``budget``). An honest run rejects nothing."""

from __future__ import annotations

import numpy as np
import torch

from cluster.message import node_id
from cluster.validate import Accept
from models.bpr import bpr_grads, sample_pairs
from nodes import secure_sum
from nodes.node import Node, NodeContext, decode_shared, expect_kinds
from protocols.base import sample_participants
from protocols.evaluation import evaluate_users
from protocols.fedmf import messages as msg
from protocols.sparse_rows import defended_step, step_on_sum

SERVER = node_id("server", 0)
EVAL_CHUNK = 1024  # users ranked in one pass at evaluation
# What the server sums with --secure-aggregation: each upload's rows over the whole item table.
# BPR item gradients have no natural bound; |∂/∂q_i| ≤ |p_u| + α|q_i|, which stays below 1 per
# coordinate here (a clipped coordinate is reported as secagg_clipped).
SECURE_SUM = secure_sum.SecureSum(
    SERVER,
    (secure_sum.Summand(msg.ITEM_GRADS, msg.item_table_length, msg.densify_item_grads),),
    bound=lambda config: 1.0,
)


class FedMFServer(Node):
    role = "server"
    ACCEPTS = {msg.ITEM_GRADS: Accept(("user",), ("aggregate",), msg.check_item_grads)}
    SECURE_SUM = SECURE_SUM
    sampled = np.zeros(0, dtype=np.int64)  # the users sent Q this round (their uploads count)

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        c, n_items = self.config, self.public.n_items
        self.users = np.asarray(users, dtype=np.int64)  # the registered clients
        q = self.rng.normal(0.0, c.init_std, size=(n_items, c.dim)).astype(np.float32)
        self.item_factors = torch.nn.Parameter(self.tensor(q))
        self.optimizer = torch.optim.Adam([self.item_factors], lr=c.lr_item)

    def handle(self, phase: str, inbox) -> None:
        if phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            users = self.users
            if phase == "download":  # step 1: the round's |Ū| users
                users = sample_participants(self.rng, users, self.config.users_per_round)
                self.sampled = np.asarray(users, dtype=np.int64)
            payload = msg.encode_item_factors(self.item_factors.detach())  # one bytes object
            kind = msg.ITEM_FACTORS if phase == "download" else msg.EVAL_ITEM_FACTORS
            for u in users:
                self.send(kind, node_id("user", int(u)), payload)
        elif phase == "aggregate" and self.secure_aggregation:  # step 3 on the sum alone
            total = secure_sum.server_sum(self, SECURE_SUM, inbox)
            if total is None or total.n < max(1, self.min_participants):
                self.report("skipped", 1.0)
                return
            grads = total.parts[msg.ITEM_GRADS].reshape(tuple(self.item_factors.shape))
            step_on_sum(self.item_factors, self.optimizer, grads, total.n)
        elif phase == "aggregate":  # step 3
            expect_kinds(inbox, msg.ITEM_GRADS, node=self.id)
            inbox = self.admit(inbox, set(self.sampled.tolist()))  # this round's sampled users
            if len(inbox) < max(1, self.min_participants):
                self.report("skipped", 1.0)
                return
            n_items = self.item_factors.shape[0]
            uploads = [msg.decode_item_grads(m.payload, n_items) for m in inbox]  # sender order
            # the mean, or the run's defence (adversaries/defences.py: per upload or item row)
            defended_step(self.item_factors, self.optimizer, uploads, self.threat)
        else:
            super().handle(phase, inbox)

    def secure_sum_peers(self) -> set[int]:
        return set(self.sampled.tolist())  # this round's sampled users

    def get_item_factors(self) -> np.ndarray:
        return self.item_factors.detach().cpu().numpy().copy()


class FedMFUser(Node):
    role = "user"
    SECURE_SUM = SECURE_SUM
    ACCEPTS = {
        msg.ITEM_FACTORS: Accept(("server",), ("train",), msg.check_item_factors),
        msg.EVAL_ITEM_FACTORS: Accept(("server",), ("eval",), msg.check_item_factors),
    }

    def __init__(self, nid: str, ctx: NodeContext, train_items: np.ndarray, test_items: np.ndarray):
        super().__init__(nid, ctx)
        c = self.config
        self.train_items = np.asarray(train_items, dtype=np.int64)
        self.test_items = np.asarray(test_items, dtype=np.int64)
        p = self.rng.normal(0.0, c.init_std, size=c.dim).astype(np.float32)
        self.factor = self.tensor(p)

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        if phase not in ("train", "eval"):
            raise ValueError(f"{cls.__name__}: no handler for phase {phase!r}")
        kind = msg.ITEM_FACTORS if phase == "train" else msg.EVAL_ITEM_FACTORS
        for n, inbox in zip(nodes, inboxes):
            expect_kinds(inbox, kind, node=n.id)
        # each user's one Q of this round from the server; a user left without one sits it out
        firsts = [n.admit_one(inbox, kind) for n, inbox in zip(nodes, inboxes)]
        nodes, inboxes = (
            [n for n, m in zip(nodes, firsts) if m is not None],
            [[m] for m in firsts if m is not None],
        )
        if not nodes:
            return
        if phase == "train":
            cls._train(nodes, inboxes)
        else:
            cls._evaluate(nodes, inboxes)

    @staticmethod
    def _train(nodes: list[FedMFUser], inboxes) -> None:
        """Step 2 for every sampled user of this host in one vectorised pass; row b of every
        tensor depends on user b alone."""
        q_list = decode_shared(inboxes, msg.ITEM_FACTORS, msg.decode_item_factors)
        c, n_items = nodes[0].config, nodes[0].public.n_items
        pairs = [sample_pairs(n.rng, n_items, n.train_items, c.pairs) for n in nodes]
        on_device = nodes[0].tensor
        if any(x is not q_list[0] for x in q_list):  # not a shared broadcast: gather per user
            pos_f = torch.stack([on_device(x[p]) for x, (p, _) in zip(q_list, pairs)])
            neg_f = torch.stack([on_device(x[g]) for x, (_, g) in zip(q_list, pairs)])
        else:
            q = on_device(q_list[0])
            pos_f = q[on_device(np.stack([p for p, _ in pairs]))]
            neg_f = q[on_device(np.stack([g for _, g in pairs]))]
        users = torch.stack([n.factor for n in nodes])
        for _ in range(c.user_steps - 1):  # local steps on p_u alone, Q fixed, the round's pairs
            users = users - c.lr_user * bpr_grads(users, pos_f, neg_f, c.l2).user
        g = bpr_grads(users, pos_f, neg_f, c.l2)
        new_users = users - c.lr_user * g.user
        # the uploads' rows [B, 2P, d] and the losses leave the device in one transfer each
        uploads = torch.cat([g.pos_items, g.neg_items], dim=1).cpu().numpy()
        losses = g.loss.tolist()
        for b, n in enumerate(nodes):
            n.factor = new_users[b].clone()
            ids = np.concatenate(pairs[b])
            rows = uploads[b]
            ids, rows = n.tamper_upload(ids, rows, q_list[b])  # an adversary's change, if any
            n.send(msg.ITEM_GRADS, SERVER, msg.encode_item_grads(ids, rows))
            n.report("loss", losses[b])

    @staticmethod
    def _evaluate(nodes: list[FedMFUser], inboxes) -> None:
        q_list = decode_shared(inboxes, msg.EVAL_ITEM_FACTORS, msg.decode_item_factors)
        users = [(n, q) for n, q in zip(nodes, q_list) if len(n.test_items)]
        k = nodes[0].config.eval_k
        for start in range(0, len(users), EVAL_CHUNK):
            chunk = users[start : start + EVAL_CHUNK]
            evaluate_users(
                [n for n, _ in chunk],
                torch.stack([n.factor for n, _ in chunk]),
                [q for _, q in chunk],
                k,
            )

    def tamper_upload(self, ids: np.ndarray, rows: np.ndarray, q: np.ndarray):
        """The upload as sent: an honest user's unchanged (attack classes override it,
        adversaries/attacks/)."""
        return ids, rows

    def get_factor(self) -> np.ndarray:
        return self.factor.cpu().numpy().copy()
