"""PFedRec's nodes: the server (holds the global item embeddings E, samples clients, averages
their tables) and the client (holds its data, its personal score function φ_u = (w_u, b_u) and
its personal item table E_u; trains, uploads, evaluates on its device). Equations refer to
protocol.py.

The client's model is the authors' (mlp.py of github.com/Zhangcx19/IJCAI-23-PFedRec): no user
embedding; the score of item i is ŷ_ui = σ(w_u·e_i + b_u), a one-layer score function on the
item's embedding, trained with binary cross-entropy on the client's positives and sampled
negatives.

What arrives is untrusted. Each role declares what it accepts (``ACCEPTS``: the kind, the sender
role, the phase and the table's shape, checked by the host before a handler runs, which also
says who may address it); the handlers drop (:meth:`Node.reject`, counted under the run's
``rejected``) rather than raise on what only they can judge: a second message from one sender in
one step (``budget``), a message of another round (``order``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from adversaries.defences import combine
from cluster import wire
from cluster.message import node_id
from cluster.validate import Accept
from models.metrics import ranking_metrics, topk_excluding
from nodes.node import Node, NodeContext, decode_shared, expect_kinds, node_seed
from nodes.secure_sum import SecureSum, Summand, server_sum
from privacy.ldp import laplace_noise
from privrec_pfedrec import messages as msg
from protocols.base import sample_participants

SERVER = node_id("server", 0)
TRAIN_CHUNK = 64  # clients trained in one vectorised pass (sorted by data size: little padding)
EVAL_CHUNK = 256  # clients ranked in one pass at evaluation
SAMPLED_K = 10  # the paper's HR@10 / NDCG@10
# What the server sums with --secure-aggregation (eq. 5's Σ): each client's whole table. Ẽ_u has
# no natural bound (the item step η·|I|·lr_eta moves rows far from their start: at d = 4 on the
# synthetic data some coordinates pass 64); the bound is 1024 standard deviations of the initial
# embeddings plus 20 Laplace scales where the LDP variant noises them. A coordinate beyond it is
# clipped and reported (secagg_clipped in the round's figures; [secure_aggregation] bound sets
# another).
SECURE_SUM = SecureSum(
    SERVER,
    (Summand(msg.ITEM_UPLOAD, msg.table_length, msg.densify_table),),
    bound=lambda c: 1024.0 * c.init_std + 20.0 * c.laplace_scale,
)


class PFedRecServer(Node):
    role = "server"
    ACCEPTS = {msg.ITEM_UPLOAD: Accept(("user",), ("aggregate",), msg.check_table)}
    SECURE_SUM = SECURE_SUM

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        c, n_items = self.config, self.public.n_items
        self.users = np.asarray(users, dtype=np.int64)  # the registered clients
        # E^0 ~ N(0, init_std²): torch.nn.Embedding's initialisation in the authors' code
        e0 = self.rng.normal(0.0, c.init_std, size=(n_items, c.dim)).astype(np.float32)
        self.table = self.tensor(e0)  # on the host's device, as every tensor of a role

    def handle(self, phase: str, inbox) -> None:
        if phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            users = self.users
            if phase == "download":  # step 1: the round's clients S_t
                users = sample_participants(self.rng, users, self.config.users_per_round)
            payload = msg.encode_table(self.table)  # one bytes object, shared by all sends
            kind = msg.ITEM_TABLE if phase == "download" else msg.EVAL_ITEM_TABLE
            for u in users:
                self.send(kind, node_id("user", int(u)), payload)
        elif phase == "aggregate":  # step 3, eq. (5)
            self._aggregate(inbox)
        else:
            super().handle(phase, inbox)

    def _aggregate(self, inbox) -> None:
        if self.secure_aggregation:  # eq. (5) from the sum alone (the uploads arrive masked)
            total = server_sum(self, SECURE_SUM, inbox)
            if total is None or total.n < max(1, self.min_participants):
                self.report("skipped", 1.0)
                return
            mean = self.tensor(total.parts[msg.ITEM_UPLOAD]) / total.n
            self.table = mean.reshape(self.table.shape).to(torch.float32)
            return
        expect_kinds(inbox, msg.ITEM_UPLOAD, node=self.id)
        c, n_items = self.config, self.public.n_items
        tables, seen = [], set()
        for m in inbox:  # sender order: the sums are the same whatever the placement
            why = None
            if m.round != self.round:
                why = "order"
            elif m.src_role != "user":
                why = "sender"
            elif m.src in seen:
                why = "budget"
            else:
                try:
                    tables.append(msg.decode_table(m.payload, n_items, c.dim))
                except wire.WireError:
                    why = "malformed"
            if why is not None:  # dropped, counted in the run's and the round's figures
                self.reject(m, why)
                self.report("rejected", 1.0)
                continue
            seen.add(m.src)
        if len(tables) < max(1, self.min_participants):  # too few arrived: keep E, say so
            self.report("skipped", 1.0)
            return
        if self.threat is not None and self.threat.defence:  # --defence: a robust eq. (5)
            self.table = self.tensor(defended_mean(self.table.cpu().numpy(), tables, self.threat))
            return
        total = torch.zeros((n_items, c.dim), dtype=torch.float64, device=self.device)
        for t in tables:
            total += self.tensor(t)
        self.table = (total / len(tables)).to(torch.float32)

    def get_table(self) -> np.ndarray:
        return self.table.cpu().numpy().copy()


class PFedRecUser(Node):
    role = "user"
    adversary = False  # an attack class (attacks.py) changes its upload
    SECURE_SUM = SECURE_SUM
    ACCEPTS = {
        msg.ITEM_TABLE: Accept(("server",), ("train",), msg.check_table),
        msg.EVAL_ITEM_TABLE: Accept(("server",), ("eval",), msg.check_table),
    }

    def __init__(self, nid: str, ctx: NodeContext, train_items: np.ndarray, test_items: np.ndarray):
        super().__init__(nid, ctx)
        c, n_items = self.config, self.public.n_items
        self.train_items = np.unique(np.asarray(train_items, dtype=np.int64))
        self.test_items = np.asarray(test_items, dtype=np.int64)
        self.not_trained = np.setdiff1d(np.arange(n_items), self.train_items)  # negative pool
        # φ_u^0: every client starts from the same score function (the authors' clients copy one
        # initial model), torch.nn.Linear's initialisation U(-1/√d, 1/√d); its tensors live on
        # the host's device
        init = np.random.default_rng(self.public.init_seed)
        bound = 1.0 / math.sqrt(c.dim)
        self.weight = self.tensor(init.uniform(-bound, bound, size=c.dim).astype(np.float32))
        self.bias = self.tensor(np.float32(init.uniform(-bound, bound)))  # b_u: a 0-d tensor
        # E_u, the personal item table: the global table it was fine-tuned from (``base``) with
        # its fine-tuned ``rows`` (item ids, numpy) replaced by ``values``; None until the client
        # has trained
        self.base: torch.Tensor | None = None
        self.rows = np.zeros(0, dtype=np.int64)
        self.values = torch.zeros((0, c.dim), device=self.device)
        self._eval_negatives: list[np.ndarray] | None = None

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        if phase not in ("train", "eval"):
            raise ValueError(f"{cls.__name__}: no handler for phase {phase!r}")
        # each client's one table of this round from the server
        kind = msg.ITEM_TABLE if phase == "train" else msg.EVAL_ITEM_TABLE
        for n, inbox in zip(nodes, inboxes):
            expect_kinds(inbox, kind, node=n.id)
        firsts = [n.admit_one(inbox, kind) for n, inbox in zip(nodes, inboxes)]
        nodes = [n for n, m in zip(nodes, firsts) if m is not None]
        inboxes = [[m] for m in firsts if m is not None]
        if not nodes:
            return
        c, n_items, on_device = nodes[0].config, nodes[0].public.n_items, nodes[0].tensor
        # one table on the host's device per distinct payload (a broadcast is decoded and moved
        # once, and its clients share it)
        tables = decode_shared(
            inboxes, kind, lambda p: on_device(msg.decode_table(p, n_items, c.dim))
        )
        if phase == "train":
            order = sorted(range(len(nodes)), key=lambda b: len(nodes[b].train_items))
            for start in range(0, len(order), TRAIN_CHUNK):
                chunk = order[start : start + TRAIN_CHUNK]
                _train([nodes[b] for b in chunk], [tables[b] for b in chunk])
        else:
            users = [(n, t) for n, t in zip(nodes, tables) if len(n.test_items)]
            for start in range(0, len(users), EVAL_CHUNK):
                _evaluate(users[start : start + EVAL_CHUNK])

    # --- the client's own data ------------------------------------------------------------------
    def examples(self) -> tuple[np.ndarray, np.ndarray]:
        """This round's (items, labels): every training positive (label 1) and ``negatives``
        items per positive drawn uniformly, with replacement, from the items it has not
        interacted with in training (label 0); drawn afresh every round as in the authors'
        code (which also excludes the held-out test items: a device does not know its future)."""
        c = self.config
        n_neg = len(self.train_items) * c.negatives if len(self.not_trained) else 0
        neg = np.zeros(0, dtype=np.int64)
        if n_neg:
            neg = self.not_trained[self.rng.integers(0, len(self.not_trained), size=n_neg)]
        items = np.concatenate([self.train_items, neg])
        labels = np.concatenate([np.ones(len(self.train_items)), np.zeros(n_neg)])
        return items, labels.astype(np.float32)

    def scores(self, table: torch.Tensor) -> torch.Tensor:
        """w_u·e_i + b_u for every item i, with E_u (or ``table`` before the first round)."""
        base = self.base if self.base is not None else table
        s = base @ self.weight + self.bias
        if len(self.rows):
            s[self.tensor(self.rows)] = self.values @ self.weight + self.bias
        return s

    def eval_negatives(self) -> list[np.ndarray]:
        """The paper's protocol: per test item, ``eval_negatives`` items the client never
        interacted with, drawn once (without replacement) from a stream of their own, so that
        evaluating never moves the training RNG."""
        if self._eval_negatives is None:
            c, n_items = self.config, self.public.n_items
            rng = np.random.default_rng(node_seed(self.ctx.seed, f"{self.id}/eval-negatives"))
            pool = np.setdiff1d(np.arange(n_items), np.union1d(self.train_items, self.test_items))
            size = min(c.eval_negatives, len(pool))
            self._eval_negatives = [
                rng.choice(pool, size=size, replace=False) for _ in self.test_items
            ]
        return self._eval_negatives

    def tamper_upload(self, ids: np.ndarray, rows: np.ndarray, table) -> tuple:
        """The step an attack class overrides (attacks.py): the update ``rows`` = Ẽ_u − E at
        item ``ids`` that the client uploads. An honest client uploads it as it is."""
        return ids, rows

    def get_state(self) -> dict:
        """The client's personal model (inspection for tests), in numpy."""
        return {
            "weight": self.weight.cpu().numpy().copy(),
            "bias": float(self.bias),
            "rows": self.rows.copy(),
            "values": self.values.cpu().numpy().copy(),
        }


