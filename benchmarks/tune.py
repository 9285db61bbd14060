"""Tune a protocol's parameters on a validation slice of the training data, never on the test
split; then (optionally) run the chosen parameters once on the real split.

    python -m benchmarks.tune --protocol fedmf --dataset gowalla --rounds 500 \
        --grid lr_item=0.02,0.05 --grid user_steps=1,10 [--set users_per_round=512] \
        [--val-fraction 0.1] [--final-rounds 1500] --name fedmf-gowalla-tune

Every user's training interactions are split at random (``data.splits.random_split``,
``--val-fraction`` of each user's rows, seed ``--seed``): each candidate of the grid (the
product of the ``--grid`` values) trains on the rest and is judged by its main metric
(``engine.compare.main_metric``: Recall@20 for ranking, RMSE for ratings) on the held-out slice,
at the end of its run. The test split is not handed to the candidates at all. The winner alone
then trains on the full training data and is measured on the test split (``--final-rounds``;
0 skips it). Writes benchmarks/out/<name>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time

from benchmarks.common import parse_key_values, write_result
from data.registry import load_dataset
from data.splits import random_split
from data.types import RecDataset
from engine import RunSettings, run
from engine.compare import main_metric
from engine.report import read_rows


def validation_dataset(ds: RecDataset, fraction: float, seed: int) -> RecDataset:
    """``ds`` with each user's training rows split: ``fraction`` of them become the evaluated
    part, the rest the training part; ``ds.test`` is dropped."""
    fit, held_out = random_split(ds.train, ds.n_users, fraction, seed)
    meta = {**ds.meta, "validation": f"{fraction} of each user's training rows (seed {seed})"}
    return dataclasses.replace(ds, train=fit, test=held_out, val=None, meta=meta)


def grid(pairs: list[str]) -> list[dict]:
    """``["a=1,2", "b=x"]`` → ``[{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]``."""
    axes = []
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep or not values:
            raise SystemExit(f"--grid {pair!r}: expected key=v1,v2,...")
        axes.append([parse_key_values([f"{key}={v}"], "--grid") for v in values.split(",")])
    return [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*axes)]


def _curve(run_dir) -> list[dict]:
    return [{"round": r["round"], **r["metrics"]} for r in read_rows(run_dir) if r.get("metrics")]


def _run(protocol: str, ds: RecDataset, params: dict, rounds: int, args) -> dict:
    start = time.perf_counter()
    settings = RunSettings(
        protocol=protocol,
        rounds=rounds,
        seed=args.seed,
        hosts=args.hosts,
        params=params,
        out="runs",
        progress=False,
    )
    run_dir, summary = run(settings, ds)
    return {
        "params": params,
        "rounds": rounds,
        "metrics": summary["metrics"],
        "curve": _curve(run_dir),
        "run_dir": str(run_dir),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rounds", type=int, required=True, help="rounds of each candidate")
    ap.add_argument("--grid", action="append", default=[], help="key=v1,v2,... (repeatable)")
    ap.add_argument("--set", action="append", default=[], help="key=value fixed for every run")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--final-rounds", type=int, default=0, help="the winner on the real split")
    ap.add_argument("--name", required=True)
    args = ap.parse_args()
    if not args.grid:
        ap.error("--grid: give at least one key=v1,v2,...")
    if not 0 < args.val_fraction < 1:
        ap.error(f"--val-fraction {args.val_fraction}: must lie in (0, 1)")
    fixed = parse_key_values(args.set, "--set")
    ds = load_dataset(args.dataset, args.data_dir)
    val_ds = validation_dataset(ds, args.val_fraction, args.seed)
    candidates = []
    for point in grid(args.grid):
        params = {**fixed, **point}
        result = _run(args.protocol, val_ds, params, args.rounds, args)
        candidates.append(result)
        print(f"[tune] {point}: {result['metrics']}", flush=True)
    metric, better = main_metric(candidates[0]["metrics"])
    if metric is None:
        raise SystemExit(f"{args.protocol}: no ranking or rating metric to tune on")
    sign = 1 if better == "higher" else -1
    best = max(candidates, key=lambda c: sign * c["metrics"][metric])
    figures = {
        "protocol": args.protocol,
        "dataset": args.dataset,
        "validation": {
            "fraction": args.val_fraction,
            "seed": args.seed,
            "train_rows": len(val_ds.train),
            "held_out_rows": len(val_ds.test),
        },
        "metric": metric,
        "better": better,
        "candidates": candidates,
        "chosen": best["params"],
    }
    if args.final_rounds:
        figures["final"] = _run(args.protocol, ds, best["params"], args.final_rounds, args)
    write_result(args.name, figures)


if __name__ == "__main__":
    main()
