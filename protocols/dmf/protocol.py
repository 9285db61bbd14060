"""dmf — decentralised BPR matrix factorisation over a user graph, no server: the decentralised
MF baseline (users exchange item gradients with their neighbours, in the manner of Chen et al.'s
DMF, AAAI 2018).

Every user keeps its own factor p_u and its own copy Q_u of the item factors (all copies start
from the same public initialisation, derived from the run's seed). Scores are p_u·q_i + b_i: the
item bias is carried as a last column of Q_u against a constant 1 in p_u, so a neighbour's
gradient moves my copy's bias of the items it likes whatever direction its own factor points
in. One round (``run_round``):

1. ``train``  each user (with probability ``participation``) draws P (positive, negative) pairs
              from its own data, computes BPR gradients (models/bpr.py), updates p_u and Q_u with
              SGD, and sends the item gradients of its 2P sampled slots (ids + rows), tagged with
              a fresh random nonce, to its neighbours.
2. ``relay``  (``hops`` − 1 times) each user applies every gradient it has not seen before,
              scaled by ``neighbour_weight``^hop, and forwards it to its other neighbours; the
              nonce lets a user drop a gradient that reaches it twice without learning who
              originated it.
3. ``merge``  each user applies the last hop's new gradients (in sender order, so the result is
              placement-independent).

Absent peers (run conditions: dropout, or a host lost to a fault). A user offline in a round
neither trains, nor sends, nor relays, nor receives. The others send and forward only to
neighbours they can reach this round (``self.online``) and apply what arrives: each gradient
that arrives is applied once, on its own, scaled by ``neighbour_weight``^hop, with no
normalisation by the number of neighbours, so a missing neighbour's gradient is simply not
applied and no user waits for one. With everyone online nothing changes.

Neighbours come from data/graphs.py (the dataset's social/trust links, or same region and
occupation). Evaluation is local: each user ranks with p_u·Q_u and reports; no traffic.

Adversaries (``--adversaries``, protocols/dmf/attacks.py): compromised users, or fake peers
befriending real users (adversaries/graph.py), gossip crafted item gradients in step 1 and relay
honestly. With a defence (``--defence``) each honest user combines the gradients new to it at a
hop with the robust rule (adversaries/defences.py ``combine_shares``) instead of applying each.
"""

from __future__ import annotations

import numpy as np

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from adversaries.graph import with_fake_peers
from cluster.message import node_id
from data.graphs import user_graph
from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec, mean_reports, training_figures
from nodes.node import Shared
from protocols.base import Protocol
from protocols.dmf.config import DMFConfig, DMFPublic
from protocols.dmf.roles import DMFUser


class DMF(Protocol):
    name = "dmf"
    Config = DMFConfig
    BASELINE_SHARES = {"dim": "dim"}
    ATTACKS = declared_in("protocols.dmf.attacks")

    @classmethod
    def central_baseline(cls, params) -> str:
        return "central:bprmf"  # BPR-MF trained on all the data in one place

    def needs_negatives(self) -> bool:
        return True  # BPR on sampled negatives

    def __init__(self, dataset: RecDataset, config: DMFConfig, seed: int):
        super().__init__(dataset, config, seed)
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)
        self.graph = user_graph(dataset, k=config.neighbours, seed=seed)

    def shared(self) -> Shared:
        adv = self.adversary_plan  # fake peers are users to the others (ids after the real ones)
        n_users = self.dataset.n_users + (len(adv.fake) if adv is not None else 0)
        return Shared(self.config, DMFPublic(n_users, self.dataset.n_items))

    def adversary_users(self) -> list[int]:
        return [u for u in range(self.dataset.n_users) if len(self.train_items[u])]

    def node_specs(self) -> list[NodeSpec]:
        # with adversaries (adversaries/condition.py): compromised real users played by the
        # attack's class, and fake peers after the real users, each befriending real users
        # (adversaries/graph.py: undirected links, so they receive and relay like any peer)
        adv = self.adversary_plan
        fake = adv.fake if adv is not None else ()
        graph = with_fake_peers(self.graph, self.adversary_users(), fake, self.seed)
        empty = np.zeros(0, dtype=np.int64)
        specs = []
        for u in range(self.dataset.n_users + len(fake)):
            real = u < self.dataset.n_users
            private = {
                "train_items": self.train_items[u] if real else empty,
                "test_items": self.test_items[u] if real else empty,
                "neighbours": graph[u],
            }
            cls, private = role_of(adv, u, DMFUser, private, fake=not real)
            specs.append(NodeSpec(cls, node_id("user", u), private, packable=True))
        return specs

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        res = dep.superstep(round_, "train", activate=["user"])  # step 1
        for hop in range(1, self.config.hops):  # step 2
            dep.superstep(round_, f"relay{hop}")
        dep.superstep(round_, "merge")  # step 3
        return training_figures(res)

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        res = dep.superstep(round_, "eval", activate=["user"])
        return mean_reports(res.reports)