def _train(nodes: list[PFedRecUser], tables: list[torch.Tensor | np.ndarray]) -> None:
    """Step 2 for a chunk of clients in one vectorised pass: eqs. (2)–(4). Row b of every tensor
    depends on client b alone (its data, its RNG, the table it received); the batch width is
    always ``batch_size`` (padding is masked), so a client's result does not depend on which
    clients share its chunk or host. The kernels run on the host's device (a GPU where Ray gave
    one), where the clients' models stay; the examples are drawn in numpy on each client's RNG,
    the same on every device."""
    c, n_items = nodes[0].config, nodes[0].public.n_items
    d, width = c.dim, c.batch_size
    lr_item = c.lr * n_items * c.lr_eta  # the authors' item step: lr · |I| · lr_eta
    data = [n.examples() for n in nodes]
    rows = [np.unique(items) for items, _ in data]  # the rows of E each client touches
    local = [np.searchsorted(r, items) for r, (items, _) in zip(rows, data)]
    n_b, p = len(nodes), max(1, max(len(r) for r in rows))
    device, on_device = nodes[0].device, nodes[0].tensor
    tables = [on_device(t) for t in tables]  # (already there when handle_batch decoded them)
    table_rows = torch.zeros((n_b, p, d), device=device)  # E_u's touched rows, padded
    for b, (r, t) in enumerate(zip(rows, tables)):
        table_rows[b, : len(r)] = t[on_device(r)]
    w = torch.stack([n.weight for n in nodes])
    bias = torch.stack([n.bias for n in nodes])
    loss_sum = torch.zeros(n_b, dtype=torch.float64, device=device)
    loss_count = torch.zeros(n_b, dtype=torch.float64, device=device)
    for _ in range(c.local_epochs):
        orders = [n.rng.permutation(len(lab)) for n, (_, lab) in zip(nodes, data)]
        steps = max(1, max(math.ceil(len(o) / width) for o in orders))
        idx = np.zeros((n_b, steps * width), dtype=np.int64)
        y = np.zeros((n_b, steps * width), dtype=np.float32)
        mask = np.zeros((n_b, steps * width), dtype=np.float32)
        for b, (o, (_, lab)) in enumerate(zip(orders, data)):
            idx[b, : len(o)] = local[b][o]
            y[b, : len(o)] = lab[o]
            mask[b, : len(o)] = 1.0
        live = mask.reshape(n_b, steps, width).any(axis=(0, 2))  # steps with an example
        idx, y, mask = on_device(idx), on_device(y), on_device(mask)
        for j in range(steps):
            if not live[j]:
                break
            sl = slice(j * width, (j + 1) * width)
            ix, yj, mj = idx[:, sl], y[:, sl], mask[:, sl]
            count = mj.sum(1)
            scale = mj / count.clamp(min=1.0)[:, None]  # BCE is a mean over the batch
            gather = ix[:, :, None].expand(-1, -1, d)
            e = table_rows.gather(1, gather)  # [n_b, B, d]
            # eq. (2): one SGD step on the score function φ_u, item embeddings fixed
            g = (torch.sigmoid((e * w[:, None, :]).sum(-1) + bias[:, None]) - yj) * scale
            w = w - c.lr * (g[:, :, None] * e).sum(1)
            bias = bias - c.lr * g.sum(1)
            # eq. (3): one SGD step on the item embeddings, with the updated score function
            prob = torch.sigmoid((e * w[:, None, :]).sum(-1) + bias[:, None])
            g = (prob - yj) * scale
            table_rows.scatter_add_(1, gather, -lr_item * g[:, :, None] * w[:, None, :])
            bce = F.binary_cross_entropy(prob, yj, reduction="none")
            loss_sum += (bce * mj).sum(1)
            loss_count += count
    losses = (loss_sum / loss_count.clamp(min=1.0)).tolist()
    for b, n in enumerate(nodes):
        r, t = rows[b], tables[b]
        n.weight, n.bias = w[b].clone(), bias[b].clone()
        values = table_rows[b, : len(r)].clone()
        n.base, n.rows, n.values = t, r, values  # E_u, kept for the client's predictions
        up = _perturbed_upload(n, t, r, values)
        if n.adversary:  # a compromised client changes its update Ẽ_u − E (attacks.py)
            ids, delta = n.tamper_upload(np.arange(n_items), (up - t).cpu().numpy(), t)
            up = t.clone()
            up[on_device(ids)] += on_device(delta)
        n.send(msg.ITEM_UPLOAD, SERVER, msg.encode_table(up))
        n.report("loss", losses[b])
        n.report(f"released/{n.id}", 1.0)  # the driver's accountant charges this client


