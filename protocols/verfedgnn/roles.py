"""The three roles of VerFedGNN: key server (PSI), server (public parameters θ), party.

Node ids: ``party/p``, ``server/0``, ``key_server/0``. The phases and their messages are those of
protocols/verfedgnn/protocol.py, in its order: the PSI set-up (``psi_key`` … ``psi_align``; a
party that lost its alignment asks again with ``psi_request``; a server that lost it, θ with it,
reports ``server_needs_alignment`` at ``download`` and the whole set-up runs again), then per
iteration ``download`` (server: A_t, Φ's seed, θ), ``exchange{j}`` (parties: Y_p^k = Φ X_p^k),
``train`` (parties: loss of eq. 5, local item step, released gradient of θ) and ``aggregate``
(server: eq. 21, Adagrad), and the same forward pass with every party under ``eval_*``.

Absent participants are handled as protocol.py describes (A_t among the parties the server
reaches, sums over the aggregates that arrived, eq. 21 over the gradients that arrived). With the
de-anonymization attack on, the attacking party keeps the victim's projected first-layer
aggregate apart (``get_deanonymization``, §4.1).

**Secrets.** The key server draws its RSA key from the operating system and the parties their
blinding factors from ``secrets`` (privacy/key_server.py), never from the seed. The run does not
depend on them: the aligned index orders the common users by id, not by token (see ``_psi``),
and RSA values travel at the modulus' byte length.

**What each role checks** of what a party sent, beside the host's screen (``ACCEPTS``; the PSI
tokens' order and a gradient's declared length are checked there): the key server signs no value
outside 1..N−1 or sharing a factor with N (``range``) and one request per party and set-up step
(``budget``); the server takes gradients only from the parties of this iteration's A_t, one each
(``peer``, ``order``), of θ's exact length (``shape``, read before anything of that length is
allocated); a party takes aggregates only from the other participants of this iteration, one
per exchange step, of the expected shape (``peer``, ``order``, ``shape``), and checks the PSI key
(e = 65537, an odd modulus of ``psi_key_bits`` bits with no small factor), signatures and
intersection it is given (``range``, ``shape``). Each drop is counted under ``rejected``; none
raises.
"""

from __future__ import annotations

import numpy as np
import torch

from adversaries.defences import defended_vectors
from cluster import wire
from cluster.message import index_of, node_id
from cluster.validate import Accept, empty
from models.rating_gnn import RatingGNN, rating_edges
from models.rating_gnn.training import adagrad
from nodes.node import Node, NodeContext, expect_kinds, node_seed
from privacy import oprf
from privacy.key_server import BlindSigner, OprfClient, new_key
from privacy.projection import make_projection, project, reconstruct
from privacy.ternary import ternary_quantize
from protocols.verfedgnn import messages as msgs
from protocols.verfedgnn import psi
from protocols.verfedgnn.aggregation import (
    exchange_schedule,
    exchange_senders,
    flat_gradient,
    partial_participation_aggregate,
    party_loss,
    party_model,
    public_parameters,
    received_aggregates,
)
from protocols.verfedgnn.config import n_participants, projection_rows
from protocols.verfedgnn.deanonymization import Adversaries, infer_victim_items
from protocols.verfedgnn.messages import decode_gradient, decode_public, encode_public

SERVER = node_id("server", 0)
KEY_SERVER = node_id("key_server", 0)


