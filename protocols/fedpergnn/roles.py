"""The four roles of FedPerGNN / FedLightGCN: user, server, key server, matcher.

Node ids: ``user/<u>``, ``server/0``, ``key_server/<r>`` (r < R replicas holding one key; user u
talks to replica u mod R), ``matcher/0``. Phases (driven by :class:`protocols.fedpergnn.protocol.FedPerGNN`;
with ``backbone = "gat"`` the download also carries the GAT weights θ, training is
protocols/fedpergnn/gat.py's and uploads add clip+Laplace ∂L/∂θ):

=================  ==========  ================================================================
phase              who acts    what it does
=================  ==========  ================================================================
oprf_key           key_server  publishes (N, e) to every user                      (step 1)
oprf_blind         users       m' = H(x)·r^e mod N for every own item x → key_server
oprf_sign          key_server  s' = m'^d mod N → back to the user (sees only m')
oprf_finalize      users       s = s'·r⁻¹, check s^e = H(x), token = SHA-256(s); cache tokens
expand_send        users       (tokens, e_u) → matcher                             (step 2)
expand_match       matcher     per user: users sharing a token, ≤ max_neighbors sampled,
                               → their embeddings + shared tokens (no ids, never e_u itself)
expand_receive     users       map shared tokens back to own items: local graph u – I_u – U_u
download           server      samples |Ū| users, sends all item embeddings E    (step 3)
train              users       LightGCN on the local graph, BPR, e_u ← e_u − η∇, uploads
                               clip+Laplace gradients of positives, negatives, M pseudo items
aggregate          server      mean of the uploads that arrived, row by row; Adam step on E
                               (skipped and reported below ``min_participants`` uploads)
eval_download      server      E to every user (evaluation traffic)
eval               users       rank all items not trained on with h_u·e_i     (step 5)
=================  ==========  ================================================================

**Absent participants** (run conditions: dropout, a host lost to a fault, late messages). A user
who is away when the key server broadcasts its key (round 0) or when a graph expansion runs has
no tokens, or a local graph older than the current epoch (expansion period P = ``expand_period``;
the user's graph is *current* when it took part in the expansion of epoch ⌊r/P⌋). It catches up
at its next participation, i.e. the next round in which it is online and sampled, before it trains
(``rejoin`` supersteps, run by the protocol only once an absence has been seen; every step is
driven by the messages of the previous one):

=================  ==========  ================================================================
rejoin (1st)       users       a sampled user keeps the round's download for ``train``; if it
                               lacks tokens: ``oprf_key_request`` (no key yet) or
                               ``oprf_blinded`` (key cached); if its graph is stale:
                               ``expand_request``
rejoin             key_server  ``oprf_key_request`` → public key; ``oprf_blinded`` → signed
rejoin             users       key → blind; signed → tokens (cached, never requested again),
                               then ``expand_request``; ``expand_reply`` → local graph
rejoin             matcher     answers each request against the latest request of every user
=================  ==========  ================================================================

A message that never arrives (the peer's host died, the message was late) leaves the user where
it was; it tries again at its next participation.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from cluster import wire
from cluster.message import node_id
from models.bpr import neg_log_sigmoid
from models.fedpergnn_gat import LocalGAT
from models.lightgcn import build_local_graphs, local_forward
from nodes.node import Node, NodeContext, decode_shared, expect_kinds, node_seed
from privacy import oprf
from privacy.ldp import choose_pseudo_items, clip_and_laplace, pseudo_item_gradients
from protocols.base import sample_participants
from protocols.fedmf import evaluate_users
from protocols.fedpergnn import gat
from protocols.fedpergnn import messages as msg
from protocols.sparse_rows import step_on_mean

SERVER = node_id("server", 0)
KEY_SERVER = node_id("key_server", 0)
MATCHER = node_id("matcher", 0)


def key_server_of(user: int, replicas: int) -> str:
    """The key-server replica a user talks to: picked by its id (u mod R)."""
    return node_id("key_server", user % replicas)


def deterministic_rsa_key(rng: np.random.Generator, bits: int):
    """An RSA key (e = 65537) whose primes come from the key server's own RNG, so that a run is
    reproducible from its seed (a real deployment would call ``oprf.generate_key``)."""
    import gmpy2  # noqa: PLC0415 - installed with the project; only the key server needs it
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    e = 65537
    half = bits // 2
    while True:
        primes = []
        for _ in range(2):
            raw = int.from_bytes(rng.bytes(half // 8), "big") | (3 << (half - 2)) | 1
            primes.append(int(gmpy2.next_prime(raw)))
        p, q = primes
        phi = (p - 1) * (q - 1)
        if p != q and math.gcd(e, phi) == 1 and (p * q).bit_length() == bits:
            break
    d = pow(e, -1, phi)
    return rsa.RSAPrivateNumbers(
        p,
        q,
        d,
        rsa.rsa_crt_dmp1(d, p),
        rsa.rsa_crt_dmq1(d, q),
        rsa.rsa_crt_iqmp(p, q),
        rsa.RSAPublicNumbers(e, p * q),
    ).private_key()


def _ratings(values: np.ndarray | None, n: int, nid: str) -> np.ndarray:
    if values is None:
        return np.zeros(0, dtype=np.float32)
    out = np.array(values, dtype=np.float32)
    if out.shape != (n,):
        raise ValueError(f"{nid}: {out.shape} ratings for {n} items")
    return out


def xavier_rows(rng: np.random.Generator, n: int, fan: int, dim: int) -> np.ndarray:
    """n rows of a Xavier-uniform table of ``fan`` rows: U(−a, a), a = √(6/(fan + d))."""
    bound = math.sqrt(6.0 / (fan + dim))
    return rng.uniform(-bound, bound, size=(n, dim)).astype(np.float32)


# --------------------------------------------------------------------------- key server


class KeyServer(Node):
    """Third party holding the RSA key; signs blinded values and never sees an id or a token."""

    role = "key_server"

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        self.users = np.asarray(users, dtype=np.int64)  # the users this replica serves
        # every replica holds the one key, derived from replica 0's seed (a deployment copies it)
        key_rng = np.random.default_rng(node_seed(ctx.seed, KEY_SERVER))
        self.key = deterministic_rsa_key(key_rng, ctx.shared["key_bits"])
        self.rsa_public = oprf.public_numbers(self.key)
        self.signed = 0

    def handle(self, phase: str, inbox) -> None:
        if phase == "oprf_key":
            expect_kinds(inbox, node=self.id)
            payload = wire.encode_bigints([self.rsa_public.n, self.rsa_public.e])
            for u in self.users:
                self.send("oprf_public_key", node_id("user", int(u)), payload)
        elif phase in ("oprf_sign", "rejoin"):
            # rejoin: users that missed the broadcast or the signing catch up one by one
            expect_kinds(inbox, "oprf_blinded", "oprf_key_request", node=self.id)
            for m in inbox:  # sorted by sender
                if key_server_of(int(m.src.split("/")[1]), self.shared["key_servers"]) != self.id:
                    raise ValueError(f"{self.id}: {m.kind} from {m.src}, served by another replica")
                if m.kind == "oprf_key_request":
                    msg.decode_key_request(m.payload)
                    payload = wire.encode_bigints([self.rsa_public.n, self.rsa_public.e])
                    self.send("oprf_public_key", m.src, payload)
                    continue
                blinded = wire.decode_bigints(m.payload)
                signed = oprf.blind_sign(self.key, blinded)
                self.signed += len(signed)
                self.send("oprf_signed", m.src, wire.encode_bigints(signed))
        else:
            super().handle(phase, inbox)

    def public_numbers(self) -> tuple[int, int]:
        """(N, e): public, as every user receives it."""
        return self.rsa_public.n, self.rsa_public.e


# --------------------------------------------------------------------------- matcher


class Matcher(Node):
    """Third party without key: finds users that share item tokens, returns anonymous lists.

    It keeps the latest request (tokens, e_u) of every user and matches each request against all
    of them: when everyone takes part in an expansion that is exactly this expansion's requests;
    a user who was away is still found by the others with the request it sent last, and a user
    who catches up later (``rejoin``) is matched against everyone."""

    role = "matcher"

    def __init__(self, nid: str, ctx: NodeContext):
        super().__init__(nid, ctx)
        self.observed: set[bytes] = set()  # every token received (its whole view of items)
        self.latest: dict[str, tuple[list[bytes], np.ndarray]] = {}  # user -> its last request

    def observed_tokens(self) -> list[bytes]:
        return sorted(self.observed)

    def handle(self, phase: str, inbox) -> None:
        if phase not in ("expand_match", "rejoin"):
            return super().handle(phase, inbox)
        expect_kinds(inbox, "expand_request", node=self.id)
        k_max = self.shared["max_neighbors"]
        by_index = lambda s: int(s.split("/")[1])  # noqa: E731
        requests = {m.src: msg.decode_expand_request(m.payload) for m in inbox}
        for tokens, _ in requests.values():
            self.observed.update(tokens)
        self.latest.update(requests)
        holders: dict[bytes, list[str]] = {}
        for s in sorted(self.latest, key=by_index):
            for t in self.latest[s][0]:
                holders.setdefault(t, []).append(s)
        for s in sorted(requests, key=by_index):  # user order: RNG draws placement-independent
            tokens = requests[s][0]
            own = set(tokens)
            found = sorted({v for t in tokens for v in holders[t] if v != s}, key=by_index)
            if len(found) > k_max:  # uniform sample of max_neighbors
                found = [found[j] for j in np.sort(self.rng.choice(len(found), k_max, False))]
            found = [found[j] for j in self.rng.permutation(len(found))]  # anonymous order
            emb = np.stack([self.latest[v][1] for v in found]) if found else np.zeros((0, 0))
            if not found:
                emb = np.zeros((0, len(requests[s][1])), dtype=np.float32)
            shared = [[t for t in self.latest[v][0] if t in own] for v in found]
            self.send("expand_reply", s, msg.encode_expand_reply(emb, shared))


# --------------------------------------------------------------------------- server


class Server(Node):
    """Holds the item embeddings E; samples the round's users; FedAvg of uploads, Adam step."""

    role = "server"

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        s = ctx.shared
        self.users = np.asarray(users, dtype=np.int64)
        e = xavier_rows(self.rng, s["n_items"], s["n_items"], s["dim"])
        self.item_emb = torch.nn.Parameter(torch.from_numpy(e))
        self.optimizer = torch.optim.Adam([self.item_emb], lr=s["lr_item"])
        self.attack_views: list[tuple[str, np.ndarray, np.ndarray]] = []
        self.gat_weights = None  # θ, the GAT backbone's weights (flat), server-held
        if s["backbone"] == "gat":
            init = LocalGAT(s["dim"], s["layers"], seed=int(self.rng.integers(0, 2**31)))
            self.gat_weights = torch.nn.Parameter(init.flat())
            self.gat_optimizer = torch.optim.Adam([self.gat_weights], lr=s["lr_item"])

    def handle(self, phase: str, inbox) -> None:
        s = self.shared
        if phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            users = self.users
            if phase == "download":
                users = sample_participants(self.rng, users, s["users_per_round"])
            payload = wire.encode_dense(self.item_emb.detach())  # all of E, to each user
            kind = "item_embeddings" if phase == "download" else "eval_item_embeddings"
            weights = None
            if self.gat_weights is not None:
                weights = wire.encode_dense(self.gat_weights.detach())
            for u in users:
                self.send(kind, node_id("user", int(u)), payload)
                if weights is not None:
                    self.send(
                        "gat_weights" if phase == "download" else "eval_gat_weights",
                        node_id("user", int(u)),
                        weights,
                    )
        elif phase == "aggregate":
            expect_kinds(inbox, "item_grads", "gat_grads", node=self.id)
            uploads, model_uploads, coords = [], [], {}
            for m in inbox:  # sorted by sender: the same sum whatever the placement
                if m.kind == "gat_grads":
                    model_uploads.append(wire.decode_dense(m.payload))
                    coords[m.src] = coords.get(m.src, 0) + model_uploads[-1].size
                    continue
                ids, grads = msg.decode_item_grads(m.payload, self.item_emb.shape[0])
                if np.any(np.diff(ids) <= 0):
                    raise wire.WireError(
                        f"item gradients from {m.src}: ids not sorted and distinct"
                    )
                uploads.append((ids, grads))
                coords[m.src] = coords.get(m.src, 0) + grads.size
                if s["attack_gradient_inference"]:  # the curious server's view (step 3)
                    self.attack_views.append((m.src, ids, grads))
            for src, n in coords.items():
                # what the server learns anyway (upload size): the accountant's input; an upload
                # spends its sender's privacy budget whether or not the update below is taken
                self.report(f"upload_coords/{src}", n)
            # the mean is over the uploads that arrived (sampled users who were away send none);
            # below min_participants of them the round's update is skipped
            if len(uploads) < max(1, self.min_participants):
                self.report("skipped", 1.0)
                return
            step_on_mean(self.item_emb, self.optimizer, uploads)
            if self.gat_weights is not None:
                gat.step_on_mean_dense(self.gat_weights, self.gat_optimizer, model_uploads)
        else:
            super().handle(phase, inbox)

    def get_item_embeddings(self) -> np.ndarray:
        return self.item_emb.detach().numpy().copy()

    def take_attack_views(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """The uploads kept for the gradient-inference attack since the last call (sender,
        item ids, perturbed rows); emptied by the call."""
        views, self.attack_views = self.attack_views, []
        return views


# --------------------------------------------------------------------------- user


class User(Node):
    """Keeps I_u, e_u, its item tokens and its local graph; nothing of these leaves in the clear."""

    role = "user"

    def __init__(
        self,
        nid: str,
        ctx: NodeContext,
        train_items: np.ndarray,
        test_items: np.ndarray,
        train_ratings: np.ndarray | None = None,
        test_ratings: np.ndarray | None = None,
    ):
        super().__init__(nid, ctx)
        s = ctx.shared
        self.train_items = np.array(train_items, dtype=np.int64)  # sorted, distinct (own copy)
        self.test_items = np.array(test_items, dtype=np.int64)
        # explicit ratings aligned with the items (gat backbone only)
        self.train_ratings = _ratings(train_ratings, len(self.train_items), nid)
        self.test_ratings = _ratings(test_ratings, len(self.test_items), nid)
        self.embedding = torch.from_numpy(xavier_rows(self.rng, 1, s["n_users"], s["dim"])[0])
        self.blinding = oprf.BlindingRng(self.rng.bytes(32))
        self.rsa_public = None
        self.unblinders: list[int] = []
        self.tokens: list[bytes] = []  # aligned with train_items
        self.nbr_emb = torch.zeros((0, s["dim"]))
        self.last_pseudo_items = np.zeros(0, dtype=np.int64)
        self.nbr_links = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self.graph_epoch = -1  # the expansion epoch ⌊r/P⌋ its local graph comes from (-1: none)
        self.download: list = []  # this round's download, kept for train while it catches up
        self.download_round = -1

    # --- OPRF and graph expansion (one node at a time: cheap, or dominated by RSA) -----------
    def handle(self, phase: str, inbox) -> None:
        if phase == "oprf_blind":
            expect_kinds(inbox, "oprf_public_key", node=self.id)
            self._blind(inbox[0].payload)
        elif phase == "oprf_finalize":
            expect_kinds(inbox, "oprf_signed", node=self.id)
            self._finalize(inbox[0].payload)
        elif phase == "expand_send":
            expect_kinds(inbox, node=self.id)
            if self.tokens:  # without tokens (away at the OPRF) it catches up when sampled
                self._request_expansion()
        elif phase == "expand_receive":
            expect_kinds(inbox, "expand_reply", node=self.id)
            self._receive_expansion(inbox[0].payload)
        elif phase == "rejoin":
            self._rejoin(inbox)
        else:
            raise ValueError(f"{type(self).__name__}: no handler for phase {phase!r}")

    def _blind(self, key_payload: bytes) -> None:
        """OPRF step 1: m' = H(x)·r^e mod N for every own item → the user's key-server replica."""
        n, e = wire.decode_bigints(key_payload)
        from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

        self.rsa_public = rsa.RSAPublicNumbers(e, n)
        self._send_blinded()

    def _send_blinded(self) -> None:
        blinded, self.unblinders = oprf.blind(
            self.train_items.tolist(), self.rsa_public, self.blinding
        )
        user = int(self.id.split("/")[1])
        replica = key_server_of(user, self.shared["key_servers"])
        self.send("oprf_blinded", replica, wire.encode_bigints(blinded))

    def _finalize(self, signed_payload: bytes) -> None:
        """OPRF step 3: s = s'·r⁻¹, check s^e = H(x), token = SHA-256(s); tokens are cached."""
        signed = wire.decode_bigints(signed_payload)
        self.tokens = oprf.unblind_and_finalize(
            self.train_items.tolist(), signed, self.unblinders, self.rsa_public
        )
        self.unblinders = []

    def _request_expansion(self) -> None:
        self.send(
            "expand_request",
            MATCHER,
            msg.encode_expand_request(sorted(self.tokens), self.embedding),
        )

    def _receive_expansion(self, reply_payload: bytes) -> None:
        emb, shared = msg.decode_expand_reply(reply_payload)
        position = {t: i for i, t in enumerate(self.tokens)}
        v = np.repeat(np.arange(len(shared)), [len(s) for s in shared]).astype(np.int64)
        i = np.array([position[t] for s in shared for t in s], dtype=np.int64)
        self.nbr_emb = torch.from_numpy(emb.astype(np.float32))
        self.nbr_links = (v, i)
        self.graph_epoch = self._epoch()

    def _epoch(self) -> int:
        return self.round // self.shared["expand_period"]

    def graph_is_current(self) -> bool:
        """Whether the local graph comes from the expansion of the current epoch."""
        return bool(self.tokens) and self.graph_epoch >= self._epoch()

    def _rejoin(self, inbox) -> None:
        """Catch up on what this user missed while it was away (see the module docstring); every
        message moves it one step on, a message that does not come leaves it where it was."""
        expect_kinds(
            inbox,
            "item_embeddings",
            "gat_weights",
            "oprf_public_key",
            "oprf_signed",
            "expand_reply",
            node=self.id,
        )
        download = [m for m in inbox if m.kind in ("item_embeddings", "gat_weights")]
        if download:  # sampled this round: keep the download for train, catch up first
            self.download, self.download_round = download, self.round
            if not self.tokens:
                if (
                    self.rsa_public is None
                ):  # the key server's broadcast was missed: ask for the key
                    user = int(self.id.split("/")[1])
                    replica = key_server_of(user, self.shared["key_servers"])
                    self.send("oprf_key_request", replica, msg.encode_key_request())
                else:  # the key is cached; the signing was missed
                    self._send_blinded()
            elif not self.graph_is_current():
                self._request_expansion()
        for m in inbox:
            if m.kind == "oprf_public_key":
                self._blind(m.payload)
            elif m.kind == "oprf_signed":
                self._finalize(m.payload)
                if not self.graph_is_current():
                    self._request_expansion()
            elif m.kind == "expand_reply":
                self._receive_expansion(m.payload)

    def take_download(self) -> list:
        """The download kept by ``rejoin`` in this round (emptied by the call)."""
        if self.download_round != self.round:
            return []
        out, self.download, self.download_round = self.download, [], -1
        return out

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        if phase == "train":
            # sampled users whose download came during rejoin (every user is activated then);
            # the others, not sampled, have nothing to do
            inboxes = [inbox or n.take_download() for n, inbox in zip(nodes, inboxes)]
            nodes = [n for n, inbox in zip(nodes, inboxes) if inbox]
            inboxes = [inbox for inbox in inboxes if inbox]
            if not nodes:
                return
        gat_backbone = bool(nodes) and nodes[0].shared["backbone"] == "gat"
        if phase == "train":
            if gat_backbone:
                gat.train_users(nodes, inboxes, SERVER)
            else:
                cls._train(nodes, inboxes)
        elif phase == "eval":
            if gat_backbone:
                gat.evaluate_users(nodes, inboxes)
            else:
                cls._evaluate(nodes, inboxes)
        else:
            super().handle_batch(nodes, phase, inboxes)

    # --- local training (all sampled users of this host in one pass) ----------------------------
    @staticmethod
    def _train(nodes: list[User], inboxes) -> None:
        for n, inbox in zip(nodes, inboxes):
            expect_kinds(inbox, "item_embeddings", node=n.id)
        e_list = decode_shared(inboxes, "item_embeddings", wire.decode_dense)
        s = nodes[0].shared
        n_items, dim = s["n_items"], s["dim"]
        gens, negs, pairs_pos = [], [], []
        for n in nodes:  # each user's own random draws, in its own stream
            g = n.torch_generator()
            n_neg, _ = msg.upload_counts(
                len(n.train_items), n_items, s["negatives"], s["pseudo_items"]
            )
            neg = choose_pseudo_items(n_items, n.train_items, n_neg, g).numpy()
            negs.append(np.sort(neg))
            # each sampled negative is paired with a random positive (FedLightGCN's sampler)
            pairs_pos.append(n.rng.integers(0, len(n.train_items), size=len(neg)))
            gens.append(g)
        # per-user leaf of item rows: [E[I_u]; E[negatives]] for every user, stacked
        rows, graph_rows, pos_rows, neg_rows, pair_user = [], [], [], [], []
        offset = 0
        for b, (n, e) in enumerate(zip(nodes, e_list)):
            ids = np.concatenate([n.train_items, negs[b]])
            rows.append(torch.from_numpy(e)[torch.from_numpy(ids)])
            n_pos = len(n.train_items)
            graph_rows.append(offset + np.arange(n_pos))
            pos_rows.append(offset + pairs_pos[b])
            neg_rows.append(offset + n_pos + np.arange(len(negs[b])))
            pair_user.append(np.full(len(negs[b]), b))
            offset += len(ids)
        item_leaf = torch.cat(rows).requires_grad_(True)
        user_leaf = torch.stack([n.embedding for n in nodes]).requires_grad_(True)
        graphs = build_local_graphs(
            [len(n.train_items) for n in nodes], [n.nbr_links for n in nodes]
        )
        nbr = torch.cat([n.nbr_emb for n in nodes]) if nodes else torch.zeros((0, dim))
        cat = lambda parts: torch.from_numpy(np.concatenate(parts).astype(np.int64))  # noqa: E731
        h_u = local_forward(
            graphs, user_leaf, item_leaf.index_select(0, cat(graph_rows)), nbr, s["layers"]
        )
        pu, pi, pj = cat(pair_user), cat(pos_rows), cat(neg_rows)
        e_i, e_j = item_leaf.index_select(0, pi), item_leaf.index_select(0, pj)
        hu = h_u.index_select(0, pu)
        x = (hu * e_i).sum(-1) - (hu * e_j).sum(-1)  # score h_u·e_i − h_u·e_j per pair
        count = torch.bincount(pu, minlength=len(nodes)).clamp(min=1).to(x.dtype)
        per_pair = neg_log_sigmoid(x) + 0.5 * s["l2"] * (e_i.pow(2).sum(-1) + e_j.pow(2).sum(-1))
        loss = torch.zeros(len(nodes)).index_add(0, pu, per_pair) / count
        loss = loss + 0.5 * s["l2"] * user_leaf.pow(2).sum(-1)
        loss.sum().backward()  # the users' graphs are disjoint: row b's gradients are user b's
        new_users = (user_leaf - s["lr_user"] * user_leaf.grad).detach()
        grads = item_leaf.grad.detach()
        start = 0
        for b, n in enumerate(nodes):
            ids_real = np.concatenate([n.train_items, negs[b]])
            real = grads[start : start + len(ids_real)]
            start += len(ids_real)
            g = gens[b]
            _, m = msg.upload_counts(len(n.train_items), n_items, s["negatives"], s["pseudo_items"])
            pseudo_ids = choose_pseudo_items(n_items, ids_real, m, g).numpy()
            pseudo = pseudo_item_gradients(real, m, g)
            all_ids = np.concatenate([ids_real, pseudo_ids])
            noisy = clip_and_laplace(torch.cat([real, pseudo]), s["clip"], s["laplace"], g)
            order = np.argsort(all_ids, kind="stable")  # rows by item id: position says nothing
            n.send("item_grads", SERVER, msg.encode_item_grads(all_ids[order], noisy[order]))
            n.last_pseudo_items = np.sort(pseudo_ids)
            n.embedding = new_users[b].clone()
            n.report("loss", loss[b].item())

    # --- evaluation -----------------------------------------------------------------------------
    def user_representation(self, item_emb: np.ndarray) -> torch.Tensor:
        return User._representations([self], [item_emb])[0]

    @staticmethod
    def _representations(nodes: list[User], e_list: list[np.ndarray]) -> torch.Tensor:
        s = nodes[0].shared
        graphs = build_local_graphs(
            [len(n.train_items) for n in nodes], [n.nbr_links for n in nodes]
        )
        items = torch.cat(
            [torch.from_numpy(e)[torch.from_numpy(n.train_items)] for n, e in zip(nodes, e_list)]
        )
        nbr = torch.cat([n.nbr_emb for n in nodes])
        with torch.no_grad():
            return local_forward(
                graphs, torch.stack([n.embedding for n in nodes]), items, nbr, s["layers"]
            )

    @staticmethod
    def _evaluate(nodes: list[User], inboxes) -> None:
        e_list = decode_shared(inboxes, "eval_item_embeddings", wire.decode_dense)
        users = [(n, e) for n, e in zip(nodes, e_list) if len(n.test_items)]
        k = nodes[0].shared["eval_k"]
        for start in range(0, len(users), 512):
            chunk = users[start : start + 512]
            h = User._representations([n for n, _ in chunk], [e for _, e in chunk])
            evaluate_users([n for n, _ in chunk], h, [e for _, e in chunk], k)

    # --- inspection (tests) ---------------------------------------------------------------------
    def get_embedding(self) -> np.ndarray:
        return self.embedding.numpy().copy()

    def setup_state(self) -> dict:
        """What this user holds from steps 1–2: its token count, whether it has the key server's
        public key, and the expansion epoch of its local graph (-1: none)."""
        return {
            "tokens": len(self.tokens),
            "public_key": self.rsa_public is not None,
            "graph_epoch": self.graph_epoch,
        }

    def get_last_pseudo_items(self) -> np.ndarray:
        """The pseudo items of this user's last upload (for measuring attacks, never sent)."""
        return self.last_pseudo_items.copy()

    def neighbour_view(self) -> list[tuple[np.ndarray, list[int]]]:
        """What the matcher gave this user: (embedding, shared item ids) per anonymous neighbour."""
        v, i = self.nbr_links
        return [
            (self.nbr_emb[j].numpy().copy(), sorted(self.train_items[i[v == j]].tolist()))
            for j in range(len(self.nbr_emb))
        ]
