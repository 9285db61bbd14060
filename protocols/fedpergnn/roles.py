"""The four roles of FedPerGNN / FedLightGCN: user, server, key server, matcher.

Node ids: ``user/<u>``, ``server/0``, ``key_server/<r>`` (R replicas of one key; user u talks to
replica u mod R), ``matcher/0``. Phases, driven by protocol.py; training and evaluation are the
backbone's (lightgcn.py, or gat.py: the download then also carries θ and uploads add ∂L/∂θ):

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
eval               users       rank all items not trained on with h_u·e_i     (step 4)
=================  ==========  ================================================================

**Absent participants** (protocol.py). A user away at the key broadcast or an expansion lacks
tokens or has a local graph older than the current epoch ⌊r/P⌋ (P = ``expand_period``). At its
next participation it catches up before it trains, in ``rejoin`` supersteps each driven by the
previous one's messages: it keeps the round's download for ``train`` and sends
``oprf_key_request`` (no key yet), ``oprf_blinded`` (no tokens) or ``expand_request`` (stale
graph); the key server answers with its key or the signatures, the user goes on (key → blind,
signed → tokens → ``expand_request``), and the matcher answers each request against the latest
request of every user. A message that never arrives leaves the user where it was.

**What each role checks** of what a user sent (beside the host's screen, ``ACCEPTS``, which
also checks that a user's tokens come sorted): the key server answers only the users of its
replica (else ``peer``), one request of each kind per user and step, signs no value outside
1..N−1 or sharing a factor with N (``range``) and no more than ``oprf_budget`` values per user
over the run (``budget``); a refused request gets no signature. The matcher takes one request
per user and step (``budget``). The server takes uploads only from the users it sampled at this
round's download (``peer``), one of each kind per user (``budget``). A user checks the key it is
given (e = 65537, an odd modulus of ``key_bits`` bits with no small factor; else it keeps none
and blinds nothing: ``range``), the key server's answer (one signature per value it blinded,
each verifying) and the matcher's (tokens it holds). Each drop is counted under ``rejected``;
none raises.

**Secrets** (privacy/key_server.py): the driver draws the replicas' one RSA key from the
operating system (``FedPerGNN.node_specs``) and hands it to each replica; blinding factors come
from ``secrets``. Neither follows from the seed, and nothing the run computes depends on them:
tokens are compared, never ordered by value (a user sorts its neighbour links by item), and RSA
values travel at the modulus' byte length.
"""

from __future__ import annotations

import numpy as np
import torch

from cluster import wire
from cluster.message import index_of, node_id
from cluster.validate import Accept, empty_blob
from models.lightgcn import xavier_rows
from nodes import secure_sum
from nodes.node import Node, NodeContext, expect_kinds
from privacy import oprf
from privacy.key_server import BlindSigner, OprfClient, key_from_der, new_key
from privacy.ldp import laplace_noise
from protocols.base import sample_participants
from protocols.fedpergnn import gat, lightgcn
from protocols.fedpergnn import messages as msg
from protocols.fedpergnn.config import model_laplace
from protocols.fedpergnn.gat_model import LocalGAT
from protocols.sparse_rows import defended_step, step_on_sum

SERVER = node_id("server", 0)
KEY_SERVER = node_id("key_server", 0)
MATCHER = node_id("matcher", 0)
# What the server sums with --secure-aggregation: the item rows over the whole table, and θ's
# gradients with the gat backbone (a zero-length part with lightgcn)
SECURE_SUM = secure_sum.SecureSum(
    SERVER,
    (
        secure_sum.Summand("item_grads", msg.item_table_length, msg.densify_item_grads),
        secure_sum.Summand("gat_grads", msg.gat_length, msg.densify_gat_grads),
    ),
    bound=msg.secure_bound,
)


def key_server_of(user: int, replicas: int) -> str:
    """The key-server replica a user talks to: picked by its id (u mod R)."""
    return node_id("key_server", user % replicas)


