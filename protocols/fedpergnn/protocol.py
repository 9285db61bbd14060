"""fedpergnn / fedlightgcn — federated GNN recommendation with a key server and a matcher
(Wu et al., "A federated graph neural network framework for privacy-preserving
personalization", Nat. Commun. 2022; LightGCN backbone and implicit-feedback ranking from the
FedLightGCN thesis).

Roles (protocols/fedpergnn/roles.py): users (packable), the server, the key server and the
matcher (each of the last three a dedicated node). The algorithm, as the paper states it:

1. **Item tokens** (once; cached). For each own item x a user runs the blind-RSA OPRF with the
   key server: m' = H(x)·r^e → s' = m'^d → s = s'·r⁻¹, s^e = H(x)?, token = SHA-256(s).
2. **Graph expansion** (at round 0 and every epoch = ⌈N/|Ū|⌉ rounds). Users send their tokens and
   e_u to the matcher; each user gets back, anonymously, the embeddings of up to
   ``max_neighbors`` users that share an item with it, with the shared items' tokens, and builds
   its local subgraph u – I_u – U_u.
3. **Training round.** The server samples |Ū| users and sends them all item embeddings E. A
   sampled user runs LightGCN (K layers, mean of layers, eqs. 3–4 of LightGCN) on its subgraph,
   scores s_ui = h_u·e_i, takes BPR + L2 over |Ĩ_u| negatives each paired with a random positive,
   updates e_u locally (SGD) and uploads the gradients of the rows of E it used — all its
   interacted items and its negatives — plus M pseudo-interacted items whose gradients are drawn
   from N(μ, σ²) fitted to the real rows; every coordinate is clipped to [−δ, δ] and gets
   Laplace(0, λ) noise; rows sorted by item id. The server averages the uploads that arrived and
   takes an Adam step on E; with fewer than ``min_participants`` uploads (a run condition), or
   none at all (every upload late or offline), it skips the round's update and reports it
   (``skipped`` in the round's training figures).
4. **Evaluation.** E goes to every user (``eval_*`` traffic); each ranks all items it has not
   trained on by h_u·e_i (Recall/NDCG@20).

``backbone = "gat"`` (FedPerGNN proper, protocols/fedpergnn/gat.py, protocols/fedpergnn/gat_model.py):
step 3 runs PyG GATConv layers on the local subgraph, r̂_ui = h_u·h_i, MSE on the user's explicit
ratings; the server also sends the GAT weights θ, each user uploads clip+Laplace ∂L_u/∂θ beside
its item rows (its rated items and M pseudo items; no negatives), and the server takes an Adam
step on (E, θ). Evaluation: RMSE on the held-out ratings (predictions clamped to the range).

**Absent participants** (dropout, a host lost to a fault, late messages; nodes/conditions.py).
Key server, matcher and server are datacenter roles, absent only when a fault takes their host.
A user away at step 1 or at a step-2 expansion catches up at its next participation (the next
round in which it is online and sampled), before it trains: it asks its key-server replica for
the public key if it never got it, runs the OPRF for its items (tokens, once obtained, are cached
and never requested again) and, if its local graph is older than the current epoch, sends its
request to the matcher, which matches it against the latest request of every user
(``rejoin`` supersteps, protocols/fedpergnn/roles.py). Until then it trains on what it has (no
neighbours if it never expanded). The ``rejoin`` supersteps run only once an absence has been
seen (a participant dropped or a message late), so a fair-weather run is unchanged by them.

Key-server replicas (``key_servers = R``): R nodes hold the same key; user u talks to replica
u mod R, so that signing runs on R actors at once. The driver draws that key once from the
operating system (``node_specs``, never from the seed) and hands each replica its PKCS#8 bytes, as
an operator provisions replicas; the report gives the key's fingerprint (``key_fingerprint``,
SHA-256 of the public key) and flags a key below 2048 bits. Each replica signs at most
``oprf_budget`` values per user over the run (the defence against an online dictionary attack by
a user; roles.py lists what else the key server and the users check).

Attack switches (measurements, under ``privacy`` in summary.json): ``attack_gradient_inference``
makes the server run the positive-item inference of privacy/leakage/gradient_inference.py on
every real upload (lightgcn: split by gradient direction; gat: real rows told from pseudo rows
by their low-rank structure), scored against the users' items, with the pseudo rows as uploaded
and with them removed; ``attack_dictionary`` makes the matcher try a dictionary attack on the tokens it
received (textbook RSA with the public key, and a plain hash of the id, over every item id).
"""

