"""dipsgnn — differentially private sequential recommendation with a noisy gated GNN
(Hu & Fang, "Towards Differential Privacy in Sequential Recommendation: A Noisy Graph Neural
Network Approach"), in the paper's trusted-curator model.

Roles: ``user/u`` (packed) holds its behaviour sequence (items in time order, the ``max_len`` most
recent) and its sensitive features; ``server/0`` is the curator that trains the network
(protocols/dipsgnn/roles.py; payloads in messages.py, the configuration in config.py, the
curator's epoch in training.py and dpsgd.py).

Data split (the paper's, done here, not by the dataset loader): every interaction of the dataset
(its train, val and test parts pooled) is ordered by time per user (data/sequences.py
``user_sequences``); the first n_tr = ⌊0.8·L⌋ items of a sequence train, the rest are held out
on the user's device. The loader's own split is ignored; the dataset needs timestamps.

One protocol round = one training epoch.

Round 0, ``upload`` (user): before anything leaves the device the user perturbs its features with
    Algorithm 3 (k = max(1, min(n, ⌊ε1/2.5⌋)) features sampled per user; piecewise mechanism
    (Alg. 1) for numeric, optimized unary encoding (Alg. 2) for categorical, each with ε1/k and
    scaled by n/k; unsampled features are zeros) and sends the perturbed vector (``features``,
    dense fp32) and its TRAINING sequence s[:n_tr] (``sequence``, ids). The held-out items stay.
Every round, ``train`` (server): it stores the uploads that arrived (all of them in round 0
    when everyone is online) and builds their training prefixes s[:j] → s[j], j = 1..n_tr-1;
    then one epoch of Algorithm 4 over all of them:
    behaviour graphs with capped counts (eq. 4), user embedding from the perturbed features
    (eq. 5), rows normalized to norm C (eq. 6), N(0, σ²) added to A_in·H̄ and A_out·H̄ (eq. 7),
    linear maps (eq. 8), GRU (eq. 9), T steps, readout (eqs. 10–11), softmax cross-entropy
    (eqs. 12–13), Adam.
Absent users (run conditions): a user offline in round 0 does not upload then; the driver asks
    every user whose data the curator does not hold yet to upload in each later round (``upload``
    again, for those users only), so a user's data joins the training set in the first round it
    is online, and its prefixes are appended (the example ids of the others, which key EdgeRand's
    noise, do not move). A device perturbs its features once and sends the same vector again if
    it has to, so a retry releases nothing new. With fewer users held than ``min_participants``
    the server skips the epoch (``skipped``).
Evaluation: ``eval_context`` (user) sends the held-out items it needs as context,
    s[n_tr:L-1] (never its last item); ``eval_rank`` (server) ranks all items for each test
    prefix s[:j], j = n_tr..L-1, without noise and sends the top-K lists (``topk``, ids);
    ``eval`` (user) compares them with its own held-out targets s[j] and reports Recall@K and
    MRR@K, K = 5, 10, 20, one value per test position (the run's figure is the mean over all
    test positions, as in SR-GNN). Users whose data the curator does not hold get no ranking.

Privacy (edge-level central DP for the graph, ε1-LDP for the features). σ is a standard
deviation, calibrated with dp-accounting (privacy/calibration.py) for the real release pattern
from PUBLIC bounds only: sensitivity Δ = √2·w_max·C with w_max = ``max_edge_weight`` (edge counts
are capped at it; the default 1 binarizes A), and every edge is released T times per prefix that
contains it, in at most train_length(max_len) - 2 prefixes, every epoch:
n = (⌊0.8·max_len⌋ - 2)·T·epochs. The noisy aggregates are the only place the graph enters the
forward pass; as in the paper, the analysis covers those releases (the gradient's backward pass
through A·H̄ is not separately accounted — the paper's argument, not a rigorous bound for it).

Only releases that happened are counted, per user: a user's features cost ε1 once, if and when
it uploaded (a user who never came online spent nothing); its edges are released in the epochs
the curator trained while holding its sequence (not before its upload, not in skipped rounds):
releases_u = max(0, n_tr(u) - 2)·T·epochs_u (EdgeRand: min(epochs_u, 1)), DP-SGD steps_u =
epochs_u·⌈n/b⌉. ``user_privacy(u)`` gives one user's figures; ``privacy()`` the worst user's,
which is the run's (ε2, δ) guarantee.

Baselines with the same network (config): ``private_graph=false`` (σ = 0) with
``private_features=false`` is the non-private network with clean features (APGNN-style, ε = ∞);
``use_features=false`` drops the user part (SR-GNN-style); ``mechanism="edgerand"`` is EdgeRand:
no noise in the aggregation, instead every training prefix's adjacency gets N(0, σ_A²) on every
entry of its node block once (fixed across epochs; A_in its transpose), σ_A calibrated for
sensitivity w_max and the ⌊0.8·max_len⌋ - 2 prefixes that contain an edge, at the same (ε2, δ).
``mechanism="dpsgd"`` is DP-SGD on all gradients (protocols/dipsgnn/dpsgd.py): σ = 0 in the
aggregation; each step draws ``dpsgd_batch_users`` users without replacement, clips each user's
gradient to ``dpsgd_clip``, adds N(0, (z·2C)²); z calibrated with dp-accounting's RDP accountant
for the sampling rate b/n and epochs·⌈n/b⌉ steps at (ε2, δ), unit = one user's training sequence
replaced (covers any edge, and the labels too).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from cluster.message import node_id
from data.sequences import train_length, user_sequences
from data.types import Interactions, RecDataset
from nodes.deployment import Deployment, NodeSpec, mean_report
from privacy.calibration import (
    calibrate_sigma,
    dpsgd_epsilon,
    dpsgd_noise_multiplier,
    edge_sensitivity,
    releases_per_edge,
    spent_epsilon,
    theorem_4_2_epsilon,
)
from privacy.feature_perturbation import feature_vector_layout, feature_vector_length
from protocols.base import ConfigError, Protocol, require
from protocols.dipsgnn.config import SERVER, DIPSGNNConfig
from protocols.dipsgnn.dpsgd import dpsgd_steps_per_epoch
from protocols.dipsgnn.roles import DIPSGNNServer, DIPSGNNUser

# --------------------------------------------------------------------------- the data split


def pooled_interactions(dataset: RecDataset) -> Interactions:
    """Every interaction of the dataset, its train, val and test parts pooled: the data split
    of the module docstring is made on these, not by the dataset loader."""
    parts = [p for p in (dataset.train, dataset.val, dataset.test) if p is not None]
    if any(p.timestamp is None for p in parts):
        raise ValueError(f"dipsgnn needs timestamps; dataset {dataset.name!r} has none")
    return Interactions(
        user=np.concatenate([p.user for p in parts]),
        item=np.concatenate([p.item for p in parts]),
        timestamp=np.concatenate([p.timestamp for p in parts]),
    )


# --------------------------------------------------------------------------- σ for (ε2, δ)


def calibrated_releases(c: DIPSGNNConfig) -> int:
    """Public bound on the noisy releases of one edge over the whole run (see module docstring).
    EdgeRand perturbs each prefix graph once, whatever the epochs and steps."""
    longest = np.zeros(c.max_len, dtype=np.int64)  # the longest sequence a user may have
    if c.mechanism == "edgerand":
        return releases_per_edge([longest], 1, 1, c.train_fraction)
    return releases_per_edge([longest], c.epochs, c.steps, c.train_fraction)


def graph_sensitivity(c: DIPSGNNConfig) -> float:
    """√2·w_max·C for the aggregates (eq. 7); w_max for one entry of A_out (EdgeRand, whose
    A_in is the transpose: post-processing)."""
    if c.mechanism == "edgerand":
        return float(c.max_edge_weight)
    return edge_sensitivity(c.clip_norm, c.max_edge_weight)


def noise_sigma(c: DIPSGNNConfig) -> float:
    """σ (of eq. 7, or of EdgeRand's adjacency noise): calibrate_sigma for the counted releases,
    or 0 for the non-private network and for DP-SGD (whose noise is on the gradients)."""
    if not c.private_graph or c.mechanism == "dpsgd":
        return 0.0
    return calibrate_sigma(
        c.eps2, c.privacy_delta, calibrated_releases(c), graph_sensitivity(c), c.accountant
    )


# --------------------------------------------------------------------------- the protocol


class DIPSGNNProtocol(Protocol):
    name = "dipsgnn"
    Config = DIPSGNNConfig

    def __init__(self, dataset: RecDataset, config: DIPSGNNConfig, seed: int):
        super().__init__(dataset, config, seed)
        c = config
        self.sequences = user_sequences(pooled_interactions(dataset), dataset.n_users, c.max_len)
        # users with a training item and a held-out item take part
        self.users = np.array(
            [u for u, s in enumerate(self.sequences) if len(s) >= 2], dtype=np.int64
        )
        self.feature_kinds = self._chosen_features(dataset, c)
        self.feature_cardinality = {
            n: dataset.feature_cardinality[n]
            for n, kind in self.feature_kinds.items()
            if kind == "categorical"
        }
        if c.use_features:
            self.layout = feature_vector_layout(self.feature_kinds, self.feature_cardinality)
        else:
            self.layout = []
        # numeric features are mapped to [-1, 1] with the domain's range, taken as public
        self.public_ranges = {
            name: (float(np.min(v)), float(np.max(v)))
            for name, v in dataset.user_features.items()
            if self.feature_kinds.get(name) == "numeric"
        }
        self.sigma = noise_sigma(c)
        self.sensitivity = graph_sensitivity(c)
        self.n_releases_bound = calibrated_releases(c)
        self.epochs_done = 0  # epochs the curator trained
        # per user (row of self.users): the round it sent its upload (-1: not yet), whether the
        # curator holds its data, the epochs trained while it did; for releases_u (docstring)
        self.uploaded_round = np.full(len(self.users), -1, dtype=np.int64)
        self.held = np.zeros(len(self.users), dtype=bool)
        self.user_epochs = np.zeros(len(self.users), dtype=np.int64)
        self.edge_prefixes = np.array(
            [
                max(0, train_length(len(self.sequences[u]), c.train_fraction) - 2)
                for u in self.users
            ],
            dtype=np.int64,
        )  # the most prefixes one edge of the user's sequence is in (releases_per_edge)
        self.dpsgd_noise_multiplier = 0.0  # z of DP-SGD (mechanism "dpsgd")
        self.dpsgd_steps_per_epoch = 0
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

    @staticmethod
    def _chosen_features(dataset: RecDataset, c: DIPSGNNConfig) -> dict[str, str]:
        if not c.use_features:
            return {}
        if not dataset.feature_kinds:
            raise ConfigError(f"use_features: dataset {dataset.name!r} has no user features")
        if c.features == "all":
            return dict(dataset.feature_kinds)
        names = [n.strip() for n in c.features.split(",") if n.strip()]
        missing = [n for n in names if n not in dataset.feature_kinds]
        require(
            bool(names) and not missing,
            "features",
            f"unknown feature(s) {missing} (dataset has {sorted(dataset.feature_kinds)})",
        )
        return {n: dataset.feature_kinds[n] for n in names}

    def shared(self) -> dict:
        c = self.config
        return {
            **dataclasses.asdict(c),
            "n_items": self.dataset.n_items,
            "n_feature_slots": feature_vector_length(self.layout) if self.layout else 0,
            "feature_kinds": dict(self.feature_kinds),
            "feature_cardinality": dict(self.feature_cardinality),
            "public_ranges": self.public_ranges,
            "sigma": self.sigma,
            "dpsgd_noise_multiplier": self.dpsgd_noise_multiplier,
        }

    def user_features(self, u: int) -> dict:
        return {
            name: (
                float(self.dataset.user_features[name][u])
                if kind == "numeric"
                else int(self.dataset.user_features[name][u])
            )
            for name, kind in self.feature_kinds.items()
        }

    def node_specs(self) -> list[NodeSpec]:
        specs = [NodeSpec(DIPSGNNServer, SERVER, {"users": self.users})]
        for u in self.users:
            specs.append(
                NodeSpec(
                    DIPSGNNUser,
                    node_id("user", int(u)),
                    {"sequence": self.sequences[u], "features": self.user_features(int(u))},
                    packable=True,
                )
            )
        return specs

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        # ``upload``: features perturbed with Algorithm 3 (ε1) and the training sequence, from
        # every user whose data the curator does not hold yet (offline ones cannot)
        pending = self.users[~self.held]
        uploads = 0
        if len(pending):
            who = (
                ["user"]
                if len(pending) == len(self.users)
                else [node_id("user", int(u)) for u in pending]
            )
            up = dep.superstep(round_, "upload", activate=who)
            sent = np.searchsorted(self.users, np.array(up.reports.get("uploaded", []), np.int64))
            first = sent[self.uploaded_round[sent] < 0]
            self.uploaded_round[first] = round_
            uploads = len(sent)
        # ``train``: one epoch of Algorithm 4 (eqs. 4–13, N(0, σ²) on A·H̄ as eq. 7), EdgeRand or
        # DP-SGD; then what the accountant needs
        res = dep.superstep(round_, "train", activate=[SERVER])
        acc = dep.call(SERVER, "get_accounting")
        self.held = acc["held"]
        self.user_epochs = acc["epochs_by_row"]
        self.epochs_done = acc["epochs_done"]
        return {
            "loss": mean_report(res.reports, "loss"),
            "examples": mean_report(res.reports, "examples"),
            "uploads": uploads,
            "skipped": len(res.reports.get("skipped", [])),
        }

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "eval_context", activate=["user"])
        dep.superstep(round_, "eval_rank")
        res = dep.superstep(round_, "eval")
        return {name: mean_report(res.reports, name) for name in sorted(res.reports)}

    # ------------------------------------------------------------- privacy: the releases so far

    def user_releases(self) -> np.ndarray:
        """Per user: releases of its most-released edge so far (the epochs the curator trained
        while holding its sequence; EdgeRand releases each prefix graph once)."""
        epochs = self.user_epochs
        if self.config.mechanism == "edgerand":
            return self.edge_prefixes * np.minimum(epochs, 1)
        return self.edge_prefixes * self.config.steps * epochs

    def releases_spent(self) -> int:
        """Releases of the most-released edge so far, over the users whose data was trained on."""
        return int(self.user_releases().max(initial=0))

    def user_privacy(self, u: int) -> dict:
        """What user ``u`` (a dataset user id) has spent so far: ε1 of its features if it
        uploaded them, and the (ε2, δ) of the releases of its edges (or of the DP-SGD steps
        taken while the curator held its sequence)."""
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
        if c.mechanism == "dpsgd":
            steps = int(self.user_epochs[row]) * self.dpsgd_steps_per_epoch
            out["steps"] = steps
            if not c.private_graph:
                out["epsilon2"] = float("inf") if steps else 0.0
            else:
                out["epsilon2"] = dpsgd_epsilon(
                    self.dpsgd_noise_multiplier,
                    len(self.users),
                    c.dpsgd_batch_users,
                    steps,
                    c.privacy_delta,
                )
            return out
        releases = int(self.user_releases()[row])
        out["releases_per_edge"] = releases
        if not c.private_graph:
            out["epsilon2"] = float("inf") if releases else 0.0
        else:
            out["epsilon2"] = spent_epsilon(
                self.sigma, self.sensitivity, releases, c.privacy_delta, c.accountant
            )
        return out

    def _epsilon1(self):
        c = self.config
        if not (c.use_features and c.private_features):
            return None
        return c.eps1 if (self.uploaded_round >= 0).any() else 0.0

    def dpsgd_privacy(self) -> dict:
        c = self.config
        # the most steps any user's sequence was in the curator's data for
        steps = int(self.user_epochs.max(initial=0)) * self.dpsgd_steps_per_epoch
        z = self.dpsgd_noise_multiplier
        n = len(self.users)
        if not c.private_graph:
            eps = float("inf") if steps else 0.0
        else:
            eps = dpsgd_epsilon(z, n, c.dpsgd_batch_users, steps, c.privacy_delta)
        return {
            "unit_graph": "one user's training sequence, replaced (covers any edge and the labels)",
            "privacy_delta": c.privacy_delta,
            "mechanism": "dpsgd",
            "accountant": "rdp, fixed-size batches sampled without replacement (replace-one)",
            "noise_multiplier": z,
            "noise_std": z * 2.0 * c.dpsgd_clip,
            "clip_norm": c.dpsgd_clip,
            "batch_users": c.dpsgd_batch_users,
            "population": n,
            "steps_calibrated": c.epochs * self.dpsgd_steps_per_epoch,
            "steps_spent": steps,
            "epsilon2_budget": c.eps2 if c.private_graph else float("inf"),
            "epsilon1_features": self._epsilon1(),
            "users_uploaded": int((self.uploaded_round >= 0).sum()),
            "users_held": int(self.held.sum()),
            "epsilon": eps,
            "epsilon2_spent": eps,
        }

    def privacy(self) -> dict:
        c = self.config
        if c.mechanism == "dpsgd":
            return self.dpsgd_privacy()
        spent = self.releases_spent()
        out = {
            "unit_graph": "one transition (edge) of one user's training sequence",
            "privacy_delta": c.privacy_delta,
            "sigma": self.sigma,
            "sensitivity": self.sensitivity,
            "max_edge_weight": c.max_edge_weight,
            "releases_per_edge_calibrated": self.n_releases_bound,
            "releases_per_edge_spent": spent,
            "epsilon2_budget": c.eps2 if c.private_graph else float("inf"),
            "epsilon1_features": self._epsilon1(),
            "users_uploaded": int((self.uploaded_round >= 0).sum()),
            "users_held": int(self.held.sum()),
            "accountant": c.accountant,
            "mechanism": c.mechanism,
        }
        if not c.private_graph:
            out["epsilon"] = float("inf") if spent else 0.0
            return out
        eps = spent_epsilon(self.sigma, self.sensitivity, spent, c.privacy_delta, c.accountant)
        out["epsilon"] = eps  # rigorous (ε2, δ) actually spent on the graph so far
        out["epsilon2_spent"] = eps
        if c.mechanism == "aggregate":
            # Theorem 4.2's closed form as the paper applies it: one release per step, Δ = C
            out["epsilon2_theorem_4_2_single_release"] = theorem_4_2_epsilon(
                self.sigma, c.privacy_delta, c.steps, c.clip_norm
            )
        # the same closed form over the real release pattern (valid, looser than PLD)
        if spent:
            out["epsilon2_theorem_4_2_all_releases"] = theorem_4_2_epsilon(
                self.sigma, c.privacy_delta, spent, self.sensitivity
            )
        return out