class VerFedGNNKeyServer(Node):
    """Holds the OPRF key; sees only blinded (uniformly random) values."""

    role = "key_server"
    ACCEPTS = {
        "psi_rejoin": Accept(("party",), ("psi_key",), empty),
        "psi_blinded": Accept(("party",), ("psi_sign",), msgs.check_blinded),
    }

    def __init__(self, nid: str, ctx: NodeContext):
        super().__init__(nid, ctx)
        self.signer = BlindSigner(new_key(self.config.psi_key_bits))  # from the OS, not the seed

    def handle(self, phase: str, inbox) -> None:
        if phase == "psi_key":
            expect_kinds(inbox, "psi_rejoin", node=self.id)
            payload = wire.encode_bigints(list(self.signer.public_numbers()))
            # a rejoin: the parties that asked; the set-up: every party
            everyone = [node_id("party", p) for p in range(self.config.parties)]
            for dst in [m.src for m in inbox] or everyone:
                self.send("psi_public_key", dst, payload)
        elif phase == "psi_sign":
            expect_kinds(inbox, "psi_blinded", node=self.id)
            bits, answered = self.config.psi_key_bits, set()
            for m in inbox:
                if m.src in answered:  # one request per party and set-up
                    self.reject(m, "budget")
                    continue
                blinded = msgs.decode_blinded(m.payload, bits)
                refused = self.signer.refusal(m.src, blinded)  # 0, ≥ N, a factor of N
                if refused is not None:
                    self.reject(m, refused)
                    continue
                answered.add(m.src)
                signed = self.signer.sign(blinded, m.src)
                self.send("psi_signed", m.src, msgs.encode_signed(signed, bits))
        else:
            super().handle(phase, inbox)

    def public_numbers(self) -> tuple[int, int]:
        """(N, e): public, as every party receives it."""
        return self.signer.public_numbers()


def _gradient_length(payload: bytes) -> int:
    """The length a gradient declares (its check passed: ternary or dense), read without
    allocating it."""
    if wire.peek_tag(payload) == "ternary":
        return wire.decode_ternary_sparse(payload)[0]
    return wire.view_dense(payload).size