def _ratings(values: np.ndarray | None, items: np.ndarray) -> np.ndarray:
    """Explicit ratings aligned with ``items`` (gat backbone; none with lightgcn)."""
    out = np.array([] if values is None else values, dtype=np.float32)
    if values is not None and out.shape != items.shape:
        raise ValueError(f"{out.shape} ratings for {len(items)} items")
    return out


class KeyServer(Node):
    """Third party holding the RSA key; signs blinded values and never sees an id or a token."""

    role = "key_server"
    ACCEPTS = {
        "oprf_blinded": Accept(("user",), ("oprf_sign", "rejoin"), msg.check_blinded),
        "oprf_key_request": Accept(("user",), ("rejoin",), empty_blob),
    }

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray, key: bytes | None = None):
        super().__init__(nid, ctx)
        self.users = np.asarray(users, dtype=np.int64)  # the users this replica serves
        # every replica holds the one key the driver drew from the operating system (PKCS#8 DER,
        # FedPerGNN.node_specs); a key server made without one draws its own
        c = self.config
        private = key_from_der(key) if key is not None else new_key(c.key_bits)
        self.signer = BlindSigner(private, budget=c.oprf_budget)

    def handle(self, phase: str, inbox) -> None:
        if phase == "oprf_key":
            expect_kinds(inbox, node=self.id)
            payload = wire.encode_bigints(list(self.signer.public_numbers()))
            for u in self.users:
                self.send("oprf_public_key", node_id("user", int(u)), payload)
        elif phase in ("oprf_sign", "rejoin"):
            # rejoin: users that missed the broadcast or the signing catch up one by one
            expect_kinds(inbox, "oprf_blinded", "oprf_key_request", node=self.id)
            bits, answered = self.config.key_bits, set()
            for m in inbox:  # sorted by sender
                if key_server_of(index_of(m.src), self.config.key_servers) != self.id:
                    self.reject(m, "peer")  # served by another replica
                    continue
                if (m.src, m.kind) in answered:  # one answer of each kind per user and step
                    self.reject(m, "budget")
                    continue
                if m.kind == "oprf_key_request":
                    answered.add((m.src, m.kind))
                    payload = wire.encode_bigints(list(self.signer.public_numbers()))
                    self.send("oprf_public_key", m.src, payload)
                    continue
                blinded = msg.decode_blinded(m.payload, bits)
                refused = self.signer.refusal(m.src, blinded)  # range (0, ≥ N) or budget
                if refused is not None:
                    self.reject(m, refused)  # no signature for any of its values
                    continue
                answered.add((m.src, m.kind))
                signed = self.signer.sign(blinded, m.src)
                self.send("oprf_signed", m.src, msg.encode_signed(signed, bits))
        else:
            super().handle(phase, inbox)

    def public_numbers(self) -> tuple[int, int]:
        """(N, e): public, as every user receives it."""
        return self.signer.public_numbers()

    def issued(self) -> dict[str, int]:
        """Values signed per user so far (tests: the budget)."""
        return dict(self.signer.issued)


