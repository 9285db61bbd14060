"""Seconds per FedLightGCN training round on gowalla through the real runtime (issue 17): the
thesis's settings (512 users per round, 2,048 negatives, 64 pseudo items, d=64, K=2), the users
packed on ``--hosts`` host actors beside the server, key-server and matcher actors, as
``launch.py`` deploys them.

    python -m benchmarks.fedlightgcn_round --rounds 6 [--before-tree DIR]

Round 0 (the OPRF tokenisation of every (user, item) pair and the first graph expansion) is timed
apart; the figure is the median wall time of rounds 1..N (download, train, aggregate; no
expansion falls in them: an epoch is 59 rounds). ``--key-bits`` defaults to 1024, the smallest
the config takes, to keep round 0 short: the key size changes only the OPRF, never a training
round. ``--before-tree DIR`` runs the same measurement first on another checkout of the code
(e.g. ``git archive <commit> | tar -x -C DIR``), in its own process, and reports both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

NAME = "fedlightgcn-round-gowalla"
PHASES = ("download", "train", "aggregate")


def _rounds_before_loop(protocol, dep, stop: int, **_):
    """What ``engine.rounds`` times, for a ``--before-tree`` checkout older than it: begin_round
    and run_round, no evaluation."""
    for t in range(stop):
        t0 = time.perf_counter()
        dep.begin_round(t)
        train = protocol.run_round(dep, t)
        yield SimpleNamespace(round=t, train=train, seconds=time.perf_counter() - t0)


def measure(args) -> dict:
    from cluster.runtime import start_or_join
    from data.registry import load_dataset
    from engine import deploy
    from protocols.base import build_config
    from protocols.fedpergnn.protocol import FedLightGCN

    try:
        from engine import rounds
    except ImportError:  # a --before-tree checkout from before the one round loop
        rounds = _rounds_before_loop

    ds = load_dataset("gowalla", data_dir=args.data_dir)
    params = {
        "users_per_round": args.users_per_round,
        "negatives": args.negatives,
        "key_bits": args.key_bits,
    }
    protocol = FedLightGCN(ds, build_config(FedLightGCN.Config, params), seed=args.seed)
    start_or_join(None)
    dep = deploy(protocol, "packed", args.hosts)
    try:
        seconds, losses = [], []
        for res in rounds(protocol, dep, args.rounds + 1, eval_every=0, evaluate_last=False):
            seconds.append(res.seconds)  # begin_round (snapshots) and the round, no evaluation
            losses.append(res.train["loss"])
            print(f"round {res.round}: {seconds[-1]:.2f} s, loss {losses[-1]:.6f}", flush=True)
        phases = {
            p: statistics.median(s["wall"] for s in dep.steps if s["round"] > 0 and s["phase"] == p)
            for p in PHASES
        }
        bytes_round = dep.ledger.total(round_=1)
        crossed = sum(v for (rnd, _), v in dep.ledger.crossed.items() if rnd == 1)
    finally:
        dep.close()
    timed = seconds[1:]
    return {
        "round0_seconds": seconds[0],
        "round_seconds": timed,
        "median_round_seconds": statistics.median(timed),
        "median_phase_seconds": phases,
        "losses": losses,
        "logical_bytes_round1": bytes_round,
        "crossed_bytes_round1": crossed,
        "params": params,
        "hosts": args.hosts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="timed rounds after round 0")
    ap.add_argument("--hosts", type=int, default=1)
    ap.add_argument("--users-per-round", type=int, default=512)
    ap.add_argument("--negatives", type=int, default=2048)
    ap.add_argument("--key-bits", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--data-dir", default=None, help="folder holding gowalla/ (default ../shared/data)"
    )
    ap.add_argument("--before-tree", default=None, help="another checkout to measure first")
    ap.add_argument("--json-out", default=None, help=argparse.SUPPRESS)  # child of --before-tree
    ap.add_argument("--name", default=NAME, help=f"benchmarks/out/NAME.json (default {NAME})")
    ap.add_argument(
        "--write",
        action="store_true",
        help="overwrite the result file even where git tracks it (a recorded result)",
    )
    args = ap.parse_args()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(measure(args)))
        return
    from benchmarks.common import claim_result, write_result

    claim_result(args.name, write=args.write)
    figures = {}
    if args.before_tree:
        tree = str(Path(args.before_tree).resolve())
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "before.json"
            child = [a for a in sys.argv[1:] if not a.startswith("--before-tree")]
            if args.before_tree in child:
                child.remove(args.before_tree)
            child = _without_output_flags(child)  # the other tree may not know them
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, str(Path(__file__).resolve()), *child, "--json-out", str(out)]
            subprocess.run(cmd, cwd=tree, env=env, check=True)
            figures["before"] = {"tree": tree, **json.loads(out.read_text())}
    figures["after"] = measure(args)
    if "before" in figures:
        figures["speedup"] = (
            figures["before"]["median_round_seconds"] / figures["after"]["median_round_seconds"]
        )
    write_result(args.name, figures, write=args.write)


def _without_output_flags(argv: list[str]) -> list[str]:
    """``argv`` less ``--write`` and ``--name NAME`` (``--name=NAME``): the child measures only."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--name":
            skip = True
        elif a != "--write" and not a.startswith("--name="):
            out.append(a)
    return out


if __name__ == "__main__":
    main()