class VerFedGNNServer(Node):
    """Holds the public parameters θ; matches the PSI tokens; samples A_t; eq. 21 + Adagrad."""

    role = "server"
    ACCEPTS = {
        "psi_tokens": Accept(("party",), ("psi_match",), msgs.check_tokens),
        "gradient": Accept(("party",), ("aggregate",), msgs.check_gradient),
    }

    def __init__(self, nid: str, ctx: NodeContext):
        super().__init__(nid, ctx)
        self.theta: torch.nn.Parameter | None = None
        self.n_users = 0
        self.psi_common: list[bytes] | None = None  # the set-up's common tokens, sorted
        self.a_t: tuple[int, frozenset[int]] = (-1, frozenset())  # (round, A_t) of the download
        if self.config.psi:
            self.aligned: set[int] = set()  # parties whose tokens the server matched
        else:
            self.aligned = set(range(self.config.parties))
            self._init_public(self.public.n_users)

    def _init_public(self, n_users: int) -> None:
        self.n_users = n_users
        one = np.zeros(1, dtype=np.int64)  # a template needs some edge; only θ is used
        seed = int(self.rng.integers(0, 2**62))
        n_items = self.public.n_items
        template = self.build(lambda: party_model(self.config, n_users, 1, n_items, one, one, seed))
        params = public_parameters(template)
        self.theta = torch.nn.Parameter(torch.nn.utils.parameters_to_vector(params).detach())
        self.user_slice = slice(0, template.user_emb.weight.numel())
        self.optimizer = adagrad([self.theta], self.config.lr)

    def handle(self, phase: str, inbox) -> None:
        if phase == "psi_match":
            self._match(inbox)
        elif phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            if self.theta is None:  # restored from a snapshot taken before the set-up
                # no θ and no aligned index: nobody to send to until the set-up runs again
                self.report("server_needs_alignment", 1.0)
                return
            if phase == "download":
                chosen = self._sample()
                if chosen is None:
                    return
                self.a_t = (self.round, frozenset(int(p) for p in chosen))
                seed = int(self.noise_rng.integers(0, 2**62))  # the seed of Φ
            else:  # evaluation: every aligned party, and no draw from the training stream
                chosen = np.array(sorted(self.aligned), dtype=np.int64)
                seed = node_seed(self.ctx.seed, f"verfedgnn-eval-phi/{self.round}")
            payload = encode_public(seed, chosen, self.theta)
            kind = "public_params" if phase == "download" else "eval_public_params"
            for p in chosen:
                self.send(kind, node_id("party", int(p)), payload)
        elif phase == "aggregate":
            self._aggregate(inbox)
        else:
            super().handle(phase, inbox)

    def _match(self, inbox) -> None:
        """PSI: intersect the sorted token lists; answer each party with its common positions
        (at a rejoin: against the set-up's common tokens, so the aligned index is unchanged)."""
        expect_kinds(inbox, "psi_tokens", node=self.id)
        lists, kept, seen = [], [], set()
        for m in inbox:
            toks = wire.decode_chunks(m.payload, oprf.TOKEN_BYTES)
            if m.src in seen or any(a >= b for a, b in zip(toks, toks[1:])):
                self.reject(m, "order")  # unsorted or repeated tokens, or a second list
                continue
            seen.add(m.src)
            lists.append(toks)
            kept.append(m)
        inbox = kept
        if not lists:
            return
        setup = self.psi_common is None
        positions, self.psi_common = psi.match(lists, self.psi_common)
        if setup:
            self._init_public(len(self.psi_common))
        for m, pos in zip(inbox, positions):
            if pos is None:  # the party lacks a common user: it cannot rejoin
                self.report("psi_rejoin_failed", 1.0)
                continue
            self.aligned.add(index_of(m.src))
            self.send("psi_intersection", m.src, wire.encode_ids(pos))

    def _gradients_of_a_t(self, inbox) -> list:
        """The gradients that may count: one from each party of this iteration's A_t (another
        sender: ``peer``; a second one: ``order``), of θ's exact length (else ``shape``, read off
        the header before anything of that length is allocated)."""
        n = 0 if self.theta is None else self.theta.shape[0]
        round_, chosen = self.a_t
        chosen = chosen if round_ == self.round else frozenset()
        kept, seen = [], set()
        for m in inbox:
            if index_of(m.src) not in chosen:
                self.reject(m, "peer")
            elif m.src in seen:
                self.reject(m, "order")
            elif _gradient_length(m.payload) != n:
                self.reject(m, "shape")
            else:
                seen.add(m.src)
                kept.append(m)
        return kept

    def _sample(self) -> np.ndarray | None:
        """A_t: S parties drawn uniformly among the aligned ones the server can reach this round
        (it tries to connect; an offline party is not in A_t); None when it reaches nobody."""
        P = self.config.parties
        k = n_participants(P, self.config.participation)
        reachable = np.array(
            [p for p in range(P) if p in self.aligned and self.online(node_id("party", p))],
            dtype=np.int64,
        )
        if not len(reachable):
            return None
        return np.sort(self.rng.choice(reachable, size=min(k, len(reachable)), replace=False))

    def _aggregate(self, inbox) -> None:
        """Eq. 21 over the gradients that arrived, the L2 term of eq. 5 on the user embeddings
        (computed where they live), one Adagrad step on θ."""
        expect_kinds(inbox, "gradient", node=self.id)
        inbox = self._gradients_of_a_t(inbox)
        if len(inbox) < max(1, self.min_participants):  # run condition: too few reports
            self.report("skipped", 1.0)
            return
        c, public = self.config, self.public
        n = self.theta.shape[0]
        decoded = [decode_gradient(m.payload, n, m.src) for m in inbox]
        threat = self.threat
        if threat is not None and threat.defence:  # the run's defence (adversaries/defences.py)
            decoded = defended_vectors(
                [g.astype(np.float64) for g in decoded],
                threat.defence,
                dict(threat.defence_params),
            )  # their sum stands for Σ_{p∈S} g_p
        grads = [self.tensor(g) for g in decoded]
        if c.estimator == "uniform":  # eq. 21, Horvitz–Thompson: (P/S) Σ g_p
            total = partial_participation_aggregate(grads, c.parties)
        else:  # the authors' code: (M / Σ_S M_p) Σ g_p
            items = [public.party_items[index_of(m.src)] for m in inbox]
            total = partial_participation_aggregate(
                grads, c.parties, party_items=items, total_items=public.n_items
            )
        total = total.to(self.theta.dtype)
        user = self.theta.detach()[self.user_slice]
        total[self.user_slice] += c.l2 * 2.0 * user / self.n_users
        self.theta.grad = total
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def get_theta(self) -> np.ndarray:
        return self.theta.detach().cpu().numpy().copy()


