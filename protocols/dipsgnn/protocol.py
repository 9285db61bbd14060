"""dipsgnn — differentially private sequential recommendation with a noisy gated GNN
(Hu & Fang, "Towards Differential Privacy in Sequential Recommendation: A Noisy Graph Neural
Network Approach"), in the paper's trusted-curator model.

Roles (protocols/dipsgnn/roles.py): ``user/u`` (packed) holds its behaviour sequence (items in
time order, the ``max_len`` most recent) and its sensitive features; ``server/0`` is the curator
that trains the network. Payloads in messages.py, parameters and public values in config.py, the
curator's epoch in training.py (Algorithm 4) and dpsgd.py (the DP-SGD baseline).

Before the run (the driver, from public values only)
  split    every interaction of the dataset (its train, val and test parts pooled) ordered by time
           per user (data/sequences.py); the first n_tr = ⌊0.8·L⌋ items of a sequence train, the
           rest are held out on the user's device. The loader's split is ignored.
  σ        calibrated for (ε2, δ) on the release pattern (privacy/calibration.py): Δ = √2·w_max·C
           (w_max = ``max_edge_weight`` caps edge counts; C the row norm of eq. 6) and
           n = (⌊0.8·max_len⌋ − 2)·T·epochs releases of an edge (the first transition of the
           longest sequence is in that many prefixes, T times per step, every epoch).

Round 0, ``upload`` (user) — Algorithm 3 on the device: k = max(1, min(n, ⌊ε1/2.5⌋)) of its n
    features are sampled; each gets ε1/k, the piecewise mechanism (Algorithm 1) if numeric,
    optimized unary encoding (Algorithm 2) if categorical, scaled by n/k; unsampled ones are
    zeros. The perturbed vector (``features``) and the training sequence s[:n_tr] (``sequence``)
    go to the curator; the held-out items stay.
Every round, ``train`` (curator) — one epoch of Algorithm 4 over the training prefixes
    s[:j] → s[j], j = 1..n_tr−1, of every user it holds:
        behaviour graphs A_in, A_out with counts capped at w_max                    (eq. 4)
        user embedding from the perturbed features                                  (eq. 5)
        rows of H̄ normalized to norm C                                              (eq. 6)
        M = A·H̄ + N(0, σ²) for A_in and A_out                                       (eq. 7)
        linear maps, GRU, T steps                                               (eqs. 8–9)
        readout, softmax cross-entropy, Adam                                   (eqs. 10–13)
Evaluation: ``eval_context`` (user) sends the held-out context s[n_tr:L−1] (never its last item);
    ``eval_rank`` (curator) ranks all items for each test prefix s[:j], j = n_tr..L−1, without
    noise and returns the top-K lists (``topk``); ``eval`` (user) scores them against its own
    held-out targets s[j]: Recall@K and MRR@K, K = 5, 10, 20, one value per test position (the
    run's figure is the mean over all test positions, as in SR-GNN). A user whose data the
    curator does not hold gets no ranking.

Absent users (run conditions): a user offline in round 0 does not upload then; every later round
the driver asks the users whose data the curator lacks to upload, so a user's data joins the
training set in the first round it is online (its prefixes are appended: the others' example
ids, which key EdgeRand's noise, do not move). A device perturbs its features once and resends
the same vector, so a retry releases nothing new. With fewer users held than
``min_participants`` the curator skips the epoch (``skipped``).

Privacy: edge-level central DP for the graph, ε1-LDP for the features. Every release that
happened is reported to the one accountant (privacy/accountant.py) as a dp-accounting event, per
user (the unit is the user's most-released edge): an epoch trained while the curator held the
user's sequence releases that edge (n_tr(u) − 2)·T times, ``GaussianDpEvent(σ/Δ)``. A user's
features cost ε1 once, if and when it uploaded; the numeric features' domains that map them to
[-1, 1] are public constants fixed before the run (``feature_ranges`` or the data's documented
domain, data/features.py), not the users' min and max, which would be a release outside ε1.
``user_privacy(u)`` gives one user's figures,
``privacy()`` the worst user's: the run's (ε2, δ). The noisy aggregates are the only place the
graph enters the forward pass; as in the paper, the analysis covers those releases (the backward
pass through A·H̄ is not separately accounted — the paper's argument, not a rigorous bound).

Baselines with the same network (config): ``private_graph=false`` (σ = 0) with
``private_features=false`` is the non-private network with clean features (APGNN-style, ε = ∞);
``use_features=false`` drops the user part (SR-GNN-style); ``mechanism="edgerand"`` is EdgeRand:
no noise in the aggregation, instead every training prefix's adjacency gets N(0, σ_A²) on every
entry of its node block once (fixed across epochs; A_in its transpose), σ_A calibrated for
sensitivity w_max and the ⌊0.8·max_len⌋ − 2 prefixes that contain an edge, at the same (ε2, δ):
a user's edge is released n_tr(u) − 2 times, in the first epoch its data is held.
``mechanism="dpsgd"`` is DP-SGD on all gradients (dpsgd.py): σ = 0 in the aggregation; each of an
epoch's ⌈n/b⌉ steps draws b = ``dpsgd_batch_users`` users without replacement, clips each user's
gradient to ``dpsgd_clip`` and adds N(0, (z·2C)²); z is calibrated with RDP for the sampling rate
b/n and epochs·⌈n/b⌉ steps at (ε2, δ), unit = one user's training sequence replaced (covers any
edge, and the labels too); a user is charged the steps of the epochs its data was held.
"""

