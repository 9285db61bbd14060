"""The three roles of VerFedGNN: key server (PSI), server (public parameters θ), party.

Node ids: ``party/p``, ``server/0``, ``key_server/0``. Phases, driven by
:class:`protocols.verfedgnn.protocol.VerFedGNN` (the algorithm is described there):

==================  ==========  ===============================================================
phase               who acts    what it does
==================  ==========  ===============================================================
psi_request         parties     (a rejoin only) a party that lost its alignment asks for it again
psi_key             key server  its RSA public key → parties (all at set-up; the askers at a rejoin)
psi_blind           parties     blinded hashes of their user ids → key server
psi_sign            key server  blind signatures → back to each party
psi_tokens          parties     sorted OPRF tokens → server
psi_match           server      positions of the common tokens → each party
psi_align           parties     re-index ratings by aligned user, build the local model
download            server      samples A_t (S of the aligned parties it can reach), draws Φ's
                                seed, sends [seed, A_t, θ]                         (step 2)
exchange{j}         parties     Y_p^k = Φ X_p^k for the layers of step j → other participants
train               parties     K layers with Φᵀ Σ Y over the aggregates that arrived, loss
                                (eq. 5), local item step, clipped + ternary/Laplace gradient of
                                θ → server                                         (step 3)
aggregate           server      eq. 21 estimate over the gradients that arrived, L2 of user
                                embeddings, Adagrad on θ
eval_*              all         the same forward pass with every party; squared errors
==================  ==========  ===============================================================

Absent participants (run conditions: a party offline in a round, or lost with its host): the
server draws A_t among the parties it can reach, so an offline party is not in A_t and nobody
sends to it or waits for it. A receiver sums the projected aggregates that arrived and scales by
M / Σ M_q over itself and the senders it heard from in every exchange step so far (a sender
missing in a later step is left out of the earlier ones too, so every layer sees the same
parties); the server applies eq. 21 to the gradients that arrived and skips its update below
``min_participants``. A party whose alignment was lost (restored from a snapshot taken before
the set-up) says so in ``train`` and the driver runs the PSI again for it (``psi_request``):
the server answers with the positions of the set-up's common tokens, so the aligned index is
unchanged for everyone.

With the de-anonymization attack switched on, the attacking party keeps the victim's
projected aggregate of the first layer apart (``get_deanonymization``, §4.1).
"""

from __future__ import annotations

import numpy as np
import torch
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers

from cluster import wire
from cluster.message import index_of, node_id
from models.rating_gnn import RatingGNN, rating_edges
from nodes.node import Node, NodeContext, expect_kinds, node_seed
from privacy import oprf
from privacy.attacks.deanonymization import DEGREE_POWER, match_aggregates
from privacy.projection import GaussianProjection, project, reconstruct
from privacy.ternary import ternary_quantize
from protocols.verfedgnn import psi
from protocols.verfedgnn.aggregation import partial_participation_aggregate
from protocols.verfedgnn.attack import Adversaries
from protocols.verfedgnn.messages import decode_public, encode_public

SERVER = node_id("server", 0)
KEY_SERVER = node_id("key_server", 0)


def exchange_schedule(kind: str, n_layers: int) -> list[list[int]]:
    """Layers (0-based) whose aggregates travel in each exchange step.

    With the user aggregates of layers < ``known`` complete, e_u^j is exact for j ≤ known and
    e_v^k for k ≤ known + 1 (e_v^k needs e_u^{k−1}). X^k (layer k, from e^k) needs e_v^k (GCN,
    GGNN) and also e_u^k (GAT attention)."""
    if kind == "mf":
        return []
    steps, known = [], 0
    while known < n_layers:
        hi = min(known + (0 if kind == "gat" else 1), n_layers - 1)
        steps.append(list(range(known, hi + 1)))
        known = hi + 1
    return steps


