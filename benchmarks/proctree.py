"""Peak memory of a process tree, sampled from outside it (benchmarks/vs_flower.py).

    python -m benchmarks.proctree --root PID --out peak.json [--interval 0.25]

Every ``interval`` seconds it sums, over ``root`` and all its live descendants (this sampler
excluded), the resident set size (RSS) and the proportional set size (PSS: each shared page is
divided among the processes that map it, so shared libraries and Ray's shared-memory object store
are not counted once per process). It keeps the largest sums seen and writes them as JSON when it
gets SIGTERM or SIGINT or when the root exits. PSS needs /proc/PID/smaps_rollup (Linux); where a
process cannot be read it is left out of that sample.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time

import psutil

MIB = 2**20


def sample(root: psutil.Process, me: int) -> tuple[int, int, int, dict, list]:
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0, 0, 0, {}, []
    rss = pss = n = 0
    names: dict[str, int] = {}
    each: list[dict] = []
    for p in procs:
        if p.pid == me:
            continue
        try:
            info = p.memory_full_info()
            name = p.name()
        except psutil.Error:
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
        n += 1
        names[name] = names.get(name, 0) + info.rss
        each.append(
            {
                "name": name,
                "rss": info.rss,
                "pss": getattr(info, "pss", info.rss),
                "uss": getattr(info, "uss", info.rss),
                "shared": getattr(info, "shared", 0),
            }
        )
    return rss, pss, n, names, each


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--interval", type=float, default=0.25)
    args = ap.parse_args()
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    me = os.getpid()
    root = psutil.Process(args.root)
    peak = {"rss": 0, "pss": 0, "processes_at_peak_rss": 0, "rss_by_name_at_peak": {}, "each": []}
    samples = 0
    t0 = time.perf_counter()
    while not stop and root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
        rss, pss, n, names, each = sample(root, me)
        samples += 1
        if rss > peak["rss"]:
            peak.update(rss=rss, processes_at_peak_rss=n, rss_by_name_at_peak=names, each=each)
        peak["pss"] = max(peak["pss"], pss)
        time.sleep(args.interval)
    doc = {
        "peak_rss_mib": peak["rss"] / MIB,
        "peak_pss_mib": peak["pss"] / MIB,
        "processes_at_peak_rss": peak["processes_at_peak_rss"],
        "rss_mib_by_process_name_at_peak": {
            k: round(v / MIB, 1) for k, v in sorted(peak["rss_by_name_at_peak"].items())
        },
        # each process at the peak: RSS, PSS, USS (pages it alone maps) and shared (resident pages
        # backed by a file or shared memory, Ray's object store among them), largest first
        "processes_mib_at_peak": [
            {k: (round(v / MIB, 1) if k != "name" else v) for k, v in p.items()}
            for p in sorted(peak["each"], key=lambda p: -p["rss"])
            if p["rss"] >= 16 * MIB
        ],
        "samples": samples,
        "interval_seconds": args.interval,
        "watched_seconds": time.perf_counter() - t0,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
