"""What every benchmark records beside its figures: the machine, the date, the command."""

from __future__ import annotations

import ast
import datetime
import json
import os
import platform
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"


def machine() -> dict:
    import torch

    info = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def command() -> str:
    """The command line as typed (``python -m benchmarks.X ...``)."""
    return " ".join(["python", *sys.orig_argv[1:]])


def write_result(name: str, figures: dict) -> Path:
    OUT.mkdir(exist_ok=True)
    doc = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command(),  # as typed, `-m benchmarks.X` kept
        "machine": machine(),
        "figures": figures,
    }
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    print(json.dumps(doc, indent=2, default=float))
    return path


def parse_key_values(pairs: list[str], flag: str) -> dict:
    """``key=value`` pairs from a benchmark's command line (e.g. ``--set lr=0.01``); values are
    Python literals (numbers, True/False, quoted strings) or else bare strings."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"{flag} {pair!r}: expected key=value")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out