class Matcher(Node):
    """Third party without key: finds users that share item tokens, returns anonymous lists.

    It keeps the latest request (tokens, e_u) of every user and matches each request against all
    of them: when everyone takes part in an expansion that is exactly this expansion's requests;
    a user who was away is still found by the others with the request it sent last, and a user
    who catches up later (``rejoin``) is matched against everyone."""

    role = "matcher"
    ACCEPTS = {
        "expand_request": Accept(("user",), ("expand_match", "rejoin"), msg.check_expand_request)
    }

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
        k_max = self.config.max_neighbors
        requests: dict[str, tuple[list[bytes], np.ndarray]] = {}
        for m in inbox:
            if m.src in requests:  # one request per user and step
                self.reject(m, "budget")
                continue
            tokens, emb = msg.decode_expand_request(m.payload)
            requests[m.src] = (sorted(set(tokens)), emb)  # a token counts once
        for tokens, _ in requests.values():
            self.observed.update(tokens)
        self.latest.update(requests)
        holders: dict[bytes, list[str]] = {}
        for s in sorted(self.latest, key=index_of):
            for t in self.latest[s][0]:
                holders.setdefault(t, []).append(s)
        for s in sorted(requests, key=index_of):  # user order: RNG draws placement-independent
            tokens = requests[s][0]
            own = set(tokens)
            found = sorted({v for t in tokens for v in holders[t] if v != s}, key=index_of)
            if len(found) > k_max:  # uniform sample of max_neighbors
                picked = np.sort(self.noise_rng.choice(len(found), k_max, False))
                found = [found[j] for j in picked]
            found = [found[j] for j in self.noise_rng.permutation(len(found))]  # anonymous order
            emb = np.zeros((0, len(requests[s][1])), dtype=np.float32)
            if found:
                emb = np.stack([self.latest[v][1] for v in found])
            shared = [[t for t in self.latest[v][0] if t in own] for v in found]
            self.send("expand_reply", s, msg.encode_expand_reply(emb, shared))


