"""privrec against Flower's Ray simulation on the same FedAvg-echo workload, side by side.

    python -m benchmarks.vs_flower [--quick] [--clients 1000 10000] [--rounds 5] [--fail 0.1]
                                   [--hosts 2] [--flower-venv /tmp/privrec-flower-venv]
                                   [--transports calls channels] [--no-flower]

Workload: N clients; each round the server sends every client a 10,000-float32 vector, every client
returns it plus a client-specific scalar δ_p = 1e-3·((p mod 100)+1), and the server replaces the
vector by the average of the replies. All clients are asked every round. With failures, a fraction
``--fail`` of the clients does not answer in a round:

* privrec: ``protocols/echo.py`` on a :class:`nodes.deployment.Deployment` (placement ``packed``,
  ``--hosts`` user hosts plus one server host, Ray), ``Conditions(dropout=fail)``: a user offline in
  a round receives nothing and sends nothing; the server averages the uploads that arrived.
* Flower 1.42.0 (``benchmarks/flower_echo.py``, run by the Python of its own virtual environment,
  created here if missing): ``run_simulation`` with the Ray backend, the Message-API ``FedAvg``
  (``fraction_train=1``, no evaluation); a failing client raises an exception in ``train`` (drawn
  with probability ``fail`` per round and client) and the strategy aggregates the other replies,
  which is ``accept_failures=True`` of the legacy strategy (``--flower-api legacy`` runs that one).

Round time: privrec from ``begin_round`` to the end of the round's last superstep (the driver's
clock); Flower from the start of the strategy's ``configure_train`` to the end of its
``aggregate_train``. The first round is reported apart (start-up: Ray workers, imports, Flower's
node registration) and the median is over the other rounds. Peak memory: a separate sampler
process (benchmarks/proctree.py) sums, every 0.25 s, the RSS (and PSS) of the measured system's
process tree — for privrec this benchmark's own process (the driver) and everything it started
(Ray's GCS, raylet and workers, i.e. the host actors); for Flower its subprocess (ServerApp,
simulation engine) and its Ray processes (client actors) — from Ray start to the last round. The
two systems run one after the other, each with a Ray instance of its own that is shut down before
the other starts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import WRITE_HELP, claim_result, result_name, write_result

FLWR_VERSION = "1.42.0"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


# --- peak memory -------------------------------------------------------------------------------
class MemoryWatch:
    """benchmarks/proctree.py watching the tree rooted at ``pid`` until :meth:`stop`."""

    def __init__(self, pid: int, interval: float):
        fd, self.path = tempfile.mkstemp(prefix="vs_flower_mem_", suffix=".json")
        os.close(fd)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.proctree",
                "--root",
                str(pid),
                "--out",
                self.path,
                "--interval",
                str(interval),
            ],
            cwd=ROOT,
        )

    def stop(self) -> dict:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        try:
            return json.loads(Path(self.path).read_text())
        except (OSError, json.JSONDecodeError):
            return {"error": "the memory sampler wrote nothing"}
        finally:
            Path(self.path).unlink(missing_ok=True)


def summarise(seconds: list[float]) -> dict:
    """First round apart (start-up), median of the others."""
    rest = seconds[1:]
    return {
        "round_seconds": seconds,
        "first_round_seconds": seconds[0] if seconds else None,
        "median_round_seconds": statistics.median(rest) if rest else None,
        "rounds_in_median": len(rest),
    }


# --- privrec -----------------------------------------------------------------------------------
def run_privrec(
    n: int, fail: float, rounds: int, hosts: int, interval: float, transport: str = "calls"
) -> dict:
    import numpy as np
    import ray

    from cluster.runtime import start_or_join
    from data.synthetic import synthetic
    from engine import deploy
    from engine import rounds as round_loop
    from nodes.conditions import Conditions
    from protocols.base import build_config
    from protocols.echo import SERVER, Echo

    # The dataset only names the N users; echo reads nothing else from it.
    ds = synthetic(n_users=n, n_items=50, avg_interactions=2, seed=0)
    protocol = Echo(ds, build_config(Echo.Config, {"dim": 10000}), 0)
    conditions = Conditions(dropout=fail)
    watch = MemoryWatch(os.getpid(), interval)
    dep = None
    try:
        t0 = time.perf_counter()
        start_or_join(None)
        t1 = time.perf_counter()
        dep = deploy(protocol, "packed", hosts, conditions=conditions, transport=transport)
        t2 = time.perf_counter()
        seconds, uploads = [], []
        for res in round_loop(protocol, dep, rounds, eval_every=0, evaluate_last=False):
            seconds.append(res.seconds)  # begin_round .. the round's last superstep
            uploads.append(int(res.train["uploads"]))
            print(
                f"  privrec N={n} fail={fail:g} round {res.round}: {seconds[-1]:.3f} s, "
                f"{uploads[-1]} replies",
                flush=True,
            )
        global_mean = float(np.mean(dep.call(SERVER, "get_vector"), dtype=np.float64))
        mem = watch.stop()
        return {
            **summarise(seconds),
            "replies_per_round": uploads,
            "global_mean": global_mean,
            "ray_start_seconds": t1 - t0,
            "deployment_setup_seconds": t2 - t1,
            "memory": mem,
            "peak_rss_mib": mem.get("peak_rss_mib"),
            "peak_pss_mib": mem.get("peak_pss_mib"),
            "placement": f"packed, {hosts} user hosts + 1 server host "
            f"({dep.cpus_per_host:.2f} CPU each)",
            "snapshot_every": conditions.snapshot_every,
            "transport": dep.transport_summary(),
        }
    finally:
        if watch.proc.poll() is None:
            watch.stop()
        if dep is not None:
            dep.close()
        ray.shutdown()


# --- Flower ------------------------------------------------------------------------------------
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def flower_versions(py: Path) -> dict | None:
    try:
        out = subprocess.run(
            [
                str(py),
                "-c",
                "import json, flwr, ray; print(json.dumps("
                "{'flwr': flwr.__version__, 'ray': ray.__version__}))",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=clean_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def clean_env() -> dict:
    """This process's environment without the project's virtual environment in it."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    return env


