"""DIPSGNN's two roles: the user's device and the curator. Node ids: ``user/u`` (packed),
``server/0``. Phases, driven by :class:`protocols.dipsgnn.protocol.DIPSGNNProtocol` (the
algorithm is described there); payloads in protocols/dipsgnn/messages.py:

============  ========  ====================================================================
phase         who acts  what it does
============  ========  ====================================================================
upload        users     features perturbed once with Algorithm 3 (ε1) → curator, with the
                        training sequence s[:n_tr]; the held-out items stay on the device
train         curator   stores the uploads that arrived, appends their prefixes, one epoch of
                        Algorithm 4 (eqs. 4–13; noise of eq. 7), EdgeRand or DP-SGD
eval_context  users     the held-out context s[n_tr:L-1] → curator
eval_rank     curator   top-K over all items for each test prefix, without noise → its user
eval          users     Recall@K and MRR@K against the held-out targets
============  ========  ====================================================================

What arrives is untrusted: the host's screen checks each payload against the public records
(protocols/dipsgnn/messages.py: ids of the catalogue, an upload no longer than ``max_len``'s
training part). A handler drops (:meth:`Node.reject`, counted under the run's ``rejected``)
rather than uses a message from another round (``order``), an upload from a user the curator
does not register (``peer``), a second message of one kind from one user in one step
(``budget``), an evaluation context that makes the user's sequence longer than ``max_len``
(``size``), or top-K lists that do not fit the user's held-out targets (``shape``,
``malformed``). An honest run rejects nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from cluster import wire
from cluster.message import index_of
from cluster.validate import Accept
from data.sequences import PrefixExamples, train_length, training_prefixes
from models.gated_session_gnn import DIPSGNN, KS
from models.metrics import next_item_metrics, topk_scores
from models.session_training import rank_prefixes, train_epoch
from nodes.node import Node, NodeContext, expect_kinds
from privacy.feature_perturbation import encode_user_features, perturb_user_features
from protocols.dipsgnn import messages
from protocols.dipsgnn.config import SERVER
from protocols.dipsgnn.dpsgd import train_epoch_dpsgd


@dataclasses.dataclass(frozen=True)
class Holdings:
    """Whose data the curator holds (bool per user row), the epochs it trained while holding
    each user's (int per row), and the epochs it trained in all."""

    held: np.ndarray
    epochs_by_row: np.ndarray
    epochs_done: int


# --------------------------------------------------------------------------- the user's device


class DIPSGNNUser(Node):
    role = "user"
    ACCEPTS = {"topk": Accept(("server",), ("eval",), messages.check_topk)}

    def __init__(self, nid: str, ctx: NodeContext, sequence: np.ndarray, features: dict):
        super().__init__(nid, ctx)
        self.sequence = np.asarray(sequence, dtype=np.int64)  # chronological, private
        self.features = dict(features)  # private: name -> value
        self.n_train = max(train_length(len(self.sequence), self.config.train_fraction), 1)
        self.perturbed: np.ndarray | None = None  # Algorithm 3's output, drawn once

    def clean_features(self) -> np.ndarray:
        p = self.public
        return encode_user_features(
            self.features, p.feature_kinds, p.feature_cardinality, p.public_ranges
        )

    def handle(self, phase: str, inbox) -> None:
        c, p = self.config, self.public
        if phase == "upload":
            expect_kinds(inbox, node=self.id)
            if c.use_features:
                if c.private_features:  # Algorithm 3, on the device, once: a retry resends
                    if self.perturbed is None:  # the same vector and releases nothing new
                        self.perturbed = perturb_user_features(
                            self.features,
                            p.feature_kinds,
                            p.feature_cardinality,
                            p.public_ranges,
                            c.eps1,
                            self.noise_rng,
                        )
                    x = self.perturbed
                else:
                    x = self.clean_features()
                self.send("features", SERVER, messages.encode_features(x))
            self.send("sequence", SERVER, messages.encode_items(self.sequence[: self.n_train]))
            self.report("uploaded", float(index_of(self.id)))  # for the privacy accounting
        elif phase == "eval_context":
            expect_kinds(inbox, node=self.id)
            # the held-out items that later test positions condition on; never the last item
            self.send(
                "eval_context", SERVER, messages.encode_items(self.sequence[self.n_train : -1])
            )
        elif phase == "eval":
            expect_kinds(inbox, "topk", node=self.id)
            inbox = self.admit(inbox)
            if not inbox:
                return
            (msg,) = inbox
            targets = self.sequence[self.n_train :]
            if not len(targets):  # nothing held out: nothing to judge the lists by
                return
            flat = wire.decode_ids(msg.payload)  # ids of the catalogue: the host's screen
            problem = messages.topk_problem(flat, len(targets))
            if problem is not None:  # not one list of distinct items per held-out target
                self.reject(msg, problem)
                return
            top = flat.reshape(len(targets), -1)
            with torch.device(self.device):  # topk_scores makes its tensors on the default device
                scores = topk_scores(top, p.n_items)
            for name, values in next_item_metrics(scores, self.tensor(targets), KS).items():
                for v in values:
                    self.report(name, float(v))
            if self.threat is not None and self.threat.targets:
                self._report_target_exposure(top)
        else:
            super().handle(phase, inbox)

    def _report_target_exposure(self, top: np.ndarray) -> None:
        """The targets' exposure (adversaries/condition.py) at this user's test prefixes, one
        value per prefix like Recall@K: ``target_er@K`` 1 when the prefix's top K holds a
        target the user did not interact with in training, ``target_hr@K`` the share of those
        targets in it. A user who interacted with every target reports nothing."""
        k = self.threat.er_k
        open_ = np.setdiff1d(np.array(self.threat.targets), self.sequence[: self.n_train])
        if not len(open_):
            return
        for row in top[:, :k]:
            hits = np.isin(open_, row)
            self.report(f"target_er@{k}", float(hits.any()))
            self.report(f"target_hr@{k}", float(hits.mean()))


