"""fedmf on gowalla's published LightGCN split: Recall/NDCG@20 after a stated budget of rounds,
beside the FedeRank figure quoted in the FedLightGCN thesis (0.1440 / 0.1164).

    python -m benchmarks.fedmf_gowalla --rounds 1500 --eval-every 250 [--hosts 2] [--name NAME]

Writes benchmarks/out/NAME.json (default fedmf_gowalla); a recorded result (a file git tracks) is
refused before anything runs unless --write is given.
"""

from __future__ import annotations

import argparse

from benchmarks.common import WRITE_HELP, claim_result, write_result
from data.registry import load_dataset
from engine import RunSettings, run
from engine.report import read_rows

THESIS_FEDERANK = {"recall@20": 0.1440, "ndcg@20": 0.1164}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--users-per-round", type=int, default=512)
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--lr-item", type=float, default=0.02)
    ap.add_argument("--lr-user", type=float, default=0.5)
    ap.add_argument("--name", default="fedmf_gowalla", help="benchmarks/out/NAME.json")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    claim_result(args.name, write=args.write)
    ds = load_dataset("gowalla")
    params = {
        "users_per_round": args.users_per_round,
        "pairs": args.pairs,
        "lr_item": args.lr_item,
        "lr_user": args.lr_user,
        "eval_every": args.eval_every,
    }
    run_dir, summary = run(
        RunSettings(
            protocol="fedmf", rounds=args.rounds, hosts=args.hosts, params=params, out="runs"
        ),
        ds,
    )
    rows = read_rows(run_dir)
    curve = [
        {"round": r["round"], **{k: r["metrics"][k] for k in ("recall@20", "ndcg@20")}}
        for r in rows
        if r["metrics"]
    ]
    rounds_seconds = [r["seconds"] for r in rows]
    write_result(
        args.name,
        {
            "params": params,
            "rounds": args.rounds,
            "interactions_seen": args.rounds * args.users_per_round * args.pairs,
            "train_interactions": len(ds.train),
            "final": summary["metrics"],
            "curve": curve,
            "thesis_federank": THESIS_FEDERANK,
            "bytes_per_round": summary["bytes_total"] / args.rounds,
            "bytes_by_kind": summary["bytes_by_kind"],
            "bytes_eval": summary["bytes_eval"],
            "wall_seconds": summary["wall_seconds"],
            "median_round_seconds_incl_eval": sorted(rounds_seconds)[len(rounds_seconds) // 2],
            "popularity": summary["baselines"]["popularity"],
        },
        write=args.write,
    )


if __name__ == "__main__":
    main()
