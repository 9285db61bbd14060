"""How a protocol's cost grows with its population: seconds and bytes per round, and the peak
memory of the whole deployment on this machine, at 1,000, 10,000, 100,000 users.

    python -m benchmarks.scale --protocol fedmf --users 1000 10000 100000 [--rounds 3] [--items N]
    python -m benchmarks.scale --protocols all --users 1000     # the memory table: every protocol
    python -m benchmarks.scale --quick                          # tiny (the test): fedmf, 200 and 400
    python -m benchmarks.scale --combine scale-1000 scale-fedmf  # earlier results in one scale.json

Data: the synthetic world of data/synthetic.py with each user's number of interactions drawn (with
replacement) from gowalla's per-user degrees (train.txt + test.txt of the LightGCN Gowalla folder,
read once; mean 34, median 20, 9..1014), capped at half the items so that every user has items to
sample negatives from; without that folder, a log-normal fitted to those degrees (μ = 3.18,
σ = 0.73 of ln n_u, clipped to 9..1014). Items: ``--items``, else users / 2 up to 10,000 (the
generator scores every user against every item, so it is the cap that keeps 100,000 users at a
few minutes). The generator's random per-user 80/20 split gives the train and test sets.

Each protocol × population is one run of the engine (``engine.run``, placement ``packed``,
``--hosts`` host actors) in a child process of its own with a fresh local Ray instance
(``ray.init(address="local")`` starts the GCS, the raylet and, under it, the workers as
descendants of that process: the whole deployment is its process tree). The run makes
``--rounds`` + 2 rounds: round 0 (set-up: key exchange, PSI, first graph expansion), the
``--rounds`` timed rounds, and a last round that also evaluates (the engine always evaluates the
last round; protocols evaluate at no other round here, ``eval_every = 0``). s/round is the median
wall seconds of the timed rounds (metrics.jsonl), bytes/round their median protocol bytes
(evaluation traffic excluded); round 0 and the last round are recorded apart.

Memory: benchmarks/proctree.py samples, every ``--interval`` s, the RSS and PSS summed over the
child and all its descendants (the driver with the dataset, Ray's GCS, raylet, agents and host
actors) from the child's start to its exit — data generation, round 0 and the last round's
evaluation included. This command's own process (which only reads the degrees) is not counted.
RSS counts a page shared by several processes (torch's libraries, Ray's object store) in each;
PSS divides it among them, so PSS is the memory the deployment takes from the machine.

A protocol's sweep stops at the first population that fails (its reason recorded) or would not
fit: the peak PSS estimated from the sizes measured before it above 70 % of the memory available
now. The estimate is a line through the last two sizes, or from one size a line through it and a
floor of 1,000 MiB, the PSS of the smallest deployment here (fedmf, 200 users: Ray's processes,
host actors with torch, the driver), or through it and zero when it is below that floor.
The JSON records per protocol the largest population reached here and an extrapolation (not a
measurement): machines of this one's memory, 70 % usable, needed for ``--extrapolate`` users at the
marginal PSS per user between the two largest sizes measured (or, from one size, its PSS above
the floor below, per user). Figures measured on a loaded machine vary with its load.
Writes benchmarks/out/NAME.json (``--name``, default ``scale``, ``scale-quick``), NAME.png (log-log
s/round and peak RSS vs users) and prints a table; a recorded result (a file git tracks) is
refused before anything runs unless ``--write`` is given.
"""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from benchmarks.common import (
    OUT,
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    claim_result,
    run_main,
    scoped_key_values,
    shown_path,
    text_table,
    usage_errors,
    writable,
    write_result,
)

PROG = "benchmarks.scale"
ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20
ITEM_CAP = 10_000
MARGIN = 0.7  # share of the memory a run may be expected to take
FLOOR_PSS_MIB = 1000.0  # PSS of a near-empty deployment here (fedmf, 200 users: 1,080 MiB)
FALLBACK = {"mu": 3.18, "sigma": 0.73, "low": 9, "high": 1014}  # ln n_u of gowalla's degrees
QUICK = {"protocols": ["fedmf"], "users": [200, 400], "rounds": 2, "hosts": 1}

