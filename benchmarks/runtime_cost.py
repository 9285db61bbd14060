"""The runtime's own cost: wall seconds per round of the trivial `ping` protocol for packed users,
and the share of a `fedmf` round spent computing vs in codecs vs in transport and scheduling.

    python -m benchmarks.runtime_cost [--users 1000 10000] [--hosts 2] [--rounds 5] [--name NAME]

Writes benchmarks/out/NAME.json (default runtime_cost); a recorded result (a file git tracks) is
refused before anything runs unless --write is given.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import WRITE_HELP, claim_result, write_result
from cluster.runtime import start_or_join
from data.synthetic import synthetic
from engine import deploy, run_rounds
from nodes.conditions import Conditions
from protocols.base import build_config
from protocols.fedmf.protocol import FedMF
from protocols.ping import Ping


def measure(protocol, hosts: int, rounds: int) -> dict:
    """Seconds per round (no evaluation; no snapshots, whose cost benchmarks.conditions
    snapshot-cost measures) and the shares of the rounds after the first."""
    t0 = time.perf_counter()
    dep = deploy(protocol, "packed", hosts, conditions=Conditions(snapshot_every=0))
    setup = time.perf_counter() - t0
    try:
        per_round = [
            res.seconds
            for res in run_rounds(protocol, dep, rounds, eval_every=0, evaluate_last=False)
        ]
        steps = dep.steps[len(dep.steps) // rounds :]  # skip the first round's steps (warm-up)
        wall = sum(s["wall"] for s in steps)
        return {
            "setup_seconds": setup,
            "round_seconds_median": statistics.median(per_round[1:] or per_round),
            "round_seconds_all": per_round,
            "share_compute": sum(s["compute_max"] for s in steps) / wall,
            "share_codec": sum(s["codec_max"] for s in steps) / wall,
            "share_transport_and_scheduling": 1
            - sum(s["compute_max"] + s["codec_max"] for s in steps) / wall,
            "bytes_per_round": dep.ledger.total(round_=rounds - 1),
            "bytes_crossed_per_round": dep.ledger.crossed_total(round_=rounds - 1),
        }
    finally:
        dep.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--name", default="runtime_cost", help="benchmarks/out/NAME.json")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    claim_result(args.name, write=args.write)
    start_or_join(None)
    figures = {}
    for n in args.users:
        ds = synthetic(n_users=n, n_items=200, avg_interactions=10, seed=0)
        figures[f"ping_{n}_users"] = measure(
            Ping(ds, build_config(Ping.Config, {}), 0), args.hosts, args.rounds
        )
    ds = synthetic(n_users=2000, n_items=5000, avg_interactions=30, seed=0)
    fedmf = FedMF(
        ds, build_config(FedMF.Config, {"users_per_round": 512, "pairs": 32, "dim": 64}), 0
    )
    figures["fedmf_2000_users_5000_items_512_per_round"] = measure(fedmf, args.hosts, args.rounds)
    write_result(args.name, figures, write=args.write)


if __name__ == "__main__":
    main()