class Server(Node):
    """Holds the item embeddings E; samples the round's users; FedAvg of uploads, Adam step."""

    role = "server"
    ACCEPTS = {
        "item_grads": Accept(("user",), ("aggregate",), msg.check_item_grads),
        "gat_grads": Accept(("user",), ("aggregate",), msg.check_gat_grads),
    }
    SECURE_SUM = SECURE_SUM

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        c, n_items = self.config, self.public.n_items
        self.users = np.asarray(users, dtype=np.int64)
        e = xavier_rows(self.rng, n_items, n_items, c.dim)
        self.item_emb = torch.nn.Parameter(self.tensor(e))
        self.optimizer = torch.optim.Adam([self.item_emb], lr=c.lr_item)
        self.attack_views: list[tuple[str, np.ndarray, np.ndarray]] = []
        self.sampled: tuple[int, frozenset[int]] = (-1, frozenset())  # (round, Ū) of the download
        self.gat_weights = None  # θ, the GAT backbone's weights (flat), server-held
        if c.backbone == "gat":
            seed = int(self.rng.integers(0, 2**31))
            init = self.build(lambda: LocalGAT(c.dim, c.layers, seed=seed))
            self.gat_weights = torch.nn.Parameter(init.flat(self.device))
            self.gat_optimizer = torch.optim.Adam([self.gat_weights], lr=c.lr_item)

    def handle(self, phase: str, inbox) -> None:
        if phase in ("download", "eval_download"):
            expect_kinds(inbox, node=self.id)
            users = self.users
            if phase == "download":
                users = sample_participants(self.rng, users, self.config.users_per_round)
                self.sampled = (self.round, frozenset(int(u) for u in users))
            prefix = "" if phase == "download" else "eval_"
            # all of E to each user (and θ with the gat backbone)
            payloads = {f"{prefix}item_embeddings": wire.encode_dense(self.item_emb.detach())}
            if self.gat_weights is not None:
                payloads[f"{prefix}gat_weights"] = wire.encode_dense(self.gat_weights.detach())
            for u in users:
                for kind, payload in payloads.items():
                    self.send(kind, node_id("user", int(u)), payload)
        elif phase == "aggregate" and self.secure_aggregation:
            self._aggregate_sum(secure_sum.server_sum(self, SECURE_SUM, inbox))
        elif phase == "aggregate":
            expect_kinds(inbox, "item_grads", "gat_grads", node=self.id)
            uploads, model_uploads, coords = [], [], {}
            for m in self._uploads_of_sampled(inbox):  # by sender: the same sum on any placement
                if m.kind == "gat_grads":
                    model_uploads.append(wire.decode_dense(m.payload))
                    coords[m.src] = coords.get(m.src, 0) + model_uploads[-1].size
                    continue
                ids, grads = msg.decode_item_grads(m.payload, self.item_emb.shape[0])
                uploads.append((ids, grads))
                coords[m.src] = coords.get(m.src, 0) + grads.size
                if self.config.attack_gradient_inference:  # the curious server's view (step 3)
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
            # the mean, or the run's defence (adversaries/defences.py: per upload or item row)
            defended_step(self.item_emb, self.optimizer, uploads, self.threat)
            if self.gat_weights is not None:
                gat.step_on_mean_dense(self.gat_weights, self.gat_optimizer, model_uploads)
            self._model_noise(len(uploads))
        else:
            super().handle(phase, inbox)

    def _model_noise(self, uploads: int) -> None:
        scale = model_laplace(self.config, uploads)
        if scale:  # the authors' code: noise on every weight of the updated model
            g = self.noise_generator()
            with torch.no_grad():
                for w in (self.item_emb, self.gat_weights):
                    if w is not None:
                        # a numpy generator (--secure-rng) draws on the CPU: moved to w's device
                        w.add_(laplace_noise(w.shape, scale, g).to(w.device, w.dtype))

    def _aggregate_sum(self, total) -> None:
        """Step 3 with secure aggregation: the mean from the sum of the survivors' uploads alone
        (no defence: the run refuses one). The curious server keeps what it holds: each user's
        masked input and the sum."""
        if total is None or total.n < max(1, self.min_participants):
            self.report("skipped", 1.0)
            return
        shape = tuple(self.item_emb.shape)
        mean = total.parts["item_grads"].reshape(shape) / total.n
        if self.config.attack_gradient_inference:
            fp_views = {src: _decode_view(y, total, shape) for src, y in total.views.items()}
            self.attack_views.append(("secagg", fp_views, mean))
        step_on_sum(
            self.item_emb, self.optimizer, total.parts["item_grads"].reshape(shape), total.n
        )
        if self.gat_weights is not None:
            step_on_sum(self.gat_weights, self.gat_optimizer, total.parts["gat_grads"], total.n)
        self._model_noise(total.n)

    @property
    def keep_masked_views(self) -> bool:
        return bool(self.config.attack_gradient_inference)

    def secure_sum_peers(self):
        round_, sampled = self.sampled
        return sampled if round_ == self.round else frozenset()

    def _uploads_of_sampled(self, inbox) -> list:
        """The uploads that may count: from users sampled at this round's download (another
        sender: ``peer``), one of each kind per user (a second one: ``budget``)."""
        round_, sampled = self.sampled
        return self.admit(inbox, sampled if round_ == self.round else frozenset())

    def get_item_embeddings(self) -> np.ndarray:
        return self.item_emb.detach().cpu().numpy().copy()

    def take_attack_views(self) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """The uploads kept for the gradient-inference attack since the last call (sender,
        item ids, perturbed rows); emptied by the call."""
        views, self.attack_views = self.attack_views, []
        return views


def _decode_view(y: np.ndarray, total, shape) -> np.ndarray:
    """A masked input read as if it were an upload: its item rows in the sum's fixed point."""
    rows = y[: shape[0] * shape[1]].view(np.int32).astype(np.float64) * total.resolution
    return rows.reshape(shape)