# The built-in protocols but the probes and the centralized baselines, with settings that keep
# 1,000 users at seconds a round without changing what a participant holds: 1024-bit RSA in the
# OPRF/PSI (a smaller number, the same messages), 256 sampled negatives (FedLightGCN's QUICK),
# two parties (VerFedGNN's QUICK), DIPSGNN's QUICK widths; evaluation only at the end.
PARAMS: dict[str, dict] = {
    "fedmf": {},
    "dmf": {},
    "dgrec": {},
    "dlgnn": {},
    "fedpergnn": {"backbone": "gat", "key_bits": 1024},
    "fedlightgcn": {"key_bits": 1024, "negatives": 256},
    "dipsgnn": {"hidden_dim": 32, "user_dim": 16},  # + epochs = the rounds the run makes
    "verfedgnn": {"parties": 2, "psi_key_bits": 1024},
}


# --- data ----------------------------------------------------------------------------------------
def gowalla_degrees(data_dir: str | None) -> tuple[np.ndarray | None, str]:
    """Each gowalla user's number of items (train + test; one line per user and file, ``user
    item item ...``), or None when the folder is missing; and where they came from."""
    from data.registry import default_data_dir

    root = Path(data_dir or default_data_dir()) / "gowalla"
    per_user: dict[str, int] = {}
    try:
        for name in ("train.txt", "test.txt"):
            with open(root / name) as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 1:
                        per_user[fields[0]] = per_user.get(fields[0], 0) + len(fields) - 1
    except OSError:
        return None, f"log-normal {FALLBACK} ({root} not found)"
    return np.array(list(per_user.values()), dtype=np.int64), f"gowalla degrees ({root})"


