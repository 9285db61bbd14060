"""DGREC's one role, the user (node id ``user/<u>``): every participant is a user and every
message goes user → user. Phases, driven by :class:`protocols.dgrec.protocol.DGREC` (the algorithm,
with the paper's equation numbers, is described there):

===============  ===========================================================================
phase            what a user does
===============  ===========================================================================
publicize        draws its ρ publicized items, sends them to its neighbours        (stage 1)
setup            builds its inner-item hypergraph, computes L_u                     (stage 1)
status           (L_u, cnt_u) → the neighbours that lack it                          (eq. 4)
seed             becomes a seed with probability ``seed_probability``; invites     (Alg. 1)
hop/h            accepts its first invitation, joins, invites further              (Alg. 1)
train            local gradient (eq. 3), clip + one-bit (eq. 5) → tree neighbours  (Alg. 2)
gossip/t         forwards the gradients new at the previous step                   (Alg. 2)
update           decodes the mean of what it holds (eq. 6), SGD step
validate         scores its held-out items, keeps its best model   (config.validation)
eval             ranks all items it does not hold with its (kept) model
===============  ===========================================================================

A host runs ``train``, ``validate`` and ``eval`` for all its users in one batched pass
(:meth:`DGRECUser.handle_batch`, protocols/dgrec/batched.py), each user with its own parameters and
its own random draws, so each gets what it would get alone.

What a peer sends is untrusted. The host's screen checks each payload against the public records
(``ACCEPTS``, protocols/dgrec/messages.py); the handlers check what only the receiver knows and
drop (:meth:`Node.reject`, counted under the run's ``rejected``) rather than raise on a message
from another round (``order``), from a user that is not its neighbour — or, for a join, that it
did not invite, for a share, that is not its parent or child in this round's tree (``peer``) —,
a second message of one kind from one sender in one step (``budget``), an invitation whose hop
is not the step's, or a join that answers an invitation of another step (``order``). An honest
run rejects nothing.
"""

from __future__ import annotations

import copy

import numpy as np
import scipy.sparse as sp
import torch
from torch.nn.utils import parameters_to_vector

from cluster import wire
from cluster.message import index_of, node_id
from cluster.validate import Accept, empty_blob
from models.bpr import hold_out, sample_pairs
from nodes.node import Node, NodeContext, expect_kinds, node_seed
from protocols.dgrec import messages as msgs
from protocols.dgrec.batched import per_user_gradients
from protocols.dgrec.factory import grad_vector, load_vector, public_model, split_parameters
from protocols.dgrec.messages import (
    HeldShares,
    decode_share,
    decode_status,
    encode_gradient,
    encode_share,
    encode_status,
)
from protocols.dgrec.model import build_user_hypergraph
from protocols.dgrec.ranking import hypergraphs, rank
from protocols.dgrec.sampling import neighbour_probabilities