def _perturbed_upload(
    node: PFedRecUser, table: torch.Tensor, rows: np.ndarray, values: torch.Tensor
) -> torch.Tensor:
    """Eq. (4): Ẽ_u = E + clip(E_u − E, −clip, clip) + Laplace(0, b)^{|I|×d}: the client's whole
    fine-tuned table (the authors upload the model's whole item embedding), its update clipped
    per coordinate and every coordinate noised when the LDP variant is on."""
    c = node.config
    ids = node.tensor(rows)
    delta = values - table[ids]
    if c.clip > 0:
        delta = delta.clamp(-c.clip, c.clip)
    up = table.clone()
    up[ids] = table[ids] + delta
    if c.laplace_scale > 0:  # (a --secure-rng generator draws on the CPU)
        up += laplace_noise(up.shape, c.laplace_scale, node.noise_generator()).to(up.device)
    return up


def defended_mean(table: np.ndarray, tables: list[np.ndarray], threat) -> np.ndarray:
    """Eq. (5) under the run's defence: E + combine(Ẽ_u − E over the uploads), the defence
    (``adversaries.defences.combine``: norm bound, median, trimmed mean, Krum) applied to the
    clients' whole updates; float32 [|I|, d]."""
    updates = np.stack([t.astype(np.float64) - table for t in tables])
    return (table + combine(updates, threat.defence, dict(threat.defence_params))).astype(
        np.float32
    )


