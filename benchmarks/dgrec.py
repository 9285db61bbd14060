"""DGREC against dmf, DLGNN (float and Laplace), central LightGCN and popularity; with
--ablations also the paper's Table 3 switches and the public-ratio-0.2 comparison (Figure 2).

    python -m benchmarks.dgrec --dataset ml-100k --rounds 100 [--dmf-rounds 100] [--ablations]
        [--params '{"hops": 2}'] [--dlgnn-params '{"hops": 2}'] [--variants dgrec,dlgnn_laplace]
        [--lightgcn-epochs 50] [--hypergnn-epochs 60] [--hypergnn-variants paper,dot] [--hosts 1]

Data: ≥10 interactions per user and item (iterated k-core), per-user random 80/20 split.
Writes benchmarks/out/dgrec-<dataset>[-<name>].json (benchmarks/common.py; a recorded result, a
file git tracks, is refused before anything runs unless --write is given): Recall/NDCG@20 per
variant, bytes per participating user per round beside the paper's worst case and float sharing,
ε, wall time. ``--dmf-rounds 0`` / ``--lightgcn-epochs 0`` / ``--hypergnn-epochs 0`` skip those
baselines. The centralized HyperGNN (protocols/dgrec/central.py) is DGREC's own model trained with one
shared copy and exact gradients: the ceiling of the per-user model on the dataset;
``--hypergnn-variants`` trains it with parts of stage 2 switched (HYPERGNN_VARIANTS) to show which
part caps it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from benchmarks.common import (
    K10_SPLIT,
    WRITE_HELP,
    claim_result,
    dataset_tag,
    write_result,
)
from data.registry import load_dataset
from data.types import RecDataset
from engine import RunSettings, run
from engine.report import read_rows
from models.baselines import popularity_metrics

# the DGREC variants: the paper's Table 3 switches, and ρ = 0.2 (Figure 2)
ABLATIONS = {
    "no_hypergraph": {"use_hypergraph": False},
    "no_public_items": {"use_public": False},
    "bipartite": {"use_bipartite": True},
    "plain_attention": {"interest_attention": False},
    "no_pearson": {"pearson": False},
    "laplace_sharing": {"mechanism": "laplace"},
    "public_ratio_0.2": {"public_ratio": 0.2},
}
# the centralized HyperGNN with parts of DGREC's stage 2 switched: which part caps the model
# (the paper's model: tag hyperedges, neighbours' publicized items in e_u, MLP scorer, d = 16)
HYPERGNN_VARIANTS = {
    "paper": {},
    "dot": {"scorer": "dot"},
    "dot_d64": {"scorer": "dot", "dim": 64},
    "no_public_dot_d64": {"use_public": False, "scorer": "dot", "dim": 64},
    "no_hypergraph_dot_d64": {"use_hypergraph": False, "scorer": "dot", "dim": 64},
    "no_hypergraph_no_public_d64": {"use_hypergraph": False, "use_public": False, "dim": 64},
    "no_hypergraph_no_public_dot_d16": {
        "use_hypergraph": False,
        "use_public": False,
        "scorer": "dot",
    },
    "no_hypergraph_no_public_dot_d64": {
        "use_hypergraph": False,
        "use_public": False,
        "scorer": "dot",
        "dim": 64,
    },
}
# protocol, parameters of the main comparison
MAIN = {
    "dgrec": ("dgrec", {}),
    "dlgnn": ("dlgnn", {"mechanism": "float"}),
    "dlgnn_laplace": ("dlgnn", {"mechanism": "laplace"}),
}


def one(protocol: str, params: dict, dataset, rounds: int, hosts: int, out: str) -> dict:
    settings = RunSettings(
        protocol=protocol, rounds=rounds, seed=0, hosts=hosts, params=params, out=out
    )
    _, summary = run(settings, dataset)
    figures = {
        "protocol": protocol,
        "params": params,
        "rounds": rounds,
        "recall@20": summary["metrics"].get("recall@20"),
        "ndcg@20": summary["metrics"].get("ndcg@20"),
        "bytes_total": summary["bytes_total"],
        "bytes_by_kind": summary["bytes_by_kind"],
        "privacy": summary["privacy"],
        "wall_seconds": summary["wall_seconds"],
        "run_dir": summary["run_dir"],
    }
    if protocol in ("dgrec", "dlgnn"):
        rows = read_rows(Path(summary["run_dir"]))
        trains = [r["train"] for r in rows if r["train"].get("members")]
        n = max(1, len(trains))
        figures["loss_first_last"] = [trains[0]["loss"], trains[-1]["loss"]] if trains else None
        figures["curve"] = {r["round"] + 1: r["metrics"] for r in rows if r["metrics"]}
        figures["share_bytes_per_member_mean"] = (
            sum(t["share_bytes_per_member"] for t in trains) / n
        )
        figures["worst_case_bytes_per_user"] = (
            trains[0]["worst_case_bytes_per_user"] if trains else None
        )
        figures["float_bytes_per_member_mean"] = (
            sum(t["float_bytes_per_member"] for t in trains) / n
        )
        figures["neighbourhood_size_mean"] = sum(t["neighbourhood_size"] for t in trains) / n
        figures["members_per_round_mean"] = sum(t["members"] for t in trains) / n
    return figures


def public_only(ds: RecDataset, ratio: float, seed: int = 0) -> RecDataset:
    """The dataset with every user's training interactions cut to a fraction ``ratio`` (the
    publicized ones: what a central server could collect); the test set is unchanged."""
    rng = np.random.default_rng(seed)
    keep = np.zeros(len(ds.train), dtype=bool)
    order = np.argsort(ds.train.user, kind="stable")
    bounds = np.searchsorted(ds.train.user[order], np.arange(ds.n_users + 1))
    for u in range(ds.n_users):
        rows = order[bounds[u] : bounds[u + 1]]
        n = int(round(ratio * len(rows)))
        keep[rng.choice(rows, size=n, replace=False)] = True
    return dataclasses.replace(ds, train=ds.train.subset(keep))


def central_lightgcn(ds: RecDataset, epochs: int) -> dict:
    from models.lightgcn import train_central

    t0 = time.perf_counter()
    _, metrics = train_central(ds, epochs=epochs, dim=64, layers=2, lr=1e-3, seed=0)
    return {
        "epochs": epochs,
        "recall@20": metrics["recall@20"],
        "ndcg@20": metrics["ndcg@20"],
        "wall_seconds": time.perf_counter() - t0,
    }


def central_hypergnn(ds: RecDataset, epochs: int, params: dict, eval_every: int = 10) -> dict:
    """DGREC's model trained centrally (shared copy, Adam 1e-3) on the hypergraphs DGREC's users
    build with ρ = 1 over the same inter-user graph; best and last Recall/NDCG@20 of the curve."""
    from data.graphs import user_graph
    from protocols.dgrec.central import HyperGNNTrainer

    t0 = time.perf_counter()
    item_tags = ds.item_tags
    if item_tags is None or item_tags.shape[1] == 0:
        if params.get("use_hypergraph", True):  # as the DGREC protocol refuses the data
            raise ValueError(f"dataset {ds.name!r} has no item tags: DGREC's hyperedges")
        item_tags = sp.csr_matrix((ds.n_items, 1), dtype=np.float32)  # no tag hyperedge used
    graph = user_graph(ds, k=params.get("neighbours", 10), seed=0)
    if not params.get("use_public", True):
        graph = [np.zeros(0, dtype=np.int64) for _ in graph]
    model_keys = (
        "dim",
        "n_interests",
        "hidden",
        "pairs",
        "scorer",
        "use_hypergraph",
        "use_bipartite",
        "interest_attention",
        "pearson",
        "lr",
        "batch_users",
    )
    trainer = HyperGNNTrainer(
        ds.train.items_by_user(ds.n_users),
        ds.test.items_by_user(ds.n_users),
        graph,
        item_tags,
        **{k: params[k] for k in model_keys if k in params},
    )
    curve = {}
    for epoch in range(1, epochs + 1):
        trainer.train_epoch()
        if epoch % eval_every == 0 or epoch == epochs:
            curve[epoch] = trainer.evaluate()
    best = max(curve, key=lambda e: curve[e]["recall@20"])
    return {
        "epochs": epochs,
        "recall@20": curve[epochs]["recall@20"],
        "ndcg@20": curve[epochs]["ndcg@20"],
        "best_epoch": best,
        "best_recall@20": curve[best]["recall@20"],
        "curve": {e: [m["recall@20"], m["ndcg@20"]] for e, m in curve.items()},
        "wall_seconds": time.perf_counter() - t0,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="ml-100k")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--dmf-rounds", type=int, default=100)
    p.add_argument("--lightgcn-epochs", type=int, default=50)
    p.add_argument("--hypergnn-epochs", type=int, default=60)
    p.add_argument(
        "--hypergnn-variants",
        default="paper",
        help=f"central HyperGNN variants, of {list(HYPERGNN_VARIANTS)}",
    )
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument("--params", default="{}", help="DGREC parameters (JSON) for every variant")
    p.add_argument("--dlgnn-params", default="{}", help="DLGNN parameters (JSON)")
    p.add_argument("--variants", default="dgrec,dlgnn,dlgnn_laplace", help=f"of {list(MAIN)}")
    p.add_argument("--ablations", action="store_true", help="also run Table 3's switches")
    p.add_argument("--name", default="", help="suffix of the result file")
    p.add_argument("--out", default="runs")
    p.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = p.parse_args()
    suffix = f"-{args.name}" if args.name else ""
    name = f"dgrec-{dataset_tag(args.dataset)}{suffix}"
    claim_result(name, write=args.write)

    ds = load_dataset(args.dataset, args.data_dir, seed=0, **K10_SPLIT)
    base, dlgnn_base = json.loads(args.params), json.loads(args.dlgnn_params)
    figures = {
        "dataset": {
            "name": ds.name,
            "users": ds.n_users,
            "items": ds.n_items,
            "train": len(ds.train),
            "test": len(ds.test),
        },
        "popularity": popularity_metrics(ds, k=20),
        "paper_reference": {
            "book-crossing": {
                "dgrec": [9.68, 5.13],
                "lightgcn": [9.94, 5.49],
                "ratio_recall": 9.68 / 9.94,
            }
        },
    }
    if args.lightgcn_epochs:
        figures["lightgcn_central"] = central_lightgcn(ds, args.lightgcn_epochs)
        figures["lightgcn_central_public_0.2"] = central_lightgcn(  # Figure 2's comparison
            public_only(ds, 0.2), args.lightgcn_epochs
        )
    if args.hypergnn_epochs:
        for name in [v for v in args.hypergnn_variants.split(",") if v]:
            if name not in HYPERGNN_VARIANTS:
                raise SystemExit(
                    f"unknown HyperGNN variant {name!r} (known: {', '.join(HYPERGNN_VARIANTS)})"
                )
            key = "hypergnn_central" if name == "paper" else f"hypergnn_central_{name}"
            params = {**base, **HYPERGNN_VARIANTS[name]}
            figures[key] = {"params": params, **central_hypergnn(ds, args.hypergnn_epochs, params)}
    if args.dmf_rounds:
        figures["dmf"] = one("dmf", {}, ds, args.dmf_rounds, args.hosts, args.out)
    for name in [v for v in args.variants.split(",") if v]:
        if name not in MAIN:
            raise SystemExit(f"unknown variant {name!r} (known: {', '.join(MAIN)})")
        protocol, extra = MAIN[name]
        params = {**(base if protocol == "dgrec" else dlgnn_base), **extra}
        figures[name] = one(protocol, params, ds, args.rounds, args.hosts, args.out)
    if args.ablations:
        for name, extra in ABLATIONS.items():
            figures[name] = one("dgrec", {**base, **extra}, ds, args.rounds, args.hosts, args.out)
    write_result(name, figures, write=args.write)


if __name__ == "__main__":
    main()