def ensure_flower_venv(venv: Path) -> dict:
    """Make ``venv`` with flwr[simulation]==1.42.0 unless it already has it; return the versions."""
    py = venv_python(venv)
    versions = flower_versions(py) if py.exists() else None
    if versions and versions["flwr"] == FLWR_VERSION:
        return versions
    print(
        f"creating the Flower environment in {venv} (flwr[simulation]=={FLWR_VERSION})", flush=True
    )
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True, env=clean_env())
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", f"flwr[simulation]=={FLWR_VERSION}"],
        check=True,
        env=clean_env(),
    )
    versions = flower_versions(py)
    if not versions or versions["flwr"] != FLWR_VERSION:
        raise SystemExit(f"{venv}: installing flwr[simulation]=={FLWR_VERSION} did not work")
    return versions


def run_flower(py: Path, n: int, fail: float, rounds: int, args, log_dir: Path) -> dict:
    fd, out_path = tempfile.mkstemp(prefix="vs_flower_fl_", suffix=".json")
    os.close(fd)
    Path(out_path).unlink()
    log_path = log_dir / f"flower_{n}_fail{fail:g}.log"
    cmd = [
        str(py),
        str(HERE / "flower_echo.py"),
        "--clients",
        str(n),
        "--rounds",
        str(rounds),
        "--dim",
        "10000",
        "--fail",
        str(fail),
        "--client-cpus",
        str(args.flower_client_cpus),
        "--api",
        args.flower_api,
        "--max-seconds",
        str(args.flower_max_seconds),
        "--out",
        out_path,
    ]
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=clean_env(),
            cwd=tempfile.gettempdir(),
            start_new_session=True,
        )
        watch = MemoryWatch(proc.pid, args.interval)
        seen = 0
        killed = False
        while proc.poll() is None:
            time.sleep(1.0)
            seen = report_flower_rounds(out_path, n, fail, seen)
            # the script stops itself at --max-seconds; this is the backstop
            if time.perf_counter() - t0 > args.flower_max_seconds + 180:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                proc.wait()
        mem = watch.stop()
    report_flower_rounds(out_path, n, fail, seen)
    try:
        doc = json.loads(Path(out_path).read_text())
        Path(out_path).unlink()
    except (OSError, json.JSONDecodeError):
        doc = {"rounds": [], "error": f"no result (exit status {proc.returncode}); see {log_path}"}
    seconds = [r["seconds"] for r in doc.get("rounds", [])]
    error = doc.get("error") or (
        f"killed after {args.flower_max_seconds + 180:g} s" if killed else None
    )
    return {
        **summarise(seconds),
        "replies_per_round": [r["results"] for r in doc.get("rounds", [])],
        "failures_per_round": [r["failures"] for r in doc.get("rounds", [])],
        "global_mean": doc.get("global_mean"),
        "process_wall_seconds": time.perf_counter() - t0,
        "memory": mem,
        "peak_rss_mib": mem.get("peak_rss_mib"),
        "peak_pss_mib": mem.get("peak_pss_mib"),
        "api": doc.get("api", args.flower_api),
        "client_resources": doc.get("client_resources"),
        "partial": bool(error) or len(seconds) < rounds,
        "error": error,
        "log": str(log_path),
    }