from __future__ import annotations

import numpy as np

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from cluster.message import node_id
from data.features import (
    FeatureSelectionError,
    feature_cardinality,
    feature_values,
    public_ranges,
    select_features,
)
from data.sequences import pooled_interactions, train_length, user_sequences
from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec, mean_report, mean_reports
from nodes.node import Shared
from privacy.accountant import PrivacyAccountant, gaussian_event, sampled_gaussian_event
from privacy.calibration import (
    DPSGD_RDP_ORDERS,
    calibrated_releases,
    dpsgd_noise_multiplier,
    graph_sensitivity,
    noise_sigma,
    theorem_4_2_epsilon,
)
from privacy.feature_perturbation import feature_vector_layout, feature_vector_length
from protocols.base import ConfigError, PaperClaim, PaperFigure, PrivacyReport, Protocol, require
from protocols.dipsgnn.config import SERVER, DIPSGNNConfig, DIPSGNNPublic
from protocols.dipsgnn.dpsgd import dpsgd_steps_per_epoch
from protocols.dipsgnn.roles import DIPSGNNServer, DIPSGNNUser

__all__ = ["DIPSGNNProtocol", "pooled_interactions"]


class DIPSGNNProtocol(Protocol):
    name = "dipsgnn"
    Config = DIPSGNNConfig
    QUICK = {"rounds": 2, "epochs": 2, "hidden_dim": 32, "user_dim": 16, "eval_every": 1}
    BASELINE_SHARES = {
        "hidden_dim": "dim",
        "steps": "layers",
        "user_dim": "user_dim",
        "use_features": "use_features",
        "features": "features",
        "feature_ranges": "feature_ranges",
        "max_len": "max_len",
        "train_fraction": "train_fraction",
    }
    # Hu & Fang, ML-1M Recall@20 in percent, beside APGNN (the paper's main table), which
    # benchmarks.reproduce sets beside ours
    PAPER = PaperFigure(
        on="ML-1M",
        percent=True,
        method={"recall@20": 21.13},
        baselines={"dipsgnn nonprivate": ("APGNN", {"recall@20": 21.26})},
        source="Hu & Fang, main table",
    )

    # adversaries (adversaries/): fake users whose uploads stay in the mechanism's range
    # (protocols/dipsgnn/attacks.py); targets' exposure reported by the honest users
    ATTACKS = declared_in("protocols.dipsgnn.attacks", "random", "bandwagon", "malformed")

    @classmethod
    def central_baseline(cls, params) -> str:
        return "central:dipsgnn"  # the same network without noise, clean features

    def __init__(self, dataset: RecDataset, config: DIPSGNNConfig, seed: int):
        super().__init__(dataset, config, seed)
        c = config
        # the data split (module docstring); users with a training and a held-out item take part
        self.sequences = user_sequences(pooled_interactions(dataset), dataset.n_users, c.max_len)
        self.users = np.array(
            [u for u, s in enumerate(self.sequences) if len(s) >= 2], dtype=np.int64
        )
        # the public feature layout: chosen features, their categories and numeric domains
        self.feature_kinds = self._chosen_features(dataset, c)
        cardinality = feature_cardinality(dataset, self.feature_kinds)
        layout = feature_vector_layout(self.feature_kinds, cardinality) if c.use_features else []
        # σ of eq. 7 (EdgeRand: σ_A), or DP-SGD's z, calibrated for (ε2, δ) before the run
        self.sigma = noise_sigma(c)
        self.sensitivity = graph_sensitivity(c)
        self.n_releases_bound = calibrated_releases(c)
        self.dpsgd_noise_multiplier, self.dpsgd_steps_per_epoch = 0.0, 0
        if c.mechanism == "dpsgd":
            n = len(self.users)
            require(
                c.dpsgd_batch_users <= n,
                "dpsgd_batch_users",
                f"must be <= the {n} participating users",
            )
            self.dpsgd_steps_per_epoch = dpsgd_steps_per_epoch(n, c.dpsgd_batch_users)
            if c.private_graph:
                self.dpsgd_noise_multiplier = dpsgd_noise_multiplier(
                    c.eps2,
                    c.privacy_delta,
                    n,
                    c.dpsgd_batch_users,
                    c.epochs * self.dpsgd_steps_per_epoch,
                )
        self.public = DIPSGNNPublic(
            n_items=dataset.n_items,
            n_feature_slots=feature_vector_length(layout) if layout else 0,
            feature_kinds=dict(self.feature_kinds),
            feature_cardinality=cardinality,
            public_ranges=self._feature_domains(dataset, c),
            sigma=self.sigma,
            dpsgd_noise_multiplier=self.dpsgd_noise_multiplier,
        )
        # what was released so far: per user (row of self.users) the round of its upload (-1:
        # none yet), whether the curator holds its data and the epochs trained while it did
        self.accountant = PrivacyAccountant(c.privacy_delta, **self._bounds(c))
        self.uploaded_round = np.full(len(self.users), -1, dtype=np.int64)
        self.held = np.zeros(len(self.users), dtype=bool)
        self.fake_held = np.zeros(0, dtype=bool)  # the same for fake users (adversaries/)
        self.user_epochs = np.zeros(len(self.users), dtype=np.int64)
        self.epochs_done = 0
        # the most training prefixes one edge of the user's sequence is in: n_tr(u) − 2
        self.edge_prefixes = np.array(
            [
                max(0, train_length(len(self.sequences[u]), c.train_fraction) - 2)
                for u in self.users
            ],
            dtype=np.int64,
        )

    @staticmethod
    def _chosen_features(dataset: RecDataset, c: DIPSGNNConfig) -> dict[str, str]:
        if not c.use_features:
            return {}
        try:
            return select_features(dataset, c.features)
        except FeatureSelectionError as e:
            raise ConfigError(str(e)) from None

    def _feature_domains(self, dataset: RecDataset, c: DIPSGNNConfig) -> dict:
        """The chosen numeric features' public domains, fixed before the run (``feature_ranges``
        or the data's documented domain, data/features.py), never the users' min and max."""
        try:
            return public_ranges(dataset, self.feature_kinds, c.feature_ranges)
        except FeatureSelectionError as e:
            raise ConfigError(str(e)) from None

    @staticmethod
    def _bounds(c: DIPSGNNConfig) -> dict:
        """How the accountant evaluates ε: DP-SGD's subsampled Gaussian by RDP on the orders it
        was calibrated with; Gaussian releases by RDP when ``accountant = "rdp"``, else by the
        tightest bound (the exact analytic Gaussian, which the PLD approaches from above)."""
        if c.mechanism == "dpsgd":
            return {"bounds": ("rdp",), "rdp_orders": DPSGD_RDP_ORDERS}
        return {"bounds": ("rdp",)} if c.accountant == "rdp" else {}

    def check_rounds(self, rounds: int) -> None:
        """One round trains one epoch, and σ is calibrated for ``epochs``: a run of more rounds
        would spend more than eps2 (run_round refuses that epoch too, as a last guard)."""
        if rounds > self.config.epochs:
            raise ConfigError(
                f"epochs {self.config.epochs}: one round trains one epoch and the noise is "
                f"calibrated for {self.config.epochs}; {rounds} rounds would spend more than "
                f"eps2 (give --epochs {rounds}, or --rounds {self.config.epochs} or fewer)"
            )

    def shared(self) -> Shared:
        return Shared(self.config, self.public)

    def user_features(self, u: int) -> dict:
        return feature_values(self.dataset, u, self.feature_kinds)

    def adversary_users(self) -> list[int]:
        return [int(u) for u in self.users]

    def _fake(self) -> np.ndarray:
        """The fake users' ids (after the dataset's users), none without adversaries."""
        plan = self.adversary_plan
        return np.array(plan.fake if plan is not None else (), dtype=np.int64)

    def node_specs(self) -> list[NodeSpec]:
        # the curator holds rows for the real users, then the fake ones (adversaries/): a fake
        # user makes up its sequence and features in its constructor; a compromised real user
        # is played by the attack's class
        plan, fake = self.adversary_plan, self._fake()
        specs = [NodeSpec(DIPSGNNServer, SERVER, {"users": np.concatenate([self.users, fake])})]
        for u in self.users:
            private = {"sequence": self.sequences[u], "features": self.user_features(int(u))}
            cls, private = role_of(plan, int(u), DIPSGNNUser, private)
            specs.append(NodeSpec(cls, node_id("user", int(u)), private, packable=True))
        for u in fake:
            private = {"sequence": np.zeros(0, np.int64), "features": {}}
            cls, private = role_of(plan, int(u), DIPSGNNUser, private, fake=True)
            specs.append(NodeSpec(cls, node_id("user", int(u)), private, packable=True))
        return specs

    # ------------------------------------------------------------------------------- one round

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        # ``upload``: Algorithm 3 (ε1) and the training sequence, from every user whose data the
        # curator does not hold yet (offline ones cannot)
        fake = self._fake()
        if len(self.fake_held) != len(fake):  # adversaries are planned after the constructor
            self.fake_held = np.zeros(len(fake), dtype=bool)
        pending = np.concatenate([self.users[~self.held], fake[~self.fake_held]])
        uploads = 0
        if len(pending):
            who = (
                ["user"]
                if len(pending) == len(self.users) + len(fake)
                else [node_id("user", int(u)) for u in pending]
            )
            up = dep.superstep(round_, "upload", activate=who)
            ids = np.array(up.reports.get("uploaded", []), np.int64)
            ids = ids[np.isin(ids, self.users)]  # a fake user's upload releases nothing of anyone
            sent = np.searchsorted(self.users, ids)
            first = sent[self.uploaded_round[sent] < 0]
            self.uploaded_round[first] = round_
            uploads = len(sent)
        # ``train``: one epoch of Algorithm 4 (eqs. 4–13, noise of eq. 7), EdgeRand or DP-SGD.
        # The epochs released are counted here, not read from the curator: a curator restored
        # from a snapshot (a killed host) forgets the epochs it trained since, which happened.
        c = self.config
        if self.epochs_done >= c.epochs:
            raise RuntimeError(
                f"epochs: σ was calibrated for {c.epochs} epochs; a further epoch would "
                "spend more than eps2 (raise `epochs` to train longer)"
            )
        res = dep.superstep(round_, "train", activate=[SERVER])
        held = dep.call(SERVER, "get_accounting")
        ran = bool(res.reports.get("loss"))  # an epoch ran: it released the held users' edges
        trained = held.held & ran
        n_real = len(self.users)
        self.fake_held = held.held[n_real:]  # the curator's rows after the real users: fake ones
        trained, held_real = trained[:n_real], held.held[:n_real]
        first_epoch = trained & (self.user_epochs == 0)
        self.held = held_real
        self.user_epochs = self.user_epochs + trained
        self.epochs_done += int(ran)
        self._spend(trained, first_epoch)
        return {
            "loss": mean_report(res.reports, "loss"),
            "examples": mean_report(res.reports, "examples"),
            "uploads": uploads,
            "skipped": len(res.reports.get("skipped", [])),
        }

    def _spend(self, trained: np.ndarray, first_epoch: np.ndarray) -> None:
        """This epoch's releases, per user, to the accountant (module docstring): eq. 7 releases
        a user's most-released edge (n_tr(u) − 2)·T times; EdgeRand n_tr(u) − 2 times, in its
        first epoch only; DP-SGD takes ⌈n/b⌉ steps of the sampled Gaussian."""
        c = self.config
        if c.mechanism == "dpsgd":
            step = sampled_gaussian_event(
                self.dpsgd_noise_multiplier, len(self.users), c.dpsgd_batch_users
            )
            units = np.repeat(self.users[trained], self.dpsgd_steps_per_epoch)
            self.accountant.spend(units, step, "dpsgd")
            return
        rows = first_epoch if c.mechanism == "edgerand" else trained
        per_epoch = self.edge_prefixes * (1 if c.mechanism == "edgerand" else c.steps)
        units = np.repeat(self.users[rows], per_epoch[rows])
        self.accountant.spend(units, gaussian_event(self.sigma, self.sensitivity), c.mechanism)

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "eval_context", activate=["user"])
        dep.superstep(round_, "eval_rank")
        res = dep.superstep(round_, "eval")
        return mean_reports(res.reports)

    # ------------------------------------------------------------- privacy: the releases so far

    def user_privacy(self, u: int) -> dict:
        """What user ``u`` (a dataset user id) has spent so far: ε1 of its features if it
        uploaded them, and the accountant's (ε2, δ) of the releases of its edges (or of the
        DP-SGD steps taken while the curator held its sequence)."""
        c = self.config
        row = int(np.searchsorted(self.users, u))
        if row >= len(self.users) or self.users[row] != u:
            raise ValueError(f"user {u} does not take part (it needs two items)")
        out = {
            "uploaded_round": int(self.uploaded_round[row]),
            "epochs": int(self.user_epochs[row]),
            "privacy_delta": c.privacy_delta,
        }
        if c.use_features and c.private_features:
            out["epsilon1_features"] = c.eps1 if self.uploaded_round[row] >= 0 else 0.0
        releases = "steps" if c.mechanism == "dpsgd" else "releases_per_edge"
        out[releases] = self.accountant.count(int(u))
        out["epsilon2"] = self.accountant.epsilon(int(u))
        return out

    def _most_releases(self) -> int:
        """Releases (DP-SGD: steps) of the most-charged user so far."""
        return max((self.accountant.count(int(u)) for u in self.users), default=0)

    def _epsilon1(self):
        c = self.config
        if not (c.use_features and c.private_features):
            return None
        return c.eps1 if (self.uploaded_round >= 0).any() else 0.0

    def _common_privacy(self) -> dict:
        c = self.config
        budget = {"epsilon2_budget": c.eps2 if c.private_graph else float("inf")}
        return {
            "privacy_delta": c.privacy_delta,
            "calibration": c.calibration,
            **(budget if c.calibration == "rigorous" else {}),  # paper modes: eps2 is per epoch
            "epsilon1_features": self._epsilon1(),
            "users_uploaded": int((self.uploaded_round >= 0).sum()),
            "users_held": int(self.held.sum()),
            "mechanism": c.mechanism,
        }

    def dpsgd_privacy(self) -> dict:
        c = self.config
        z = self.dpsgd_noise_multiplier
        eps = self.accountant.worst_epsilon()
        return {
            **self._common_privacy(),
            "unit_graph": "one user's training sequence, replaced (covers any edge and the labels)",
            "accountant": "rdp, fixed-size batches sampled without replacement (replace-one)",
            "noise_multiplier": z,
            "noise_std": z * 2.0 * c.dpsgd_clip,
            "clip_norm": c.dpsgd_clip,
            "batch_users": c.dpsgd_batch_users,
            "population": len(self.users),
            "steps_calibrated": c.epochs * self.dpsgd_steps_per_epoch,
            "steps_spent": self._most_releases(),
            "epsilon": eps,
            "epsilon2_spent": eps,
        }

    def audits(self) -> list:
        """Algorithm 3 on this run's features and one release of eq. 7 at this run's σ
        (protocols/dipsgnn/audit.py)."""
        from protocols.dipsgnn.audit import run_audits

        return run_audits(self)

    def privacy(self) -> PrivacyReport:
        """The worst user's (ε2, δ) so far beside the paper's claim (ε2 per epoch in the paper
        modes, Theorem 4.2's closed form for one release in the aggregate mechanism) and the
        budget the run was calibrated to."""
        figures = self.dpsgd_privacy() if self.config.mechanism == "dpsgd" else self._privacy()
        paper = None
        if "epsilon2_claimed_per_epoch" in figures:
            paper = PaperClaim(figures["epsilon2_claimed_per_epoch"], "ε2 per epoch, claimed")
        elif "epsilon2_theorem_4_2_single_release" in figures:
            paper = PaperClaim(
                figures["epsilon2_theorem_4_2_single_release"], "ε2 by Theorem 4.2, one release"
            )
        return PrivacyReport(
            mechanism=figures.pop("mechanism"),
            epsilon=figures.pop("epsilon"),
            delta=figures.pop("privacy_delta"),
            unit="user (sequence)" if self.config.mechanism == "dpsgd" else "edge",
            budget=figures.get("epsilon2_budget"),
            paper=paper,
            details=figures,
        )

    def _privacy(self) -> dict:
        c = self.config
        spent = self._most_releases()
        eps = self.accountant.worst_epsilon()  # the worst user's (ε2, δ) so far
        out = {
            **self._common_privacy(),
            "unit_graph": "one transition (edge) of one user's training sequence",
            "sigma": self.sigma,
            "sensitivity": self.sensitivity,
            "max_edge_weight": c.max_edge_weight,
            "releases_per_edge_calibrated": self.n_releases_bound,
            "releases_per_edge_spent": spent,
            "accountant": c.accountant,
            "epsilon": eps,
        }
        if not c.private_graph:
            return out
        out["epsilon2_spent"] = eps
        if c.calibration != "rigorous":  # the paper's claim: eps2 in every epoch
            out["epsilon2_claimed_per_epoch"] = c.eps2
        if c.mechanism == "aggregate":
            # Theorem 4.2's closed form as the paper applies it: one release per step, Δ = C
            out["epsilon2_theorem_4_2_single_release"] = theorem_4_2_epsilon(
                self.sigma, c.privacy_delta, c.steps, c.clip_norm
            )
        if spent:  # the same closed form over the real release pattern (valid, looser)
            out["epsilon2_theorem_4_2_all_releases"] = theorem_4_2_epsilon(
                self.sigma, c.privacy_delta, spent, self.sensitivity
            )
        return out
