"""verfedgnn — vertical federated GNN recommendation (Mai & Pang, ICML 2023, Algorithm 1).

P parties share the users and own disjoint items (data/partition.py ``partition_items``); each
keeps its items' embeddings e_v^0 and its user–item ratings (edges: ratings ≥ ``thd``) private. A
server keeps the public parameters θ: user embeddings e_u^0, layer weights W^k, layer-combination
weights a_k, and the attention vectors (GAT) or GRU weights (GGNN). Node ids: ``party/p``,
``server/0`` and, for the PSI, ``key_server/0``.

Round 0 first aligns the users (step 1, protocols/verfedgnn/psi.py) when ``psi`` is on:

``psi_key``    key server → parties: its RSA public key (bigints), drawn from the operating
               system (never from the seed; the report gives its fingerprint).
``psi_blind``  parties → key server: blinded full-domain hashes of their user ids (values at the
               modulus' byte length), after checking the key.
``psi_sign``   key server → parties: blind signatures (the same form).
``psi_tokens`` parties → server: sorted 32-byte OPRF tokens (blob).
``psi_match``  server → parties: positions of the common tokens in each party's sorted list (ids).
``psi_align``  parties order the common users by id (the aligned user index 0..N−1, the same at
               every party and independent of the key), re-index their ratings by it and build
               their local model.

The alignment is a set-up between organisations and waits for every party (exempt from the
run's availability model, see ``align``). A node restored from a snapshot taken before it (a
killed host, nodes/deployment.py) lost it: a party asks to rejoin (``rejoin``: the PSI again,
mapped onto the set-up's common tokens); the server, without θ, sends nothing at ``download``
and the whole set-up runs again at the end of that round (an aligned party keeps its model).

Every round (one iteration t of Algorithm 1):

``download``    server samples A_t: S = max(1, round(αP)) parties (partial participation) drawn
                uniformly among the parties it can reach this round (fewer if fewer are
                online: an offline party is not in A_t), draws the seed of Φ and sends each
                participant a record: [seed, participant ids, θ (dense fp32)].
``exchange{j}`` each participant computes its N×D neighbour aggregations X_p^k (GCN eqs. 12–13,
                GAT eqs. 14–15, GGNN eq. 16; models/rating_gnn) for the layers of exchange step j
                and sends Y_p^k = Φ X_p^k (Φ q×N, entries N(0, 1/q), q = N/5; privacy/projection.py)
                to every other participant as one dense [L_j, q, D] tensor; each receiver
                reconstructs Σ_{q≠p} X̂_q^k = Φᵀ Σ_{q≠p} Y_q^k over the tensors that arrived
                (a participant lost to a fault sends none). Layers are grouped into as few
                steps as the dependencies allow (``exchange_schedule``): for GCN/GGNN X^k needs
                e_v^{k−1}, which needs the complete e_u^{k−2}, so K = 2 takes one step; for GAT
                the attention in X^k needs the complete e_u^{k−1}, so every layer takes a step.
``train``       each participant runs the K layers with the reconstructed aggregates (scaled by
                M / Σ_{q∈S} M_q under partial participation, S: itself and the participants whose
                aggregates arrived), computes the loss on a minibatch of its own ratings,
                r̂ = h_uᵀh_v, h = Σ_k a_k e^k (eq. 5), updates its private item embeddings
                locally (Adagrad), clips the gradient of θ to [−B, B] and quantizes it (ternary,
                eqs. 19–20; or Laplace noise, Appendix J.2) and sends it to the server.
``aggregate``   server: eq. 21 estimate (P/S)·Σ_{p∈S} g_p of the all-party gradient over the S
                gradients that arrived, plus the L2 term of the user embeddings, and an Adagrad
                step on θ; with fewer than ``min_participants`` (run condition) it skips the
                update (``skipped``). The privacy accounting counts the gradients the parties
                really sent.

Evaluation (``eval_download``, ``eval_exchange{j}``, ``eval``) runs the same forward pass with
every aligned party (evaluation ignores availability) and reports the squared errors of each party's held-out ratings (clamped to the
rating range): RMSE on validation and test. Its traffic is ledgered apart (eval phases).

De-anonymization attack (§4.1, §6.2.3, Appendix I; ``attack = true``): party ``attack_party``
registers one adversarial user for each of a random fraction ``attack_p_ad`` of party
``attack_victim``'s items; each rates that one item (the highest rating, so it is an edge), and
goes through the PSI like any user. At every evaluation the attacker takes the victim's
projected first-layer aggregate it received, X̂ = ΦᵀY_victim, and infers each honest user's
items as the ≤ c adversarial rows whose combination is closest in l1 (eq. I.1,
privacy/leakage/deanonymization.py); ``evaluate`` scores it against the victim's true edges
(``attack_verfedgnn_*``) beside the same attack on a FedPerGNN-style exchange of individual
neighbour embeddings (``attack_fedpergnn_style_*``, a counterfactual computed from the victim's
item embeddings; protocols/verfedgnn/deanonymization.py).

Parameters: protocols/verfedgnn/config.py; roles and payloads: protocols/verfedgnn/roles.py,
protocols/verfedgnn/messages.py.

Data split 60/20/20: the dataset's per-user random train/test split (``load_dataset(...,
split="random", test_fraction=0.2)``, the default) is 80/20; 25 % of each user's training ratings
(data/splits.py ``random_split``) become validation: 60/20/20. A dataset with its own ``val``
keeps it.
"""

