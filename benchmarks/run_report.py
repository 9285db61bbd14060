"""A launch.py run directory (run in one piece or in several with ``--checkpoint-every`` and
``--resume``) as a benchmark record: the metrics curve, bytes per training round by kind, the
privacy figures, wall time; written to benchmarks/out/<name>.json with the machine and date.

    python launch.py --protocol fedlightgcn --dataset gowalla --rounds 20 --eval-every 10 \\
        --checkpoint-every 5                                  # → runs/<stamp>-fedlightgcn
    python launch.py --resume runs/<stamp>-fedlightgcn --rounds 60   # later, as often as needed
    python -m benchmarks.run_report runs/<stamp>-fedlightgcn --name fedlightgcn-gowalla

Works on a run still in progress (the rows written so far; ``complete: false`` until summary.json
covers the last metrics row).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from benchmarks.common import write_result
from engine.report import RunDirError, read_rows

__all__ = ["RunDirError", "read_rows", "summarize"]


def summarize(run_dir: Path) -> dict:
    """The benchmark figures of one run directory."""
    rows = read_rows(run_dir)
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise RunDirError(f"{run_dir}/config.json: {err}") from None
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    # round 0 carries the one-off set-up traffic (tokens, graph expansion): reported apart
    later = rows[1:] or rows
    kinds = sorted({k for row in later for k in row.get("bytes_by_kind", {})})
    per_round = {
        k: sum(r.get("bytes_by_kind", {}).get(k, 0) for r in later) / len(later) for k in kinds
    }
    curve = [
        {"round": r["round"] + 1, **r["metrics"], "epsilon": r.get("epsilon")}
        for r in rows
        if r.get("metrics")
    ]
    seconds = [float(r.get("seconds", math.nan)) for r in rows]
    return {
        "run_dir": str(run_dir),
        "protocol": config.get("settings", {}).get("protocol"),
        "dataset": config.get("dataset"),
        "protocol_config": config.get("protocol_config"),
        "resumed_with": config.get("resumed_with", []),  # parameters changed on --resume
        "rounds_done": rows[-1]["round"] + 1,
        "complete": bool(summary) and summary.get("rounds") == rows[-1]["round"] + 1,
        "curve": curve,
        "bytes_first_round_by_kind": rows[0].get("bytes_by_kind", {}),
        "bytes_per_round_by_kind": per_round,
        "bytes_per_round": sum(per_round.values()),
        "seconds_per_round_median": sorted(seconds)[len(seconds) // 2],
        "train_seconds": math.fsum(seconds),
        "privacy": summary.get("privacy"),
        "baselines": summary.get("baselines"),
        "final_metrics": summary.get("metrics"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--name", required=True, help="benchmarks/out/<name>.json")
    args = ap.parse_args()
    try:
        figures = summarize(args.run_dir)
    except RunDirError as err:
        raise SystemExit(f"run_report: {err}") from None
    write_result(args.name, figures)


if __name__ == "__main__":
    main()
