"""dgrec — DGREC (Zheng et al., CIKM 2023): decentralised GNN recommendation, users as peers.

There is no server: every participant is a user node, and every message goes user → user along
the inter-user graph of data/graphs.py (the dataset's social/trust links; for ml-100k users of the
same zip-code prefix and occupation, as the paper does for Book-Crossing). Every user holds its own
DGREC model (protocols/dgrec/model.py: item table, W1…W5, MLP); all copies start from one public
initialisation derived from the run's seed.

Stage 1 — graphs (round 0, before the first training round)

``publicize``  each user publicizes a fraction ρ (``public_ratio``) of its training interactions,
               drawn with its own RNG, and sends the item ids to its 1-hop neighbours
               (``public_items``). Its other interactions never leave it.
``setup``      each user builds its inner-item hypergraph: nodes = its own items ∪ the publicized
               items its neighbours sent, hyperedges = item tags (A_u, D_v, D_t in protocols/dgrec/model.py),
               and computes its initial loss L_u (eq. 3 on a pair sample) for eq. 4.

Stage 2 — the local model (protocols/dgrec/model.py, no traffic): hypergraph convolution over the user's
inner-item hypergraph, interest extraction with the Pearson term L_P (eq. 1), the user embedding,
ŷ = MLP(e_u ‖ e_i), and the loss L_u (eq. 3: BPR over ``pairs`` pairs + λ_P·L_P + λ_2·‖Θ‖²).

Stage 3 — neighbourhood training (one round = several neighbourhoods in parallel)

``status``     every user whose loss or sample count changed sends (L_u, cnt_u) to its neighbours
               (``status``, 2 floats): what eq. 4 needs, as a small message.
``seed``       each user becomes a seed with probability ``neighbourhoods`` / #users (own RNG) and
               invites min(n_u, #candidates) neighbours drawn without replacement with
               p_v ∝ L_v / (ln(cnt_v + 1) + 1) (eq. 4, Algorithm 1) (``invite``, carries the hop).
``hop/h``, h = 1..H:  a user that is not yet in a neighbourhood this round accepts its first invitation
               (lowest sender id among those arriving together), answers ``join`` to its parent,
               increments cnt_u and, if its hop < H, invites n_u of its other neighbours (eq. 4).
               Invitations to users already taken this round are ignored (no answer), so a user
               belongs to at most one neighbourhood per round and each neighbourhood is a tree of
               depth ≤ H and fan-out ≤ n_u, as in protocols/dgrec/sampling.py's Algorithm 1 (where
               a parent picks among non-members only; here it learns membership by the missing
               ``join``, and the slot stays empty).
``train``      the last joins arrive; every member computes its local gradient g_u of eq. 3 on
               ``pairs`` (positive, negative) pairs of its own items, clips it to [−δ, δ], encodes it
               to ±1 (eq. 5, privacy/onebit.py), bit-packs it (wire.encode_signs) and sends it to its
               tree neighbours: gossip step 1 (``share``).
``gossip/t``, t = 2..2H:  gossip step t (Algorithm 2): a member forwards every encoded gradient it
               obtained for the first time at the previous step to each tree neighbour that did not
               just send it that gradient; all gradients for one neighbour in one step travel in one
               ``share`` message: record(ids of their origins, one signs field per gradient).
``update``     the step-2H messages arrive; every member decodes the mean of all the encoded
               gradients it holds (its own included), ḡ = δ(e^β+1)/(e^β−1) · mean (eq. 6), and takes
               an SGD step θ_u ← θ_u − lr·ḡ on its own model.

On a tree of diameter ≤ 2H every member holds every encoded gradient of its neighbourhood after
2H steps (tests check it on the real messages). Forwarding an encoded gradient is post-processing,
so user u spends privacy only for its own shares: ε = β per element, n_s·β per shared vector
(basic composition), composed over the shares it made with privacy/accountant.py (dp_accounting).

Absent peers (run conditions: dropout, or a host lost to a fault). A user offline in a round runs
no handler and receives nothing: it is not sampled, does not train, share or forward. The others:

* ``status``: a user owes its current (L_u, cnt_u) to each neighbour and sends it to those it can
  reach (``self.online``); a neighbour that was offline gets it the next round both are online.
* eq. 4 / Algorithm 1: a user invites only neighbours it can reach this round; p_v is normalised
  over the reachable candidates (protocols/dgrec/sampling.py does the same with an ``online``
  mask). An invitee lost to a fault after the draw never answers ``join``: its slot stays empty.
* gossip (Algorithm 2) finishes with what arrives: after 2H steps each member decodes eq. 6 over the
  k gradients it actually holds (its own and those received), ḡ = δ(e^β+1)/(e^β−1) · (1/k)·Σ b_j,
  the unbiased estimate of the mean of those k clipped gradients (:func:`decode_held`); a
  gradient that did not arrive is neither waited for nor counted.
* stage 1 is enrolment: it happens once before the first training round, and every user takes
  part in it (a device enrols when it can). A user whose stage-1 state was lost to a fault (its
  host restored from a snapshot taken before stage 1) builds its hypergraph from what it holds
  (its own items and the publicized items it kept) the next time it acts.

With everyone online each of these does exactly what it does without run conditions.

Adversaries (``--adversaries``, protocols/dgrec/attacks.py, DLGNN too): compromised members,
or fake peers befriending real users (adversaries/graph.py), replace their encoded share with a
crafted one (one-bit: signs of their choosing, still one bit per coordinate) and forward the
others' honestly. With a defence (``--defence``) each member decodes the k shares it holds with
the robust rule instead of eq. 6's mean (protocols/dgrec/messages.py ``decode_held``).

Evaluation (``eval``): every user ranks all items not in its training set with its own model
(ŷ = MLP(e_u ‖ e_i)) and reports Recall/NDCG@K; no traffic. With ``validation`` (not in the paper,
off by default) each user also holds out part of its own training items, scores them every
``validate_every`` rounds (``validate``) and before each evaluation, keeps the model that did
best on them, and is evaluated with that model (protocols/dgrec/ranking.py).

Parameters, the step-size note (lr, not stated by the paper) and the ablations (the paper's
Table 3) are in protocols/dgrec/config.py; the wire formats in protocols/dgrec/messages.py; the
user node that runs each phase in protocols/dgrec/roles.py; the local model in protocols/dgrec/model.py
(built by protocols/dgrec/factory.py); the pure sampler and gossip schedule, checked against these
messages by the tests, in protocols/dgrec/sampling.py. ``model = "lightgcn"`` is the DLGNN
baseline (protocols/dlgnn/).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from dp_accounting import dp_event

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from adversaries.graph import with_fake_peers
from cluster.message import node_id
from data.graphs import user_graph
from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec, mean_report, mean_reports
from nodes.node import Shared
from privacy.accountant import (
    PrivacyAccountant,
    laplace_vector_event,
    randomized_response_event,
    rdp_of_randomized_response,
)
from privacy.ldp import laplace_epsilon_per_coordinate
from protocols.base import PaperClaim, PaperFigure, PrivacyReport, Protocol
from protocols.dgrec.config import PAPER_RDP, DGRECConfig, DGRECPublic
from protocols.dgrec.factory import n_shared
from protocols.dgrec.roles import DGRECUser
from protocols.dgrec.sampling import worst_case_bits


class DGREC(Protocol):
    name = "dgrec"
    Config = DGRECConfig
    # FedRecAttack's promotion loss assumes dot-product scores; DGREC scores with an MLP
    ATTACKS = declared_in(
        "protocols.dgrec.attacks",
        "random",
        "bandwagon",
        "pipattack",
        "byzantine-scaled",
        "byzantine-signflip",
        "byzantine-random",
        "malformed",
    )
    QUICK = {"rounds": 3, "eval_every": 1}
    # Zheng et al., CIKM 2023, Book-Crossing, Recall@20 / NDCG@20 in percent, beside LightGCN
    # (the paper's main table), which benchmarks.reproduce sets beside ours
    PAPER = PaperFigure(
        on="Book-Crossing",
        percent=True,
        method={"recall@20": 9.68, "ndcg@20": 5.13},
        baselines={"central:lightgcn": ("LightGCN", {"recall@20": 9.94, "ndcg@20": 5.49})},
        source="Zheng et al., CIKM 2023, main table",
    )

    @classmethod
    def central_baseline(cls, params) -> str:
        return "central:lightgcn"  # LightGCN on the whole interaction graph

    def needs_negatives(self) -> bool:
        return True  # each member's local BPR loss samples negatives

    def __init__(self, dataset: RecDataset, config: DGRECConfig, seed: int):
        super().__init__(dataset, config, seed)
        has_tags = dataset.item_tags is not None and dataset.item_tags.shape[1] > 0
        if config.model == "dgrec" and not has_tags:
            raise ValueError(f"dataset {dataset.name!r} has no item tags: DGREC's hyperedges")
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)
        self.users = [u for u in range(dataset.n_users) if len(self.train_items[u])]
        active = np.zeros(dataset.n_users, dtype=bool)
        active[self.users] = True
        graph = user_graph(dataset, k=config.neighbours, seed=seed)
        self.graph = [np.asarray(g[active[g]], dtype=np.int64) for g in graph]
        item_tags = (
            sp.csr_matrix(dataset.item_tags, dtype=np.float32)
            if has_tags
            else sp.csr_matrix((dataset.n_items, 1), dtype=np.float32)
        )
        self.public = DGRECPublic(
            n_users=dataset.n_users,
            n_items=dataset.n_items,
            n_tags=int(item_tags.shape[1]),
            item_tags=item_tags,
            seed_probability=min(1.0, config.neighbourhoods / max(1, len(self.users))),
            laplace_scale=config.resolved_laplace_scale(),
        )
        self.n_s = n_shared(config, self.public)
        self.accountant = PrivacyAccountant(delta=config.privacy_delta)
        self._stage1_done = False
        self.history: list[dict] = []

    def _fake(self) -> tuple[int, ...]:
        return self.adversary_plan.fake if self.adversary_plan is not None else ()

    def shared(self) -> Shared:
        fake = self._fake()  # fake peers are users to the others (ids after the real ones)
        public = self.public
        if fake:
            public = dataclasses.replace(public, n_users=self.dataset.n_users + len(fake))
        return Shared(self.config, public)

    def adversary_users(self) -> list[int]:
        return list(self.users)

    def node_specs(self) -> list[NodeSpec]:
        # with adversaries (adversaries/condition.py): compromised real users played by the
        # attack's class, and fake peers after the real users, each befriending real users
        # (adversaries/graph.py: undirected links, so they are sampled, invited and gossip
        # like any peer)
        adv, fake = self.adversary_plan, self._fake()
        graph = with_fake_peers(self.graph, self.users, fake, self.seed)
        empty = np.zeros(0, dtype=np.int64)
        specs = []
        for u in [*self.users, *fake]:
            real = u < self.dataset.n_users
            private = {
                "train_items": self.train_items[u] if real else empty,
                "test_items": self.test_items[u] if real else empty,
                "neighbours": graph[u],
            }
            cls, private = role_of(adv, u, DGRECUser, private, fake=not real)
            specs.append(NodeSpec(cls, node_id("user", u), private, packable=True))
        return specs

    # --- one round ---------------------------------------------------------------------------
    def stage1(self, dep: Deployment, round_: int) -> None:
        """Stage 1, once: enrolment, before the participants go about their training rounds, so
        every user takes part whatever its availability in round ``round_`` (module docstring)."""
        dep.status(
            f"enrolment: publicized interactions, local hypergraphs ({len(self.users)} users)…"
        )
        dep.superstep(round_, "publicize", activate=["user"], availability=False)  # ρ of I_u
        # inner-item hypergraph (A_u, D_v, D_t) and the initial L_u of eq. 3, for eq. 4
        dep.superstep(round_, "setup", activate=["user"], availability=False)
        self._stage1_done = True

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        if not self._stage1_done:
            self.stage1(dep, round_)
        c = self.config
        # Stage 3, Algorithm 1: sample neighbourhoods by messages, p_v ∝ L_v / (ln(cnt_v + 1) + 1)
        dep.superstep(round_, "status", activate=["user"])  # (L_u, cnt_u) for eq. 4
        dep.superstep(round_, "seed", activate=["user"])  # seeds invite n_u neighbours (eq. 4)
        for h in range(1, c.hops + 1):  # trees of depth ≤ H, fan-out ≤ n_u
            dep.superstep(round_, f"hop/{h}")
        # Algorithm 2: g_u of eq. 3, clipped and one-bit encoded (eq. 5), gossiped for 2H steps
        res = dep.superstep(round_, "train", activate=["user"])  # gossip step 1
        for t in range(2, 2 * c.hops + 1):
            dep.superstep(round_, f"gossip/{t}")
        upd = dep.superstep(round_, "update", activate=["user"])  # eq. 6 mean, SGD step
        validated = {}
        if c.validation > 0 and (round_ + 1) % c.validate_every == 0:
            validated = self.validate(dep, round_)

        members = sorted(int(u) for u in res.reports.get("shared_by", []))
        self._spend(members)
        share_bytes = dep.ledger.by_kind(round_=round_).get("share", 0)
        n_members, n_seeds = len(members), len(res.reports.get("seed", []))
        row = {
            "loss": mean_report(res.reports, "loss"),
            "members": n_members,
            "neighbourhoods": n_seeds,
            "neighbourhood_size": n_members / n_seeds if n_seeds else 0.0,
            "held_mean": mean_report(upd.reports, "held"),
            "share_bytes_per_member": share_bytes / n_members if n_members else 0.0,
            "worst_case_bytes_per_user": worst_case_bits(c.hops, c.n_u, self.n_s) / 8,
            "float_bytes_per_member": (
                share_bytes / n_members * 32 if n_members and c.mechanism == "onebit" else 0.0
            ),
            "round_bytes": dep.ledger.total(round_=round_),
        }
        row.update(validated)
        self.history.append(row)
        return row

    _validated: tuple[int, dict[str, float]] = (-1, {})  # (round, figures) of the last check

    def validate(self, dep: Deployment, round_: int) -> dict[str, float]:
        """Each user scores its held-out items and keeps its best model (config ``validation``);
        returns the mean NDCG@K on them and the mean round of the kept models. Once a round: the
        models have not changed since a check made earlier in the same round."""
        if self._validated[0] != round_:
            reports = dep.superstep(round_, "validate", activate=["user"]).reports
            self._validated = (round_, mean_reports(reports))
        return self._validated[1]

    def _spend(self, members: list[int]) -> None:
        """Each member spent one share this round: n_s elements, each ε = β (eq. 5); forwarding
        another's encoded gradient is post-processing and costs nothing."""
        if not members:
            return
        c = self.config
        if c.mechanism == "onebit":  # n_s elements, each binary RR with ε = β
            event = dp_event.SelfComposedDpEvent(randomized_response_event(c.beta), self.n_s)
        elif c.mechanism == "laplace":
            event = laplace_vector_event(c.clip, c.resolved_laplace_scale(), self.n_s)
        else:
            event = dp_event.NonPrivateDpEvent()
        self.accountant.spend(members, event, f"{c.mechanism}-share")

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        if not self._stage1_done:
            self.stage1(dep, round_)
        out = {}
        if self.config.validation > 0:  # the last rounds' models are candidates too
            out = self.validate(dep, round_)
        res = dep.superstep(round_, "eval", activate=["user"])
        return {**out, **mean_reports(res.reports)}

    def audits(self) -> list:
        """One element of a share, encoded and decoded as members do (protocols/dgrec/audit.py)."""
        from protocols.dgrec.audit import run_audits

        return run_audits(self.config)

    def privacy(self) -> PrivacyReport:
        """The worst user's ε composed over the shares it made (at ``privacy_delta``), beside
        the paper's stated RDP figure for the one-bit encoder; per element ε = β (eq. 5)."""
        c = self.config
        details = {"n_s": self.n_s, "shares_max": 0, "users_sharing": self.accountant.n_units}
        epsilon = 0.0
        if self.accountant.n_units:
            summary = self.accountant.summary()
            details["shares_max"] = summary["labels"][f"{c.mechanism}-share"]["max_count"]
            epsilon = summary["worst_epsilon"]  # composed over the shares, at `privacy_delta`
            details["epsilon_bound"] = summary["bound"]
        paper, per = None, None
        if c.mechanism == "onebit":
            per = c.beta
            details["epsilon_per_vector"] = self.n_s * c.beta
            details["rdp_per_element_order_1.5"] = rdp_of_randomized_response(c.beta, 1.5)
            details["paper_stated_rdp"] = {"order": PAPER_RDP[0], "epsilon": PAPER_RDP[1]}
            paper = PaperClaim(PAPER_RDP[1], f"RDP ε at order {PAPER_RDP[0]:g}")
        elif c.mechanism == "laplace":
            per = laplace_epsilon_per_coordinate(c.clip, c.resolved_laplace_scale())
            details["epsilon_per_vector"] = self.n_s * per
        return PrivacyReport(
            mechanism=c.mechanism,
            epsilon=epsilon,
            delta=c.privacy_delta,
            unit="user",
            per_element=per,
            paper=paper,
            details=details,
        )
