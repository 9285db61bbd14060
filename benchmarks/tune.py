"""Tune a protocol's parameters on a validation slice of the training data, never on the test
split; then (optionally) run the chosen parameters once on the real split.

    python -m benchmarks.tune --protocol fedmf --dataset gowalla --rounds 500 \\
        --grid lr_item=0.02,0.05 --grid user_steps=1,10 [--set users_per_round=512] \\
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

import dataclasses
import itertools
import sys
import time
from pathlib import Path

from benchmarks.common import (
    ArgumentParser,
    UsageError,
    check_dataset,
    parse_key_values,
    run_main,
    shown_path,
    text_table,
    usage_errors,
    write_result,
)
from data.registry import load_dataset
from data.splits import random_split
from data.types import RecDataset
from engine import RunSettings, run
from engine.compare import fmt, main_metric
from engine.report import read_rows

PROG = "benchmarks.tune"


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
        if not sep or not key or not values:
            raise UsageError(f"--grid {pair!r}: expected key=v1,v2,...")
        axes.append([parse_key_values([f"{key}={v}"], "--grid") for v in values.split(",")])
    return [dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*axes)]


def point_text(point: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in point.items())


def check_params(protocol: str, fixed: dict, points: list[dict]) -> None:
    """Every run's parameters built into the protocol's Config (names, types, ranges) before
    any data is read: a mistake is a UsageError naming its flag."""
    from protocols import get_protocol
    from protocols.base import build_config

    with usage_errors(f"--protocol {protocol}"):
        config = get_protocol(protocol).Config
    with usage_errors(f"--set {point_text(fixed)}"):
        build_config(config, fixed)
    for point in points:
        with usage_errors(f"--grid {point_text(point)}"):
            build_config(config, {**fixed, **point})


def _curve(run_dir) -> list[dict]:
    return [{"round": r["round"], **r["metrics"]} for r in read_rows(run_dir) if r.get("metrics")]


def _run(protocol: str, ds: RecDataset, params: dict, rounds: int, args) -> dict:
    from protocols.base import ConfigError, UnsuitableDataError

    start = time.perf_counter()
    settings = RunSettings(
        protocol=protocol,
        rounds=rounds,
        seed=args.seed,
        hosts=args.hosts,
        params=params,
        out=args.out,
    )
    # a parameter that does not fit the data, or data without the signal the protocol needs,
    # is found only by the protocol once it sees the dataset: still the user's choice
    with usage_errors(
        f"--protocol {protocol} on --dataset {args.dataset}", (ConfigError, UnsuitableDataError)
    ):
        run_dir, summary = run(settings, ds)
    return {
        "params": params,
        "rounds": rounds,
        "metrics": summary["metrics"],
        "curve": _curve(run_dir),
        "run_dir": str(run_dir),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }


def parse_args(argv: list[str] | None):
    ap = ArgumentParser(PROG, __doc__)
    ap.add_argument(
        "--protocol", required=True, help="the protocol to tune (as launch.py names it)"
    )
    ap.add_argument("--dataset", required=True, help="a dataset name or a folder of its files")
    ap.add_argument("--data-dir", default=None, help="default: ../shared/data beside the checkout")
    ap.add_argument("--rounds", type=int, required=True, help="rounds of each candidate")
    ap.add_argument("--grid", action="append", default=[], help="key=v1,v2,... (repeatable)")
    ap.add_argument("--set", action="append", default=[], help="key=value fixed for every run")
    ap.add_argument("--val-fraction", type=float, default=0.1, help="held out of each user's rows")
    ap.add_argument("--seed", type=int, default=0, help="of the slice and of every run")
    ap.add_argument("--hosts", type=int, default=2, help="Ray hosts the participants share")
    ap.add_argument("--final-rounds", type=int, default=0, help="the winner on the real split")
    ap.add_argument("--name", required=True, help="writes benchmarks/out/NAME.json")
    ap.add_argument("--out", default="runs", help="where the runs go")
    ap.add_argument(
        "--dry-run", action="store_true", help="check, load the data, list the candidates, stop"
    )
    args = ap.parse_args(argv)
    if not args.grid:
        ap.error("--grid: give at least one key=v1,v2,...")
    checks = [
        (0 < args.val_fraction < 1, f"--val-fraction {args.val_fraction}: must lie in (0, 1)"),
        (args.rounds >= 1, f"--rounds {args.rounds}: at least 1"),
        (args.final_rounds >= 0, f"--final-rounds {args.final_rounds}: 0 or more"),
        (args.hosts >= 1, f"--hosts {args.hosts}: at least 1"),
        (args.name and Path(args.name).name == args.name, f"--name {args.name!r}: a file name"),
        (not Path(args.out).is_file(), f"--out {args.out}: a file, not a folder"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    return args


def summary_table(figures: dict) -> str:
    """The candidates (their grid values, the metric on the held-out slice, the wall time) with
    the chosen one marked, and the final run's metric on the test split."""
    metric, candidates = figures["metric"], figures["candidates"]
    # the columns: the parameters that differ between candidates (all of them for one candidate)
    keys = list(candidates[0]["params"])
    keys = [k for k in keys if len({repr(c["params"][k]) for c in candidates}) > 1] or keys
    rows = [
        [
            *(str(c["params"][k]) for k in keys),
            fmt(c["metrics"].get(metric)),
            f"{c['wall_seconds']:.0f}",
            "chosen" if c["params"] == figures["chosen"] else "",
        ]
        for c in candidates
    ]
    lines = [
        f"{figures['protocol']} on {figures['dataset']}: {metric} on the validation slice "
        f"({figures['better']} is better)",
        text_table([*keys, metric, "seconds", ""], rows),
    ]
    if "final" in figures:
        final = figures["final"]
        lines.append(
            f"chosen, {final['rounds']} rounds on the test split: "
            f"{metric} {fmt(final['metrics'].get(metric))}"
        )
    return "\n".join(lines)


def _main(argv: list[str] | None) -> None:
    args = parse_args(argv)
    fixed = parse_key_values(args.set, "--set")
    points = grid(args.grid)
    check_params(args.protocol, fixed, points)
    check_dataset(args.dataset, args.data_dir)
    with usage_errors(f"--dataset {args.dataset}"):
        ds = load_dataset(args.dataset, args.data_dir)
    val_ds = validation_dataset(ds, args.val_fraction, args.seed)
    if args.dry_run:
        for i, point in enumerate(points, 1):
            print(f"candidate {i}/{len(points)}: {point_text(point)}, {args.rounds} rounds")
        final = f", then {args.final_rounds} rounds of the chosen one" if args.final_rounds else ""
        print(f"(dry run: {len(points)} candidates on {ds.name}{final}; nothing started)")
        return
    candidates = []
    for i, point in enumerate(points, 1):
        print(
            f"candidate {i}/{len(points)}: {point_text(point)}, {args.rounds} rounds",
            file=sys.stderr,
            flush=True,
        )
        candidates.append(_run(args.protocol, val_ds, {**fixed, **point}, args.rounds, args))
    metric, better = main_metric(candidates[0]["metrics"])
    if metric is None:
        raise UsageError(f"--protocol {args.protocol}: no ranking or rating metric to tune on")
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
        print(
            f"chosen: {point_text(best['params'])}, {args.final_rounds} rounds on the test split",
            file=sys.stderr,
            flush=True,
        )
        figures["final"] = _run(args.protocol, ds, best["params"], args.final_rounds, args)
    path = write_result(args.name, figures, echo=False)
    print(summary_table(figures))
    print(f"wrote {shown_path(path)}")


def main(argv: list[str] | None = None) -> int:
    return run_main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
