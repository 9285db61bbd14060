"""A launch.py run directory (run in one piece or in several with ``--checkpoint-every`` and
``--resume``) as a benchmark record: the metrics curve, bytes per training round by kind, the
privacy figures, wall time; written to benchmarks/out/<name>.json with the machine and date.

    python launch.py --protocol fedlightgcn --dataset gowalla --rounds 20 --eval-every 10 \\
        --checkpoint-every 5                                  # → runs/<stamp>-fedlightgcn
    python launch.py --resume runs/<stamp>-fedlightgcn --rounds 60   # later, as often as needed
    python -m benchmarks.run_report runs/<stamp>-fedlightgcn --name fedlightgcn-gowalla

Works on a run still in progress (the rows written so far; ``complete: false`` until summary.json
covers the last metrics row). A recorded result (a file git tracks) is refused unless ``--write``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    claim_result,
    run_main,
    shown_path,
    text_table,
    usage_errors,
    write_result,
)
from engine.compare import epsilon_cell, fmt, fmt_bytes
from engine.report import RunDirError, read_rows

__all__ = ["RunDirError", "read_rows", "summarize"]

PROG = "benchmarks.run_report"


def summarize(run_dir: Path) -> dict:
    """The benchmark figures of one run directory."""
    rows = read_rows(run_dir)
    try:
        config = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise RunDirError(f"{run_dir}/config.json: {err}") from None
    summary_path = run_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    except (OSError, ValueError) as err:
        raise RunDirError(f"{summary_path}: {err}") from None
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


def summary_table(figures: dict) -> str:
    """A few lines for the terminal: what ran, how far, its last metrics, its cost, its ε."""
    done = figures["rounds_done"]
    state = "complete" if figures["complete"] else "in progress or stopped"
    dataset = figures["dataset"]
    if isinstance(dataset, dict):
        dataset = dataset.get("name")
    privacy = figures["privacy"] or {}
    epsilon = {"epsilon": privacy.get("epsilon"), "delta": privacy.get("privacy_delta")}
    rows = [
        ["protocol", f"{figures['protocol']} on {dataset}, {done} rounds ({state})"],
        *([k, fmt(v)] for k, v in (figures["final_metrics"] or _last(figures)).items()),
        ["bytes per round", fmt_bytes(figures["bytes_per_round"])],
        ["seconds per round", f"{figures['seconds_per_round_median']:.2f} (median)"],
        ["ε", epsilon_cell(epsilon)],
    ]
    return text_table(["run", shown_path(Path(figures["run_dir"]))], rows)


def _last(figures: dict) -> dict:
    """The metrics of the curve's last point (a run without summary.json yet)."""
    last = dict(figures["curve"][-1]) if figures["curve"] else {}
    return {k: v for k, v in last.items() if k not in ("round", "epsilon")}


def _main(argv: list[str] | None) -> None:
    ap = ArgumentParser(PROG, __doc__)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--name", required=True, help="writes benchmarks/out/NAME.json")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args(argv)
    claim_result(args.name, write=args.write)
    if not args.run_dir.is_dir():
        raise UsageError(f"{args.run_dir}: no such run directory")
    with usage_errors(None, (RunDirError,)):  # its message names the file
        figures = summarize(args.run_dir)
    path = write_result(args.name, figures, echo=False, write=args.write)
    print(summary_table(figures))
    print(f"wrote {shown_path(path)}")


def main(argv: list[str] | None = None) -> int:
    return run_main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