class VerFedGNNParty(Node):
    """Holds its items' embeddings and ratings; exchanges projected aggregates; releases ∂θ.
    ``user_ids``: the users it knows (raw ids); ``items``: its items (global ids, local id =
    position); ratings as (raw user id, local item id, rating); ``adversaries``: the fake users
    it registered when it runs the de-anonymization attack."""

    role = "party"
    ACCEPTS = {
        "psi_public_key": Accept(("key_server",), ("psi_blind",), msgs.check_public_key),
        "psi_signed": Accept(("key_server",), ("psi_tokens",), msgs.check_signed),
        "psi_intersection": Accept(("server",), ("psi_align",), msgs.check_intersection),
        "public_params": Accept(("server",), None, msgs.check_public),
        "eval_public_params": Accept(("server",), None, msgs.check_public),
        "aggregates": Accept(("party",), None, msgs.check_aggregates),
    }

    def __init__(
        self,
        nid: str,
        ctx: NodeContext,
        user_ids: np.ndarray,
        items: np.ndarray,
        train: tuple[np.ndarray, np.ndarray, np.ndarray],
        val: tuple[np.ndarray, np.ndarray, np.ndarray],
        test: tuple[np.ndarray, np.ndarray, np.ndarray],
        adversaries: Adversaries | None = None,
    ):
        super().__init__(nid, ctx)
        self.adversaries = adversaries
        self.attack_observed: torch.Tensor | None = None  # X̂ of the victim, first layer
        self.user_ids = np.asarray(user_ids, dtype=np.int64)
        self.items = np.asarray(items, dtype=np.int64)
        self.raw = {"train": train, "val": val, "test": test}
        self.model: RatingGNN | None = None
        self.schedule = exchange_schedule(self.config.gnn, self.config.layers)
        self.participating = False
        if not self.config.psi:
            self._align(np.arange(self.public.n_users, dtype=np.int64))

    def _align(self, aligned_users: np.ndarray) -> None:
        """Aligned index j is raw user ``aligned_users[j]``; ratings of other users drop out."""
        c = self.config
        n = len(aligned_users)
        self.data = psi.align_ratings(self.raw, self.user_ids, aligned_users)
        self.n_users = n
        self.aligned_users = np.asarray(aligned_users, dtype=np.int64)
        eu, ei = rating_edges(*self.data["train"], c.thd)
        seed = int(self.rng.integers(0, 2**62))
        n_items = self.public.n_items
        self.model = self.build(lambda: party_model(c, n, len(self.items), n_items, eu, ei, seed))
        self.theta = public_parameters(self.model)  # this party's copy of θ
        self.item_optimizer = adagrad([self.model.item_emb.weight], c.lr)
        self.rows = projection_rows(c, n)

    def handle(self, phase: str, inbox) -> None:
        if phase.startswith("psi"):
            self._psi(phase, inbox)
            return
        if self.model is None:  # not aligned (lost the set-up to a fault): cannot take part
            if phase == "train":
                self.report("needs_alignment", float(index_of(self.id)))
            return
        self._absorb(inbox)
        if not self.participating:
            return
        base = phase.removeprefix("eval_")
        if base.startswith("exchange"):
            self._exchange(int(base.removeprefix("exchange")))
        elif phase == "train":
            self._train()
        elif phase == "eval":
            self._evaluate()
        else:
            super().handle(phase, inbox)

    def _psi(self, phase: str, inbox) -> None:
        ids = [int(u) for u in self.user_ids]
        if phase == "psi_request":  # a rejoin: ask the key server for its public key
            expect_kinds(inbox, node=self.id)
            self.send("psi_rejoin", KEY_SERVER, b"")
        elif phase == "psi_blind":
            expect_kinds(inbox, "psi_public_key", node=self.id)
            m, bits = inbox[0], self.config.psi_key_bits
            self.psi_client = OprfClient()  # blinding factors from the operating system
            n, e = wire.decode_bigints(m.payload)  # two values: the host's screen checked
            if self.psi_client.receive_key(n, e, min_bits=bits) is not None:
                self.reject(m, "range")  # a key it must not use: it blinds nothing
                return
            blinded = self.psi_client.blind(ids)
            self.send("psi_blinded", KEY_SERVER, msgs.encode_blinded(blinded, bits))
        elif phase == "psi_tokens":
            expect_kinds(inbox, "psi_signed", node=self.id)
            m, client = inbox[0], getattr(self, "psi_client", None)
            signed = msgs.decode_signed(m.payload, self.config.psi_key_bits)
            problem = "shape" if client is None else client.answer_problem(signed)
            if problem is not None:
                self.reject(m, problem)
                return
            try:
                tokens = client.finalize(ids, signed)
            except oprf.OprfVerificationError:  # a signature that does not verify
                self.reject(m, "range")
                return
            order = sorted(range(len(tokens)), key=lambda j: tokens[j])
            self.psi_sorted_users = self.user_ids[np.array(order, dtype=np.int64)]
            payload = wire.encode_chunks([tokens[j] for j in order], oprf.TOKEN_BYTES)
            self.send("psi_tokens", SERVER, payload)
        elif phase == "psi_align":
            expect_kinds(inbox, "psi_intersection", node=self.id)
            m, mine = inbox[0], getattr(self, "psi_sorted_users", None)
            pos = wire.decode_ids(m.payload)
            if mine is None or (pos.size and int(pos.max()) >= len(mine)):
                self.reject(m, "range")  # positions in a token list it never sent
                return
            if len(np.unique(pos)) != len(pos):
                self.reject(m, "order")
                return
            # the aligned index orders the common users by id: every party holds the same ids
            # of them, so the index is the same at every party, and it does not follow the
            # tokens' order (hence the key) as ranking the common tokens would
            aligned = np.sort(mine[pos])
            if self.model is not None and np.array_equal(aligned, self.aligned_users):
                return  # the set-up again for the server (it lost it): same index, keep the model
            self._align(aligned)
        else:
            raise ValueError(f"{self.id}: no PSI phase {phase!r}")

    def _absorb(self, inbox) -> None:
        """Take in θ (a new iteration) and the other participants' projected aggregates."""
        expect_kinds(inbox, "public_params", "eval_public_params", "aggregates", node=self.id)
        c = self.config
        for m in inbox:
            if m.kind.endswith("public_params"):
                seed, participants, theta = decode_public(m.payload)
                torch.nn.utils.vector_to_parameters(self.tensor(theta), self.theta)
                self.participating = True
                self.participants = [int(p) for p in participants]
                if c.projection == "sparse":  # the authors' code: one Φ for the whole run
                    seed = node_seed(self.ctx.seed, "verfedgnn-sparse-phi")
                self.phi = make_projection(c.projection, self.rows, self.n_users, seed)
                self.received: dict[int, dict[int, torch.Tensor]] = {}  # step -> sender -> Y
                self._gather(0)
        for m in inbox:  # sorted by sender: the same sums whatever the placement
            if m.kind != "aggregates" or not self.participating:
                continue  # not in this iteration: it cannot tell who may write to it
            step = self._aggregate_step(m)
            if step is None:
                continue
            y = self.tensor(wire.decode_dense(m.payload))
            self.received.setdefault(step, {})[index_of(m.src)] = y
            if self.adversaries is not None and step == 1:
                if index_of(m.src) == c.attack_victim:  # the attacker keeps X̂_victim^1 apart
                    self.attack_observed = (
                        reconstruct(self.phi, y[0]) if self.phi is not None else y[0]
                    )

    def _aggregate_step(self, m) -> int | None:
        """The exchange step of aggregates ``m``, or None (dropped) where its sender is not another
        participant of this iteration (``peer``), it is not the step this phase receives
        (``phase``), the sender sent this step already (``order``) or its shape is not
        [L_j, q, D] (``shape``)."""
        me, sender = index_of(self.id), index_of(m.src)
        if sender == me or sender not in self.participants:
            self.reject(m, "peer")
            return None
        base = self.phase.removeprefix("eval_")
        step = (
            int(base[len("exchange") :]) - 1 if base.startswith("exchange") else len(self.schedule)
        )
        sent = m.phase.removeprefix("eval_").removeprefix("exchange")
        if not sent.isdigit() or int(sent) != step or not 1 <= step <= len(self.schedule):
            self.reject(m, "phase")
            return None
        if sender in self.received.get(step, {}):
            self.reject(m, "order")
            return None
        shape = (len(self.schedule[step - 1]), self.rows, self.config.dim)
        if tuple(wire.view_dense(m.payload).shape) != shape:
            self.reject(m, "shape")
            return None
        return step

    def _gather(self, steps_done: int) -> None:
        """``external`` (Σ_q X̂_q^k of the layers of exchange steps 1..steps_done) and ``scale``
        (M / Σ M_q) over this party and the senders that are really there."""
        c, public = self.config, self.public
        me = index_of(self.id)
        senders = exchange_senders(self.participants, me, self.received, steps_done)
        covered = public.party_items[me] + sum(public.party_items[p] for p in senders)
        self.scale = public.n_items / covered  # M / Σ_{q∈S} M_q
        shape = (self.model.n_layers, self.n_users, c.dim)
        self.external = received_aggregates(
            self.received, senders, self.schedule, steps_done, self.phi, shape, self.device
        )

    def _exchange(self, step: int) -> None:
        """Y_p^k = Φ X_p^k for the layers of exchange step ``step`` → every other participant."""
        layers = self.schedule[step - 1]
        self._gather(step - 1)
        with torch.no_grad():
            prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        xs = [prop.local_user_aggregates[k] for k in layers]  # exact by the schedule
        xs = self.tamper_aggregates(xs)  # a compromised party's change (adversaries/), if any
        if self.phi is not None:
            xs = [project(self.phi, x) for x in xs]
        payload = wire.encode_dense(torch.stack(xs))
        for p in self.participants:
            if p != index_of(self.id):
                self.send("aggregates", node_id("party", p), payload)

    def _train(self) -> None:
        """K layers with the aggregates received, loss of eq. 5 on a minibatch of own ratings,
        local item step, released gradient of θ → server (step 3)."""
        c = self.config
        self.participating = False
        self._gather(len(self.schedule))
        u, i, r = self.data["train"]
        if c.batch_size and c.batch_size < len(u):
            pick = np.sort(self.rng.choice(len(u), size=c.batch_size, replace=False))
            u, i, r = u[pick], i[pick], r[pick]
        self.model.zero_grad(set_to_none=True)
        prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        loss, sq = party_loss(self.model, prop, (u, i, r), c.l2, c.loss_reduction)
        if sq is not None:
            self.report("loss", float(sq.detach().mean()))
        loss.backward()
        self.item_optimizer.step()  # private item embeddings: local update
        self.send("gradient", SERVER, self._release(flat_gradient(self.theta)))
        self.report("released", float(index_of(self.id)))  # one release (privacy accounting)

    def _release(self, grad: torch.Tensor) -> bytes:
        """Clip to [−B, B], then ternary (eqs. 19–20), Laplace (App. J.2) or nothing."""
        c = self.config
        g = self.tamper_gradient(grad.clamp(-c.clip, c.clip))  # a compromised party's change
        if c.mechanism == "ternary":
            # an honest party's g lies in [−B, B]; a crafted one stays in the code's range [−r, r]
            bound = self.release_bound()
            values, scale = ternary_quantize(g, c.ternary_r, self.noise_generator(), clip=bound)
            return wire.encode_ternary(values.cpu().numpy(), scale)
        if c.mechanism == "laplace":
            noise = self.noise_rng.laplace(0.0, c.laplace_scale, size=g.shape[0])
            return wire.encode_dense((g.double().cpu().numpy() + noise).astype(np.float32))
        return wire.encode_dense(g)

    @torch.no_grad()
    def _evaluate(self) -> None:
        """The same forward pass; squared errors of the held-out ratings, clamped to the range."""
        self.participating = False
        self._gather(len(self.schedule))
        prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        for name in ("val", "test"):
            u, i, r = self.data[name]
            if len(u):
                pred = self.model.predict(prop, self.tensor(u), self.tensor(i))
                pred = pred.clamp(self.public.rating_min, self.public.rating_max)
                se = (pred - self.tensor(r)).double().pow(2).sum()
                self.report(f"{name}_se", float(se))
                self.report(f"{name}_n", float(len(u)))
        if self.threat is not None and self.threat.targets:
            self.target_view = self._target_view(prop)

    def _target_view(self, prop) -> dict:
        """What the driver needs of this party for the targets' exposure (adversaries/): per
        aligned user, the best ``er_k`` predicted ratings among this party's items the user did
        not rate in training, and the predicted ratings of the targets this party owns, with
        whether the user rated them in training."""
        scores = prop.user @ prop.item.T
        if self.model.use_bias:
            scores = scores + self.model.global_mean + self.model.user_bias.weight
            scores = scores + self.model.item_bias.weight.T
        scores = scores.double()
        u, i, _ = self.data["train"]
        rated = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)
        rated[self.tensor(u), self.tensor(i)] = True
        k = min(self.threat.er_k, scores.shape[1])
        best = scores.masked_fill(rated, -torch.inf).topk(k, dim=1).values
        own = [t for t in self.threat.targets if t in set(self.items.tolist())]
        local = self.tensor(np.searchsorted(self.items, own).astype(np.int64))
        return {
            "users": self.aligned_users.copy(),
            "best": best.cpu().numpy(),
            "targets": np.array(own, dtype=np.int64),
            "target_scores": scores[:, local].cpu().numpy(),
            "target_rated": rated[:, local].cpu().numpy(),
        }

    def get_target_view(self) -> dict | None:
        return getattr(self, "target_view", None)

    # --- what a compromised party changes (protocols/verfedgnn/attacks.py overrides these)
    def tamper_aggregates(self, xs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The neighbour aggregates X_p^k of an exchange step, before the projection Φ."""
        return xs

    def tamper_gradient(self, g: torch.Tensor) -> torch.Tensor:
        """The clipped gradient of θ, before the release mechanism."""
        return g

    def release_bound(self) -> float:
        """What the ternary encoder clips to: B for an honest party (the code allows r)."""
        return self.config.clip

    def get_deanonymization(self) -> dict:
        """Eq. (I.1) on the last X̂_victim^1 received (protocols/verfedgnn/deanonymization.py): for every
        honest aligned user, the victim items (global ids) inferred."""
        if self.adversaries is None or self.attack_observed is None:
            raise RuntimeError(f"{self.id}: no attack configured or no victim aggregate seen yet")
        observed, users = self.attack_observed, self.aligned_users
        return infer_victim_items(observed, users, self.adversaries, self.config)

    def get_aligned_users(self) -> np.ndarray:
        return self.aligned_users.copy()

    def get_item_embeddings(self) -> np.ndarray:
        return self.model.item_emb.weight.detach().cpu().numpy().copy()

    def get_local_aggregates(self) -> list[np.ndarray]:
        with torch.no_grad():
            prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        return [x.cpu().numpy().copy() for x in prop.local_user_aggregates]

    def get_private(self) -> dict:
        return {"items": self.items.copy(), "train": tuple(a.copy() for a in self.data["train"])}
