"""VerFedGNN on ml-100k (or ``--dataset filmtrust``/``ciao``; P parties, items split at random)
against the centralized GCN and MF of models/rating_gnn, on the same 60/20/20 split; bytes per
iteration by kind beside the formula; privacy per release and composed. ``--scale N ...``:
iterations per second and per-phase seconds on synthetic worlds of N users instead.

    python -m benchmarks.verfedgnn                      # P=4, GCN, 600 iterations, 3 variants
    python -m benchmarks.verfedgnn --rounds 200 --variants default
    python -m benchmarks.verfedgnn --gnn gat --variants default --name verfedgnn_gat
    python -m benchmarks.verfedgnn --attack --name verfedgnn_attack   # de-anonymization table
    python -m benchmarks.verfedgnn --attack --projection sparse --name verfedgnn_attack_sparse
    python -m benchmarks.verfedgnn --scale 100000 1000000 --scale-q 0 256 --name verfedgnn_scale
    python -m benchmarks.verfedgnn --scale 100000 1000000 --scale-projection sparse --name verfedgnn_scale_sparse
    python -m benchmarks.verfedgnn --variants default,r_1,r_5,nq_2,nq_10 --rounds 400 --no-central
    python -m benchmarks.verfedgnn --dataset filmtrust --thd 3.5 --variants default --rounds 400

Model selection: every ``--eval-every`` iterations (federated) or epoch (central) the validation
RMSE is measured; the test RMSE reported is the one at the best validation RMSE.

Writes benchmarks/out/NAME.json: ``--name``, else ``verfedgnn-DATASET``, ``verfedgnn-attack-DATASET``
or ``verfedgnn-scale``; a recorded result (a file git tracks) is refused before anything runs
unless ``--write`` is given.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import (
    WRITE_HELP,
    claim_result,
    dataset_tag,
    result_name,
    write_result,
)
from data.registry import load_dataset
from models.rating_gnn import build_rating_gnn, global_mean_rmse, train_central
from protocols.base import build_config
from protocols.verfedgnn.config import n_participants, projection_rows
from protocols.verfedgnn.messages import iteration_bytes, paper_iteration_floats
from protocols.verfedgnn.protocol import VerFedGNN, split_60_20_20

VARIANTS = {
    "default": {},
    "no_projection": {"projection": "none"},
    "sparse": {"projection": "sparse"},  # the authors' code's CountSketch Φ
    "laplace": {"mechanism": "laplace"},
    "no_mechanism": {"mechanism": "none"},
    "alpha_0.2": {"participation": 0.2},
    "alpha_0.5": {"participation": 0.5},
    "r_1": {"ternary_r": 1.0},  # 1/r sweep (Figure 3); default r = 3
    "r_5": {"ternary_r": 5.0},
    "nq_2": {"projection_reduction": 2},  # N/q sweep (Figure 4); default N/q = 5
    "nq_10": {"projection_reduction": 10},
    "lr_0.1": {"lr": 0.1},  # Adagrad step size (paper: 0.05), picked on validation RMSE
    "lr_0.2": {"lr": 0.2},
    "batch_1024": {"batch_size": 1024},  # ratings per party per iteration (default 256)
}


def central(ds, kind: str, epochs: int, seed: int, thd: float = 4.0) -> dict:
    train, val, test = split_60_20_20(ds, 0)
    model = build_rating_gnn(ds.n_users, ds.n_items, train, thd=thd, kind=kind, seed=seed)
    t0 = time.perf_counter()
    rr = (float(train.rating.min()), float(train.rating.max()))
    hist = train_central(model, train, val, epochs=epochs, lr=0.05, l2=1e-3, rating_range=rr)
    best = min(range(len(hist)), key=lambda e: hist[e]["val_rmse"])
    # re-train to the best epoch to read its test RMSE (same seed, deterministic)
    model = build_rating_gnn(ds.n_users, ds.n_items, train, thd=thd, kind=kind, seed=seed)
    hist2 = train_central(model, train, test, epochs=best + 1, lr=0.05, l2=1e-3, rating_range=rr)
    return {
        "kind": kind,
        "epochs": epochs,
        "best_epoch": best + 1,
        "val_rmse": hist[best]["val_rmse"],
        "test_rmse": hist2[-1]["val_rmse"],
        "seconds": time.perf_counter() - t0,
    }


def federated(ds, params: dict, rounds: int, every: int, seed: int) -> dict:
    from engine import deploy
    from engine import rounds as round_loop

    proto = VerFedGNN(ds, build_config(VerFedGNN.Config, params), seed=seed)
    dep = deploy(proto, "packed")
    curve = []
    t0 = time.perf_counter()
    try:
        for res in round_loop(proto, dep, rounds, eval_every=every):
            if res.evaluated:
                curve.append({"round": res.round + 1, "loss": res.train["loss"], **res.metrics})
                print(params, curve[-1], flush=True)
        wall = time.perf_counter() - t0
        c = proto.config
        s = n_participants(c.parties, c.participation)
        last = rounds - 1
        by_kind = dep.ledger.by_kind(round_=last)
        rows = proto.config.projection_dim or ds.n_users // c.projection_reduction
        rows = rows if c.projection != "none" else ds.n_users
        grad_bytes = by_kind.get("gradient", 0)
        formula = iteration_bytes(
            n_public=proto.n_public,
            s=s,
            rows=rows,
            dim=c.dim,
            schedule=proto.schedule,
            grad_sizes=[grad_bytes],
        )
        psi_bytes = {k: v for k, v in dep.ledger.by_kind(round_=0).items() if k.startswith("psi")}
    finally:
        dep.close()
    best = min(curve, key=lambda e: e["val_rmse"])
    return {
        "params": params,
        "rounds": rounds,
        "best_round": best["round"],
        "val_rmse": best["val_rmse"],
        "test_rmse": best["test_rmse"],
        "final_test_rmse": curve[-1]["test_rmse"],
        "curve": curve,
        "bytes_last_iteration": by_kind,
        "bytes_formula": formula,
        "bytes_match_formula": all(by_kind.get(k, 0) == v for k, v in formula.items()),
        "paper_floats_per_iteration": paper_iteration_floats(
            n_public=proto.n_public, s=s, rows=rows, dim=c.dim, n_layers=c.layers
        ),
        "psi_bytes": psi_bytes,
        "privacy": proto.privacy().as_dict(),
        "wall_seconds": wall,
        "seconds_per_iteration": wall / rounds,
    }


def attack_table(ds, rounds: int, seed: int, p_ads: list[float], projection: str) -> dict:
    """The de-anonymization attack (§6.2.3, Table 3) for each p_ad: party 0 attacks party 1
    through the protocol's real messages (``deanonymization = true``, evaluated after ``rounds``
    iterations); beside it ``simulate`` on the victim's trained item embeddings and honest edges
    (VerFedGNN with a fresh Φ, the unprojected aggregate, FedPerGNN-style)."""
    from engine import deploy, run_rounds
    from protocols.verfedgnn.deanonymization import simulate

    out = {}
    for p_ad in p_ads:
        params = {
            "parties": 4,
            "gnn": "gcn",
            "psi": True,
            "deanonymization": True,
            "attack_p_ad": p_ad,
        }
        params["projection"] = projection
        proto = VerFedGNN(ds, build_config(VerFedGNN.Config, params), seed=seed)
        dep = deploy(proto, "packed")
        t0 = time.perf_counter()
        try:
            metrics = run_rounds(proto, dep, rounds, eval_every=0)[-1].metrics  # the last only
            emb = dep.call("party/1", "get_item_embeddings")
        finally:
            dep.close()
        victim = np.flatnonzero(proto.owner == 1)
        local = -np.ones(ds.n_items, dtype=np.int64)
        local[victim] = np.arange(len(victim))
        tr = proto.train
        keep = (proto.owner[tr.item] == 1) & (tr.rating >= 4.0) & (tr.user < ds.n_users)
        pairs = np.unique(np.stack([tr.user[keep], local[tr.item[keep]]], 1), axis=0)
        sim = simulate(
            torch.from_numpy(np.array(emb)),
            pairs[:, 0],
            pairs[:, 1],
            ds.n_users,
            n_total_items=ds.n_items,
            p_ad=p_ad,
            seed=seed,
        )
        out[str(p_ad)] = {
            "protocol": {k: v for k, v in metrics.items() if k.startswith("attack_")},
            "test_rmse": metrics["test_rmse"],
            "simulated": {k: v.as_dict() for k, v in sim.items()},
            "seconds": time.perf_counter() - t0,
        }
        print(p_ad, out[str(p_ad)], flush=True)
    return out


def _peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) of a process on this machine, MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scale_world(n_users: int, args) -> tuple:
    """A synthetic world of ``n_users`` users, ``--scale-items`` items and about
    ``--scale-interactions`` ratings per user, and the seconds it took to generate."""
    from data.synthetic import synthetic

    t0 = time.perf_counter()
    ds = synthetic(
        n_users=n_users,
        n_items=args.scale_items,
        avg_interactions=args.scale_interactions,
        seed=args.seed,
    )
    return ds, time.perf_counter() - t0


def scale_run(ds, q: int, args) -> dict:
    """Iterations per second with P parties on ``ds``, PSI off (RSA blind signatures for every
    user would dominate; not timed here), Φ with ``q`` rows (-1: the default N/5; 0: no
    projection), timed per phase from the deployment's steps; peak RSS of every host process."""
    from engine import deploy, rounds
    from nodes.conditions import Conditions

    params = {"parties": args.parties, "gnn": args.gnn, "psi": False}
    params["projection"] = args.scale_projection
    if q == 0:
        params["projection"] = "none"
    elif q > 0:
        params["projection_dim"] = q
    t0 = time.perf_counter()
    proto = VerFedGNN(ds, build_config(VerFedGNN.Config, params), seed=args.seed)
    # no snapshots: the iterations are timed (and the parties' memory taken) without them, as
    # before the one round loop; their cost is benchmarks.conditions snapshot-cost's figure
    dep = deploy(proto, "packed", conditions=Conditions(snapshot_every=0))
    setup_s = time.perf_counter() - t0
    iters = []
    try:
        for res in rounds(proto, dep, args.scale_rounds, eval_every=0, evaluate_last=False):
            iters.append(res.seconds)
            print(ds.n_users, q, "iteration", res.round, f"{iters[-1]:.1f} s", flush=True)
        phases: dict[str, dict[str, float]] = {}
        for st in dep.steps:
            ph = phases.setdefault(st["phase"], {"wall": 0.0, "compute_max": 0.0, "codec_max": 0.0})
            for k in ("wall", "compute_max", "codec_max"):
                ph[k] += st[k] / args.scale_rounds
        by_kind = dep.ledger.by_kind(round_=args.scale_rounds - 1)
        rss = [_peak_rss_mb(h["pid"]) for h in dep.host_info()]
        rows = projection_rows(proto.config, proto.n_users)
    finally:
        dep.close()
    steady = iters[1:] or iters
    return {
        "params": params,
        "projection_rows_q": rows if proto.config.projection != "none" else None,
        "setup_seconds": setup_s,
        "iteration_seconds": iters,
        "iterations_per_second": len(steady) / sum(steady),
        "mean_phase_seconds": phases,
        "bytes_per_iteration": by_kind,
        "bytes_per_iteration_total": sum(by_kind.values()),
        "peak_rss_mb_hosts": rss,
    }


