"""What ``python -m benchmarks.reproduce PAPER`` runs for each paper (:data:`PAPERS`) and the
figures of the paper's main table it is set beside (:func:`figures`: each protocol's ``PAPER``
declaration, :class:`protocols.base.PaperFigure`, in its own package).

A paper's runs are of three modes: ``paper`` (the paper's own calibration, or its authors' code),
``rigorous`` (the calibration whose ε the accountant proves; absent when the paper has no code of
its own, then the paper-mode run is also the rigorous one) and ``baseline`` (central,
non-private). Each run names a protocol and its parameters as ``--protocol``/``--config`` take
them (checked by the protocol's Config before anything runs) and its budget: the default is the
one benchmarks/RESULTS.md recorded, ``quick`` overrides it for ``--quick``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from benchmarks.common import K10_SPLIT
from protocols import get_protocol

HYPERGNN = "hypergnn"  # not a protocol: benchmarks/dgrec.py central_hypergnn (DGREC's parameters)

FIGURE_KEYS = ("on", "percent", "method")  # the other keys of a figures() entry are run labels


def figures_of(paper) -> dict:
    """A protocol's :class:`protocols.base.PaperFigure` as reproduce reads it: the dataset
    (``on``), ``percent`` when the paper prints percent, the method's figures (``method``) and,
    per run label, (the paper's name of that baseline, its figures)."""
    out: dict = {"on": paper.on, "method": dict(paper.method)}
    if paper.percent:
        out["percent"] = True
    out.update({label: (name, dict(values)) for label, (name, values) in paper.baselines.items()})
    return out


def as_fraction(figures: dict, value: float) -> float:
    """A figure of ``figures`` (one :func:`figures` entry) on our runs' scale: a percent divided
    by 100."""
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


_FED = {"users_per_round": 64, "negatives": 256, "lr_item": 0.01, "laplace_scale": 0.001}
_FED_QUICK = {"rounds": 40, "key_bits": 1024, "eval_every": 0}
_VFL_QUICK = {"rounds": 300, "psi_key_bits": 1024, "eval_every": 0}
_DIPS = {"epochs": 3, "max_len": 50, "features": "all", "eval_every": 0}
_DIPS_QUICK = {"rounds": 1, "epochs": 1}

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
            # the recorded runs' best validation came at epoch 29 of 30 (GCN) and 92 of 300 (MF);
            # the runner reports the last epoch, so MF stops at 100
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
        "the paper: Book-Crossing, Flixster, Weeplaces (→ ciao, epinions with --dataset: "
        "filmtrust has no item tags, which DGREC's hyperedges need); here ml-100k, ≥ 10 "
        "interactions per user and item, per-user random 80/20",
        ("recall@20", "ndcg@20"),
        (
            # no public code: paper mode is the model as specified, and it is the rigorous run
            Run("paper", "dgrec", "dgrec", 60, {"eval_every": 20}, {"rounds": 15, "eval_every": 0}),
            Run("baseline", "central:lightgcn", "central", 120,
                {"model": "lightgcn", "eval_every": 40}, {"rounds": 40, "eval_every": 0}),
            # 120 epochs: 1.4 s each on a quiet 2-core VM, 5-26 s each there beside other jobs:
            # quick gives it 5
            Run("baseline", "central HyperGNN", HYPERGNN, 120, {}, {"rounds": 5}),
        ),
        load=K10_SPLIT,
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


@functools.cache
def figures(name: str) -> dict:
    """The figures of paper ``name`` as its protocol declares them (protocols/<name>/protocol.py
    ``PAPER``); read when asked, so that a command refuses a bad argument before importing the
    protocols' models."""
    return figures_of(get_protocol(name).PAPER)