from __future__ import annotations

import math

import numpy as np
from cryptography.hazmat.primitives.asymmetric import rsa

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from cluster.message import index_of, node_id
from data.types import Interactions, RecDataset
from nodes import secure_sum
from nodes.deployment import Deployment, NodeSpec, mean_reports, training_figures
from nodes.node import Shared
from privacy import oprf
from privacy.accountant import PrivacyAccountant, laplace_vector_event
from privacy.key_server import key_fingerprint, key_report, key_to_der, new_key
from privacy.ldp import laplace_epsilon_per_coordinate, laplace_epsilon_vector
from privacy.leakage import (
    dictionary_attack,
    infer_positive_items,
    infer_real_rows,
    precision_recall_f1,
    recovery_rate,
)
from protocols.base import (
    ConfigError,
    MainMetric,
    PaperClaim,
    PaperFigure,
    PrivacyReport,
    Protocol,
)
from protocols.fedpergnn import gat
from protocols.fedpergnn.config import FedPerGNNConfig, FedPerGNNPublic, upload_laplace
from protocols.fedpergnn.roles import (
    MATCHER,
    SECURE_SUM,
    SERVER,
    KeyServer,
    Matcher,
    Server,
    User,
)

REJOIN_STEPS = 7  # supersteps of the longest catch-up chain (see FedPerGNN.rejoin)


