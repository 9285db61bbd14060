"""Unreliable and slow participants: what dropout costs in accuracy, how long a deployment would
take on phones vs in a datacenter, and what the fault machinery (per-host snapshots) costs.

    python -m benchmarks.conditions dropout --dataset ml-100k --protocols fedmf,fedlightgcn,dgrec,verfedgnn \\
        --dropouts 0,0.1,0.3,0.5 --rounds 100
    python -m benchmarks.conditions deploy-time --dataset ml-100k --protocols fedmf,fedlightgcn,dgrec --rounds 100
    python -m benchmarks.conditions snapshot-cost --dataset ml-100k --protocols fedmf,fedlightgcn --rounds 20

``--set PROTOCOL.key=value`` sets a protocol parameter (``--set dgrec.eval_every=20``); every run
goes through the same runner as ``launch.py`` and writes its run directory under ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from benchmarks.common import (
    WRITE_HELP,
    claim_result,
    dataset_tag,
    parse_key_values,
    result_name,
    write_result,
)
from cluster.runtime import start_or_join
from data.registry import default_data_dir, load_dataset
from engine import RunSettings, run
from engine.compare import main_metric
from engine.report import read_rows
from nodes.conditions import Conditions


def _run(args, protocol: str, conditions: Conditions, dataset, params: dict) -> tuple[dict, list]:
    settings = RunSettings(
        protocol=protocol,
        rounds=args.rounds,
        seed=args.seed,
        hosts=args.hosts,
        out=args.out,
        params=params,
        progress=False,
        conditions=conditions,
    )
    run_dir, summary = run(settings, dataset, dataset.meta)
    rows = read_rows(Path(run_dir))
    return summary, rows


def _params(args, protocol: str) -> dict:
    out = {}
    for key, value in args.set.items():
        proto, _, name = key.partition(".")
        if proto == protocol:
            out[name] = value
    return out


def dropout_curve(args, dataset) -> dict:
    figures = {}
    for protocol in args.protocols:
        rows = []
        for p in args.dropouts:
            summary, _ = _run(
                args, protocol, Conditions(dropout=p), dataset, _params(args, protocol)
            )
            metric, _ = main_metric(summary["metrics"])
            rows.append(
                {
                    "dropout": p,
                    metric: summary["metrics"].get(metric),
                    "bytes_total": summary["bytes_total"],
                    "wall_seconds": summary["wall_seconds"],
                    "sim_seconds": summary["sim_seconds"],
                }
            )
            print(protocol, rows[-1], flush=True)
        base = rows[0][metric]
        for r in rows:
            r["vs_no_dropout"] = r[metric] / base if base else None
        figures[protocol] = {"metric": metric, "rows": rows}
    return figures


def time_to_target(rows: list[dict], metric: str, lower_better: bool, share: float = 0.9):
    """Simulated seconds until the metric first reaches ``share`` of its final value."""
    pts = [(r["sim_elapsed"], r["metrics"][metric]) for r in rows if r["metrics"].get(metric)]
    if not pts:
        return None, None
    final = pts[-1][1]
    for t, v in pts:
        if (v <= final / share) if lower_better else (v >= share * final):
            return t, final
    return None, final


DEPLOYMENTS = {
    "mobile": Conditions(),  # phones: mobile links, 2x slower than this core, spread σ = 0.5
    "datacenter": Conditions(user_link="datacenter", user_speed=1.0, speed_spread=0.0),
}


def deploy_time(args, dataset) -> dict:
    figures = {}
    for protocol in args.protocols:
        out = {}
        for name, cond in DEPLOYMENTS.items():
            summary, rows = _run(args, protocol, cond, dataset, _params(args, protocol))
            metric, better = main_metric(summary["metrics"])
            t90, final = time_to_target(rows, metric, better == "lower")
            out[name] = {
                metric: final,
                "sim_seconds_to_90pct": t90,
                "sim_seconds_total": summary["sim_seconds"],
                "wall_seconds": summary["wall_seconds"],
                "bytes_per_round": summary["bytes_total"] / args.rounds,
            }
            print(protocol, name, out[name], flush=True)
        figures[protocol] = out
    return figures


def snapshot_cost(args, dataset) -> dict:
    """Mean wall seconds per round (rounds 1.., so the snapshot rounds count at any interval),
    median over runs, with a snapshot every ``--snapshot-every`` rounds vs none; runs interleaved
    (off, on, off, on, ...) so that the machine's load hits both alike."""
    figures = {}
    for protocol in args.protocols:
        per = {"off": [], "on": []}
        for _ in range(args.repeats):
            for name, every in (("off", 0), ("on", args.snapshot_every)):
                _, rows = _run(
                    args,
                    protocol,
                    Conditions(snapshot_every=every),
                    dataset,
                    _params(args, protocol),
                )
                per[name].append(statistics.mean(r["seconds"] for r in rows[1:]))
        off, on = statistics.median(per["off"]), statistics.median(per["on"])
        figures[protocol] = {
            "round_seconds_off": off,  # median over runs of each run's mean
            "round_seconds_on": on,
            "overhead": on / off - 1,
            "snapshot_every": args.snapshot_every,
            "runs": per,
        }
        print(protocol, figures[protocol], flush=True)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["dropout", "deploy-time", "snapshot-cost"])
    ap.add_argument("--dataset", default="ml-100k")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--protocols", default="fedmf,fedlightgcn,dgrec,verfedgnn")
    ap.add_argument("--dropouts", default="0,0.1,0.3,0.5")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument(
        "--snapshot-every", type=int, default=1, help="snapshot-cost: the interval 'on'"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench-conditions")
    ap.add_argument("--set", action="append", default=[], metavar="PROTOCOL.key=value")
    ap.add_argument("--name", default=None, help="default conditions-WHAT-DATASET")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    name = args.name or result_name("conditions", args.what, dataset_tag(args.dataset))
    claim_result(name, write=args.write)
    args.protocols = args.protocols.split(",")
    args.dropouts = [float(x) for x in args.dropouts.split(",")]
    args.set = parse_key_values(args.set, "--set")
    data_dir = args.data_dir or default_data_dir()
    dataset = load_dataset(args.dataset, data_dir if args.dataset != "synthetic" else None)
    start_or_join(None)
    what = {"dropout": dropout_curve, "deploy-time": deploy_time, "snapshot-cost": snapshot_cost}
    figures = what[args.what](args, dataset)
    write_result(
        name, {"rounds": args.rounds, "dataset": args.dataset, **figures}, write=args.write
    )


if __name__ == "__main__":
    main()
