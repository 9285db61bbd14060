"""PFedRec — dual personalization on federated recommendation (Zhang, Long, Zhou, Yan, Zhang,
Zhang and Yang, IJCAI 2023; code: github.com/Zhangcx19/IJCAI-23-PFedRec), built on privrec's
public API only, as a package installed beside privrec.

Every user is a client with its own data. Its model has no user embedding: a personal score
function φ_u = (w_u, b_u) scores an item from the item's embedding, and the client keeps a
personal item table E_u, fine-tuned from the global item embeddings E that the server averages.
Both are "dual personalization": the score function never leaves the device, the item table is
shared but personalized after every download. The equations are numbered here (in the order of
the paper's Algorithm 1 and the authors' engine.py):

    ŷ_ui = σ(w_u·e_i + b_u)                                                        (1)
    L_u  = − mean over the client's batch of [y log ŷ + (1 − y) log(1 − ŷ)]        (BCE)

One round (``run_round``):

1. ``download``  the server samples S_t (``users_per_round``; the paper: every client) and sends
                 each the global item embeddings E (dense fp32 [|I|, d]).
2. ``train``     each sampled client sets E_u ← E, draws ``negatives`` negatives per positive
                 and, per mini-batch of ``batch_size`` examples, for ``local_epochs`` passes:
                     φ_u ← φ_u − η ∇_φ L_u(φ_u, E_u)                  (2)  score function first
                     E_u ← E_u − η·|I|·lr_eta ∇_E L_u(φ_u, E_u)       (3)  then its item view
                 It keeps φ_u and E_u (its personal model) and uploads
                     Ẽ_u = E + clip(E_u − E, −clip, clip) + Laplace(0, b)^{|I|×d}        (4)
                 — plain E_u when ``clip`` = ``laplace_scale`` = 0 (the paper's PFedRec); with them,
                 the privacy-enhanced PFedRec (the paper adds Laplace noise to the uploaded item
                 embeddings; the clip bounds the sensitivity, so that ε is finite).
3. ``aggregate`` the server averages the tables that arrived (sender order, float64 sums):
                     E ← (1/|A_t|) Σ_{u ∈ A_t} Ẽ_u                    (5)
                 A_t ⊆ S_t: an offline client never uploads; with fewer than ``min_participants``
                 tables (a run condition) the server keeps E and reports the round ``skipped``.
                 Malformed uploads (shape, non-finite values, a second upload) are dropped and
                 counted (``rejected``).

Evaluation (``eval_download``/``eval``): the server sends E to every client (ledgered as
evaluation); a client that has trained ranks with its personal model (E_u, φ_u) — as in the
authors' code, E_u is the table of its last participation — and one that has not with E and φ^0.
Each reports Recall/NDCG/Precision/Hit/MRR@eval_k over every item it has not trained on (our
protocol, the one every privrec protocol is judged by) and ``sampled_hr@10`` /
``sampled_ndcg@10``: each test item ranked among ``eval_negatives`` = 99 sampled non-interacted
items (the paper's protocol — there on a leave-one-out split, one test item per user, the latest;
here on the run's split, averaged over the user's test items).

Privacy (``privacy``): without ``laplace_scale`` the uploads are the clients' item tables in the clear
(``mechanism`` ""; no DP). With it, every upload is a Laplace release of |I|·d coordinates, each
clipped to [−clip, clip]: under local DP (any two datasets of one client are neighbours) the whole
vector may change, so its L1 sensitivity is 2·clip·|I|·d and one upload costs ε = 2·clip·|I|·d/b;
the accountant (privacy/accountant.py) composes each client's uploads over the rounds. Without a
clip (the paper's noise alone) the sensitivity is unbounded and ε = ∞. The paper states no ε for
its noise that we could find (``paper`` is None); ``details`` also gives the per-coordinate
figure 2·clip/b that the LDP literature on recommendation usually quotes.

Bytes per round (no dropout): |S_t| downloads and |S_t| uploads of ``messages.table_size`` =
11 + 4·|I|·d bytes each (tests/integration/test_plugin.py checks the ledger against it).
"""

from __future__ import annotations

import math

import numpy as np

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from cluster.message import index_of, node_id
from data.types import RecDataset
from nodes import secure_sum
from nodes.deployment import Deployment, NodeSpec, mean_reports, training_figures
from nodes.node import Shared
from privacy.accountant import PrivacyAccountant, laplace_vector_event
from privacy.ldp import laplace_epsilon_per_coordinate, laplace_epsilon_vector
from privrec_pfedrec.config import PFedRecConfig, PFedRecPublic
from privrec_pfedrec.roles import SECURE_SUM, SERVER, PFedRecServer, PFedRecUser
from protocols.base import PaperFigure, PrivacyReport, Protocol