class DGRECUser(Node):
    role = "user"
    ACCEPTS = {  # what a peer may send, in the phase it arrives (stage 1, Algorithms 1 and 2)
        "public_items": Accept(("user",), ("setup",), msgs.check_public_items),
        "status": Accept(("user",), ("seed",), msgs.check_status),
        "invite": Accept(("user",), ("hop",), msgs.check_invite),
        "join": Accept(("user",), ("hop", "train"), empty_blob),
        "share": Accept(("user",), ("gossip", "update"), msgs.check_share),
    }
    BATCHED_PHASES = frozenset({"train", "validate", "eval"})  # handle_batch below
    status_owed: frozenset | set = frozenset()  # (a user from a checkpoint that predates it)
    invited: dict[int, int] = {}  # this round's invitees -> the hop they were invited at
    valid_items = np.zeros(0, dtype=np.int64)  # held out to keep the best model (config.validation)
    best_model: torch.nn.Module | None = None
    best_score, best_round = -np.inf, -1

    def __init__(self, nid: str, ctx: NodeContext, train_items, test_items, neighbours):
        super().__init__(nid, ctx)
        self.index = index_of(nid)
        self.train_items = np.asarray(train_items, dtype=np.int64)
        if self.config.validation > 0:
            self.train_items, self.valid_items = hold_out(
                self.rng, self.train_items, self.config.validation
            )
        self.test_items = np.asarray(test_items, dtype=np.int64)
        self.neighbours = np.asarray(neighbours, dtype=np.int64)  # sorted global ids
        init_seed = node_seed(ctx.seed, "dgrec-public-init")
        self.model = self.build(lambda: public_model(init_seed, self.config, self.public))
        self.shared_params, self.private_params = split_parameters(self.model)
        if self.private_params:  # DLGNN's user embedding: drawn by the user itself
            gen = self.torch_generator("cpu")  # on the CPU: the same numbers on every device
            with torch.no_grad():
                for p in self.private_params:
                    drawn = torch.randn(p.shape, generator=gen, device="cpu")
                    p.copy_(drawn * self.config.init_std)
        self.private_grad: torch.Tensor | None = None
        self.public_items = np.zeros(0, dtype=np.int64)
        self.neighbour_public: dict[int, np.ndarray] = {}
        self.node_item_ids: np.ndarray | None = None
        self.incidence: sp.csr_matrix | None = None
        self.loss_value = 0.0  # L_u of eq. 4 (latest training loss)
        self.count = 0  # cnt_u of eq. 4 (times sampled)
        self.status_dirty = False
        self.status_owed: set[int] = set()  # neighbours that have not got the current status
        self.neighbour_status: dict[int, tuple[float, int]] = {}
        self._reset_round()
        self.last_round: dict = {}

    def _reset_round(self) -> None:
        self.in_tree = False
        self.hop = -1
        self.parent: int | None = None
        self.children: list[int] = []
        self.held: HeldShares | None = None  # the gradients held this round (eq. 6)
        self.invited = {}  # this round's invitees -> the hop they were invited at (their join's)

    @property
    def tree_neighbours(self) -> list[int]:
        return sorted(([self.parent] if self.parent is not None else []) + self.children)

    def _neighbour_set(self) -> set[int]:
        return set(self.neighbours.tolist())

    # --- dispatch ------------------------------------------------------------------------------
    def handle(self, phase: str, inbox) -> None:
        handler = {  # "hop/h" (h = 1..H) and "gossip/t" (t = 2..2H) are numbered supersteps
            "publicize": self._publicize,
            "setup": self._setup,
            "status": self._status,
            "seed": self._seed,
            "hop": self._hop,
            "train": self._train,
            "gossip": self._gossip,
            "update": self._update,
            "validate": lambda inbox: rank([self], [inbox], "validate"),
            "eval": lambda inbox: rank([self], [inbox], "eval"),
        }.get(phase.split("/", 1)[0])
        if handler is None:
            super().handle(phase, inbox)
        else:
            handler(inbox)

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        """DGREC's training and evaluation: all this host's users in one pass of
        protocols/dgrec/batched.py (each with its own parameters and its own random draws, so each
        gets what it would get alone); ``batch_users = False`` or DLGNN: one by one."""
        batched = bool(nodes) and nodes[0].config.model == "dgrec" and nodes[0].config.batch_users
        if batched and phase == "train":
            cls._train_batch(nodes, inboxes)
        elif phase in ("eval", "validate"):
            rank(nodes, inboxes, phase)
        else:
            super().handle_batch(nodes, phase, inboxes)

    # --- stage 1 -------------------------------------------------------------------------------
    def _publicize(self, inbox) -> None:
        expect_kinds(inbox, node=self.id)
        c = self.config
        n_pub = int(round(c.public_ratio * len(self.train_items)))
        self.public_items = np.sort(self.rng.choice(self.train_items, size=n_pub, replace=False))
        if c.use_public and c.model == "dgrec" and n_pub:  # DLGNN does not use them
            payload = wire.encode_ids(self.public_items)
            for v in self.neighbours:
                self.send("public_items", node_id("user", int(v)), payload)

    def _setup(self, inbox) -> None:
        expect_kinds(inbox, "public_items", node=self.id)
        for m in self.admit(inbox, self._neighbour_set()):
            ids = wire.decode_ids(m.payload)  # in the catalogue: the host's screen checked it
            self.neighbour_public[index_of(m.src)] = ids
        self._build_graph()

    def _build_graph(self) -> None:
        """The local graph from the user's items and the publicized items it holds, and L_u."""
        if self.config.model == "lightgcn":  # DLGNN: the ego graph u – I_u
            self.node_item_ids, self.incidence = self.train_items, None
        else:
            self.node_item_ids, self.incidence = build_user_hypergraph(
                self.train_items, list(self.neighbour_public.values()), self.public.item_tags
            )
        with torch.no_grad():
            loss, _ = self._loss()
        self.loss_value = float(loss)
        self.status_dirty = True

    def _ensure_graph(self) -> None:
        """Build the local graph if stage 1 never reached this user (its state was restored from a
        snapshot taken before stage 1, after a fault)."""
        if self.node_item_ids is None:
            self._build_graph()

    def _loss(self):
        c = self.config
        pos, neg = sample_pairs(self.rng, self.public.n_items, self.train_items, c.pairs)
        return self.model.loss(
            pos, neg, self.node_item_ids, self.incidence, reduction=c.loss_reduction
        )

    # --- stage 3: sampling (Algorithm 1) --------------------------------------------------------
    def _status(self, inbox) -> None:
        """Send the current (L_u, cnt_u) to each neighbour that has not got it and is reachable."""
        expect_kinds(inbox, node=self.id)
        self._ensure_graph()
        if self.status_dirty:
            self.status_owed = set(self.neighbours.tolist())
            self.status_dirty = False
        if self.status_owed:
            payload = encode_status(self.loss_value, self.count)
            for v in self.neighbours.tolist():
                if v in self.status_owed and self.online(node_id("user", v)):
                    self.send("status", node_id("user", v), payload)
                    self.status_owed.discard(v)

    def _seed(self, inbox) -> None:
        expect_kinds(inbox, "status", node=self.id)
        for m in self.admit(inbox, self._neighbour_set()):
            self.neighbour_status[index_of(m.src)] = decode_status(m.payload)
        self._reset_round()
        if self.rng.random() < self.public.seed_probability:
            self._join(hop=0, parent=None)

    def _join(self, hop: int, parent: int | None) -> None:
        self.in_tree, self.hop, self.parent = True, hop, parent
        self.count += 1
        if parent is not None:
            self.send("join", node_id("user", parent), wire.encode_blob(b""))
        if hop < self.config.hops:
            self._invite(hop + 1)

    def _invite(self, hop: int) -> None:
        """Eq. 4 over this user's neighbours other than its parent that it can reach this round;
        invitations carry the hop."""
        candidates = np.array(
            [
                v
                for v in self.neighbours.tolist()
                if v != self.parent and self.online(node_id("user", v))
            ],
            dtype=np.int64,
        )
        if candidates.size == 0:
            return
        status = [self.neighbour_status.get(int(v), (0.0, 0)) for v in candidates]
        p = neighbour_probabilities(
            np.array([st[0] for st in status]), np.array([st[1] for st in status])
        )
        k = min(self.config.n_u, int(np.count_nonzero(p)))
        picked = self.rng.choice(candidates, size=k, replace=False, p=p)
        payload = wire.encode_ids([hop], width=1)
        self.invited = {int(v): hop for v in picked}  # a join answers one of these
        for v in sorted(int(x) for x in picked):
            self.send("invite", node_id("user", v), payload)

    def _take_joins(self, inbox, hop: int) -> None:
        """Take as children the users that join this user's tree: each must answer an invitation
        this user sent at ``hop`` (the invitee's join arrives one step after it; in ``train``,
        those of the last hop)."""
        joins = self.admit([m for m in inbox if m.kind == "join"], self.invited)
        for m in joins:
            src = index_of(m.src)
            if not self.in_tree:
                self.reject(m, "peer")
            elif self.invited[src] != hop:  # an answer to an invitation of another step
                self.reject(m, "order")
            else:
                self.children.append(src)

    def _hop(self, inbox) -> None:
        expect_kinds(inbox, "invite", "join", node=self.id)
        step = int(self.phase.split("/", 1)[1])  # hop/h: the invitations of hop h arrive
        self._take_joins(inbox, step - 1)
        invites = self.admit([m for m in inbox if m.kind == "invite"], self._neighbour_set())
        valid = []
        for m in invites:  # sorted by sender
            hop = wire.decode_ids(m.payload)  # one hop in 1..H: the host's screen checked it
            if int(hop[0]) != step:
                self.reject(m, "order")
            else:
                valid.append(m)
        if valid and not self.in_tree:
            self._join(step, index_of(valid[0].src))

    # --- stage 3: local gradient, one-bit encoding, gossip (Algorithm 2) -----------------------
    def _train(self, inbox) -> None:
        expect_kinds(inbox, "join", node=self.id)
        self._take_joins(inbox, self.config.hops)
        if not self.in_tree:
            return
        self.model.zero_grad(set_to_none=True)
        loss, parts = self._loss()
        loss.backward()
        if self.private_params:
            self.private_grad = grad_vector(self.private_params)
        self._share(grad_vector(self.shared_params), parts["total"])
        self.model.zero_grad(set_to_none=True)  # kept as vectors: the model holds no copy

    def _share(self, grad: torch.Tensor, loss: float) -> None:
        """Gossip step 1: encode the local gradient (eq. 5) and send it to the tree neighbours."""
        self.children.sort()
        encoded = self.encode_own(grad)
        self.held = HeldShares(self.config, self.threat)
        self.held.add(self.index, encoded)
        self.loss_value = loss
        self.status_dirty = True
        self.report("loss", loss)
        self.report("shared_by", float(self.index))
        if self.parent is None:
            self.report("seed", 1.0)
        payload = encode_share([self.index], [encoded])
        for v in self.tree_neighbours:
            self.send("share", node_id("user", v), payload)

    def encode_own(self, grad: torch.Tensor) -> bytes:
        """The member's gradient as it gossips it (eq. 5, :func:`messages.encode_gradient`); an
        honest member's as is (attack classes override it, protocols/dgrec/attacks.py)."""
        return encode_gradient(
            grad, self.config, self.public.laplace_scale, self.noise_rng, self.noise_generator
        )

    def _receive_shares(self, inbox) -> dict[int, tuple[bytes, set[int]]]:
        """Hold first-seen gradients; returns origin → (encoded, senders) for the ones new at
        this step: the encoded ones are needed only until they are forwarded, in this step."""
        expect_kinds(inbox, "share", node=self.id)
        fresh: dict[int, tuple[bytes, set[int]]] = {}
        tree = set(self.tree_neighbours) if self.in_tree else set()
        for m in self.admit(inbox, tree):  # one share a step from each tree neighbour
            src = index_of(m.src)
            for origin, enc in decode_share(m.payload):
                if origin in fresh:
                    fresh[origin][1].add(src)
                elif origin not in self.held:
                    self.held.add(origin, enc)
                    fresh[origin] = (enc, {src})
        return fresh

    def _gossip(self, inbox) -> None:
        fresh = self._receive_shares(inbox)
        for v in self.tree_neighbours:
            origins = sorted(o for o, (_, senders) in fresh.items() if v not in senders)
            if origins:
                self.send(
                    "share",
                    node_id("user", v),
                    encode_share(origins, [fresh[o][0] for o in origins]),
                )

    def _update(self, inbox) -> None:
        self._receive_shares(inbox)
        if not self.in_tree:
            return
        lr = self.config.step_size(self.round)
        origins = sorted(self.held.origins)
        # eq. 6 over the gradients that arrived, or the run's defence (adversaries/defences.py)
        mean = self.held.mean()
        with torch.no_grad():
            theta = parameters_to_vector(self.shared_params)
            load_vector(theta - lr * self.tensor(mean), self.shared_params)
            if self.private_params:  # DLGNN: the private user embedding, from its own gradient
                own = parameters_to_vector(self.private_params) - lr * self.private_grad
                load_vector(own, self.private_params)
        self.report("held", float(len(origins)))
        self.last_round = {
            "round": self.round,
            "hop": self.hop,
            "parent": self.parent,
            "children": list(self.children),
            "held": origins,
        }
        self.held = None  # the round's gradients are spent: not kept in memory or checkpoints
        self.private_grad = None

    @staticmethod
    def _train_batch(nodes: list[DGRECUser], inboxes) -> None:
        for n, inbox in zip(nodes, inboxes, strict=True):
            expect_kinds(inbox, "join", node=n.id)
            n._take_joins(inbox, n.config.hops)
        members = [n for n in nodes if n.in_tree]
        if not members:
            return
        c, n_items = members[0].config, members[0].public.n_items
        pairs = [sample_pairs(n.rng, n_items, n.train_items, c.pairs) for n in members]
        grads, losses = per_user_gradients(
            [n.model for n in members],
            hypergraphs(members, members[0].device),
            np.stack([p for p, _ in pairs]),
            np.stack([q for _, q in pairs]),
            reduction=c.loss_reduction,
        )
        for n, grad, loss in zip(members, grads, losses.tolist(), strict=True):
            n._share(grad, loss)

    def keep_if_best(self, score: float) -> None:
        """Keep a copy of the current model if NDCG@K on the held-out items is ≥ the best so far."""
        self.report("valid_ndcg", score)
        if score >= self.best_score:
            self.best_score, self.best_model = score, copy.deepcopy(self.model)
            self.best_round = self.round
        self.report("kept_round", float(self.best_round))

    # --- inspection (tests) ------------------------------------------------------------------------
    def get_last_round(self) -> dict:
        return dict(self.last_round)

    def get_parameters(self) -> np.ndarray:
        return parameters_to_vector(self.model.parameters()).detach().cpu().numpy().copy()

    def get_public_items(self) -> np.ndarray:
        return self.public_items.copy()