# --------------------------------------------------------------------------- the curator


class DIPSGNNServer(Node):
    role = "server"
    ACCEPTS = {
        "features": Accept(("user",), ("train",), messages.check_features),
        "sequence": Accept(("user",), ("train",), messages.check_sequence),
        "eval_context": Accept(("user",), ("eval_rank",), messages.check_context),
    }

    def __init__(self, nid: str, ctx: NodeContext, users: np.ndarray):
        super().__init__(nid, ctx)
        c = self.config
        self.users = np.asarray(users, dtype=np.int64)
        self.row_of = {int(u): r for r, u in enumerate(self.users)}
        self.sigma = float(self.public.sigma)
        self.edgerand = c.mechanism == "edgerand"
        self.dpsgd = c.mechanism == "dpsgd"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(self.rng.integers(0, 2**63 - 1)))
            self.model = self.build(
                lambda: DIPSGNN(
                    self.public.n_items,
                    self.public.n_feature_slots,
                    use_features=c.use_features,
                    hidden_dim=c.hidden_dim,
                    user_dim=c.user_dim,
                    steps=c.steps,
                    clip_norm=c.clip_norm,
                    sigma=0.0 if self.edgerand else self.sigma,
                    graph_messages=c.graph_messages,
                )
            )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=c.lr, weight_decay=c.l2)
        # eq. 7's and DP-SGD's noise, and EdgeRand's (--secure-rng: from the OS, privacy/noise.py)
        self.noise = self.noise_generator()
        self.edgerand_seed = self.noise_seed()
        self.train_seqs: list[np.ndarray] | None = None
        self.features: torch.Tensor | None = None
        self.examples: PrefixExamples | None = None
        self.held = np.zeros(len(self.users), dtype=bool)  # rows whose upload arrived
        self.epochs_by_row = np.zeros(len(self.users), dtype=np.int64)  # epochs with it held
        self.epochs_done = 0

    def _receive_uploads(self, inbox) -> None:
        """Store the uploads of users not held yet and append their training prefixes (a
        second upload of a held user is ignored: its examples keep their ids)."""
        p = self.public
        n = len(self.users)
        if self.train_seqs is None:
            self.train_seqs = [np.zeros(0, dtype=np.int64)] * n
            self.feats = np.zeros((n, max(p.n_feature_slots, 1)), dtype=np.float32)
        new = [np.zeros(0, dtype=np.int64)] * n
        arrived = np.zeros(n, dtype=bool)
        for m in self.admit(inbox, self.row_of):
            row = self.row_of[index_of(m.src)]
            if self.held[row]:
                continue
            if m.kind == "sequence":
                new[row] = messages.decode_sequence(m.payload, p.n_items, m.src)
                arrived[row] = True
            else:
                self.feats[row] = messages.decode_features(m.payload, p.n_feature_slots, m.src)
        for row in np.flatnonzero(arrived):
            self.train_seqs[row] = new[row]
        self.held |= arrived
        # the uploaded part is all training data: every prefix s[:j] → s[j], j = 1..n_tr-1
        examples, _ = training_prefixes(new, train_fraction=1.0)
        if self.examples is None:
            self.examples = examples  # examples.user is the server's row index of the user
        elif len(examples):  # appended: earlier examples keep their ids
            self.examples = PrefixExamples(
                user=np.concatenate([self.examples.user, examples.user]),
                prefixes=self.examples.prefixes + examples.prefixes,
                target=np.concatenate([self.examples.target, examples.target]),
            )
        use = self.config.use_features
        self.features = self.tensor(self.feats) if use else None

    def handle(self, phase: str, inbox) -> None:
        c = self.config
        if phase == "train":
            expect_kinds(inbox, "features", "sequence", node=self.id)
            if inbox:
                self._receive_uploads(inbox)  # what fails the curator's checks is dropped
            if self.held.sum() < max(1, self.min_participants):  # run condition: too few users
                self.report("skipped", 1.0)
                return
            if self.epochs_done >= c.epochs:
                raise RuntimeError(
                    f"epochs: σ was calibrated for {c.epochs} epochs; a further epoch would "
                    "spend more than eps2 (raise `epochs` to train longer)"
                )
            if self.dpsgd:
                _, loss = train_epoch_dpsgd(
                    self.model,
                    self.optimizer,
                    self.examples,
                    self.features,
                    self.train_seqs,
                    batch_users=c.dpsgd_batch_users,
                    clip_norm=c.dpsgd_clip,
                    noise_multiplier=self.public.dpsgd_noise_multiplier,
                    max_weight=c.max_edge_weight,
                    # the sampling the accountant's amplification assumes secret (as Opacus)
                    sample_rng=self.noise_rng,
                    noise=self.noise,
                )
            else:
                loss = self._train_epoch()
            self.epochs_done += 1
            self.epochs_by_row[self.held] += 1  # this epoch released the held users' edges
            self.report("loss", loss)
            self.report("examples", float(len(self.examples)))
        elif phase == "eval_rank":
            expect_kinds(inbox, "eval_context", node=self.id)
            prefixes, rows, owners = [], [], []
            for m in self.admit(inbox, self.row_of):
                row = self.row_of[index_of(m.src)]
                if not self.held[row]:  # no training data of this user: nothing to rank with
                    continue
                context = messages.decode_context(m.payload)
                if len(self.train_seqs[row]) + len(context) + 1 > c.max_len:
                    self.reject(m, "size")  # longer than any sequence: a cost, not a user's
                    continue
                full = np.concatenate([self.train_seqs[row], context])
                start = len(self.train_seqs[row])
                for j in range(start, len(full) + 1):  # test prefixes s[:j], j = n_tr..L-1
                    prefixes.append(full[:j])
                    rows.append(row)
                owners.append((m.src, len(full) + 1 - start))
            if not prefixes:
                return
            k = max(max(KS), c.eval_k, self.threat.er_k if self.threat is not None else 0)
            top = rank_prefixes(
                self.model,
                prefixes,
                np.asarray(rows, dtype=np.int64),
                self.features,
                k=k,
                max_weight=c.max_edge_weight,
            )
            pos = 0
            for src, n in owners:
                self.send("topk", src, messages.encode_topk(top[pos : pos + n]))
                pos += n
        else:
            super().handle(phase, inbox)

    def _train_epoch(self) -> float:
        """One epoch of Algorithm 4 (noisy aggregation) or of EdgeRand."""
        c = self.config
        return train_epoch(
            self.model,
            self.optimizer,
            self.examples,
            self.features,
            batch_size=c.batch_size,
            max_weight=c.max_edge_weight,
            order_rng=self.rng,
            noise=self.noise,
            edgerand=(self.sigma, self.edgerand_seed) if self.edgerand else None,
        )

    def get_accounting(self) -> Holdings:
        """What the driver's accountant needs: whose data the curator holds, for how many epochs."""
        return Holdings(self.held.copy(), self.epochs_by_row.copy(), self.epochs_done)

    # inspection (tests)
    def get_state(self) -> dict:
        return {
            "sigma": self.sigma,
            "model_sigma": self.model.sigma,
            "epochs_done": self.epochs_done,
            "train_seqs": [x.copy() for x in self.train_seqs or []],
            "features": None if self.features is None else self.features.cpu().numpy().copy(),
        }
