"""dmf's one role: the user, with its factor p_u, its copy Q_u of the item factors (last column:
the item biases) and its neighbours. Steps refer to protocol.py.

What a neighbour sends is untrusted: the host's screen checks each payload against the public
records (protocols/dmf/messages.py); the user drops (:meth:`Node.reject`, counted under the run's
``rejected``) rather than applies a gradient from another round (``order``), from a user that is
not its neighbour (``peer``), or the same nonce twice from one sender in one step, or more
gradients from one sender in one step than there are users to originate them (``budget``). A
gradient that reaches it again by another path is skipped, as the protocol has it (not counted).
An honest run rejects nothing."""

from __future__ import annotations

import secrets

import numpy as np
import torch

from adversaries.defences import combine_shares
from cluster.message import node_id
from cluster.validate import Accept
from models.bpr import bpr_grads, sample_pairs
from nodes.node import Node, NodeContext, expect_kinds, node_seed
from protocols.dmf import messages as msg
from protocols.evaluation import evaluate_users


class DMFUser(Node):
    role = "user"
    ACCEPTS = {msg.ITEM_GRADS: Accept(("user",), ("relay", "merge"), msg.check_item_grads)}

    def __init__(self, nid: str, ctx: NodeContext, train_items, test_items, neighbours):
        super().__init__(nid, ctx)
        c, n_items = self.config, self.public.n_items
        self.train_items = np.asarray(train_items, dtype=np.int64)
        self.test_items = np.asarray(test_items, dtype=np.int64)
        self.neighbours = [node_id("user", int(v)) for v in neighbours]
        # Q_u: the same public initialisation on every device, derived from the run's seed
        public = np.random.default_rng(node_seed(ctx.seed, "dmf-public-init"))
        q = public.normal(0, c.init_std, (n_items, c.dim + 1)).astype(np.float32)
        q[:, -1] = 0.0  # item biases start at zero
        self.item_factors = self.tensor(q)
        p = self.rng.normal(0, c.init_std, c.dim + 1).astype(np.float32)
        p[-1] = 1.0  # the constant that multiplies the item bias
        self.factor = self.tensor(p)
        self.seen: set[bytes] = set()  # nonces of the gradients applied this round

    def handle(self, phase: str, inbox) -> None:
        if phase == "train":
            expect_kinds(inbox, node=self.id)
            self._train()
        elif phase.startswith("relay") or phase == "merge":
            expect_kinds(inbox, msg.ITEM_GRADS, node=self.id)
            hop = self.config.hops if phase == "merge" else int(phase[len("relay") :])
            self._apply(inbox, hop, forward=phase != "merge")
        elif phase == "eval":
            if len(self.test_items):
                k = self.config.eval_k
                evaluate_users([self], self.factor[None], [self.item_factors], k)
        else:
            super().handle(phase, inbox)

    def _train(self) -> None:
        """Step 1: a local BPR step on p_u and Q_u; the item gradients go to the neighbours."""
        c = self.config
        self.seen = set()
        if self.rng.random() >= c.participation or len(self.train_items) == 0:
            return
        pos, neg = sample_pairs(self.rng, self.public.n_items, self.train_items, c.pairs)
        q = self.item_factors
        g = bpr_grads(
            self.factor[None],
            q[self.tensor(pos)][None],
            q[self.tensor(neg)][None],
            c.l2,
        )
        ids = np.concatenate([pos, neg])
        rows = torch.cat([g.pos_items[0], g.neg_items[0]])
        self.factor = self.factor - c.lr * g.user[0]
        self.factor[-1] = 1.0
        self.item_factors.index_add_(0, self.tensor(ids), rows, alpha=-c.lr)
        # from the operating system: a nonce drawn from the seeded RNG would tell anyone who knows
        # the seed which user originated a gradient gossiped on its behalf
        nonce = secrets.token_bytes(msg.NONCE_BYTES)
        self.seen.add(nonce)
        # an adversary's change (attacks read numpy: the CPU's copies)
        ids, rows = self.tamper_upload(ids, rows.cpu().numpy(), q.cpu().numpy())
        payload = msg.encode_item_grads(nonce, ids, rows)
        for v in self.neighbours:
            if self.online(v):  # an offline neighbour cannot be reached this round
                self.send(msg.ITEM_GRADS, v, payload)
        self.report("loss", g.loss[0].item())

    def _apply(self, inbox, hop: int, forward: bool) -> None:
        """Steps 2–3: apply every gradient of ``inbox`` not seen before (whatever arrived: absent
        neighbours' gradients are missing, not waited for) and, if ``forward``, pass it on to the
        other neighbours reachable this round."""
        c = self.config
        weight = c.neighbour_weight**hop
        defence = self.threat.defence if self.threat is not None else ""
        received = []
        neighbours = set(self.neighbours)
        # an honest neighbour forwards each gradient of the round once: at most one per user
        most = self.public.n_users
        last, from_sender, nonces = None, 0, set()  # the current sender's count and nonces
        for m in inbox:  # sorted by sender: the same result whatever the placement
            if m.round != self.round:
                self.reject(m, "order")
                continue
            if m.src not in neighbours:
                self.reject(m, "peer")
                continue
            nonce, grads = msg.decode_nonce(m.payload)
            if m.src != last:
                last, from_sender, nonces = m.src, 0, set()
            if nonce in nonces or from_sender >= most:
                self.reject(m, "budget")
                continue
            from_sender += 1
            nonces.add(nonce)
            if nonce in self.seen:
                continue
            self.seen.add(nonce)
            ids, rows = msg.decode_grads(grads, self.public.n_items)
            if defence:
                received.append((ids, rows))
            else:
                self.item_factors.index_add_(
                    0, self.tensor(ids), self.tensor(rows), alpha=-c.lr * weight
                )
            if forward:
                for v in self.neighbours:
                    if v != m.src and self.online(v):
                        self.send(msg.ITEM_GRADS, v, m.payload)
        if received:  # the run's defence: a robust combination of the hop's new gradients
            ids, total = combine_shares(received, defence, dict(self.threat.defence_params))
            self.item_factors.index_add_(
                0, self.tensor(ids), self.tensor(total), alpha=-c.lr * weight
            )

    def tamper_upload(self, ids: np.ndarray, rows: np.ndarray, q: np.ndarray):
        """The item gradients as gossiped: an honest user's unchanged (attack classes override
        it, protocols/dmf/attacks.py)."""
        return ids, rows