from __future__ import annotations

import math

import numpy as np

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from cluster.message import node_id
from data.partition import partition_items
from data.splits import random_split
from data.types import Interactions, RecDataset
from models.rating_gnn import global_mean_rmse
from nodes.deployment import Deployment, NodeSpec, StepResult, mean_report
from nodes.node import Shared
from privacy.accountant import (
    PrivacyAccountant,
    approx_dp_event,
    laplace_vector_event,
)
from privacy.key_server import key_fingerprint, key_report
from privacy.ldp import laplace_epsilon_per_coordinate, laplace_epsilon_vector
from privacy.ternary import ternary_delta
from protocols.base import MainMetric, PaperClaim, PaperFigure, PrivacyReport, Protocol
from protocols.verfedgnn import deanonymization
from protocols.verfedgnn.aggregation import exchange_schedule
from protocols.verfedgnn.config import VerFedGNNConfig, VerFedGNNPublic
from protocols.verfedgnn.roles import (
    KEY_SERVER,
    SERVER,
    VerFedGNNKeyServer,
    VerFedGNNParty,
    VerFedGNNServer,
)

PSI_PHASES = ("psi_key", "psi_blind", "psi_sign", "psi_tokens", "psi_match", "psi_align")


def split_60_20_20(
    dataset: RecDataset, seed: int
) -> tuple[Interactions, Interactions, Interactions]:
    """(train, val, test): the dataset's val if it has one, else 25 % of each user's training
    ratings (the dataset's 80/20 random split then gives 60/20/20)."""
    if dataset.val is not None and len(dataset.val):
        return dataset.train, dataset.val, dataset.test
    train, val = random_split(dataset.train, dataset.n_users, 0.25, seed)
    return train, val, dataset.test


