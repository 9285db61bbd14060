"""FedLightGCN vs fedmf vs central LightGCN on ml-100k (implicit), FedPerGNN(GAT) vs central GAT
on ml-100k ratings (u1), and the OPRF's throughput (in one process, and through the deployment
with R key-server replicas).

    python -m benchmarks.fedpergnn [--rounds 300] [--users-per-round 64] [--central-epochs 100]
                                   [--key-bits 2048] [--oprf-bits 2048] [--oprf-items 2000]
                                   [--skip oprf,fedlightgcn,fedmf,central]
    python -m benchmarks.fedpergnn --backbone gat [--rounds 200] [--users-per-round 128]
                                   [--dim 16] [--layers 1] [--central-epochs 30] [--attacks]
    python -m benchmarks.fedpergnn --oprf-replicas 1,2 [--oprf-users 40] [--oprf-bits 2048]

Federated runs go through the real deployment (Ray, packed users on one host); the central
model sees the same training split. Writes benchmarks/out/fedpergnn[_gat|_oprf].json (``--name``
another); a recorded result (a file git tracks) is refused before anything runs unless
``--write`` is given.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from benchmarks.common import WRITE_HELP, claim_result, write_result
from cluster.runtime import start_or_join
from data.registry import load_dataset
from engine import deploy
from engine import rounds as round_loop  # `rounds` is the round count below
from models.baselines import popularity_metrics
from models.lightgcn import train_central
from models.rating_gnn import build_rating_gnn, global_mean_rmse
from models.rating_gnn import train_central as train_central_rating
from privacy import oprf
from protocols import get_protocol
from protocols.base import build_config


def oprf_throughput(bits: int, n: int) -> dict:
    """Items/s of the whole blind → sign → unblind/verify/finalize chain in one process."""
    key = oprf.generate_key(bits)
    pub = oprf.public_numbers(key)
    ids = list(range(n))
    t0 = time.perf_counter()
    blinded, unblinders = oprf.blind(ids, pub, 0)
    t1 = time.perf_counter()
    signed = oprf.blind_sign(key, blinded)
    t2 = time.perf_counter()
    oprf.unblind_and_finalize(ids, signed, unblinders, pub)
    t3 = time.perf_counter()
    total = t3 - t0
    return {
        "bits": bits,
        "items": n,
        "backend": oprf.BACKEND,
        "user_blind_s": t1 - t0,
        "key_server_sign_s": t2 - t1,
        "user_finalize_s": t3 - t2,
        "items_per_s": n / total,
        "key_server_items_per_s": n / (t2 - t1),
        "gowalla_810k_minutes_one_core": 810_128 / (n / total) / 60,
    }


def federated(name: str, dataset, params: dict, rounds: int, eval_every: int) -> dict:
    proto_cls = get_protocol(name)
    protocol = proto_cls(dataset, build_config(proto_cls.Config, params), seed=0)
    t0 = time.perf_counter()
    dep = deploy(protocol, hosts=1)
    curve = []
    try:
        for res in round_loop(protocol, dep, rounds, eval_every=eval_every):
            if res.evaluated:
                curve.append({"round": res.round + 1, "loss": res.train["loss"], **res.metrics})
                print(name, curve[-1], flush=True)
        last_round = dep.ledger.by_kind(round_=rounds - 1)
        return {
            "params": params,
            "rounds": rounds,
            "metrics": curve[-1],
            "curve": curve,
            "bytes_total": dep.ledger.total(),
            "bytes_by_kind": dep.ledger.by_kind(),
            "bytes_last_round_by_kind": last_round,
            "bytes_eval": dep.ledger.eval_total(),
            "privacy": {
                k: v
                for k, v in protocol.privacy().as_dict().items()
                if k not in ("accountant", "mechanism")
            },
            "wall_seconds": time.perf_counter() - t0,
        }
    finally:
        dep.close()


def oprf_replicas(replicas: list[int], n_users: int, bits: int) -> list[dict]:
    """Items/s of the whole tokenization (step 1) through the deployment: R key-server replicas
    (dedicated actors), users packed on one host; ml-100k's first ``n_users`` users."""
    ds = load_dataset("ml-100k", implicit=True)
    keep = ds.train.user < n_users
    ds = dataclasses.replace(
        ds,
        train=ds.train.subset(keep),
        test=ds.test.subset(ds.test.user < n_users),
        n_users=n_users,
        val=None,
    )
    out = []
    for r in replicas:
        proto_cls = get_protocol("fedlightgcn")
        cfg = build_config(proto_cls.Config, {"key_servers": r, "key_bits": bits})
        protocol = proto_cls(ds, cfg, seed=0)
        dep = deploy(protocol, hosts=1)
        try:
            t0 = time.perf_counter()
            protocol.tokenize(dep, 0)
            wall = time.perf_counter() - t0
            phases = {s["phase"]: s["wall"] for s in dep.steps if s["phase"].startswith("oprf")}
        finally:
            dep.close()
        out.append(
            {
                "replicas": r,
                "bits": bits,
                "users": n_users,
                "items_signed": int(keep.sum()),
                "wall_s": wall,
                "phase_wall_s": phases,
                "items_per_s": int(keep.sum()) / wall,
                "gowalla_810k_interactions_minutes": 810_128 / (int(keep.sum()) / wall) / 60,
                "gowalla_40981_items_minutes": 40_981 / (int(keep.sum()) / wall) / 60,
            }
        )
        print(out[-1], flush=True)
    return out