def n_participants(parties: int, participation: float) -> int:
    return max(1, min(parties, int(round(participation * parties))))


def public_parameters(model: RatingGNN) -> list[torch.nn.Parameter]:
    """θ: everything but the private item embeddings (fixed order)."""
    return [
        p
        for name, p in model.named_parameters()
        if not name.startswith(("item_emb", "item_bias", "user_bias"))
    ]


def _model(shared: dict, n_users: int, n_items: int, eu, ei, seed: int) -> RatingGNN:
    return RatingGNN(
        n_users,
        n_items,
        eu,
        ei,
        kind=shared["gnn"],
        dim=shared["dim"],
        n_layers=shared["layers"],
        activation=shared["activation"],
        n_total_items=shared["n_items"],
        init_std=shared["init_std"],
        seed=seed,
    )


def projection_rows(shared: dict, n_users: int) -> int:
    """Rows of what travels per layer: q with projection, N without."""
    if not shared["projection"]:
        return n_users
    if shared["projection_dim"]:
        return min(shared["projection_dim"], n_users)
    return max(1, n_users // shared["projection_reduction"])


class VerFedGNNKeyServer(Node):
    """Holds the OPRF key; sees only blinded (uniformly random) values."""

    role = "key_server"

    def __init__(self, nid: str, ctx: NodeContext):
        super().__init__(nid, ctx)
        self.key = psi.seeded_rsa_key(self.rng, ctx.shared["psi_key_bits"])
        self.public = oprf.public_numbers(self.key)

    def handle(self, phase: str, inbox) -> None:
        if phase == "psi_key":
            expect_kinds(inbox, "psi_rejoin", node=self.id)
            payload = wire.encode_bigints([self.public.n, self.public.e])
            if inbox:  # a rejoin: the parties that asked
                targets = [m.src for m in inbox]
            else:  # the set-up: every party
                targets = [node_id("party", p) for p in range(self.shared["parties"])]
            for dst in targets:
                self.send("psi_public_key", dst, payload)
        elif phase == "psi_sign":
            expect_kinds(inbox, "psi_blinded", node=self.id)
            for m in inbox:
                signed = oprf.blind_sign(self.key, wire.decode_bigints(m.payload))
                self.send("psi_signed", m.src, wire.encode_bigints(signed))
        else:
            super().handle(phase, inbox)


class VerFedGNNServer(Node):
    role = "server"

    def __init__(self, nid: str, ctx: NodeContext):
        super().__init__(nid, ctx)
        self.theta: torch.nn.Parameter | None = None
        self.n_users = 0
        self.last_participants: list[int] = []
        self.psi_common: list[bytes] | None = None  # the set-up's common tokens, sorted
        if ctx.shared["psi"]:
            self.aligned: set[int] = set()  # parties whose tokens the server matched
        else:
            self.aligned = set(range(ctx.shared["parties"]))
            self._init_public(ctx.shared["n_users"])

    def _init_public(self, n_users: int) -> None:
        s = self.shared
        self.n_users = n_users
        one = np.zeros(1, dtype=np.int64)  # a template needs some edge; only θ is used
        template = _model(s, n_users, 1, one, one, int(self.rng.integers(0, 2**62)))
        params = public_parameters(template)
        self.theta = torch.nn.Parameter(torch.nn.utils.parameters_to_vector(params).detach())
        self.user_slice = slice(0, template.user_emb.weight.numel())
        self.optimizer = torch.optim.Adagrad(
            [self.theta], lr=s["lr"], initial_accumulator_value=1e-8
        )

    def handle(self, phase: str, inbox) -> None:
        s = self.shared
        if phase == "psi_match":
            expect_kinds(inbox, "psi_tokens", node=self.id)
            lists = [psi.unpack_tokens(wire.decode_blob(m.payload)) for m in inbox]
            for toks, m in zip(lists, inbox):
                if toks != sorted(toks):
                    raise ValueError(f"{self.id}: tokens from {m.src} are not sorted")
            if self.psi_common is None:  # the set-up: intersect the lists that arrived
                positions = psi.intersect_positions(lists)
                self.psi_common = [lists[0][i] for i in positions[0]]
                self._init_public(len(positions[0]))
            else:  # a rejoin: the same common tokens, so the aligned index does not change
                positions = [psi.common_positions(toks, self.psi_common) for toks in lists]
            for m, pos in zip(inbox, positions):
                if pos is None:  # the party lacks a common user: it cannot rejoin
                    self.report("psi_rejoin_failed", 1.0)
                    continue
                self.aligned.add(index_of(m.src))
                self.send("psi_intersection", m.src, wire.encode_ids(pos))
        elif phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            P = s["parties"]
            if phase == "download":
                # A_t: S parties drawn uniformly among the aligned ones the server can reach this
                # round (it tries to connect); an offline party is not in A_t, and eq. 21 then
                # scales by the number of gradients that arrive
                k = n_participants(P, s["participation"])
                reachable = np.array(
                    [p for p in range(P) if p in self.aligned and self.online(node_id("party", p))],
                    dtype=np.int64,
                )
                if not len(reachable):
                    self.last_participants = []
                    return
                chosen = np.sort(
                    self.rng.choice(reachable, size=min(k, len(reachable)), replace=False)
                )
                self.last_participants = [int(p) for p in chosen]
            else:
                chosen = np.array(sorted(self.aligned), dtype=np.int64)
            if phase == "download":
                seed = int(self.rng.integers(0, 2**62))  # the seed of Φ
            else:  # evaluation does not draw from the training stream
                seed = node_seed(self.ctx.seed, f"verfedgnn-eval-phi/{self.round}")
            payload = encode_public(seed, chosen, self.theta)
            kind = "public_params" if phase == "download" else "eval_public_params"
            for p in chosen:
                self.send(kind, node_id("party", int(p)), payload)
        elif phase == "aggregate":
            expect_kinds(inbox, "gradient", node=self.id)
            if len(inbox) < max(1, self.min_participants):  # run condition: too few reports
                self.report("skipped", 1.0)
                return
            grads = [torch.from_numpy(self._decode_gradient(m)) for m in inbox]
            if s["estimator"] == "uniform":  # eq. 21, Horvitz–Thompson
                total = partial_participation_aggregate(grads, s["parties"])
            else:
                items = [s["party_items"][index_of(m.src)] for m in inbox]
                total = partial_participation_aggregate(
                    grads, s["parties"], party_items=items, total_items=s["n_items"]
                )
            total = total.to(self.theta.dtype)
            # L2 term of eq. 5 on the public user embeddings, computed where they live
            user = self.theta.detach()[self.user_slice]
            total[self.user_slice] += s["l2"] * 2.0 * user / self.n_users
            self.theta.grad = total
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        else:
            super().handle(phase, inbox)

    def _decode_gradient(self, m) -> np.ndarray:
        tag = wire.peek_tag(m.payload)
        if tag == "ternary":
            g = wire.decode_ternary(m.payload)
        elif tag == "dense":
            g = wire.decode_dense(m.payload).astype(np.float32)
        else:
            raise wire.WireError(f"gradient from {m.src}: unexpected codec {tag}")
        if g.shape != tuple(self.theta.shape):
            raise wire.WireError(
                f"gradient from {m.src}: shape {g.shape}, expected {tuple(self.theta.shape)}"
            )
        return g

    def get_last_participants(self) -> list[int]:
        return list(self.last_participants)

    def get_theta(self) -> np.ndarray:
        return self.theta.detach().numpy().copy()


class VerFedGNNParty(Node):
    role = "party"

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
        """``user_ids``: the users this party knows (raw ids); ``items``: its items (global ids,
        local id = position); ratings as (raw user id, local item id, rating). ``adversaries``:
        the fake users this party registered when it runs the de-anonymization attack."""
        super().__init__(nid, ctx)
        self.adversaries = adversaries
        self.attack_observed: torch.Tensor | None = None  # X̂ of the victim, first layer
        self.user_ids = np.asarray(user_ids, dtype=np.int64)
        self.items = np.asarray(items, dtype=np.int64)
        self.raw = {"train": train, "val": val, "test": test}
        self.model: RatingGNN | None = None
        self.schedule = exchange_schedule(ctx.shared["gnn"], ctx.shared["layers"])
        self.participating = False
        if not ctx.shared["psi"]:
            self._align(np.arange(ctx.shared["n_users"], dtype=np.int64))

    # ----- set-up -----------------------------------------------------------------------
    def _align(self, aligned_users: np.ndarray) -> None:
        """Aligned index j is raw user ``aligned_users[j]``; ratings of other users drop out."""
        s = self.shared
        n = len(aligned_users)
        lookup = -np.ones(
            max(int(self.user_ids.max(initial=0)), int(aligned_users.max(initial=0))) + 1,
            dtype=np.int64,
        )
        lookup[aligned_users] = np.arange(n)
        self.data = {}
        for name, (u, i, r) in self.raw.items():
            u = np.asarray(u, dtype=np.int64)
            a = np.where(u < len(lookup), lookup[np.minimum(u, len(lookup) - 1)], -1)
            keep = a >= 0
            self.data[name] = (a[keep], np.asarray(i)[keep], np.asarray(r, np.float32)[keep])
        self.n_users = n
        self.aligned_users = np.asarray(aligned_users, dtype=np.int64)
        eu, ei = rating_edges(*self.data["train"], s["thd"])
        self.model = _model(s, n, len(self.items), eu, ei, int(self.rng.integers(0, 2**62)))
        self.public = public_parameters(self.model)
        self.item_optimizer = torch.optim.Adagrad(
            [self.model.item_emb.weight], lr=s["lr"], initial_accumulator_value=1e-8
        )
        self.rows = projection_rows(s, n)

    # ----- protocol -----------------------------------------------------------------------
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
        if phase == "psi_request":  # a rejoin: ask the key server for its public key
            expect_kinds(inbox, node=self.id)
            self.send("psi_rejoin", KEY_SERVER, b"")
        elif phase == "psi_blind":
            expect_kinds(inbox, "psi_public_key", node=self.id)
            n, e = wire.decode_bigints(inbox[0].payload)
            self.psi_public = RSAPublicNumbers(e, n)
            rng = oprf.BlindingRng.from_seed(self.ctx.seed, self.id)
            blinded, self.psi_unblinders = oprf.blind(
                [int(u) for u in self.user_ids], self.psi_public, rng
            )
            self.send("psi_blinded", KEY_SERVER, wire.encode_bigints(blinded))
        elif phase == "psi_tokens":
            expect_kinds(inbox, "psi_signed", node=self.id)
            signed = wire.decode_bigints(inbox[0].payload)
            tokens = oprf.unblind_and_finalize(
                [int(u) for u in self.user_ids], signed, self.psi_unblinders, self.psi_public
            )
            order = sorted(range(len(tokens)), key=lambda j: tokens[j])
            self.psi_sorted_users = self.user_ids[np.array(order, dtype=np.int64)]
            self.send(
                "psi_tokens", SERVER, wire.encode_blob(psi.pack_tokens([tokens[j] for j in order]))
            )
        elif phase == "psi_align":
            expect_kinds(inbox, "psi_intersection", node=self.id)
            positions = wire.decode_ids(inbox[0].payload)
            self._align(self.psi_sorted_users[positions])
        else:
            raise ValueError(f"{self.id}: no PSI phase {phase!r}")

    def _absorb(self, inbox) -> None:
        """Take in θ (a new iteration) and the other participants' projected aggregates."""
        expect_kinds(inbox, "public_params", "eval_public_params", "aggregates", node=self.id)
        s = self.shared
        for m in inbox:
            if m.kind.endswith("public_params"):
                seed, participants, theta = decode_public(m.payload)
                torch.nn.utils.vector_to_parameters(theta, self.public)
                self.participating = True
                self.participants = [int(p) for p in participants]
                self.phi = GaussianProjection(self.rows, self.n_users, seed)
                self.received: dict[int, dict[int, torch.Tensor]] = {}  # step -> sender -> Y
                self._gather(0)
        for m in inbox:  # sorted by sender: the same sums whatever the placement
            if m.kind != "aggregates" or not self.participating:
                continue
            step = int(m.phase.removeprefix("eval_").removeprefix("exchange"))
            y = torch.from_numpy(wire.decode_dense(m.payload))
            shape = (len(self.schedule[step - 1]), self.rows, s["dim"])
            if tuple(y.shape) != shape:
                raise wire.WireError(f"aggregates from {m.src}: shape {tuple(y.shape)} != {shape}")
            self.received.setdefault(step, {})[index_of(m.src)] = y
            if self.adversaries is not None and step == 1:
                if index_of(m.src) == s["attack_victim"]:  # the attacker keeps X̂_victim^1 apart
                    first = y[0]
                    self.attack_observed = (
                        reconstruct(self.phi, first) if s["projection"] else first
                    )

    def _gather(self, steps_done: int) -> None:
        """``external`` (Σ_q X̂_q^k of the layers of exchange steps 1..steps_done) and ``scale``
        (M / Σ M_q) over this party and the senders whose aggregates arrived in every one of
        those steps: the participants that are really there (all of A_t but itself before the
        first exchange). A sender missing from a later step is left out of the earlier ones too,
        so that every layer sums over the same parties."""
        s = self.shared
        me = index_of(self.id)
        if steps_done == 0:
            senders = {p for p in self.participants if p != me}
        else:
            senders = set(self.received.get(1, {}))
            for step in range(2, steps_done + 1):
                senders &= set(self.received.get(step, {}))
        covered = s["party_items"][me] + sum(s["party_items"][p] for p in senders)
        self.scale = s["n_items"] / covered  # M / Σ_{q∈S} M_q
        self.external = [torch.zeros(self.n_users, s["dim"]) for _ in range(self.model.n_layers)]
        for step in range(1, steps_done + 1):
            y_sum = None
            for p, y in self.received.get(step, {}).items():  # arrival order: sorted by sender
                if p in senders:
                    y_sum = y if y_sum is None else y_sum + y
            if y_sum is None:
                continue
            for j, k in enumerate(self.schedule[step - 1]):
                # X̂ = Φᵀ Σ_q Y_q (linear: one reconstruction for all senders)
                x_hat = reconstruct(self.phi, y_sum[j]) if s["projection"] else y_sum[j]
                self.external[k] = self.external[k] + x_hat

    def _exchange(self, step: int) -> None:
        layers = self.schedule[step - 1]
        self._gather(step - 1)
        with torch.no_grad():
            prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        xs = [prop.local_user_aggregates[k] for k in layers]  # exact by the schedule
        if self.shared["projection"]:
            xs = [project(self.phi, x) for x in xs]  # Y_p^k = Φ X_p^k
        payload = wire.encode_dense(torch.stack(xs))
        for p in self.participants:
            if p != index_of(self.id):
                self.send("aggregates", node_id("party", p), payload)

    def _train(self) -> None:
        s = self.shared
        self.participating = False
        self._gather(len(self.schedule))
        u, i, r = self.data["train"]
        if s["batch_size"] and s["batch_size"] < len(u):
            pick = np.sort(self.rng.choice(len(u), size=s["batch_size"], replace=False))
            u, i, r = u[pick], i[pick], r[pick]
        self.model.zero_grad(set_to_none=True)
        prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        if len(u):
            err = self.model.predict(prop, torch.from_numpy(u), torch.from_numpy(i))
            err = err - torch.from_numpy(r)
            sq = err.pow(2)
            loss = sq.sum() if s["loss_reduction"] == "sum" else sq.mean()
            self.report("loss", float(sq.detach().mean()))
        else:
            loss = torch.zeros(())
        item_w = self.model.item_emb.weight
        loss = loss + s["l2"] * item_w.pow(2).sum() / item_w.shape[0]  # private part of eq. 5
        loss.backward()
        self.item_optimizer.step()  # private item embeddings: local update
        grad = torch.cat(
            [
                (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                for p in self.public
            ]
        ).detach()
        self.send("gradient", SERVER, self._release(grad))
        self.report("released", float(index_of(self.id)))  # one release (privacy accounting)

    def _release(self, grad: torch.Tensor) -> bytes:
        """Clip to [−B, B], then ternary (eqs. 19–20), Laplace (App. J.2) or nothing."""
        s = self.shared
        g = grad.clamp(-s["clip"], s["clip"])
        if s["mechanism"] == "ternary":
            values, scale = ternary_quantize(
                g, s["ternary_r"], self.torch_generator(), clip=s["clip"]
            )
            return wire.encode_ternary(values.numpy(), scale)
        if s["mechanism"] == "laplace":
            noise = self.rng.laplace(0.0, s["laplace_scale"], size=g.shape[0])
            return wire.encode_dense((g.double().numpy() + noise).astype(np.float32))
        return wire.encode_dense(g)

    @torch.no_grad()
    def _evaluate(self) -> None:
        s = self.shared
        self.participating = False
        self._gather(len(self.schedule))
        prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        for name in ("val", "test"):
            u, i, r = self.data[name]
            if not len(u):
                continue
            pred = self.model.predict(prop, torch.from_numpy(u), torch.from_numpy(i))
            pred = pred.clamp(s["rating_min"], s["rating_max"])
            self.report(f"{name}_se", float((pred - torch.from_numpy(r)).double().pow(2).sum()))
            self.report(f"{name}_n", float(len(u)))

    # ----- the de-anonymization attack (this party is the attacker) --------------------------
    def get_deanonymization(self) -> dict:
        """Eq. (I.1) of privacy/attacks/deanonymization.py on the last X̂_victim^1 received:
        for every honest aligned user, the victim items (global ids) inferred."""
        if self.adversaries is None or self.attack_observed is None:
            raise RuntimeError(f"{self.id}: no attack configured or no victim aggregate seen yet")
        s = self.shared
        position = {int(u): j for j, u in enumerate(self.aligned_users)}
        adv_rows = np.array([position[int(u)] for u in self.adversaries.users], dtype=np.int64)
        honest = np.setdiff1d(np.arange(self.n_users), adv_rows)
        x_hat = self.attack_observed.double()
        inferred = match_aggregates(
            x_hat[honest],
            x_hat[adv_rows],
            self.adversaries.items,
            max_items=s["attack_max_items"],
            degree_power=DEGREE_POWER[s["gnn"]],
            beam=s["attack_beam"],
        )
        return {"users": self.aligned_users[honest].copy(), "items": inferred}

    # ----- inspection (tests) -----------------------------------------------------------
    def get_aligned_users(self) -> np.ndarray:
        return self.aligned_users.copy()

    def get_item_embeddings(self) -> np.ndarray:
        return self.model.item_emb.weight.detach().numpy().copy()

    def get_local_aggregates(self) -> list[np.ndarray]:
        with torch.no_grad():
            prop = self.model.propagate(self.external, aggregate_scale=self.scale)
        return [x.numpy().copy() for x in prop.local_user_aggregates]

    def get_private(self) -> dict:
        return {"items": self.items.copy(), "train": tuple(a.copy() for a in self.data["train"])}