def ratings_by_user(inter: Interactions, n_users: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per user: (sorted distinct items, their ratings; the mean where a pair repeats)."""
    if inter.rating is None:
        raise ValueError("the gat backbone needs explicit ratings: this dataset has none")
    order = np.lexsort((inter.item, inter.user))
    users, items = inter.user[order], inter.item[order]
    ratings = inter.rating[order].astype(np.float64)
    bounds = np.searchsorted(users, np.arange(n_users + 1))
    out = []
    for u in range(n_users):
        it, r = items[bounds[u] : bounds[u + 1]], ratings[bounds[u] : bounds[u + 1]]
        uniq, start, count = np.unique(it, return_index=True, return_counts=True)
        sums = np.add.reduceat(r, start) if len(it) else np.zeros(0)
        out.append((uniq, (sums / np.maximum(count, 1)).astype(np.float32)))
    return out


def _bucket(n: int) -> int:
    """n rounded up to the next 2^k or 1.5·2^k: upload sizes vary per user, and accounting a
    larger vector than was sent is a valid upper bound that keeps the accountant's streams few."""
    if n <= 2:
        return n
    k = (n - 1).bit_length() - 1
    return int(1.5 * 2**k) if n <= 1.5 * 2**k else 2 ** (k + 1)


class FedPerGNN(Protocol):
    name = "fedpergnn"
    Config = FedPerGNNConfig
    BASELINE_SHARES = {"dim": "dim", "layers": "layers"}
    ATTACKS = declared_in("protocols.fedpergnn.attacks")
    SECURE_SUM = SECURE_SUM  # what the server sums with --secure-aggregation (roles.py)
    # the FedLightGCN thesis on gowalla (the published LightGCN split), which benchmarks.reproduce
    # sets beside ours
    PAPER = PaperFigure(
        on="gowalla",
        method={"recall@20": 0.1661, "ndcg@20": 0.1390},
        baselines={
            "central:lightgcn": ("central LightGCN", {"recall@20": 0.1777, "ndcg@20": 0.1524})
        },
        source="FedLightGCN thesis, gowalla",
    )

    @classmethod
    def central_baseline(cls, params) -> str:
        backbone = params.get("backbone", cls.Config.backbone)
        return "central:lightgcn" if backbone == "lightgcn" else f"central:{backbone}"

    def needs_negatives(self) -> bool:
        return self.config.backbone == "lightgcn"  # |Ĩ_u| sampled negatives per round

    def main_metric(self) -> MainMetric:
        if self.config.backbone == "gat":  # rating prediction
            return MainMetric("rmse", "lower")
        return super().main_metric()

    def __init__(self, dataset: RecDataset, config: FedPerGNNConfig, seed: int):
        super().__init__(dataset, config, seed)
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)
        self.train_ratings = self.test_ratings = None
        self.rating_range = (0.0, 0.0)
        if config.backbone == "gat":  # explicit ratings, aligned with the items above
            self.train_ratings = [r for _, r in ratings_by_user(dataset.train, dataset.n_users)]
            self.test_ratings = [r for _, r in ratings_by_user(dataset.test, dataset.n_users)]
            self.rating_range = (
                float(dataset.train.rating.min()),
                float(dataset.train.rating.max()),
            )
        self.attack: dict[str, float] = {}  # cumulative attack measurements (switches)
        self._attack_sums: dict[str, list[float]] = {}
        self.users = [u for u in range(dataset.n_users) if len(self.train_items[u])]
        largest = max((len(self.train_items[u]) for u in self.users), default=0)
        if largest > config.oprf_budget:  # honest users would be refused their tokens
            raise ConfigError(
                f"oprf_budget: {config.oprf_budget} signatures per user, below the largest "
                f"profile ({largest} items): give oprf_budget >= {2 * largest}"
            )
        self.key_fingerprint: str | None = None  # SHA-256 of the key server's public key
        self.accountant = PrivacyAccountant(delta=config.privacy_delta)
        self.round_epsilon: list[float] = []  # max ε of one upload, per round (exact)
        self.set_up = False
        self.absence_seen = False  # a participant was away or a message late: run ``rejoin``

    @property
    def expand_every(self) -> int:
        c = self.config
        if c.expand_every:
            return c.expand_every
        per_round = c.users_per_round or len(self.users)
        return max(1, math.ceil(len(self.users) / per_round))

    def shared(self) -> Shared:
        lo, hi = self.rating_range
        public = FedPerGNNPublic(
            n_users=self.dataset.n_users,
            n_items=self.dataset.n_items,
            expand_period=self.expand_every,  # P: users tell a stale local graph by it
            rating_min=lo,
            rating_max=hi,
        )
        return Shared(self.config, public)

    @property
    def key_server_ids(self) -> list[str]:
        return [node_id("key_server", r) for r in range(self.config.key_servers)]

    def adversary_users(self) -> list[int]:
        return list(self.users)

    def node_specs(self) -> list[NodeSpec]:
        # with adversaries (adversaries/condition.py): fake users after the real ones, taking
        # part in tokens, expansion and training like any user; compromised users played by the
        # attack's class. The expansion period stays that of the real users.
        adv = self.adversary_plan
        fake = list(adv.fake) if adv is not None else []
        users = np.array(self.users + fake, dtype=np.int64)
        replicas = self.config.key_servers
        specs = [NodeSpec(Server, SERVER, {"users": users})]
        # the replicas' one key, from the operating system (a resumed run's replicas get theirs
        # back from the checkpoint); the driver keeps none of it
        key = key_to_der(new_key(self.config.key_bits))
        for r, nid in enumerate(self.key_server_ids):  # user u → replica u mod R
            served = users[users % replicas == r]
            specs.append(NodeSpec(KeyServer, nid, {"users": served, "key": key}))
        specs.append(NodeSpec(Matcher, MATCHER))
        for u in self.users:
            data = {"train_items": self.train_items[u], "test_items": self.test_items[u]}
            if self.train_ratings is not None:
                data["train_ratings"] = self.train_ratings[u]
                data["test_ratings"] = self.test_ratings[u]
            cls, data = role_of(adv, u, User, data)
            specs.append(NodeSpec(cls, node_id("user", u), data, packable=True))
        for u in fake:  # no data of their own: the attack class makes up its profile
            data = {"train_items": np.zeros(0, np.int64), "test_items": np.zeros(0, np.int64)}
            if self.train_ratings is not None:
                data["train_ratings"] = np.zeros(0, np.float32)
                data["test_ratings"] = np.zeros(0, np.float32)
            cls, data = role_of(adv, u, User, data, fake=True)
            specs.append(NodeSpec(cls, node_id("user", u), data, packable=True))
        return specs

    # --- choreography ---------------------------------------------------------------------------
    def tokenize(self, dep: Deployment, round_: int) -> None:
        """Step 1: every user's item tokens by the blind-RSA OPRF with the key server (the
        paper's third-party server holding the key of the privacy-preserving graph expansion)."""
        dep.status(f"item tokens: blind-RSA OPRF with the key server ({len(self.users)} users)…")
        dep.superstep(round_, "oprf_key", activate=self.key_server_ids)  # (N, e) → users
        self.key_fingerprint = key_fingerprint(*dep.call(self.key_server_ids[0], "public_numbers"))
        dep.superstep(round_, "oprf_blind")  # m' = H(x)·r^e → key server
        dep.superstep(round_, "oprf_sign")  # s' = m'^d → user
        dep.superstep(round_, "oprf_finalize")  # s = s'·r⁻¹, token = SHA-256(s)

    def expand(self, dep: Deployment, round_: int) -> None:
        """Step 2: graph expansion through the matcher."""
        dep.status(f"graph expansion at the matcher ({len(self.users)} users)…")
        dep.superstep(round_, "expand_send", activate=["user"])  # (tokens, e_u) → matcher
        dep.superstep(round_, "expand_match")  # neighbours sharing a token → user, anonymously
        dep.superstep(round_, "expand_receive")  # local subgraph u – I_u – U_u

    def rejoin(self, dep: Deployment, round_: int) -> None:
        """Sampled users who missed step 1 or the current epoch's expansion catch up before they
        train (protocols/fedpergnn/roles.py): each superstep is driven by the previous one's
        messages, so the chain stops as soon as nobody has anything left to do. Longest chain:
        user key request → key → blinded → signed → expansion request → reply → user."""
        for _ in range(REJOIN_STEPS):
            dep.superstep(round_, "rejoin")
            if not dep.has_pending():
                return
        raise RuntimeError(
            f"round {round_}: rejoin messages still in flight after {REJOIN_STEPS} steps"
        )

    def _note_absences(self, dep: Deployment) -> None:
        stats = dep.round_stats()
        if stats.dropped or stats.late:
            self.absence_seen = True

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        if not self.set_up:  # step 1, once: tokens are cached
            self.tokenize(dep, round_)
            self.set_up = True
        if round_ % self.expand_every == 0:  # step 2, every epoch
            self.expand(dep, round_)
            if self.config.attack_dictionary and not self.attack.get("dictionary_tokens_observed"):
                self._dictionary_attack(dep)  # once: the tokens never change
        # step 3: the server samples Ū and sends E (and θ with the gat backbone)
        dep.superstep(round_, "download", activate=[SERVER])
        self._note_absences(dep)
        if self.absence_seen:
            self.rejoin(dep, round_)
            # the sampled users received their download during rejoin and kept it
            res = dep.superstep(round_, "train", activate=["user"])
        else:
            res = dep.superstep(round_, "train")  # local step; clip + Laplace uploads
        # with --secure-aggregation the uploads are masked and the server learns only their sum
        # (nodes/secure_sum.py); the users then report their upload sizes to the accountant
        masked = secure_sum.run_stages(dep, round_)
        # mean of the uploads, Adam step on E (and θ); the server runs even when no upload
        # arrived in time, and reports the round skipped
        agg = dep.superstep(round_, "aggregate", activate=[SERVER])
        self._note_absences(dep)
        self._account({**res.reports, **agg.reports})
        if self.config.attack_gradient_inference:
            self._gradient_inference(dep)
        return {**training_figures(res, agg), **masked}

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        """Step 4: E (and θ) to every user; each ranks (lightgcn) or rates (gat) held-out items."""
        dep.superstep(round_, "eval_download", activate=[SERVER])
        res = dep.superstep(round_, "eval")
        if self.config.backbone == "gat":
            return {"rmse": gat.rmse_from_reports(res.reports)}
        return mean_reports(res.reports)

    # --- attacks (measurement switches) ---------------------------------------------------------
    def _dictionary_attack(self, dep: Deployment) -> None:
        """The matcher enumerates every item id with the token functions it can evaluate without
        the key (public (N, e)): textbook RSA x^e mod N, and the token of the unsigned hash
        SHA-256(label ‖ H(x)); recovery = fraction of the tokens it holds that it maps to an id.
        The control: the same attack on textbook-RSA tokens of the same items (the naive design)."""
        observed = dep.call(MATCHER, "observed_tokens")
        n, e = dep.call(self.key_server_ids[0], "public_numbers")
        public = rsa.RSAPublicNumbers(e, n)
        ids = range(self.dataset.n_items)
        guesses = {
            "textbook_rsa": lambda x: oprf.textbook_rsa_token(x, public),
            "unsigned_hash": lambda x: oprf.token_of_unsigned_hash(x, n),
        }
        for name, fn in guesses.items():
            found = dictionary_attack(observed, ids, fn)
            self.attack[f"dictionary_{name}_recovered"] = len(found) / max(1, len(observed))
        used = np.unique(np.concatenate([self.train_items[u] for u in self.users]))
        naive = {oprf.textbook_rsa_token(int(x), public): int(x) for x in used}
        found = dictionary_attack(naive, ids, guesses["textbook_rsa"])
        self.attack["dictionary_control_textbook_tokens_recovered"] = recovery_rate(found, naive)
        self.attack["dictionary_tokens_observed"] = len(observed)

    def _gradient_inference(self, dep: Deployment) -> None:
        """The curious server's positive-item inference on this round's real uploads, scored
        against the users' items: as uploaded (with pseudo rows) and with the pseudo rows removed
        (what the upload would show without them); ``f1_all_rows`` is the F1 of calling every row
        positive, the figure an attack has to beat."""
        if self.config.backbone == "gat":  # every real row is a rated item: find the real rows
            attack = lambda ids, g: infer_real_rows(g)  # noqa: E731
        else:  # BPR: positives and negatives pull opposite ways
            attack = infer_positive_items
        for src, ids, grads in dep.call(SERVER, "take_attack_views"):
            if src == "secagg":  # (tag, each user's masked input, the mean): see _secagg_inference
                self._secagg_inference(dep, attack, ids, grads)
                continue
            truth = np.isin(ids, self.train_items[index_of(src)])
            pseudo = np.isin(ids, dep.call(src, "get_last_pseudo_items"))
            for tag, keep in (
                ("with_pseudo", np.ones(len(ids), bool)),
                ("without_pseudo", ~pseudo),
            ):
                pred = attack(ids[keep], grads[keep]).numpy()
                p, r, f = precision_recall_f1(pred, truth[keep])
                chance = precision_recall_f1(np.ones(int(keep.sum()), bool), truth[keep])[2]
                for name, v in (
                    ("precision", p),
                    ("recall", r),
                    ("f1", f),
                    ("f1_all_rows", chance),
                ):
                    self._attack_sums.setdefault(f"gradient_inference_{tag}_{name}", []).append(v)
        for name, values in self._attack_sums.items():
            self.attack[name] = math.fsum(values) / len(values)
        self.attack["gradient_inference_uploads"] = len(
            self._attack_sums.get("gradient_inference_with_pseudo_f1", [])
            or self._attack_sums.get("gradient_inference_secagg_masked_f1", [])
        )

    def _secagg_inference(self, dep: Deployment, attack, masked: dict, mean: np.ndarray) -> None:
        """The same attack under secure aggregation, on what the server holds: each user's
        masked input (read as its item rows) and the round's mean. The attacker is even told
        which rows the user uploaded (an oracle it does not have), so the F1 compares with the
        clear-text figures; ``f1_all_rows`` is the guess on those rows."""
        for src, rows in masked.items():
            ids = dep.call(src, "get_last_upload_ids")
            truth = np.isin(ids, self.train_items[index_of(src)])
            chance = precision_recall_f1(np.ones(len(ids), bool), truth)[2]
            for tag, view in (("masked", rows[ids]), ("sum", mean[ids])):
                p, r, f = precision_recall_f1(attack(ids, view).numpy(), truth)
                for name, v in (
                    ("precision", p),
                    ("recall", r),
                    ("f1", f),
                    ("f1_all_rows", chance),
                ):
                    key = f"gradient_inference_secagg_{tag}_{name}"
                    self._attack_sums.setdefault(key, []).append(v)

    # --- privacy --------------------------------------------------------------------------------
    def _account(self, reports: dict[str, list[float]]) -> None:
        c = self.config
        lam = upload_laplace(c)  # the noise on the upload the server receives
        worst = 0.0
        for name, values in sorted(reports.items()):
            if not name.startswith("upload_coords/"):
                continue
            user = name.split("/", 1)[1]
            n = int(values[0])
            self.accountant.spend(
                [user], laplace_vector_event(c.clip, lam, _bucket(n)), "item_grad_upload"
            )
            worst = max(worst, laplace_epsilon_vector(c.clip, lam, n) if lam else math.inf)
        self.round_epsilon.append(worst)

    def audits(self) -> list:
        """One coordinate of an upload as the server receives it: clipped to [−δ, δ], then
        Laplace(λ) (``privacy.ldp.perturbed_upload``; the authors' code's calibration uploads
        it without noise, ``upload_laplace``), beside the thesis's 2δ/λ."""
        from privacy import audit as pa
        from privacy.accountant import epsilon_of, laplace_vector_event
        from protocols.fedpergnn.config import upload_laplace

        c = self.config
        lam = upload_laplace(c)
        return [
            pa.Audit(
                name=f"Laplace upload, δ = {c.clip:g}, λ = {lam:g}, one coordinate",
                code_path="privacy.ldp.perturbed_upload",
                neighbours="gradient coordinate −1000δ vs +1000δ (clipped to ∓δ)",
                sampler=pa.laplace_upload_sampler(c.clip, lam, 1),
                rigorous=epsilon_of(laplace_vector_event(c.clip, lam, 1), 1, c.privacy_delta),
                rigorous_text="accountant: laplace_vector_event(clip, λ, 1)",
                delta=c.privacy_delta,
                paper=pa.Claim(
                    laplace_epsilon_per_coordinate(c.clip, c.laplace_scale),
                    "epsilon",
                    "2δ/λ per coordinate (thesis)",
                ),
                samples=10_000_000,
                note="authors' code: the upload is only clipped (the server noises the model)"
                if c.calibration == "authors_code"
                else "",
            )
        ]

    def privacy(self) -> PrivacyReport:
        """The worst user's ε, composed over its uploads as the server receives them, beside the
        thesis's ε = 2δ/λ per coordinate of an upload."""
        c = self.config
        noise = (
            "clip to [-clip, clip] + Laplace(laplace_scale) per coordinate of each upload; "
            if c.calibration == "thesis"
            else "uploads clipped to [-clip, clip] only; the server adds "
            "Laplace(lr_item·laplace_scale/√B) to every weight after each update (authors' "
            "code); "
        )
        per_coordinate = laplace_epsilon_per_coordinate(c.clip, c.laplace_scale)
        return PrivacyReport(
            mechanism="laplace",
            epsilon=self.accountant.worst_epsilon(),
            delta=c.privacy_delta,
            unit="user",
            per_element=per_coordinate if c.calibration == "thesis" else None,
            paper=PaperClaim(per_coordinate, "ε per coordinate of an upload"),
            attacks=self.attack,
            details={
                "epsilon_per_coordinate_thesis": per_coordinate,
                "epsilon_last_round_max_upload": (
                    self.round_epsilon[-1] if self.round_epsilon else 0.0
                ),
                "calibration": c.calibration,
                "noise": noise + "rigorous ε composes each user's uploads as the server "
                "receives them (vector L1 sensitivity 2·clip·n, n rounded up to 2^k or 1.5·2^k)",
                "unprotected": "e_u goes to the matcher without noise (as in the paper)",
                "accountant": self.accountant.summary(),
                **key_report(c.key_bits, self.key_fingerprint),
            },
        )


class FedLightGCN(FedPerGNN):
    """``fedpergnn`` with the LightGCN backbone (the thesis's FedLightGCN)."""

    name = "fedlightgcn"
    # the main job: every user every round, fewer sampled negatives, 1024-bit blind-RSA keys and
    # a faster server learning rate, so that four rounds learn something
    QUICK = {
        "rounds": 4,
        "dim": 32,
        "users_per_round": 0,
        "negatives": 256,
        "key_bits": 1024,
        "lr_item": 0.05,
        "eval_every": 1,
    }