def central_gat(ds, dim: int, layers: int, epochs: int) -> dict:
    """models/rating_gnn's GAT (VerFedGNN's central baseline) on the same u1 split; test RMSE
    per epoch (the best epoch is picked on test: an optimistic central figure)."""
    t0 = time.perf_counter()
    model = build_rating_gnn(
        ds.n_users, ds.n_items, ds.train, thd=4.0, kind="gat", dim=dim, n_layers=layers, seed=0
    )
    hist = train_central_rating(
        model, ds.train, ds.test, epochs=epochs, lr=0.05, l2=1e-3, rating_range=(1.0, 5.0)
    )
    curve = [{"epoch": int(h["epoch"]), "rmse": h["val_rmse"]} for h in hist]
    print("central gat", curve[-1], flush=True)
    return {
        "dim": dim,
        "layers": layers,
        "epochs": epochs,
        "rmse_last": curve[-1]["rmse"],
        "rmse_best": min(c["rmse"] for c in curve),
        "curve": curve,
        "wall_seconds": time.perf_counter() - t0,
    }


def main_gat(args) -> None:
    ds = load_dataset("ml-100k")  # u1, explicit ratings
    figures: dict = {
        "dataset": {"name": ds.name, "split": "u1", "train": len(ds.train), "test": len(ds.test)},
        "global_mean_rmse": global_mean_rmse(ds.train, ds.test),
    }
    if "central" not in args.skip:
        figures["central_gat"] = central_gat(ds, args.central_dim, 2, args.central_epochs)
    start_or_join(None)
    params = {
        "backbone": "gat",
        "dim": args.dim,
        "layers": args.layers,
        "users_per_round": args.users_per_round,
        "pseudo_items": 64,
        "lr_item": args.lr_item,
        "lr_user": args.lr_user,
        "clip": args.clip,
        "laplace_scale": args.laplace,
        "key_bits": args.key_bits,
        "attack_gradient_inference": args.attacks,
        "attack_dictionary": args.attacks,
    }
    figures["fedpergnn_gat"] = federated("fedpergnn", ds, params, args.rounds, args.eval_every)
    if "central_gat" in figures:
        fed = figures["fedpergnn_gat"]["metrics"]["rmse"]
        figures["fed_over_central_rmse"] = fed / figures["central_gat"]["rmse_best"]
    write_result(args.name, figures, write=args.write)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--users-per-round", type=int, default=64)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--central-epochs", type=int, default=100)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--oprf-items", type=int, default=2000)
    ap.add_argument("--oprf-bits", type=int, default=2048)
    ap.add_argument("--lr-item", type=float, default=0.01)
    ap.add_argument("--skip", default="")
    ap.add_argument("--backbone", choices=("lightgcn", "gat"), default="lightgcn")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--lr-user", type=float, default=0.5)
    ap.add_argument("--clip", type=float, default=0.05)
    ap.add_argument("--laplace", type=float, default=0.0)
    ap.add_argument("--central-dim", type=int, default=6)
    ap.add_argument("--attacks", action="store_true")
    ap.add_argument("--oprf-replicas", default="", help="e.g. 1,2: tokenization through Ray")
    ap.add_argument("--oprf-users", type=int, default=40)
    ap.add_argument("--name", default="", help="default fedpergnn, fedpergnn_gat, fedpergnn_oprf")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    default = (
        "fedpergnn_oprf"
        if args.oprf_replicas
        else "fedpergnn_gat"
        if args.backbone == "gat"
        else "fedpergnn"
    )
    args.name = args.name or default
    claim_result(args.name, write=args.write)
    skip = set(filter(None, args.skip.split(",")))
    args.skip = skip
    if args.oprf_replicas:
        start_or_join(None)
        runs = oprf_replicas(
            [int(r) for r in args.oprf_replicas.split(",")], args.oprf_users, args.oprf_bits
        )
        write_result(args.name, {"oprf_replicas": runs}, write=args.write)
        return
    if args.backbone == "gat":
        main_gat(args)
        return
    ds = load_dataset("ml-100k", implicit=True)
    figures: dict = {
        "dataset": {
            "name": ds.name,
            "users": ds.n_users,
            "items": ds.n_items,
            "train": len(ds.train),
        },
        "popularity": popularity_metrics(ds),
    }
    if "oprf" not in skip:
        figures["oprf"] = oprf_throughput(args.oprf_bits, args.oprf_items)
        print(figures["oprf"], flush=True)
    start_or_join(None)
    if "fedlightgcn" not in skip:
        figures["fedlightgcn"] = federated(
            "fedlightgcn",
            ds,
            {
                "users_per_round": args.users_per_round,
                "negatives": 256,
                "pseudo_items": 64,
                "lr_item": args.lr_item,
                "key_bits": args.key_bits,
                "attack_gradient_inference": args.attacks,
                "attack_dictionary": args.attacks,
            },
            args.rounds,
            args.eval_every,
        )
    if "fedmf" not in skip:
        figures["fedmf"] = federated(
            "fedmf",
            ds,
            {"users_per_round": args.users_per_round, "pairs": 64, "lr_item": args.lr_item},
            args.rounds,
            args.eval_every,
        )
    if "central" not in skip:
        t0 = time.perf_counter()
        curve = []
        _, m = train_central(
            ds,
            epochs=args.central_epochs,
            lr=1e-3,
            l2=1e-4,
            eval_every=max(1, args.central_epochs // 5),
            log=lambda e, mm: (
                curve.append({"epoch": e, **mm}),
                print("central", e, mm, flush=True),
            ),
        )
        figures["central_lightgcn"] = {
            "epochs": args.central_epochs,
            "metrics": m,
            "curve": curve,
            "wall_seconds": time.perf_counter() - t0,
        }
    if "fedlightgcn" in figures and "central_lightgcn" in figures:
        figures["fed_over_central_recall"] = (
            figures["fedlightgcn"]["metrics"]["recall@20"]
            / figures["central_lightgcn"]["metrics"]["recall@20"]
        )
    write_result(args.name, figures, write=args.write)


if __name__ == "__main__":
    main()
