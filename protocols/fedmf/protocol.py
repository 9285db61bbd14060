"""fedmf — federated BPR matrix factorisation, FCF / FedeRank style (Ammad-ud-din et al. 2019;
Anelli et al. 2021): the federated MF baseline, with plain (unencrypted, unperturbed) uploads.

The server keeps the item factors Q; every user keeps its own factor p_u and its interactions on
its device. One round (``run_round``):

1. ``download``  the server samples |Ū| users and sends each the item factors Q (dense fp32).
2. ``train``     each sampled user draws P (positive, negative) pairs from its own data, computes
                 the BPR gradients (models/bpr.py), updates p_u locally with SGD (``user_steps``
                 = S steps on the same pairs: the first S − 1 on p_u alone with Q fixed) and
                 uploads the item gradients of its 2P sampled slots at the last step: ids + rows.
                 Uploads have a fixed size, so their length says nothing about how many items the
                 user has; the ids do reveal which items were sampled — the known leak of this
                 baseline, which FedPerGNN's pseudo items hide.
3. ``aggregate`` the server sums the uploads that arrived row by row (in a fixed order), averages
                 over them and takes an Adam step on Q. A sampled user who is offline never
                 uploads; with fewer than ``min_participants`` uploads (a run condition), or
                 none at all (every upload late or offline), the server skips the round's update
                 and reports it (``skipped``).

Evaluation (``eval_download``/``eval``): the server sends Q to every user, each user ranks all
items it has not trained on with p_u·Q and reports its Recall/NDCG/Precision/Hit@K; that traffic
is ledgered as evaluation, apart from protocol traffic.
"""

from __future__ import annotations

import numpy as np

from adversaries.attacks import declared_in
from adversaries.condition import role_of
from cluster.message import node_id
from data.types import RecDataset
from nodes import secure_sum
from nodes.deployment import Deployment, NodeSpec, mean_reports, training_figures
from nodes.node import Shared
from protocols.base import Protocol
from protocols.fedmf.config import FedMFConfig, FedMFPublic
from protocols.fedmf.roles import SECURE_SUM, SERVER, FedMFServer, FedMFUser


class FedMF(Protocol):
    name = "fedmf"
    Config = FedMFConfig
    QUICK = {"rounds": 30, "dim": 32, "eval_every": 5}
    ATTACKS = declared_in("protocols.fedmf.attacks")
    BASELINE_SHARES = {"dim": "dim"}
    SECURE_SUM = SECURE_SUM  # what the server sums with --secure-aggregation (roles.py)

    @classmethod
    def central_baseline(cls, params) -> str:
        return "central:bprmf"  # BPR-MF trained on all the data in one place

    def needs_negatives(self) -> bool:
        return True  # BPR on sampled negatives

    def __init__(self, dataset: RecDataset, config: FedMFConfig, seed: int):
        super().__init__(dataset, config, seed)
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)

    def shared(self) -> Shared:
        return Shared(self.config, FedMFPublic(self.dataset.n_users, self.dataset.n_items))

    def adversary_users(self) -> list[int]:
        return [u for u in range(self.dataset.n_users) if len(self.train_items[u])]

    def node_specs(self) -> list[NodeSpec]:
        # the server and one user per user with training data (the others take no part); with
        # adversaries (adversaries/condition.py), fake users after the real ones, and the
        # compromised real users played by the attack's class
        users = self.adversary_users()
        adv = self.adversary_plan
        fake = list(adv.fake) if adv is not None else []
        specs = [NodeSpec(FedMFServer, SERVER, {"users": np.array(users + fake)})]
        for u in users:
            private = {"train_items": self.train_items[u], "test_items": self.test_items[u]}
            cls, private = role_of(adv, u, FedMFUser, private)
            specs.append(NodeSpec(cls, node_id("user", u), private, packable=True))
        for u in fake:  # no data of their own: the attack class makes up its profile
            private = {"train_items": np.zeros(0, np.int64), "test_items": np.zeros(0, np.int64)}
            cls, private = role_of(adv, u, FedMFUser, private, fake=True)
            specs.append(NodeSpec(cls, node_id("user", u), private, packable=True))
        return specs

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "download", activate=[SERVER])  # step 1: Q to the sampled users
        res = dep.superstep(round_, "train")  # step 2: local BPR step, item gradients up
        masked = secure_sum.run_stages(dep, round_)  # --secure-aggregation: only the sum
        # step 3: mean of the uploads, Adam on Q; the server runs even when no upload arrived
        # in time, and reports the round skipped
        agg = dep.superstep(round_, "aggregate", activate=[SERVER])
        return {**training_figures(res, agg), **masked}

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        dep.superstep(round_, "eval_download", activate=[SERVER])
        res = dep.superstep(round_, "eval")
        return mean_reports(res.reports)