class User(Node):
    """Keeps I_u, e_u, its item tokens and its local graph; nothing of these leaves in the clear."""

    role = "user"
    SECURE_SUM = SECURE_SUM
    # phases: a user that was away catches up on any of these in "rejoin" (module docstring)
    ACCEPTS = {
        "oprf_public_key": Accept(("key_server",), None, msg.check_public_key),
        "oprf_signed": Accept(("key_server",), None, msg.check_signed),
        "expand_reply": Accept(("matcher",), None, msg.check_expand_reply),
        "item_embeddings": Accept(("server",), None, msg.check_item_embeddings),
        "gat_weights": Accept(("server",), None, msg.check_gat_weights),
        "eval_item_embeddings": Accept(("server",), ("eval",), msg.check_item_embeddings),
        "eval_gat_weights": Accept(("server",), ("eval",), msg.check_gat_weights),
    }

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
        dim = self.config.dim
        self.train_items = np.array(train_items, dtype=np.int64)  # sorted, distinct (own copy)
        self.test_items = np.array(test_items, dtype=np.int64)
        self.train_ratings = _ratings(train_ratings, self.train_items)
        self.test_ratings = _ratings(test_ratings, self.test_items)
        self.embedding = self.tensor(xavier_rows(self.rng, 1, self.public.n_users, dim)[0])
        self.oprf = OprfClient()  # blinding factors from the operating system
        self.tokens: list[bytes] = []  # aligned with train_items
        self.nbr_emb = torch.zeros((0, dim), device=self.device)
        self.last_pseudo_items = np.zeros(0, dtype=np.int64)
        self.nbr_links = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        self.graph_epoch = -1  # the expansion epoch ⌊r/P⌋ its local graph comes from (-1: none)
        self.download: list = []  # this round's download, kept for train while it catches up
        self.download_round = -1

    @property
    def key_server(self) -> str:
        """This user's key-server replica (u mod R)."""
        return key_server_of(index_of(self.id), self.config.key_servers)

    # --- OPRF and graph expansion (one node at a time: cheap, or dominated by RSA) -----------
    def handle(self, phase: str, inbox) -> None:
        if phase == "oprf_blind":
            expect_kinds(inbox, "oprf_public_key", node=self.id)
            self._blind(inbox[0])
        elif phase == "oprf_finalize":
            expect_kinds(inbox, "oprf_signed", node=self.id)
            self._finalize(inbox[0])
        elif phase == "expand_send":
            expect_kinds(inbox, node=self.id)
            if self.tokens:  # without tokens (away at the OPRF) it catches up when sampled
                self._request_expansion()
        elif phase == "expand_receive":
            expect_kinds(inbox, "expand_reply", node=self.id)
            self._receive_expansion(inbox[0])
        elif phase == "rejoin":
            self._rejoin(inbox)
        else:
            raise ValueError(f"{type(self).__name__}: no handler for phase {phase!r}")

    def _blind(self, m) -> None:
        """OPRF: check and keep (N, e), send m' = H(x)·r^e mod N for every own item x. A key that
        fails the check (e ≠ 65537, a modulus below key_bits or with a small factor) is dropped:
        the user keeps no key and blinds nothing (it asks again when it catches up)."""
        n, e = wire.decode_bigints(m.payload)  # two values: the host's screen checked
        if self.oprf.receive_key(n, e, min_bits=self.config.key_bits) is not None:
            self.reject(m, "range")
            return
        self._send_blinded()

    def _send_blinded(self) -> None:
        if not len(self.train_items):  # nothing to tokenize (a fake user's profile comes later)
            return
        blinded = self.oprf.blind(self.train_items.tolist())
        payload = msg.encode_blinded(blinded, self.config.key_bits)
        self.send("oprf_blinded", self.key_server, payload)

    def _finalize(self, m) -> bool:
        """OPRF: s = s'·r⁻¹, check s^e = H(x), token = SHA-256(s); tokens are cached. An answer
        that is not one valid signature per value blinded is dropped (the exchange failed: the
        user asks again when it catches up). Returns whether it has its tokens."""
        signed = msg.decode_signed(m.payload, self.config.key_bits)
        problem = self.oprf.answer_problem(signed)
        if problem is not None:
            self.reject(m, problem)
            return False
        try:
            self.tokens = self.oprf.finalize(self.train_items.tolist(), signed)
        except oprf.OprfVerificationError:  # a signature that does not verify
            self.reject(m, "range")
            return False
        return True

    def _request_expansion(self) -> None:
        request = msg.encode_expand_request(sorted(self.tokens), self.embedding)
        self.send("expand_request", MATCHER, request)

    def _receive_expansion(self, m) -> None:
        emb, shared = msg.decode_expand_reply(m.payload)
        position = {t: i for i, t in enumerate(self.tokens)}
        if any(t not in position for s in shared for t in s):  # a token it does not hold
            self.reject(m, "range")
            return
        v = np.repeat(np.arange(len(shared)), [len(s) for s in shared]).astype(np.int64)
        i = np.array([position[t] for s in shared for t in s], dtype=np.int64)
        # links by (neighbour, item): the tokens' order follows their values, hence the key
        order = np.lexsort((i, v))
        self.nbr_emb = self.tensor(emb.astype(np.float32))
        self.nbr_links = (v[order], i[order])
        self.graph_epoch = self._epoch()

    def _epoch(self) -> int:
        return self.round // self.public.expand_period

    def graph_is_current(self) -> bool:
        """Whether the local graph comes from the expansion of the current epoch."""
        return bool(self.tokens) and self.graph_epoch >= self._epoch()

    def _rejoin(self, inbox) -> None:
        """Catch up on what this user missed while it was away (see the module docstring); every
        message moves it one step on, a message that does not come leaves it where it was."""
        download_kinds = ("item_embeddings", "gat_weights")
        kinds = (*download_kinds, "oprf_public_key", "oprf_signed", "expand_reply")
        expect_kinds(inbox, *kinds, node=self.id)
        download = [m for m in inbox if m.kind in download_kinds]
        if download:  # sampled this round: keep the download for train, catch up first
            self.download, self.download_round = download, self.round
            if not self.tokens:
                if self.oprf.public is None:  # the key server's broadcast was missed: ask for it
                    self.send("oprf_key_request", self.key_server, msg.encode_key_request())
                else:  # the key is cached; the signing was missed
                    self._send_blinded()
            elif not self.graph_is_current():
                self._request_expansion()
        for m in inbox:
            if m.kind == "oprf_public_key":
                self._blind(m)
            elif m.kind == "oprf_signed":
                if self._finalize(m) and not self.graph_is_current():
                    self._request_expansion()
            elif m.kind == "expand_reply":
                self._receive_expansion(m)

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
        backbone = gat if nodes and nodes[0].config.backbone == "gat" else lightgcn
        if phase == "train":
            backbone.train_users(nodes, inboxes, SERVER)
        elif phase == "eval":
            backbone.evaluate_held_out(nodes, inboxes)
        else:
            super().handle_batch(nodes, phase, inboxes)

    def tamper_upload(self, ids: np.ndarray, rows: np.ndarray, item_emb: np.ndarray):
        """The upload as sent: an honest user's unchanged (attack classes override it,
        adversaries/attacks/)."""
        return ids, rows

    # --- inspection (tests) ---------------------------------------------------------------------
    def get_embedding(self) -> np.ndarray:
        return self.embedding.cpu().numpy().copy()

    def setup_state(self) -> dict:
        """What this user holds from steps 1–2: its token count, whether it has the key server's
        public key, and the expansion epoch of its local graph (-1: none)."""
        return {
            "tokens": len(self.tokens),
            "public_key": self.oprf.public is not None,
            "graph_epoch": self.graph_epoch,
        }

    def get_last_upload_ids(self) -> np.ndarray:
        """The item ids of this user's last upload (for measuring attacks)."""
        return np.asarray(getattr(self, "last_upload_ids", np.zeros(0, np.int64))).copy()

    def get_last_pseudo_items(self) -> np.ndarray:
        """The pseudo items of this user's last upload (for measuring attacks, never sent)."""
        return self.last_pseudo_items.copy()

    def neighbour_view(self) -> list[tuple[np.ndarray, list[int]]]:
        """What the matcher gave this user: (embedding, shared item ids) per anonymous neighbour."""
        v, i = self.nbr_links
        return [
            (self.nbr_emb[j].cpu().numpy().copy(), sorted(self.train_items[i[v == j]].tolist()))
            for j in range(len(self.nbr_emb))
        ]
