"""central — the non-private centralized baselines the papers compare against, as a protocol.

One participant: ``curator/0`` (a dedicated host actor; it computes on the GPU share Ray gives
its host when ``--gpus-per-host`` > 0) holds the whole training data — by definition of the
baseline, nothing is private and nothing travels: **the ledger shows 0 protocol bytes**.

    python launch.py --protocol central --model lightgcn --dataset ml-100k --rounds 100

One round = one training epoch: ``train`` activates the curator, which runs one epoch of its
trainer (models/trainer.py's family; models/central.py picks it by ``model``) and reports its
loss; evaluation (``eval``) asks it for the test metrics. Models (``model``):

* ``lightgcn`` — LightGCN (He et al. 2020, eqs. 3–4, BPR + L2 of eq. 15, Adam; d = 64, K = 2,
  lr 1e-3, α = 1e-4, batch 2048); ``bprmf`` — the same with K = 0, i.e. BPR-MF (s_ui = e_u·e_i).
  Implicit ranking: Recall/NDCG@eval_k over all items not in the user's training set (ratings,
  if the dataset has any, are ignored: every training interaction is a positive).
* ``gcn``, ``gat``, ``ggnn``, ``mf`` — VerFedGNN's rating models (models/rating_gnn, eqs. 5 and
  13–16; D = 6, K = 2, Adagrad lr 0.05, λ = 1e-3, graph edges = ratings ≥ thd = 4); RMSE on the
  held-out test ratings (predictions clamped to the training rating range). Needs ratings.
* ``dipsgnn`` — the DIPSGNN network without noise and with clean user features (the
  non-private sequential baseline; models/sequential.py, paper settings d = 100,
  d' = 50, T = ``layers`` = 1, Adam 1e-3, weight decay 1e-5, batch 100); Recall/MRR@5/10/20
  over all test positions. Needs timestamps (and user features unless ``use_features=false``).

``dim``, ``layers``, ``lr``, ``l2`` (LightGCN α, rating λ, DIPSGNN weight decay) and
``batch_size`` left unset take the chosen model's defaults above; the resolved values are what
``config.json`` records. The curator's trainer is seeded with the run's seed, so
``--protocol central --model lightgcn`` reproduces models.lightgcn.train_central(seed=…)
exactly.
"""

from __future__ import annotations

from cluster.message import node_id
from data.types import RecDataset
from models.central import RANKING, RATING, TASK_OF_MODEL
from nodes.deployment import Deployment, NodeSpec, mean_reports
from protocols.base import MainMetric, PrivacyReport, Protocol
from protocols.central.config import CentralConfig, check_fits
from protocols.central.roles import Curator

CURATOR = node_id("curator", 0)


# the main job's settings per model (`central:MODEL` beside the protocol it is the baseline of)
QUICK_BY_MODEL: dict[str, dict] = {
    "bprmf": {"rounds": 30, "dim": 32, "lr": 0.01, "eval_every": 5},
    "lightgcn": {"rounds": 30, "dim": 32, "lr": 0.01, "eval_every": 5},
    "gcn": {"rounds": 10, "eval_every": 2},
    "dipsgnn": {"rounds": 2, "dim": 32, "user_dim": 16, "eval_every": 1},
}


class Central(Protocol):
    name = "central"
    Config = CentralConfig
    LABEL_PARAM = "model"  # central:lightgcn is --protocol central --model lightgcn

    @classmethod
    def quick_settings(cls, params) -> dict:
        return dict(QUICK_BY_MODEL.get(params.get("model", CentralConfig.model), {}))

    def needs_negatives(self) -> bool:
        return TASK_OF_MODEL[self.config.model] == RANKING  # BPR on sampled negatives

    def main_metric(self) -> MainMetric:
        if TASK_OF_MODEL[self.config.model] == RATING:
            return MainMetric("rmse", "lower")
        return MainMetric(f"recall@{self.config.eval_k}", "higher")

    def __init__(self, dataset: RecDataset, config: CentralConfig, seed: int):
        super().__init__(dataset, config, seed)
        check_fits(dataset, config)

    # shared(): the base class's Shared(config); there are no public values, nobody else

    def node_specs(self) -> list[NodeSpec]:
        return [NodeSpec(Curator, CURATOR, {"dataset": self.dataset})]

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        res = dep.superstep(round_, "train", activate=[CURATOR])  # one epoch
        return mean_reports(res.reports)

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        res = dep.superstep(round_, "eval", activate=[CURATOR])
        return mean_reports(res.reports)

    def privacy(self) -> PrivacyReport:
        return PrivacyReport(
            mechanism="none",
            epsilon=float("inf"),
            details={
                "note": "non-private baseline: one curator holds all training data; no protocol "
                "messages are exchanged (0 bytes on the ledger)"
            },
        )
