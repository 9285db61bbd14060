"""Every protocol's rounds on a CPU host and on a GPU host, side by side: s/round, GPU memory
and utilization, the same bytes, metrics within a tolerance.

    python -m benchmarks.gpu --dry-run               # the plan and its device-time budget; no Ray
    python -m benchmarks.gpu                         # on a machine with CUDA: JSON + table
    python -m benchmarks.gpu --device cpu --quick    # the GPU leg on the CPU too: a try-out here
    python -m benchmarks.gpu --prepare-carry .carry  # what a lent GPU machine lacks, packed

Each run is ``python launch.py`` twice in a row, in subprocesses with a time limit each (a run
that does not finish is recorded as cut, never waited for): the CPU leg with
``--gpus-per-host 0 --cpus-per-host C`` (C: ``--cpu-threads``, 2 by default: the 2-core machine
the issue's targets compare with), the GPU leg with the default share (the machine's GPUs
divided among the host actors). s/round is the median over rounds 1.. (round 0 sets up). While
the GPU leg runs, ``nvidia-smi`` is polled every second for the memory used and the
utilization. Bytes must be equal between the legs; metrics are compared with a relative
tolerance (``--tolerance``): GPU kernels are not bit-identical and a node's torch generators draw
other streams on a GPU, so the figures of a few rounds differ by the noise of the protocol.

On a lent GPU machine (Python 3.12 with torch and PyG, but no Ray, dp-accounting, gmpy2,
cryptography, nor the data sets): here, with pip able to download,
``python -m benchmarks.gpu --prepare-carry .carry`` packs into ``.carry/site.tar.xz`` the wheels
for CPython 3.12 (``--carry-python``) of what the machine lacks (``CARRY``: Ray without its
unused parts and a few wheels, at the versions installed here) and into ``.carry/data.tar.xz`` the
plan's data sets; it prints their sizes (the working tree and what travels with it: 64 MiB at
most). With ``.carry`` ignored by git (``echo /.carry/ >> .git/info/exclude``) and named in
the device call's carry, the one command there is

    mkdir -p /tmp/site /tmp/data && tar xJf .carry/site.tar.xz -C /tmp/site && \\
        tar xJf .carry/data.tar.xz -C /tmp/data && PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site \\
        python3 -m benchmarks.gpu --data-dir /tmp/data --write

which runs the plan (at most ``BUDGET_S`` seconds of device time) and writes
``benchmarks/out/gpu.json`` and ``gpu.md`` (copy them to ``$OUT`` to bring them back).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    claim_result,
    result_name,
    run_main,
    shown_path,
    text_table,
    write_result,
)

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 480  # eight minutes of device time, every leg at its limit
PFEDREC = "privrec_pfedrec.protocol:PFedRec"
K10 = "[dataset]\nsplit = 'random'\nmin_user_interactions = 10\nmin_item_interactions = 10\n"


@dataclass(frozen=True)
class Case:
    label: str
    protocol: str
    dataset: str
    rounds: int
    limit_s: int  # per leg
    flags: tuple[str, ...] = ()
    config: str = ""  # TOML for --config (the ciao 10-core split)


PLAN: tuple[Case, ...] = (
    Case("fedmf", "fedmf", "ml-100k", 4, 16),
    Case("dmf", "dmf", "ml-100k", 4, 16),
    Case("fedpergnn-gat", "fedpergnn", "ml-100k", 3, 22, ("--backbone", "gat")),
    Case("fedlightgcn", "fedlightgcn", "gowalla", 3, 35, ("--users-per-round", "512")),
    Case("dgrec", "dgrec", "ciao", 3, 28, (), K10),
    Case("dlgnn", "dlgnn", "ciao", 3, 28, (), K10),
    Case("verfedgnn", "verfedgnn", "ml-100k", 3, 20),
    Case("dipsgnn", "dipsgnn", "ml-100k", 2, 24, ("--epochs", "1")),
    # the plugin, by its import path (examples/pfedrec on PYTHONPATH: no installation needed)
    Case("pfedrec", PFEDREC, "ml-100k", 4, 18),
    Case("central:lightgcn", "central", "gowalla", 4, 30, ("--model", "lightgcn")),
)
QUICK: tuple[Case, ...] = (
    Case("fedmf", "fedmf", "synthetic", 3, 60),
    Case("central:bprmf", "central", "synthetic", 3, 60, ("--model", "bprmf")),
)


def budget(plan: tuple[Case, ...]) -> int:
    """Device seconds the plan takes at most: both legs of every run at their limit."""
    return sum(2 * c.limit_s for c in plan)


def describe(plan: tuple[Case, ...], device: str) -> str:
    rows = [
        [c.label, c.dataset + (" (10-core)" if c.config else ""), str(c.rounds), f"{c.limit_s} s"]
        for c in plan
    ]
    table = text_table(["run", "dataset", "rounds", "limit per leg"], rows)
    return (
        f"{table}\n{len(plan)} runs × 2 legs (cpu, {device}): at most {budget(plan)} s of device "
        f"time (budget {BUDGET_S} s)"
    )


class GpuSampler:
    """``nvidia-smi`` every second while running: the most memory used (MiB) and the mean and
    highest utilization (%) seen; nothing where there is no nvidia-smi."""

    def __init__(self):
        self.memory: list[float] = []
        self.busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        if shutil.which("nvidia-smi"):
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _poll(self) -> None:
        query = ["nvidia-smi", "--query-gpu=memory.used,utilization.gpu"]
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    [*query, "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                ).stdout
                for line in out.strip().splitlines():
                    mem, util = (float(x) for x in line.split(","))
                    self.memory.append(mem)
                    self.busy.append(util)
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            self._stop.wait(1.0)

    def figures(self) -> dict:
        if not self.memory:
            return {"gpu_mib": None, "gpu_busy_mean": None, "gpu_busy_max": None}
        return {
            "gpu_mib": max(self.memory),
            "gpu_busy_mean": round(statistics.mean(self.busy), 1),
            "gpu_busy_max": max(self.busy),
        }


@dataclass
class Leg:
    device: str
    status: str = "ok"  # ok | cut | failed
    wall_s: float = 0.0
    s_per_round: float | None = None
    rounds_done: int = 0
    bytes_total: int | None = None
    metrics: dict = field(default_factory=dict)
    host_devices: list[str] = field(default_factory=list)
    error: str = ""


def run_leg(case: Case, gpu: bool, args, tmp: Path) -> tuple[Leg, dict]:
    """One leg of ``case`` in a subprocess, cut at its limit; (its figures, the GPU samples)."""
    out = tmp / f"{case.label.replace(':', '-')}-{'gpu' if gpu else 'cpu'}"
    cmd = [sys.executable, str(ROOT / "launch.py"), "--protocol", case.protocol]
    cmd += ["--dataset", case.dataset, "--rounds", str(case.rounds), "--seed", "0"]
    cmd += ["--no-progress", "--out", str(out), *case.flags]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    if case.config:
        toml = tmp / f"{case.label}.toml"
        toml.write_text(case.config)
        cmd += ["--config", str(toml)]
    if gpu and args.device == "cuda":
        pass  # the default share: the machine's GPUs divided among the host actors
    elif args.device == "cuda":  # the CPU leg: C CPUs per host
        cmd += ["--gpus-per-host", "0", "--cpus-per-host", str(args.cpu_threads)]
    else:  # the stand-in: both legs with the default CPU share of this machine
        cmd += ["--gpus-per-host", "0"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "examples" / "pfedrec"), env.get("PYTHONPATH", "")) if p
    )
    leg = Leg("cuda" if gpu and args.device == "cuda" else "cpu")
    t0 = time.perf_counter()
    with GpuSampler() if leg.device == "cuda" else _Nothing() as sampler:
        try:
            done = subprocess.run(
                cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=case.limit_s
            )
            if done.returncode != 0:
                leg.status = "failed"
                leg.error = (done.stderr.strip().splitlines() or ["?"])[-1][:300]
        except subprocess.TimeoutExpired:
            leg.status = "cut"
    leg.wall_s = round(time.perf_counter() - t0, 2)
    _read_run(out, leg)
    return leg, sampler.figures()


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def figures(self) -> dict:
        return {"gpu_mib": None, "gpu_busy_mean": None, "gpu_busy_max": None}


def _read_run(out: Path, leg: Leg) -> None:
    """The leg's rounds (metrics.jsonl, written as they end: a cut run keeps the rounds it
    finished) and summary (a finished run's)."""
    runs = sorted(out.glob("*/metrics.jsonl")) if out.is_dir() else []
    if not runs:
        return
    rows = [json.loads(line) for line in runs[-1].read_text().splitlines() if line.strip()]
    leg.rounds_done = len(rows)
    timed = [r["seconds"] for r in rows[1:] if isinstance(r.get("seconds"), (int, float))]
    leg.s_per_round = round(statistics.median(timed), 4) if timed else None
    summary = runs[-1].parent / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        leg.bytes_total = s.get("bytes_total")
        leg.metrics = s.get("metrics") or {}
        leg.host_devices = sorted({h["device"] for h in s.get("host_placement", [])})


def compare(cpu: Leg, gpu: Leg, tolerance: float) -> dict:
    """Ratio of s/round, equal bytes, metrics within ``tolerance`` (relative, or absolute below
    1e-3)."""
    ratio = None
    if cpu.s_per_round and gpu.s_per_round:
        ratio = round(cpu.s_per_round / gpu.s_per_round, 2)
    same_bytes = None
    if cpu.bytes_total is not None and gpu.bytes_total is not None:
        same_bytes = cpu.bytes_total == gpu.bytes_total
    close = None
    shared = sorted(set(cpu.metrics) & set(gpu.metrics))
    if shared:
        close = all(
            _close(cpu.metrics[k], gpu.metrics[k], tolerance)
            for k in shared
            if isinstance(cpu.metrics[k], (int, float))
        )
    return {"speedup": ratio, "same_bytes": same_bytes, "metrics_close": close}


def _close(a: float, b: float, tolerance: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= max(tolerance * max(abs(a), abs(b)), 1e-3)


def table(results: list[dict], device_name: str) -> str:
    rows = []
    for r in results:
        cpu, gpu, c = r["cpu"], r["gpu"], r["compare"]
        rows.append(
            [
                r["run"],
                _time(cpu),
                _time(gpu),
                "—" if c["speedup"] is None else f"{c['speedup']}×",
                "—" if r["gpu_mib"] is None else f"{r['gpu_mib']:.0f}",
                "—" if r["gpu_busy_mean"] is None else f"{r['gpu_busy_mean']}",
                _yes(c["same_bytes"]),
                _yes(c["metrics_close"]),
            ]
        )
    header = ["run", "s/round CPU", f"s/round {device_name}", "speed-up", "GPU MiB", "% busy"]
    return text_table([*header, "same bytes", "metrics close"], rows)


def _time(leg: dict) -> str:
    if leg["s_per_round"] is None:
        return f"{leg['status']} ({leg['rounds_done']} rounds)"
    cut = "" if leg["status"] == "ok" else f" ({leg['status']})"
    return f"{leg['s_per_round']:.3f}{cut}"


def _yes(v) -> str:
    return "—" if v is None else ("yes" if v else "NO")


# What the lent machine's image lacks (its package list: Python 3.12 with torch, PyG, numpy,
# scipy, click, protobuf, pyyaml, requests, packaging, filelock, attrs, absl-py, mpmath), by
# distribution: Ray, the wheels privrec imports (dp-accounting, gmpy2, cryptography) and what
# these import that the image has not.
CARRY = (
    "ray",
    "dp-accounting",
    "gmpy2",
    "cryptography",
    "cffi",
    "pycparser",
    "msgpack",
    "jsonschema",
    "jsonschema-specifications",
    "referencing",
    "rpds-py",
)
CARRY_PYTHON = "3.12"  # the lent machine's python3
CARRY_DATA = tuple(sorted({c.dataset for c in PLAN}))  # ciao, gowalla, ml-100k
# parts of Ray a run never imports (Java, RLlib, Serve, Data, Train)
RAY_DROPPED = ("ray/jars/", "ray/rllib/", "ray/serve/", "ray/data/", "ray/train/")
PLATFORMS = (
    "manylinux_2_28",
    "manylinux_2_27",
    "manylinux_2_24",
    "manylinux_2_17",
    "manylinux2014",
)


def prepare_carry(
    folder: Path, dists=CARRY, python: str = CARRY_PYTHON, data_dir=None
) -> list[Path]:
    """What a lent GPU machine lacks, packed into ``folder``: ``site.tar.xz``, the wheels of
    ``dists`` for CPython ``python`` at the versions installed here (``pip download``: the
    lent machine's Python is not necessarily this one, and a compiled module of another Python
    does not load), unpacked into one tree without Ray's unused parts, to unpack into a folder on
    PYTHONPATH; and ``data.tar.xz``, the plan's datasets from ``data_dir`` (default: found)."""
    import importlib.metadata as md
    import zipfile

    from data.registry import dataset_root

    folder.mkdir(parents=True, exist_ok=True)
    wanted = [f"{d}=={md.version(d)}" for d in dists]
    platforms = [a for p in PLATFORMS for a in ("--platform", f"{p}_x86_64")]
    with tempfile.TemporaryDirectory(prefix="privrec-carry-") as tmp:
        wheels, site = Path(tmp) / "wheels", Path(tmp) / "site"
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
            + ["--python-version", python, "--implementation", "cp", *platforms]
            + ["-d", str(wheels), *wanted],
            capture_output=True,
            text=True,
        )
        if got.returncode != 0:
            last = (got.stderr.strip().splitlines() or ["pip failed"])[-1]
            raise UsageError(f"--prepare-carry: pip download for Python {python}: {last}")
        for wheel in sorted(wheels.glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:
                for info in z.infolist():
                    if info.filename.startswith(RAY_DROPPED):
                        continue
                    z.extract(info, site)
                    mode = (info.external_attr >> 16) & 0o777  # zipfile drops it: Ray's binaries
                    if mode and not info.is_dir():
                        os.chmod(site / info.filename, mode)
        packed = [folder / "site.tar.xz", folder / "data.tar.xz"]
        with tarfile.open(packed[0], "w:xz") as tar:
            for path in sorted(site.iterdir()):
                tar.add(path, arcname=path.name, filter=_no_cache)
    with tarfile.open(packed[1], "w:xz") as tar:
        for name in CARRY_DATA:
            tar.add(dataset_root(name, data_dir), arcname=name, filter=_no_cache)
    return packed


def _no_cache(info: tarfile.TarInfo):
    return None if "__pycache__" in info.name else info


def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser("benchmarks.gpu", __doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print the plan and stop")
    ap.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="the second leg's device; cpu: a stand-in that runs here (default: %(default)s)",
    )
    ap.add_argument("--quick", action="store_true", help="two small runs on synthetic data")
    ap.add_argument(
        "--cpu-threads",
        type=float,
        default=2.0,
        help="the CPU leg's CPUs per host with --device cuda (default: %(default)s; the stand-in "
        "gives both legs the machine's default share)",
    )
    ap.add_argument("--tolerance", type=float, default=0.1, help="metrics' relative tolerance")
    ap.add_argument("--only", default="", help="comma-separated run labels of the plan")
    ap.add_argument("--data-dir", default=None, help="where the datasets are (default: found)")
    ap.add_argument("--name", default=None, help="result name (default: gpu[-quick])")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    ap.add_argument(
        "--prepare-carry",
        metavar="DIR",
        default=None,
        help="pack what a lent GPU machine lacks (wheels by pip download, the plan's datasets) "
        "into DIR/site.tar.xz and DIR/data.tar.xz",
    )
    ap.add_argument(
        "--carry-python",
        default=CARRY_PYTHON,
        help="the lent machine's Python, whose wheels --prepare-carry packs (default: %(default)s)",
    )
    args = ap.parse_args(argv)

    if args.prepare_carry:
        packed = prepare_carry(Path(args.prepare_carry), CARRY, args.carry_python, args.data_dir)
        for path, what in zip(packed, (", ".join(CARRY), ", ".join(CARRY_DATA)), strict=True):
            print(f"{shown_path(path)}: {path.stat().st_size / 2**20:.1f} MiB ({what})")
        total = sum(p.stat().st_size for p in packed) / 2**20
        print(f"in all {total:.1f} MiB (a lent machine takes 64 MiB with the working tree)")
        return 0
    plan = QUICK if args.quick else PLAN
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [w for w in wanted if w not in {c.label for c in plan}]
        if unknown:
            raise UsageError(
                f"--only: no run {unknown[0]!r} (runs: {', '.join(c.label for c in plan)})"
            )
        plan = tuple(c for c in plan if c.label in wanted)
    if args.dry_run:
        print(describe(plan, args.device))
        return 0
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            "this machine has no CUDA GPU: --dry-run prints the plan, --device cpu runs it with "
            "the GPU leg on the CPU"
        )
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu (stand-in)"
    name = args.name or result_name("gpu", "" if args.device == "cuda" else "cpu", quick=args.quick)
    claim_result(name, write=args.write, suffixes=(".json", ".md"))
    print(describe(plan, device_name), file=sys.stderr)
    results = []
    with tempfile.TemporaryDirectory(prefix="privrec-gpu-") as tmp:
        for case in plan:
            cpu, _ = run_leg(case, False, args, Path(tmp))
            gpu, samples = run_leg(case, True, args, Path(tmp))
            results.append(
                {
                    "run": case.label,
                    "dataset": case.dataset,
                    "rounds": case.rounds,
                    "limit_s": case.limit_s,
                    "cpu": cpu.__dict__,
                    "gpu": gpu.__dict__,
                    **samples,
                    "compare": compare(cpu, gpu, args.tolerance),
                }
            )
            print(
                f"{case.label}: cpu {_time(cpu.__dict__)}, gpu {_time(gpu.__dict__)}",
                file=sys.stderr,
            )
    text = table(results, device_name)
    print(text)
    figures = {
        "device": device_name,
        "cpu_threads": args.cpu_threads,
        "tolerance": args.tolerance,
        "runs": results,
        "table": text,
    }
    path = write_result(name, figures, echo=False, write=args.write)
    path.with_suffix(".md").write_text(f"device: {device_name}\n\n{text}\n")
    print(f"wrote {shown_path(path)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_main("python -m benchmarks.gpu", main, None))