def report_flower_rounds(path: str, n: int, fail: float, seen: int) -> int:
    try:
        rounds = json.loads(Path(path).read_text()).get("rounds", [])
    except (OSError, json.JSONDecodeError):
        return seen
    for r, item in enumerate(rounds[seen:], start=seen):
        print(
            f"  flower  N={n} fail={fail:g} round {r}: {item['seconds']:.3f} s, "
            f"{item['results']} replies",
            flush=True,
        )
    return len(rounds)


# --- the comparison ----------------------------------------------------------------------------
def ratio(a, b):
    return a / b if a and b else None


def table(cases: list[dict]) -> str:
    head = (
        f"{'N':>6} {'fail':>5} {'transport':>9} | {'privrec s/round':>15} {'flower s/round':>15} {'speed-up':>9} | "
        f"{'privrec RSS MiB':>15} {'flower RSS MiB':>15} | {'privrec PSS':>11} {'flower PSS':>10}"
    )
    lines = [head, "-" * len(head)]

    def f(x, spec):
        return format(x, spec) if isinstance(x, (int, float)) else "-"

    for c in cases:
        p, fl = c["privrec"], c["flower"]
        mark = "*" if fl.get("partial") else ""
        lines.append(
            f"{c['clients']:>6} {c['fail']:>5g} {c.get('transport', 'calls'):>9} | "
            f"{f(p['median_round_seconds'], '15.3f')} "
            f"{f(fl['median_round_seconds'], '14.3f')}{mark or ' '} {f(c['speedup'], '8.1f')}x | "
            f"{f(p['peak_rss_mib'], '15.0f')} {f(fl['peak_rss_mib'], '15.0f')} | "
            f"{f(p['peak_pss_mib'], '11.0f')} {f(fl['peak_pss_mib'], '10.0f')}"
        )
    if any(c["flower"].get("partial") for c in cases):
        lines.append("* Flower run cut short: median of the rounds it finished (see 'error')")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="N=1000 only, 3 rounds")
    ap.add_argument("--clients", type=int, nargs="+", default=None, help="default 1000 10000")
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds per run, the first one apart (default 5; 3 with --quick)",
    )
    ap.add_argument("--fail", type=float, default=0.1, help="failure rate of the second run per N")
    ap.add_argument("--hosts", type=int, default=2, help="privrec user hosts (placement packed)")
    ap.add_argument(
        "--transports",
        choices=("calls", "channels"),
        nargs="+",
        default=["calls", "channels"],
        help="privrec's superstep transports (nodes/transport.py), each run beside one Flower "
        "run per case (default: both)",
    )
    ap.add_argument("--flower-venv", type=Path, default=Path("/tmp/privrec-flower-venv"))
    ap.add_argument(
        "--no-flower",
        action="store_true",
        help="privrec only (its transports side by side; no speed-up): Flower at 10,000 clients "
        "takes about 200 s a round on 2 cores",
    )
    ap.add_argument(
        "--flower-client-cpus",
        type=float,
        default=0.5,
        help="Flower client_resources num_cpus (actors = CPUs / this)",
    )
    ap.add_argument("--flower-api", choices=("message", "legacy"), default="message")
    ap.add_argument(
        "--flower-max-seconds",
        type=float,
        default=600,
        help="stop a Flower run after this long and report the rounds it finished",
    )
    ap.add_argument("--interval", type=float, default=0.25, help="memory sampling period (s)")
    ap.add_argument(
        "--name", default=None, help="benchmarks/out/NAME.json (default vs_flower[-quick])"
    )
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    name = args.name or result_name("vs_flower", quick=args.quick)
    claim_result(name, write=args.write)
    clients = args.clients or ([1000] if args.quick else [1000, 10000])
    rounds = args.rounds or (3 if args.quick else 5)
    if rounds < 2:
        raise SystemExit("--rounds: at least 2 (the first is reported apart)")
    os.chdir(ROOT)

    import ray

    load_start = os.getloadavg()
    flower = {"flwr": None, "ray": None} if args.no_flower else ensure_flower_venv(args.flower_venv)
    py = venv_python(args.flower_venv)
    log_dir = Path(tempfile.gettempdir()) / "vs_flower_logs"
    log_dir.mkdir(exist_ok=True)
    expected = 0.0
    cases = []
    for n in clients:
        mean_delta = statistics.fmean(1e-3 * ((p % 100) + 1) for p in range(n))
        expected = rounds * mean_delta
        for fail in (0.0, args.fail):
            runs = {}
            for t in args.transports:
                print(f"N={n} fail={fail:g}: privrec over {t}", flush=True)
                runs[t] = run_privrec(n, fail, rounds, args.hosts, args.interval, t)
            if not args.no_flower:
                print(f"N={n} fail={fail:g}: flower (log {log_dir})", flush=True)
            fl = (
                {"median_round_seconds": None, "peak_rss_mib": None, "peak_pss_mib": None}
                if args.no_flower
                else run_flower(py, n, fail, rounds, args, log_dir)
            )
            for t, p in runs.items():
                case = {
                    "clients": n,
                    "fail": fail,
                    "rounds": rounds,
                    "transport": t,
                    "privrec": p,
                    "flower": fl,
                    "speedup": ratio(fl["median_round_seconds"], p["median_round_seconds"]),
                    "memory_ratio_rss": ratio(fl["peak_rss_mib"], p["peak_rss_mib"]),
                }
                if fail == 0.0:
                    case["expected_global_mean"] = expected  # rounds · mean δ: both match it
                cases.append(case)
                print(table([case]), flush=True)
    figures = {
        "versions": {
            "privrec_ray": ray.__version__,
            "flower_ray": flower["ray"],
            "flwr": flower["flwr"],
        },
        "cpus": os.cpu_count(),
        "workload": "FedAvg echo: 10,000 float32 down and up per client per round, all clients "
        "every round, server averages; client p adds 1e-3*((p mod 100)+1)",
        "timing": "privrec: begin_round .. last superstep of the round (driver); Flower: "
        "configure_train start .. aggregate_train end (strategy). First round apart "
        "(first_round_seconds); median over the remaining rounds",
        "memory": "peak over 0.25 s samples of the summed RSS (and PSS) of the measured system's "
        "process tree: privrec = the benchmark driver + its Ray processes (GCS, raylet, host "
        "actors); Flower = its subprocess + its Ray processes (client actors); sampler excluded",
        "failures": f"privrec Conditions(dropout={args.fail}); Flower clients raise in train with "
        f"probability {args.fail}, "
        + (
            "Message-API FedAvg aggregates the other replies (= accept_failures=True)"
            if args.flower_api == "message"
            else "legacy FedAvg(accept_failures=True) aggregates the other results"
        ),
        "noise": "2-core machine shared with other work; single run per case",
        "load_average_1_5_15": {"start": load_start, "end": os.getloadavg()},
        "flower_settings": {
            "api": args.flower_api,
            "client_resources_num_cpus": args.flower_client_cpus,
            "actors": int((os.cpu_count() or 1) / args.flower_client_cpus),
        },
        "privrec_settings": {
            "placement": "packed",
            "hosts": args.hosts,
            "transports": args.transports,
        },
        "cases": cases,
    }
    path = write_result(name, figures, write=args.write)
    print()
    print(table(cases))
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
