"""The centralized baselines (protocol ``central``) on one dataset: a list of models, each trained
for ``--epochs`` rounds (one round = one epoch) on the real deployment (one curator actor),
evaluated every ``--eval-every`` epochs; curve, final metrics, wall time and bytes (always 0).

    python -m benchmarks.central --dataset ml-100k --models lightgcn,bprmf --epochs 150 --eval-every 10
    python -m benchmarks.central --dataset ml-100k --models gcn,gat,mf --epochs 60 --eval-every 5 \\
        --param val_fraction=0.25 --name central-ml-100k-ratings
    python -m benchmarks.central --dataset ml-100k --models dipsgnn --epochs 10 --param max_len=50

Rating models with ``val_fraction`` > 0 (or a dataset with a validation part) also report the
test RMSE at the evaluation with the best validation RMSE. Writes benchmarks/out/<name>.json,
already after every evaluation (``complete: false`` until the model's last epoch).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.common import (
    WRITE_HELP,
    claim_result,
    dataset_tag,
    parse_key_values,
    result_name,
    write_result,
)
from cluster.runtime import start_or_join
from data.registry import load_dataset
from engine import deploy, rounds
from models.baselines import popularity_metrics
from protocols.base import build_config
from protocols.central.config import CentralConfig
from protocols.central.protocol import Central


def train_model(
    dataset, params: dict, epochs: int, every: int, seed: int, gpus: float, on_eval=None
) -> dict:
    """Train one model; ``on_eval(partial figures)`` after every evaluation (so that a run
    stopped early still leaves its curve on disk)."""
    config = build_config(CentralConfig, params)
    protocol = Central(dataset, config, seed)
    t0 = time.perf_counter()
    dep = deploy(protocol, gpus_per_host=gpus)
    setup = time.perf_counter() - t0
    curve, train_seconds = [], 0.0
    eval_started = eval_seconds = 0.0  # the round's evaluation, kept out of train_seconds

    def evaluating(on: bool) -> None:
        nonlocal eval_started, eval_seconds
        if on:
            eval_started = time.perf_counter()
        else:
            eval_seconds = time.perf_counter() - eval_started

    try:
        device = dep.host_info()[0]["device"]
        for res in rounds(protocol, dep, epochs, eval_every=every, evaluating=evaluating):
            r = res.round
            train_seconds += res.seconds - (eval_seconds if res.evaluated else 0.0)
            if res.evaluated:
                curve.append({"epoch": r + 1, **res.train, **res.metrics})
                print(params["model"], curve[-1], flush=True)
                if on_eval is not None:
                    on_eval(
                        {
                            "epochs_done": r + 1,
                            "curve": curve,
                            "complete": False,
                            "train_seconds": train_seconds,
                        }
                    )
        bytes_total = dep.ledger.total(include_eval=True)
    finally:
        dep.close()
    out = {
        "config": {k: v for k, v in vars(config).items()},
        "epochs": epochs,
        "complete": True,
        "metrics": curve[-1],
        "curve": curve,
        "bytes_total": bytes_total,
        "device": device,
        "setup_seconds": setup,
        "train_seconds": train_seconds,
        "wall_seconds": time.perf_counter() - t0,
    }
    with_val = [c for c in curve if "val_rmse" in c]
    if with_val:
        best = min(with_val, key=lambda c: c["val_rmse"])
        out["at_best_val"] = {k: best[k] for k in ("epoch", "val_rmse", "test_rmse")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ml-100k")
    ap.add_argument("--models", default="lightgcn,bprmf")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gpus-per-host", type=float, default=0.0)
    ap.add_argument("--implicit", action="store_true", help="load the dataset as implicit")
    ap.add_argument("--param", action="append", default=[], help="name=value for every model")
    ap.add_argument("--name", default=None, help="output name (default central-<dataset>)")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    name = args.name or result_name("central", dataset_tag(args.dataset))
    claim_result(name, write=args.write)
    models = [m for m in args.models.split(",") if m]
    params = parse_key_values(args.param, "--param")
    dataset = load_dataset(args.dataset, seed=args.seed, implicit=args.implicit)
    figures: dict = {
        "dataset": {
            "name": dataset.name,
            "users": dataset.n_users,
            "items": dataset.n_items,
            "train": len(dataset.train),
            "test": len(dataset.test),
            "meta": {k: v for k, v in dataset.meta.items() if isinstance(v, (str, int, float))},
        },
        "popularity": popularity_metrics(dataset),
        "models": {},
    }
    for model in models:  # refuse a model that does not fit before any training starts
        Central(dataset, build_config(CentralConfig, {**params, "model": model}), args.seed)
    start_or_join(None)
    for model in models:

        def checkpoint(partial: dict, model: str = model) -> None:
            write_result(
                name,
                {**figures, "models": {**figures["models"], model: partial}},
                write=args.write,
            )

        figures["models"][model] = train_model(
            dataset,
            {**params, "model": model},
            args.epochs,
            args.eval_every,
            args.seed,
            args.gpus_per_host,
            on_eval=checkpoint,
        )
    write_result(name, figures, write=args.write)


if __name__ == "__main__":
    main()
