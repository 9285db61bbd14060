"""What ``python -m benchmarks.reproduce PAPER`` runs for each paper (:data:`PAPERS`) and the
figures of the paper's main table it is set beside (:data:`FIGURES`).

A paper's runs are of three modes: ``paper`` (the paper's own calibration, or its authors' code),
``rigorous`` (the calibration whose ε the accountant proves; absent when the paper has no code of
its own, then the paper-mode run is also the rigorous one) and ``baseline`` (central,
non-private). Each run names a protocol and its parameters as ``--protocol``/``--config`` take
them (checked by the protocol's Config before anything runs) and its budget: the default is the
one benchmarks/RESULTS.md recorded, ``quick`` overrides it for ``--quick``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HYPERGNN = "hypergnn"  # not a protocol: benchmarks/dgrec.py central_hypergnn (DGREC's parameters)

# The papers' figures, only from text already in this repository (or found with the search tool,
# address noted): per paper the dataset they are on, the method's figure per metric and the
# figure of the baseline that stands where our central baseline (by label) stands, each as the
# paper prints it; ``"percent": True`` marks a paper that prints its ranking figures in percent
# (9.68 for a recall of 0.0968), which :func:`as_fraction` brings to our runs' fractions.
FIGURES: dict[str, dict] = {
    # FedLightGCN thesis, gowalla, as quoted in benchmarks/RESULTS.md ("Gowalla, published
    # LightGCN split", column "thesis")
    "fedpergnn": {
        "on": "gowalla",
        "method": {"recall@20": 0.1661, "ndcg@20": 0.1390},
        "central:lightgcn": ("central LightGCN", {"recall@20": 0.1777, "ndcg@20": 0.1524}),
    },
    # VerFedGNN (Mai & Pang, ICML 2023) reports RMSE on ML-1M and Book-Crossing; no figure of its
    # table is in this repository, and the search tool (https://arxiv.org/html/2303.05786v3)
    # returned the set-up but not the table: not recorded
    "verfedgnn": {"on": "ML-1M", "method": {}},
    # DGREC (Zheng et al., CIKM 2023), Book-Crossing Recall@20 / NDCG@20 as printed: the
    # ``paper_reference`` of benchmarks/dgrec.py and RESULTS.md's DGREC section ("9.68 vs 9.94")
    "dgrec": {
        "on": "Book-Crossing",
        "percent": True,
        "method": {"recall@20": 9.68, "ndcg@20": 5.13},
        "central:lightgcn": ("LightGCN", {"recall@20": 9.94, "ndcg@20": 5.49}),
    },
    # DIPSGNN (Hu & Fang), ML-1M Recall@20 in percent, beside APGNN: RESULTS.md's DIPSGNN section
    "dipsgnn": {
        "on": "ML-1M",
        "percent": True,
        "method": {"recall@20": 21.13},
        "dipsgnn nonprivate": ("APGNN", {"recall@20": 21.26}),
    },
}

FIGURE_KEYS = ("on", "percent", "method")  # the other keys of a FIGURES entry are run labels


def as_fraction(figures: dict, value: float) -> float:
    """A figure of ``figures`` (one FIGURES entry) on our runs' scale: a percent divided by 100."""
    return value / 100 if figures.get("percent") else value


@dataclass(frozen=True)
class Run:
    """One run: ``mode`` is "paper", "rigorous" or "baseline"; ``quick`` overrides the parameters
    (and ``rounds``) for ``--quick``."""

    mode: str
    label: str
    protocol: str
    rounds: int
    params: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)

    def budget(self, quick: bool) -> tuple[int, dict]:
        params = {**self.params, **(self.quick if quick else {})}
        return params.pop("rounds", self.rounds), params


@dataclass(frozen=True)
class Paper:
    title: str
    dataset: str  # ours by default (--dataset overrides)
    datasets: str  # the paper's datasets and their substitutes here, for the caption
    metrics: tuple[str, ...]
    runs: tuple[Run, ...]
    load: dict = field(default_factory=dict)  # load_dataset options (the split)
    note: str = ""
    quick_note: str = ""  # what the quick budgets leave out, for the caption

    def mode(self, mode: str) -> list[Run]:
        return [r for r in self.runs if r.mode == mode]


_FED = {"users_per_round": 64, "negatives": 256, "lr_item": 0.01, "laplace": 0.001}
_FED_QUICK = {"rounds": 40, "key_bits": 1024, "eval_every": 0}
_VFL_QUICK = {"rounds": 300, "psi_key_bits": 1024, "eval_every": 0}
_DIPS = {"epochs": 3, "max_len": 50, "features": "all", "eval_every": 0}
_DIPS_QUICK = {"rounds": 1, "epochs": 1}
_K10 = {"split": "random", "min_user_interactions": 10, "min_item_interactions": 10}