def user_counts(degrees: np.ndarray | None, n_users: int, n_items: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if degrees is None:
        raw = rng.lognormal(FALLBACK["mu"], FALLBACK["sigma"], n_users)
        counts = np.clip(np.rint(raw), FALLBACK["low"], FALLBACK["high"]).astype(np.int64)
    else:
        counts = rng.choice(degrees, n_users)
    return np.clip(counts, 2, max(2, n_items // 2))


def items_for(users: int, items: int | None) -> int:
    return items or min(max(users // 2, 50), ITEM_CAP)


# --- one run, in a child process -----------------------------------------------------------------
def child(spec_path: str) -> int:
    """Generate the data, run the protocol, write what the rows say next to the spec."""
    from cluster.runtime import start_or_join
    from data.synthetic import synthetic
    from engine import RunSettings, run
    from engine.report import read_rows

    spec = json.loads(Path(spec_path).read_text())
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    degrees = np.load(spec["degrees"]) if spec["degrees"] else None
    counts = user_counts(degrees, spec["users"], spec["items"], spec["seed"])
    dataset = synthetic(
        n_users=spec["users"], n_items=spec["items"], seed=spec["seed"], interaction_counts=counts
    )
    data_seconds = time.perf_counter() - t0
    start_or_join(None)
    settings = RunSettings(
        protocol=spec["protocol"],
        rounds=spec["rounds_made"],
        seed=spec["seed"],
        hosts=spec["hosts"],
        out=spec["out"],
        params=spec["params"],
        progress=False,
    )
    run_dir, summary = run(settings, dataset, dataset.meta)
    rows = read_rows(Path(run_dir))
    timed = [r for r in rows[1:] if not r["metrics"]]
    result = {
        "interactions_train": int(len(dataset.train.user)),
        "data_seconds": data_seconds,
        "round_seconds": [r["seconds"] for r in rows],
        "seconds_per_round": statistics.median(r["seconds"] for r in timed),
        "timed_rounds": [r["round"] for r in timed],
        "round0_seconds": rows[0]["seconds"],
        "last_round_seconds_with_eval": rows[-1]["seconds"],
        "bytes_per_round": statistics.median(r["bytes"] for r in timed),
        "bytes_round0": rows[0]["bytes"],
        "bytes_total": summary["bytes_total"],
        "bytes_total_per_round": summary["bytes_total"] / len(rows),
        "wall_seconds": summary["wall_seconds"],
        "metrics": summary["metrics"],
        "run_dir": str(run_dir),
        "load_average_1min": [load_before, os.getloadavg()[0]],  # at the start and the end
    }
    Path(spec_path + ".result").write_text(json.dumps(result, default=float))
    return 0


def measure(args, protocol: str, users: int, degrees_file: str | None) -> dict:
    """One protocol × population in a child process, its tree's peak memory sampled outside."""
    from benchmarks.vs_flower import MemoryWatch

    items = items_for(users, args.items)
    params = {**PARAMS.get(protocol, {}), "eval_every": 0, **args.set.get(protocol, {})}
    rounds_made = args.rounds + 2
    if protocol == "dipsgnn":
        params.setdefault("epochs", rounds_made)
    spec = {
        "protocol": protocol,
        "users": users,
        "items": items,
        "rounds_made": rounds_made,
        "seed": args.seed,
        "hosts": args.hosts,
        "out": args.out,
        "params": params,
        "degrees": degrees_file,
    }
    record = {"users": users, "items": items, "params": params, "rounds_made": rounds_made}
    with tempfile.TemporaryDirectory(prefix="scale_") as tmp:
        spec_path = str(Path(tmp) / "spec.json")
        Path(spec_path).write_text(json.dumps(spec))
        log_path = Path(tmp) / "log.txt"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.scale", "--child", spec_path],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a timeout ends all of it
            )
            watch = MemoryWatch(proc.pid, args.interval)
            try:
                rc = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                rc = proc.wait()
                rc = f"timeout after {args.timeout} s"
            memory = watch.stop()
        result_path = Path(spec_path + ".result")
        if rc == 0 and result_path.is_file():
            record.update(status="ok", **json.loads(result_path.read_text()))
        else:
            record.update(status="failed", reason=_failure(rc, log_path))
    record["memory"] = memory
    peak_rss, peak_pss = memory.get("peak_rss_mib"), memory.get("peak_pss_mib")
    if peak_rss:
        record["peak_rss_mib"] = peak_rss
        record["peak_pss_mib"] = peak_pss
        record["rss_mib_per_1000_users"] = peak_rss / users * 1000
        record["pss_mib_per_1000_users"] = peak_pss / users * 1000
    return record


def _failure(rc, log_path: Path) -> str:
    lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    last = lines[-1].strip()[:300] if lines else "no output"
    if isinstance(rc, int) and rc < 0:
        return f"killed by signal {-rc} (out of memory?); last output: {last}"
    return f"exit status {rc}: {last}"


# --- the sweep -----------------------------------------------------------------------------------
def estimate_pss(points: list[tuple[int, float]], users: int) -> float:
    """Peak PSS (MiB) at ``users`` from measured (users, MiB): a line through the last two points
    (its slope at least 0), or from one point a line through it and (0, the floor)."""
    if len(points) == 1:
        n, mib = points[0]
        floor = FLOOR_PSS_MIB if mib > FLOOR_PSS_MIB else 0.0
        return floor + (mib - floor) * users / n
    (n0, m0), (n1, m1) = points[-2:]
    slope = max((m1 - m0) / (n1 - n0), 0.0)
    return m1 + slope * (users - n1)


def sweep(args, protocol: str, degrees_file: str | None) -> dict:
    sizes, points, stopped = [], [], None
    for users in sorted(args.users):
        if points:
            need = estimate_pss(points, users)
            available = psutil.virtual_memory().available / MIB
            if need > MARGIN * available:
                stopped = (
                    f"{users} users would not fit: estimated peak PSS {need / 1024:.1f} GiB > "
                    f"{MARGIN:.0%} of the {available / 1024:.1f} GiB available"
                )
                sizes.append({"users": users, "status": "skipped", "reason": stopped})
                break
        record = measure(args, protocol, users, degrees_file)
        sizes.append(record)
        print(_line(protocol, record), flush=True)
        if record["status"] != "ok":
            stopped = f"{users} users failed: {record['reason']}"
            break
        points.append((users, record["peak_pss_mib"]))
    reached = [s["users"] for s in sizes if s["status"] == "ok"]
    return {
        "sizes": sizes,
        "largest_population_reached_here": max(reached) if reached else None,
        "stopped": stopped,
        "extrapolation": extrapolate(points, args.extrapolate),
    }


def extrapolate(points: list[tuple[int, float]], targets: list[int]) -> dict | None:
    if not points:
        return None
    total = psutil.virtual_memory().total / MIB
    if len(points) >= 2:
        (n0, m0), (n1, m1) = points[-2:]
        per_user, basis = max((m1 - m0) / (n1 - n0), 0.0), f"marginal PSS between {n0} and {n1}"
    else:
        (n1, m1) = points[0]
        per_user = estimate_pss(points, 2 * n1) - estimate_pss(points, n1)
        per_user, basis = per_user / n1, f"PSS at {n1} above the {FLOOR_PSS_MIB:.0f} MiB floor"
    return {
        "note": "an extrapolation, not a measurement: linear in the users, memory only",
        "basis": basis,
        "pss_mib_per_1000_users": per_user * 1000,
        "machine_memory_gib": total / 1024,
        "usable_fraction": MARGIN,
        "machines_of_this_size_needed": {
            str(n): max(1, math.ceil(per_user * n / (MARGIN * total))) for n in targets
        },
    }


# --- output --------------------------------------------------------------------------------------
def _fmt(x, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def _line(protocol: str, r: dict) -> str:
    if r["status"] != "ok":
        return f"{protocol} {r['users']}: {r['status']}: {r.get('reason')}"
    return (
        f"{protocol} {r['users']} users: {r['seconds_per_round']:.3g} s/round, "
        f"{r['bytes_per_round']:.3g} B/round, peak RSS {r['peak_rss_mib']:.0f} MiB "
        f"(PSS {r['peak_pss_mib']:.0f})"
    )


def table(figures: dict) -> str:
    header = ["protocol", "users", "items", "s/round", "B/round", "RSS MiB", "PSS MiB"]
    header += ["RSS MiB/1k users", "status"]
    rows = []
    for protocol, fig in figures.items():
        for r in fig["sizes"]:
            rows.append(
                [
                    protocol,
                    r["users"],
                    r.get("items", "-"),
                    _fmt(r.get("seconds_per_round")),
                    _fmt(r.get("bytes_per_round")),
                    _fmt(r.get("peak_rss_mib"), ".0f"),
                    _fmt(r.get("peak_pss_mib"), ".0f"),
                    _fmt(r.get("rss_mib_per_1000_users"), ".0f"),
                    r["status"],
                ]
            )
    return text_table(header, rows)


def plot(figures: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for protocol, f in figures.items():
        ok = [r for r in f["sizes"] if r["status"] == "ok"]
        if not ok:
            continue
        users = [r["users"] for r in ok]
        left.plot(users, [r["seconds_per_round"] for r in ok], "o-", label=protocol)
        right.plot(users, [r["peak_rss_mib"] for r in ok], "o-", label=protocol)
    for ax, what in ((left, "wall seconds per round"), (right, "peak RSS of the deployment, MiB")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("users")
        ax.set_ylabel(what)
        ax.grid(True, which="both", alpha=0.3)
    if left.lines:
        left.legend(fontsize=8)
    fig.suptitle("privrec on one machine, synthetic gowalla-shaped data (measured under load)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --- the command line ----------------------------------------------------------------------------
def parse(argv):

    ap = ArgumentParser(PROG, __doc__.split("\n\n")[0])
    ap.add_argument("--protocol", "--protocols", dest="protocols", nargs="+", default=["fedmf"])
    ap.add_argument("--users", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (the run makes 2 more)")
    ap.add_argument("--items", type=int, default=None, help="default: users/2 up to 10,000")
    ap.add_argument("--hosts", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None, help="where the gowalla folder is")
    ap.add_argument("--interval", type=float, default=0.25, help="memory sampling (s)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds one run may take")
    ap.add_argument("--extrapolate", type=int, nargs="+", default=[10**6, 10**7])
    ap.add_argument("--set", action="append", default=[], metavar="PROTOCOL.key=value")
    ap.add_argument("--out", default="runs/bench-scale")
    ap.add_argument("--name", default=None, help="JSON/PNG name (default scale)")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    ap.add_argument("--quick", action="store_true", help="fedmf at 200 and 400 users, 2 rounds")
    ap.add_argument("--combine", nargs="+", metavar="NAME", help="merge earlier results, no runs")
    args = ap.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    args.protocols = _protocols(args.protocols)
    if min(args.users) < 10 or args.rounds < 1 or args.hosts < 1:
        raise UsageError("--users must be >= 10, --rounds and --hosts >= 1")
    if args.items is not None and args.items < 50:
        raise UsageError(f"--items {args.items}: must be >= 50")
    args.set = scoped_key_values(
        args.set, "--set", "expected PROTOCOL.key with a protocol of the sweep", args.protocols
    )
    args.name = args.name or ("scale-quick" if args.quick else "scale")
    if "/" in args.name or args.name.startswith("."):
        raise UsageError(f"--name {args.name!r}: a file name")
    claim_result(args.name, write=args.write, suffixes=(".json", ".png"))
    return args


def _protocols(names: list[str]) -> list[str]:
    names = [n for name in names for n in name.split(",") if n]
    if names == ["all"]:
        return list(PARAMS)
    unknown = [n for n in names if n not in PARAMS]
    if unknown:
        raise UsageError(
            f"--protocol {', '.join(unknown)}: not a protocol of this benchmark "
            f"(known: {', '.join(PARAMS)}, or all)"
        )
    return names


def run_sweeps(args) -> tuple[dict, dict]:
    degrees, source = gowalla_degrees(args.data_dir)
    figures = {}
    with tempfile.TemporaryDirectory(prefix="scale_degrees_") as tmp:
        degrees_file = None
        if degrees is not None:
            degrees_file = str(Path(tmp) / "degrees.npy")
            np.save(degrees_file, degrees)
        for protocol in args.protocols:
            figures[protocol] = sweep(args, protocol, degrees_file)
    header = {
        "note": "measured on a loaded machine (other jobs running): times vary with the load",
        "data": {
            "interactions_per_user": source,
            "items": f"--items {args.items}" if args.items else f"users/2 up to {ITEM_CAP}",
            "generator": "data/synthetic.py, per-user random 80/20 split",
        },
        "rounds_timed": args.rounds,
        "hosts": args.hosts,
        "placement": "packed",
        "memory": "peak RSS/PSS summed over the run's child process and its descendants "
        f"(driver, Ray GCS, raylet, agents, host actors), sampled every {args.interval} s",
    }
    return figures, header


def combine(names: list[str], targets: list[int]) -> tuple[dict, dict]:
    """The protocols of earlier results of this benchmark (benchmarks/out/NAME.json) in one; where
    two files measured a protocol at the same size, the later file's figures are kept, and a
    protocol is stopped where its smallest size that did not run says so."""
    figures: dict[str, dict] = {}
    why: dict[tuple[str, int], str] = {}  # (protocol, users) -> the stop that size met
    header: dict = {"combined_from": []}
    for name in names:
        path = OUT / f"{name}.json"
        with usage_errors(f"--combine {name}", (OSError, ValueError, KeyError)):
            doc = json.loads(path.read_text())
            protocols = doc["figures"]["protocols"]
        header["combined_from"].append({"name": name, "command": doc["command"]})
        for key in ("note", "data", "hosts", "placement", "memory"):
            header.setdefault(key, doc["figures"].get(key))
        for protocol, fig in protocols.items():
            merged = figures.setdefault(protocol, {"sizes": [], "stopped": None})
            sizes = {s["users"]: s for s in merged["sizes"] + fig["sizes"]}
            merged["sizes"] = [sizes[u] for u in sorted(sizes)]
            failed = [s["users"] for s in fig["sizes"] if s["status"] != "ok"]
            if fig["stopped"] and failed:
                why[(protocol, min(failed))] = fig["stopped"]
    for protocol, fig in figures.items():
        failed = [s["users"] for s in fig["sizes"] if s["status"] != "ok"]
        fig["stopped"] = why.get((protocol, min(failed))) if failed else None
        ok = [(s["users"], s["peak_pss_mib"]) for s in fig["sizes"] if s["status"] == "ok"]
        fig["largest_population_reached_here"] = max((u for u, _ in ok), default=None)
        fig["extrapolation"] = extrapolate(ok, targets)
    return figures, header


def _main(argv) -> int:
    if argv and argv[0] == "--child":
        return child(argv[1])
    args = parse(argv)
    if args.combine:
        figures, header = combine(args.combine, args.extrapolate)
    else:
        figures, header = run_sweeps(args)
    OUT.mkdir(exist_ok=True)
    png = writable(OUT / f"{args.name}.png", args.write)
    plot(figures, png)
    path = write_result(
        args.name,
        {**header, "plot": shown_path(png), "protocols": figures},
        echo=False,
        write=args.write,
    )
    print(table(figures))
    for protocol, fig in figures.items():
        print(f"{protocol}: largest population here {fig['largest_population_reached_here']}")
        if fig["stopped"]:
            print(f"  stopped: {fig['stopped']}")
    print(f"written: {shown_path(path)}, {shown_path(png)}")
    return 0


def main(argv=None) -> int:
    return run_main(PROG, _main, argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