class PFedRec(Protocol):
    name = "pfedrec"
    Config = PFedRecConfig
    # the main job's settings (a small demonstration, not the paper's 100 rounds)
    QUICK = {"rounds": 20, "dim": 16, "eval_every": 5}
    # its central baseline has the same embedding size
    BASELINE_SHARES = {"dim": "dim"}
    # with --secure-aggregation the server learns only eq. (5)'s sum (roles.py)
    SECURE_SUM = SECURE_SUM
    # the attacks its clients can play, with the classes of this package that play them
    # (attacks.py); the server's defence is the run's --defence (roles.py, eq. (5))
    ATTACKS = declared_in(
        "privrec_pfedrec.attacks", "byzantine-scaled", "byzantine-signflip", "byzantine-random"
    )
    # the paper's MovieLens-100K figures (HR@10, NDCG@10 with 99 sampled negatives) could not be
    # read from a source we had: none is stated here rather than one from memory
    PAPER: PaperFigure | None = None

    @classmethod
    def central_baseline(cls, params) -> str:
        # the paper's centralized baselines are MF and NCF trained on all data in one place;
        # privrec's nearest is BPR-MF
        return "central:bprmf"

    def __init__(self, dataset: RecDataset, config: PFedRecConfig, seed: int):
        super().__init__(dataset, config, seed)
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)
        self.users = [u for u in range(dataset.n_users) if len(self.train_items[u])]
        self.accountant = PrivacyAccountant(delta=config.privacy_delta)
        self.releases = 0  # uploads made under the LDP mechanism, all clients together

    def shared(self) -> Shared:
        d = self.dataset
        return Shared(self.config, PFedRecPublic(d.n_users, d.n_items, init_seed=self.seed))

    def node_specs(self) -> list[NodeSpec]:
        # the server and one client per user with training data (the others take no part); a
        # compromised client (--adversaries) is played by its attack's class
        specs = [NodeSpec(PFedRecServer, SERVER, {"users": np.array(self.users)})]
        for u in self.users:
            private = {"train_items": self.train_items[u], "test_items": self.test_items[u]}
            cls, private = role_of(self.adversary_plan, u, PFedRecUser, private)
            specs.append(NodeSpec(cls, node_id("user", u), private, packable=True))
        return specs

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "download", activate=[SERVER])  # step 1: E to the clients S_t
        res = dep.superstep(round_, "train")  # step 2: eqs. (2)-(4), Ẽ_u up
        self._account(res.reports)
        masked = secure_sum.run_stages(dep, round_)  # --secure-aggregation: masked tables
        # step 3: eq. (5); the server runs even when no upload arrived in time (then: skipped)
        agg = dep.superstep(round_, "aggregate", activate=[SERVER])
        out = {**training_figures(res, agg), **masked}
        out["rejected"] = len(agg.reports.get("rejected", []))
        return out

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "eval_download", activate=[SERVER])
        res = dep.superstep(round_, "eval")
        return mean_reports(res.reports)

    # --- privacy --------------------------------------------------------------------------------
    @property
    def coordinates(self) -> int:
        """Coordinates of one upload: the whole item table, |I|·d."""
        return self.dataset.n_items * self.config.dim

    def _account(self, reports: dict[str, list[float]]) -> None:
        """Charge every client that released an upload this round (it did, whether or not the
        upload arrived in time): one Laplace vector release, L1 sensitivity 2·clip·|I|·d."""
        c = self.config
        if c.laplace_scale <= 0:
            return
        released = sorted(
            index_of(name.split("/", 1)[1]) for name in reports if name.startswith("released/")
        )
        self.releases += len(released)
        if c.clip > 0 and released:
            event = laplace_vector_event(c.clip, c.laplace_scale, self.coordinates)
            self.accountant.spend(released, event, "item_table_upload")

    def privacy(self) -> PrivacyReport:
        c = self.config
        if c.laplace_scale <= 0:
            what = (
                "none: the clients' item tables travel in the clear"
                if c.clip <= 0
                else "clipped updates without noise: no DP"
            )
            return PrivacyReport(mechanism="", details={"upload_protection": what})
        if c.clip > 0:
            epsilon = self.accountant.worst_epsilon() if self.releases else 0.0
            per_coordinate = laplace_epsilon_per_coordinate(c.clip, c.laplace_scale)
            per_upload = laplace_epsilon_vector(c.clip, c.laplace_scale, self.coordinates)
        else:  # the paper's noise without a clip: the sensitivity is unbounded
            epsilon = math.inf if self.releases else 0.0
            per_coordinate = per_upload = math.inf
        return PrivacyReport(
            mechanism="laplace",
            epsilon=epsilon,
            delta=c.privacy_delta,
            unit="user",
            per_element=per_coordinate,
            paper=None,  # the paper states no ε for its Laplace noise (none found)
            details={
                "noise": "LDP on each upload: the item-table update clipped to [-clip, clip] per "
                "coordinate, Laplace(0, laplace_scale) noise on all |I|·d coordinates; ε per "
                "client over its uploads (vector L1 sensitivity 2·clip·|I|·d)",
                "epsilon_per_upload": per_upload,
                "epsilon_per_coordinate": per_coordinate,
                "coordinates_per_upload": self.coordinates,
                "releases": self.releases,
                "accountant": self.accountant.summary(),
            },
        )