def scale(n_users: int, args) -> dict:
    """One world, then one run per ``--scale-q``."""
    import resource

    ds, gen_s = scale_world(n_users, args)
    out = {
        "users": ds.n_users,
        "items": ds.n_items,
        "train_ratings": len(ds.train),
        "generate_seconds": gen_s,
        "runs": {str(q): scale_run(ds, q, args) for q in args.scale_q},
    }
    out["peak_rss_mb_driver"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(n_users, out, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parties", type=int, default=4)
    ap.add_argument("--gnn", default="gcn")
    ap.add_argument(
        "--dataset", default="ml-100k", help="a rating dataset: ml-100k, filmtrust, ciao"
    )
    ap.add_argument("--thd", type=float, default=4.0, help="ratings >= thd are graph edges")
    ap.add_argument("--rounds", type=int, default=600)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--mf-epochs", type=int, default=300, help="central MF: to convergence")
    ap.add_argument("--variants", default="default,no_projection,laplace")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--name", default=None, help="benchmarks/out/NAME.json (default verfedgnn[-MODE]-DATASET)"
    )
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    ap.add_argument("--attack", action="store_true", help="the de-anonymization table only")
    ap.add_argument("--attack-rounds", type=int, default=100)
    ap.add_argument(
        "--projection",
        default="gaussian",
        choices=("gaussian", "sparse"),
        help="Φ of the attacked protocol run (--attack; the simulation scores both)",
    )
    ap.add_argument("--p-ad", default="0.2,0.5,0.8")
    ap.add_argument("--scale", type=int, nargs="+", help="users: the scale runs only")
    ap.add_argument("--scale-rounds", type=int, default=3)
    ap.add_argument("--scale-items", type=int, default=2000)
    ap.add_argument("--scale-interactions", type=int, default=20)
    ap.add_argument(
        "--scale-q",
        type=int,
        nargs="+",
        default=[-1],
        help="q of Φ, one run each: -1 = N/5 (the default), 0 = no projection",
    )
    ap.add_argument(
        "--scale-projection",
        default="gaussian",
        choices=("gaussian", "sparse"),
        help="Φ of the scale runs: the paper's Gaussian or the authors' code's sparse CountSketch",
    )
    ap.add_argument("--no-central", action="store_true", help="skip the central MF/GNN runs")
    args = ap.parse_args()
    args.name = args.name or (
        result_name("verfedgnn", "scale")
        if args.scale
        else result_name("verfedgnn", "attack" if args.attack else "", dataset_tag(args.dataset))
    )
    claim_result(args.name, write=args.write)
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    torch.set_num_threads(1)
    if args.scale:
        figures = {
            "setting": f"P={args.parties}, {args.gnn}, {args.scale_projection} Φ, synthetic, "
            "psi off, packed, 1 CPU thread per host process",
            "scale": {str(n): scale(n, args) for n in args.scale},
        }
        write_result(args.name, figures, write=args.write)
        return
    ds = load_dataset(args.dataset, split="random", test_fraction=0.2, seed=0)
    train, _, test = split_60_20_20(ds, 0)
    if args.attack:
        p_ads = [float(x) for x in args.p_ad.split(",")]
        figures = {
            "dataset": {"name": args.dataset, "users": ds.n_users, "items": ds.n_items},
            "setting": f"P=4, GCN, {args.projection} Φ, attacker party 0, victim party 1, c <= 3, "
            "beam 32",
            "attack": attack_table(ds, args.attack_rounds, args.seed, p_ads, args.projection),
        }
        write_result(args.name, figures, write=args.write)
        return
    figures = {
        "dataset": {"name": args.dataset, "users": ds.n_users, "items": ds.n_items},
        "thd": args.thd,
        "split": "per-user random 80/20 (load_dataset), then 25% of train -> val: 60/20/20",
        "global_mean_rmse": global_mean_rmse(train, test),
        "central": {},
        "verfedgnn": {},
    }
    for kind in () if args.no_central else ("mf", args.gnn):
        epochs = args.mf_epochs if kind == "mf" else args.epochs
        figures["central"][kind] = central(ds, kind, epochs, args.seed, args.thd)
        print(figures["central"][kind], flush=True)
    base = {"parties": args.parties, "gnn": args.gnn, "psi": True, "thd": args.thd}
    for v in args.variants.split(","):
        figures["verfedgnn"][v] = federated(
            ds, {**base, **VARIANTS[v]}, args.rounds, args.eval_every, args.seed
        )
    fed = figures["verfedgnn"].get("default")
    if fed and not args.no_central:
        cen = figures["central"][args.gnn]["test_rmse"]
        figures["gap_to_central_pct"] = 100 * (fed["test_rmse"] - cen) / cen
        figures["better_than_mf"] = fed["test_rmse"] < figures["central"]["mf"]["test_rmse"]
        if "no_projection" in figures["verfedgnn"]:
            a = fed["bytes_last_iteration"]
            b = figures["verfedgnn"]["no_projection"]["bytes_last_iteration"]
            figures["projection_saving_total_pct"] = 100 * (1 - sum(a.values()) / sum(b.values()))
            figures["projection_saving_aggregates_pct"] = 100 * (
                1 - a["aggregates"] / b["aggregates"]
            )
    figures["finite"] = all(
        math.isfinite(v["test_rmse"]) for v in figures["verfedgnn"].values()
    ) and bool(np.isfinite(figures["global_mean_rmse"]))
    write_result(args.name, figures, write=args.write)


if __name__ == "__main__":
    main()