def _evaluate(users: list[tuple[PFedRecUser, torch.Tensor]]) -> None:
    """Each client ranks every item it has not trained on with its personal model (E_u, φ_u) and
    reports Recall/NDCG/Precision/Hit/MRR@eval_k; and, the paper's protocol, ranks each test item
    among ``eval_negatives`` sampled non-interacted items: sampled HR@10 and NDCG@10 (a tie
    counts against the test item, as the authors' pandas rank(method='first') has it)."""
    nodes = [n for n, _ in users]
    c = nodes[0].config
    scores = torch.stack([n.scores(t) for n, t in users])
    top = topk_excluding(scores, [n.train_items for n in nodes], c.eval_k)
    metrics = ranking_metrics(top, [n.test_items for n in nodes], ks=(c.eval_k,))
    for name, values in metrics.items():
        for n, v in zip(nodes, values):
            n.report(name, v)
    if c.eval_negatives == 0:
        return
    for n, s in zip(nodes, scores.cpu().numpy()):  # a few items per client: ranked in numpy
        hits, gains = [], []
        for item, negs in zip(n.test_items, n.eval_negatives()):
            rank = 1 + int((s[negs] >= s[item]).sum())
            hits.append(rank <= SAMPLED_K)
            gains.append(1.0 / math.log2(rank + 1) if rank <= SAMPLED_K else 0.0)
        n.report(f"sampled_hr@{SAMPLED_K}", float(np.mean(hits)))
        n.report(f"sampled_ndcg@{SAMPLED_K}", float(np.mean(gains)))