class VerFedGNN(Protocol):
    name = "verfedgnn"
    Config = VerFedGNNConfig
    # the main job: two parties, 1024-bit PSI keys, and the de-anonymization attack at the end
    QUICK = {
        "rounds": 60,
        "parties": 2,
        "psi_key_bits": 1024,
        "deanonymization": True,
        "eval_every": 20,
    }
    BASELINE_SHARES = {"dim": "dim", "layers": "layers", "thd": "thd", "activation": "activation"}
    # Mai & Pang, ICML 2023, report RMSE on ML-1M and Book-Crossing; no figure of their table is
    # in this repository, and the search tool (https://arxiv.org/html/2303.05786v3) returned the
    # set-up but not the table: not recorded
    PAPER = PaperFigure(on="ML-1M", source="Mai & Pang, ICML 2023 (table not recorded)")
    # adversaries (adversaries/): compromised parties (protocols/verfedgnn/attacks.py) chosen
    # by (seed, party node id); the defence is the server's combination of the gradients (eq. 21)
    ATTACKS = declared_in(
        "protocols.verfedgnn.attacks",
        "byzantine-scaled",
        "byzantine-signflip",
        "byzantine-random",
        "malformed",
    )
    ADVERSARY_ROLE = "party"

    @classmethod
    def central_baseline(cls, params) -> str:
        return f"central:{params.get('gnn', cls.Config.gnn)}"  # the same GNN, one party

    def main_metric(self) -> MainMetric:
        return MainMetric("rmse", "lower")

    def __init__(self, dataset: RecDataset, config: VerFedGNNConfig, seed: int):
        super().__init__(dataset, config, seed)
        if not dataset.has_ratings:
            raise ValueError(
                "verfedgnn needs explicit ratings (dataset loaded with implicit=False)"
            )
        c = config
        self.train, self.val, self.test = split_60_20_20(dataset, c.split_seed)
        self.owner = partition_items(dataset.n_items, c.parties, c.split_seed)
        self.party_items = [int((self.owner == p).sum()) for p in range(c.parties)]
        if min(self.party_items) == 0:
            raise ValueError(f"{dataset.n_items} items cannot give each of {c.parties} parties one")
        self.schedule = exchange_schedule(c.gnn, c.layers)
        self.participation_counts = np.zeros(c.parties, dtype=np.int64)
        self.accountant = PrivacyAccountant(delta=c.privacy_delta)
        self.n_public: int | None = None
        self.key_fingerprint: str | None = None  # SHA-256 of the PSI key server's public key
        self.baseline = global_mean_rmse(self.train, self.test)
        self.n_users = dataset.n_users  # honest users, then the adversarial ones (attack)
        self.adversaries: deanonymization.Adversaries | None = None
        if (
            c.deanonymization
        ):  # adversarial users, ids n_users.., one rating (≥ thd) of a victim item each
            self.adversaries = deanonymization.register_adversaries(
                self.owner, c.attack_victim, c.attack_p_ad, dataset.n_users, (seed, c.split_seed)
            )
            rating = max(float(self.train.rating.max()), c.thd)
            self.train = deanonymization.add_ratings(self.train, self.adversaries, rating)
            self.n_users += len(self.adversaries.users)

    def adversary_users(self) -> list[int]:
        return list(range(self.config.parties))  # the participants that can be compromised

    def set_adversaries(self, condition) -> None:
        from adversaries.condition import AdversaryError

        super().set_adversaries(condition)
        if self.adversary_plan is not None and self.adversary_plan.fake:
            raise AdversaryError(
                "mode: verfedgnn's adversaries are compromised parties (mode 'compromised')"
            )

    def shared(self) -> Shared:
        r = self.train.rating
        public = VerFedGNNPublic(
            n_users=self.n_users,
            n_items=self.dataset.n_items,
            party_items=tuple(self.party_items),
            rating_min=float(r.min()),
            rating_max=float(r.max()),
        )
        return Shared(self.config, public)

    def _party_triples(self, inter: Interactions, p: int, local: np.ndarray):
        keep = self.owner[inter.item] == p
        return (
            inter.user[keep].astype(np.int64),
            local[inter.item[keep]],
            inter.rating[keep].astype(np.float32),
        )

    def node_specs(self) -> list[NodeSpec]:
        c = self.config
        specs = [NodeSpec(VerFedGNNServer, SERVER)]
        if c.psi:
            specs.append(NodeSpec(VerFedGNNKeyServer, KEY_SERVER))
        n = self.n_users
        for p in range(c.parties):
            items = np.flatnonzero(self.owner == p)
            local = -np.ones(self.dataset.n_items, dtype=np.int64)
            local[items] = np.arange(len(items))
            extra = n + p * c.psi_extra_users + np.arange(c.psi_extra_users)
            kwargs = {
                "user_ids": np.concatenate([np.arange(n), extra]).astype(np.int64),
                "items": items,
                "train": self._party_triples(self.train, p, local),
                "val": self._party_triples(self.val, p, local),
                "test": self._party_triples(self.test, p, local),
            }
            if self.adversaries is not None and p == c.attack_party:
                kwargs["adversaries"] = self.adversaries
            # a compromised party is played by the attack's class (adversaries/)
            cls, kwargs = role_of(self.adversary_plan, p, VerFedGNNParty, kwargs)
            specs.append(NodeSpec(cls, node_id("party", p), kwargs))
        return specs

    def align(self, dep: Deployment, round_: int) -> None:
        """Step 1: OPRF-PSI user alignment (round 0).

        Exempt from availability (``availability=False``): the alignment is a set-up between the
        organisations, done once before the first iteration (Algorithm 1, step 1). The parties
        are organisations' servers that agree to federate, and iterations cannot start until
        every one of them has aligned, so the set-up waits for all of them; the run condition's
        per-round absence of a party concerns the iterations (A_t, eq. 21), not the set-up.
        It runs again at the end of a round in which the server, restored from a snapshot taken
        before the set-up, reported that it lost it (``run_round``)."""
        dep.status(f"user alignment: OPRF-PSI among {self.config.parties} parties…")
        for phase in PSI_PHASES:
            dep.superstep(
                round_,
                phase,
                activate=[KEY_SERVER] if phase == "psi_key" else (),
                availability=False,
            )
        self.key_fingerprint = key_fingerprint(*dep.call(KEY_SERVER, "public_numbers"))

    def rejoin(self, dep: Deployment, round_: int, parties: list[int]) -> None:
        """The PSI again for ``parties``, which lost their alignment (a host restored from a
        snapshot taken before the set-up); they asked in this round's ``train``, so they are
        online, and the server maps them onto the set-up's common tokens. Subject to
        availability like any step of a round: a party lost again asks again next round."""
        dep.superstep(round_, "psi_request", activate=[node_id("party", p) for p in parties])
        for phase in PSI_PHASES:
            dep.superstep(round_, phase)

    def _forward(self, dep: Deployment, round_: int, prefix: str) -> StepResult:
        """Step 2 (server → A_t: seed of Φ, θ) and the exchanges of the forward pass (parties:
        Y_p^k = Φ X_p^k of eqs. 12–16 → the other participants). Returns the download step."""
        download = dep.superstep(round_, f"{prefix}download", activate=[SERVER])
        for j in range(1, len(self.schedule) + 1):
            dep.superstep(round_, f"{prefix}exchange{j}", activate=["party"])
        return download

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        """One iteration t of Algorithm 1 (after the step-1 alignment in round 0)."""
        if round_ == 0 and self.config.psi:
            self.align(dep, round_)
        if self.n_public is None:
            self.n_public = int(dep.call(SERVER, "get_theta").shape[0])
        download = self._forward(dep, round_, "")
        # step 3: loss (eq. 5), local item step, clipped + ternary gradient of θ (eqs. 19–20)
        res = dep.superstep(round_, "train", activate=["party"])
        # the server: eq. 21 estimate over the gradients that arrived, Adagrad on θ
        agg = dep.superstep(round_, "aggregate", activate=[SERVER])
        # releases that happened: the parties of A_t that were there to send their gradient
        released = np.array(sorted(int(p) for p in res.reports.get("released", [])), np.int64)
        self.participation_counts[released] += 1
        if self.config.mechanism != "none":
            self.accountant.spend(released, self._release_event(), self.config.mechanism)
        lost = sorted(int(p) for p in res.reports.get("needs_alignment", []))
        if self.config.psi and download.reports.get("server_needs_alignment"):
            # the server, restored from a snapshot taken before the set-up, lost θ and the common
            # tokens: the whole set-up again (every party; an aligned one keeps its model, the
            # index being the same), and the server starts over from θ's initial draw
            self.align(dep, round_)
        elif lost and self.config.psi:
            self.rejoin(dep, round_, lost)
        return {
            "loss": mean_report(res.reports, "loss"),
            "participants": len(released),
            "exchange_steps": len(self.schedule),
            "skipped": len(agg.reports.get("skipped", [])),
        }

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        self._forward(dep, round_, "eval_")
        res = dep.superstep(round_, "eval", activate=["party"])
        out = {}
        for name in ("val", "test"):
            n = math.fsum(res.reports.get(f"{name}_n", []))
            if n:
                out[f"{name}_rmse"] = math.sqrt(math.fsum(res.reports[f"{name}_se"]) / n)
        out["rmse"] = out.get("test_rmse", float("nan"))
        out["global_mean_rmse"] = self.baseline
        if self.adversary_plan is not None:
            out.update(self.target_exposure(dep))
        if self.adversaries is not None:
            out.update(self.deanonymization(dep))
        return out

    def target_exposure(self, dep: Deployment) -> dict[str, float]:
        """The targets' exposure to honest users (adversaries/condition.py), over predicted
        ratings: every honest party sends the driver, per aligned user, its best ``er_k``
        predicted ratings among its items the user did not rate in training and its targets'
        predicted ratings (``get_target_view``; a compromised party's are not measured, nor are
        its held-out ratings in the RMSE). Over the honest users (the dataset's) and the targets
        they did not rate: ``target_er@K``, the share of such users with one of those targets in
        the top K of the honest parties' items; ``target_hr@K``, the share of (user, target) pairs in the
        top K; ``target_rating``, the targets' mean predicted rating (clamped to the rating
        range)."""
        k = self.adversary_plan.threat.er_k
        views = [dep.call(node_id("party", p), "get_target_view") for p in self.adversary_users()]
        views = [v for v in views if v is not None]
        if not views:
            return {}
        honest = views[0]["users"] < self.dataset.n_users
        best = np.concatenate([v["best"] for v in views], axis=1)[honest]
        kth = -np.partition(-best, min(k, best.shape[1]) - 1, axis=1)[:, min(k, best.shape[1]) - 1]
        scores = np.concatenate([v["target_scores"] for v in views], axis=1)[honest]
        open_ = ~np.concatenate([v["target_rated"] for v in views], axis=1)[honest]
        if not open_.any():
            return {}
        hit = (scores >= kth[:, None]) & open_
        users = open_.any(1)
        r = self.train.rating
        clamped = np.clip(scores, float(r.min()), float(r.max()))
        return {
            f"target_er@{k}": float(hit.any(1)[users].mean()),
            f"target_hr@{k}": float(hit.sum() / open_.sum()),
            "target_rating": float(clamped[open_].mean()),
        }

    def deanonymization(self, dep: Deployment) -> dict[str, float]:
        """The attacker's inference from the victim's last projected aggregate (X̂ = ΦᵀY of the
        first layer, evaluation exchange), scored against the victim's true edges; beside it the
        same attack had the victim sent each neighbour embedding in the clear (FedPerGNN-style,
        computed here from the victim's item embeddings: a counterfactual, nothing is sent)."""
        c = self.config
        victim = node_id("party", c.attack_victim)
        inference = dep.call(node_id("party", c.attack_party), "get_deanonymization")
        victim_emb = dep.call(victim, "get_item_embeddings")
        return deanonymization.score_protocol_attack(
            inference,
            victim_emb,
            np.flatnonzero(self.owner == c.attack_victim),
            self.train,
            self.adversaries,
            n_honest=self.dataset.n_users,
            n_items=self.dataset.n_items,
            thd=c.thd,
        )

    def _l1_sensitivity(self) -> float:
        """Neighbouring = one rating of a party changed, which can move every coordinate of the
        gradient clipped to [−B, B]: Δ₁ = 2B·|θ|."""
        return 2.0 * self.config.clip * self.n_public

    def _release_event(self):
        """One party's gradient release as a dp-accounting event: ternary quantization (eq. 6)
        is (0, min(1, Δ₁/r))-DP; Laplace(0, b) noise is ε = Δ₁/b per release."""
        c = self.config
        if c.mechanism == "laplace":
            return laplace_vector_event(c.clip, c.laplace_scale, self.n_public)
        return approx_dp_event(0.0, ternary_delta(self._l1_sensitivity(), c.ternary_r).delta)

    def audits(self) -> list:
        """One coordinate of a party's release (protocols/verfedgnn/audit.py)."""
        from protocols.verfedgnn.audit import run_audits

        return run_audits(self.config)

    def privacy(self) -> PrivacyReport:
        """The rigorous ε at ``privacy_delta`` of the worst party, composed by the one accountant
        over the releases it really made (a party absent from a round releases nothing), beside
        the paper's per-coordinate figures: (0, 1/r) for ternary, 2B/b for Laplace."""
        c = self.config
        releases = int(self.participation_counts.max(initial=0))
        details: dict = {"releases": releases}
        if c.psi:  # the PSI's key: fingerprint and size (flagged below 2048 bits)
            details.update(key_report(c.psi_key_bits, self.key_fingerprint))
        report = dict(mechanism=c.mechanism, delta=c.privacy_delta, unit="party", details=details)
        if self.n_public is None:
            return PrivacyReport(epsilon=0.0, **report)
        if c.mechanism == "none":
            return PrivacyReport(epsilon=math.inf, **report)
        l1 = self._l1_sensitivity()
        details["l1_sensitivity"] = l1
        if c.mechanism == "ternary":
            per = ternary_delta(l1, c.ternary_r)
            details["privacy_delta_per_release"] = per.delta
            details["paper_delta_per_release"] = per.paper_delta
            details["paper_delta_composed"] = min(1.0, releases * per.paper_delta)
            return PrivacyReport(
                epsilon=self.accountant.worst_epsilon(),
                delta_spent=min(1.0, releases * per.delta),  # (0, kδ₁) by composition
                paper=PaperClaim(
                    per.paper_delta,
                    "δ per release at ε = 0",
                    kind="delta",
                    composed=details["paper_delta_composed"],
                ),
                **report,
            )
        per_coordinate = laplace_epsilon_per_coordinate(c.clip, c.laplace_scale)
        details["epsilon_per_release"] = laplace_epsilon_vector(
            c.clip, c.laplace_scale, self.n_public
        )
        details["epsilon_per_coordinate"] = per_coordinate
        return PrivacyReport(
            epsilon=self.accountant.worst_epsilon(),
            per_element=per_coordinate,
            paper=PaperClaim(per_coordinate, "ε per coordinate"),
            **report,
        )