# fmt: off
PAPERS: dict[str, Paper] = {
    "fedpergnn": Paper(
        "FedPerGNN / FedLightGCN (Wu et al. 2022; the FedLightGCN thesis), Recall@20 and NDCG@20",
        "ml-100k",
        "the thesis: gowalla (the paper's-figure column) and Yelp2018 (→ gowalla); here "
        "ml-100k (u1): gowalla costs hours a run on this machine (RESULTS.md)",
        ("recall@20", "ndcg@20"),
        (
            Run("paper", "fedlightgcn calibration=authors_code", "fedlightgcn", 300,
                {**_FED, "calibration": "authors_code", "eval_every": 50}, _FED_QUICK),
            Run("rigorous", "fedlightgcn calibration=thesis", "fedlightgcn", 300,
                {**_FED, "calibration": "thesis", "eval_every": 50}, _FED_QUICK),
            Run("baseline", "central:lightgcn", "central", 500,
                {"model": "lightgcn", "l2": 0.001, "eval_every": 50},
                {"rounds": 60, "eval_every": 0}),
        ),
        note="claimed ε = 2δ/λ = 1 per coordinate in both modes (δ = 5e-4, λ = 1e-3)",
    ),
    "verfedgnn": Paper(
        "VerFedGNN (Mai & Pang, ICML 2023), test RMSE (lower is better: ratio = ours / central)",
        "ml-100k",
        "the paper: ML-1M and Book-Crossing; here ml-100k (ML-1M → ml-100k; Book-Crossing → "
        "ciao/epinions/filmtrust with --dataset), per-user 60/20/20, P = 4 parties, GCN",
        ("rmse",),
        (
            Run("paper", "verfedgnn projection=sparse", "verfedgnn", 600,
                {"projection": "sparse", "eval_every": 50}, _VFL_QUICK),
            Run("rigorous", "verfedgnn projection=gaussian", "verfedgnn", 600,
                {"projection": "gaussian", "eval_every": 50}, _VFL_QUICK),
            # RESULTS.md: best validation at epoch 29 of 30 (GCN) and 92 of 300 (MF); the runner
            # reports the last epoch, so MF stops at 100
            Run("baseline", "central:gcn", "central", 30,
                {"model": "gcn", "val_fraction": 0.25, "eval_every": 0}, {"rounds": 15}),
            Run("baseline", "central:mf", "central", 100,
                {"model": "mf", "val_fraction": 0.25, "eval_every": 0}, {"rounds": 30}),
        ),
        load={"split": "random", "test_fraction": 0.2},
        note="paper mode = the authors' code's sparse CountSketch Φ, rigorous mode = the paper's "
        "Gaussian Φ; both send ternary gradients, whose accounting gives no finite ε",
    ),
    "dgrec": Paper(
        "DGREC (Zheng et al., CIKM 2023), Recall@20 and NDCG@20",
        "ml-100k",
        "the paper: Book-Crossing, Flixster, Weeplaces (→ ciao, epinions, filmtrust with "
        "--dataset); here ml-100k, ≥ 10 interactions per user and item, per-user random 80/20",
        ("recall@20", "ndcg@20"),
        (
            # no public code: paper mode is the model as specified, and it is the rigorous run
            Run("paper", "dgrec", "dgrec", 60, {"eval_every": 20}, {"rounds": 15, "eval_every": 0}),
            Run("baseline", "central:lightgcn", "central", 120,
                {"model": "lightgcn", "eval_every": 40}, {"rounds": 40, "eval_every": 0}),
            # 120 epochs: 1.4 s each when RESULTS.md recorded them, 5-26 s each in 2026-11-25's
            # runs on the same VM (other jobs' load): quick gives it 5
            Run("baseline", "central HyperGNN", HYPERGNN, 120, {}, {"rounds": 5}),
        ),
        load=_K10,
        note="no public code: paper mode is the model as specified and the rigorous mode is the "
        "same run; the accountant's ε stands beside the paper's stated (1.5, 0.54)-RDP",
        quick_note="central HyperGNN after 5 epochs is far from its ceiling (0.188 by epoch 40 "
        "in RESULTS.md), so a ratio above 1 against it means nothing here",
    ),
    "dipsgnn": Paper(
        "DIPSGNN (Hu & Fang), Recall@20 and MRR@20 over all test positions",
        "ml-100k",
        "the paper: ML-1M (→ ml-100k); per-user chronological 80/20, max_len 50",
        ("recall@20", "mrr@20"),
        (
            Run("paper", "dipsgnn calibration=paper", "dipsgnn", 3,
                {**_DIPS, "calibration": "paper"}, _DIPS_QUICK),
            Run("paper", "dipsgnn calibration=authors_code", "dipsgnn", 3,
                {**_DIPS, "calibration": "authors_code"}, _DIPS_QUICK),
            Run("rigorous", "dipsgnn calibration=rigorous", "dipsgnn", 3,
                {**_DIPS, "calibration": "rigorous"}, _DIPS_QUICK),
            Run("baseline", "dipsgnn nonprivate", "dipsgnn", 3,
                {**_DIPS, "private_graph": False, "private_features": False}, _DIPS_QUICK),
        ),
        load={"split": "random"},
        note="ε1 = 20 on the features and ε2 = 5 claimed in every private run; the baseline is "
        "the same network with σ = 0 and clean features",
    ),
}
# fmt: on
