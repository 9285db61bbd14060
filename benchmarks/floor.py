"""A floor for every protocol (issue 25): each protocol's training round through the real runtime
(``engine.deploy`` + ``engine.rounds``: host actors, encoded message batches, Ray), beside its
*floor* measured in the same command, round by round, interleaved:

* **in-process** — the same round run by the protocol's own driver (``run_round``) on the same
  node classes (their ``handle_batch``: local training, noise, payload encoding and decoding,
  aggregation), all nodes in this one process, messages handed from outbox to inbox as Python
  objects: no message batch, no host actor, no Ray (:class:`InProcess`);
* **plus the round's bytes at memory speed** — the round's logical bytes (its ledger) divided by
  this machine's memcpy rate, measured with numpy on a large buffer.

floor = in-process round + bytes / memcpy; ratio = the real round / floor (target: ≤ 3). The
in-process round gives the same losses and the same bytes as the real one (same seed; checked
and recorded). Where the rest goes, per real round, from the deployment's superstep records: host
compute above the floor's handler time, the hosts' codecs (batch decode + encode), transport and
scheduling (a superstep's wall beyond its slowest host's compute and codecs) and the driver
(``begin_round``, the protocol's own code, ledger merging); and the top entries of a cProfile of
one more round of each (not timed).

    python -m benchmarks.floor --quick                  # synthetic, every protocol, < 2 minutes
    python -m benchmarks.floor [--datasets ml-100k ciao] [--rounds 3] [--hosts 1 2]
                               [--protocols fedmf dgrec] [--rounds-for dgrec=1]

Round 0 (set-up: OPRF tokens, PSI, first expansion, neighbourhood sampling) is a warm-up, never
timed; the figures are medians of rounds 1..R. Writes ``benchmarks/out/<name>.json`` (machine,
date, command) and ``benchmarks/out/<name>.md`` (the table); prints the table. The name is
``--name``, else ``floor-DATASETS[-quick]``; a recorded result (a file git tracks) is refused
before anything runs unless ``--write`` is given.
"""

from __future__ import annotations

import cProfile
import io
import os
import pickle
import pstats
import statistics
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.common import (
    K10_SPLIT,
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    check_dataset,
    claim_result,
    dataset_tag,
    parse_key_values,
    result_name,
    run_main,
    scoped_key_values,
    shown_path,
    text_table,
    usage_errors,
    writable,
    write_result,
)

MODULE = "benchmarks.floor"

# label -> (registered protocol name, parameters); key sizes at the config's minimum: they change
# only round 0's OPRF/PSI, which is never timed
PROTOCOLS: dict[str, tuple[str, dict]] = {
    "fedmf": ("fedmf", {}),
    "dmf": ("dmf", {}),
    "fedlightgcn": ("fedlightgcn", {"key_bits": 1024}),
    "fedpergnn-gat": ("fedpergnn", {"backbone": "gat", "key_bits": 1024}),
    "dgrec": ("dgrec", {}),
    "dlgnn": ("dlgnn", {}),
    "verfedgnn": ("verfedgnn", {"psi_key_bits": 1024}),
    "dipsgnn": ("dipsgnn", {}),
}
# --quick: a small synthetic world, and parameters that fit it
QUICK_DATA = {"n_users": 60, "n_items": 120, "avg_interactions": 12, "seed": 0}
# the loading options of the sets as every other figure of RESULTS.md uses them: ciao as the >= 10
# k-core (2,557 users x 3,047 items), not the raw 7,375 x 105,114, whose dense per-user item
# tables (dmf) alone need ~34 GB
DATASET_OPTIONS: dict[str, dict] = {"ciao": K10_SPLIT}
# parameters a set needs: ciao has no user features, so DIPSGNN runs its w/o-features variant (as
# in benchmarks/compare_ciao_dipsgnn.toml)
DATASET_PARAMS: dict[str, dict[str, dict]] = {"ciao": {"dipsgnn": {"use_features": False}}}
QUICK_PARAMS: dict[str, dict] = {
    "fedmf": {"users_per_round": 32},
    "dmf": {"neighbours": 8},
    "fedlightgcn": {"users_per_round": 32, "negatives": 32, "pseudo_items": 8},
    "fedpergnn-gat": {"users_per_round": 32, "pseudo_items": 8},
    "dgrec": {"neighbours": 5, "hops": 2, "neighbourhoods": 4.0},
    "dlgnn": {"neighbours": 5, "hops": 2, "neighbourhoods": 4.0},
    "verfedgnn": {"parties": 2, "psi": False},
    "dipsgnn": {"hidden_dim": 32, "user_dim": 16, "epochs": 4},
}
TARGET = 3.0
# the order the protocols run in: those with the same number of host actors one after the other,
# so that each deployment reuses the idle actors of the one before (cluster/runtime.py)
RUN_ORDER = ("dmf", "dgrec", "dlgnn", "fedlightgcn", "fedpergnn-gat", "fedmf", "dipsgnn",
             "verfedgnn")  # fmt: skip


# --- the floor's driver -----------------------------------------------------------------------
def _quiet(text: str) -> None:
    pass


class InProcess:
    """The deployment interface a protocol's driver uses (``superstep``, ``begin_round``,
    ``round_stats``, ``has_pending``, ``call``, ``ledger``, ``status``), with every node in this
    process: a superstep hands each node its messages (sorted by sender, as a host does), runs
    each node class's ``handle_batch`` on its active nodes (classes by name, nodes by id, as a
    host does) and keeps the outboxes as the next superstep's inboxes. No encoding of message
    batches, no availability model, no simulated clock, no snapshot. ``kernel_seconds`` adds up
    the time spent inside the handlers."""

    n_hosts = 1

    def __init__(self, specs, *, seed: int, shared):
        import torch

        from cluster.ledger import Ledger
        from nodes.conditions import Conditions
        from nodes.host import dumps_specs
        from nodes.node import NodeContext

        self.conditions = Conditions()  # none (read by the drivers: nodes/secure_sum.py)
        self.ctx = NodeContext(seed, torch.device("cpu"), shared, self.conditions)
        # the nodes' own copies of their data, as a host unpickles them
        made = pickle.loads(dumps_specs([(s.cls, s.nid, s.kwargs) for s in specs]))
        self.nodes = {nid: cls(nid, self.ctx, **kw) for cls, nid, kw in made}
        self.pending: dict[str, list] = defaultdict(list)
        self.ledger = Ledger()
        self.status = _quiet
        self.steps: list[dict] = []
        self.kernel_seconds = 0.0

    def begin_round(self, round_: int) -> None:
        pass

    def superstep(self, round_, phase, activate=(), *, availability=True):
        from nodes.deployment import StepResult
        from nodes.host import activated, class_batches

        t0 = time.perf_counter()
        inbox, self.pending = self.pending, defaultdict(list)
        for msgs in inbox.values():
            msgs.sort(key=lambda m: m.src)
        active = activated(self.nodes, inbox, activate)  # the host's own rules
        reports: dict[str, list[float]] = defaultdict(list)
        kernel = 0.0
        record = self.ledger.record
        for cls, nids in class_batches(self.nodes, active):
            nodes = [self.nodes[n] for n in nids]
            for n in nodes:
                n.round, n.phase = round_, phase
            tc = time.perf_counter()
            cls.handle_batch(nodes, phase, [inbox.get(n, []) for n in nids])
            kernel += time.perf_counter() - tc
            for n in nodes:
                out, rep = n._drain()
                for name, values in rep.items():
                    reports[name].extend(values)
                for m in out:
                    if m.dst not in self.nodes:
                        raise ValueError(f"{m.src} sent {m.kind} to unknown node {m.dst}")
                    record((round_, phase, m.kind, m.src_role, m.dst_role), len(m.payload))
                    self.pending[m.dst].append(m)
        wall = time.perf_counter() - t0
        self.kernel_seconds += kernel
        self.steps.append({"round": round_, "phase": phase, "wall": wall, "kernel": kernel})
        return StepResult(dict(reports), wall, kernel, 0.0)

    def round_stats(self) -> dict:
        return {
            "sim_seconds": 0.0,
            "dropped": [],
            "late": 0,
            "late_nodes": [],
            "undelivered": 0,
            "faults": [],
        }

    def has_pending(self) -> bool:
        return any(self.pending.values())

    def call(self, nid: str, method: str, *args, **kwargs):
        return getattr(self.nodes[nid], method)(*args, **kwargs)

    def close(self) -> None:
        pass


# --- measurements -----------------------------------------------------------------------------
def memcpy_rate(mib: int = 256, repeats: int = 5) -> float:
    """This machine's memcpy rate (bytes per second): the best of ``repeats`` copies of a
    ``mib`` MiB buffer into another, both touched first."""
    src = np.ones(mib * 2**20, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return src.nbytes / best


def _top(prof: cProfile.Profile, n: int) -> list[dict]:
    """The ``n`` functions with the most time of their own (tottime) in a profile."""
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, func), (_, ncalls, tottime, cumtime, _) in st.stats.items():
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
        rows.append({"function": f"{where}({func})", "tottime": tottime, "cumtime": cumtime,
                     "calls": ncalls})  # fmt: skip
    rows.sort(key=lambda r: -r["tottime"])
    return rows[:n]


def _make(label: str, dataset, params: dict, seed: int):
    from protocols import get_protocol
    from protocols.base import build_config

    name, base = PROTOCOLS[label]
    cls = get_protocol(name)
    return cls(dataset, build_config(cls.Config, {**base, **params}), seed)


def _by_phase(steps: list[dict], rnds: set[int], key: str) -> dict[str, float]:
    """Median over the rounds ``rnds`` of each phase's summed ``key``."""
    per: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for s in steps:
        if s["round"] in rnds:
            per[s["phase"]][s["round"]] += s[key]
    return {p: statistics.median(v.get(r, 0.0) for r in rnds) for p, v in per.items()}


def measure_protocol(
    label: str, dataset, *, params: dict, rounds: int, hosts: list[int], rate: float, seed: int,
    profile_top: int,
) -> dict:  # fmt: skip
    """Round 0 and ``rounds`` timed rounds of ``label`` in process and on each host count,
    interleaved round by round; then one profiled round of each."""
    from engine import deploy
    from engine.loop import rounds as round_loop

    floor_proto = _make(label, dataset, params, seed)
    floor_dep = InProcess(
        floor_proto.node_specs(), seed=floor_proto.seed, shared=floor_proto.shared()
    )
    stop = rounds + 1 + (1 if profile_top else 0)
    loops = {"floor": round_loop(floor_proto, floor_dep, stop, eval_every=0, evaluate_last=False)}
    deps = {"floor": floor_dep}
    t0 = time.perf_counter()
    for h in hosts:
        proto = _make(label, dataset, params, seed)
        deps[h] = deploy(proto, "packed", h)
        loops[h] = round_loop(proto, deps[h], stop, eval_every=0, evaluate_last=False)
    setup = time.perf_counter() - t0
    seconds: dict = {k: [] for k in loops}
    losses: dict = {k: [] for k in loops}
    kernels: list[float] = []
    profiles: dict = {}
    try:
        for t in range(stop):
            profiled = profile_top and t == stop - 1
            for key, loop in loops.items():
                k0 = floor_dep.kernel_seconds
                if profiled:
                    prof = cProfile.Profile()
                    res = prof.runcall(next, loop)
                    profiles[key] = _top(prof, profile_top)
                    continue
                res = next(loop)
                seconds[key].append(res.seconds)
                losses[key].append(res.train.get("loss"))
                if key == "floor":
                    kernels.append(floor_dep.kernel_seconds - k0)
        timed = set(range(1, rounds + 1))
        bytes_round = statistics.median(floor_dep.ledger.total(round_=t) for t in timed)
        floor_round = statistics.median(seconds["floor"][1:])
        floor = floor_round + bytes_round / rate
        out = {
            "params": {**PROTOCOLS[label][1], **params},
            "rounds_timed": rounds,
            "round0_seconds": {str(k): v[0] for k, v in seconds.items()},
            "deploy_seconds": setup,
            "bytes_per_round": bytes_round,
            "memcpy_seconds": bytes_round / rate,
            "floor_inprocess_seconds": floor_round,
            "floor_inprocess_all": seconds["floor"],
            "floor_kernel_seconds": statistics.median(kernels[1:]),
            "floor_seconds": floor,
            "floor_phase_seconds": _by_phase(floor_dep.steps, timed, "wall"),
            "losses_floor": losses["floor"],
            "profile_floor": profiles.get("floor", []),
            "hosts": {},
        }
        for h in hosts:
            dep = deps[h]
            steps = [s for s in dep.steps if s["round"] in timed]
            per_round = statistics.median(seconds[h][1:])
            n = len(timed)
            wall = sum(s["wall"] for s in steps) / n
            compute = sum(s["compute_max"] for s in steps) / n
            codec = sum(s["codec_max"] for s in steps) / n
            gap = per_round - floor
            real_bytes = statistics.median(dep.ledger.total(round_=t) for t in timed)
            out["hosts"][str(h)] = {
                "n_hosts": dep.n_hosts,
                "cpus_per_host": dep.cpus_per_host,
                "round_seconds": per_round,
                "round_all": seconds[h],
                "ratio": per_round / floor,
                "losses": losses[h],
                "same_losses": _close(losses[h], losses["floor"]),
                "bytes_per_round": real_bytes,
                "same_bytes": real_bytes == bytes_round,
                "crossed_bytes_per_round": statistics.median(
                    dep.ledger.crossed_total(round_=t) for t in timed
                ),
                # where the round's seconds go (means over the timed rounds)
                "supersteps_wall": wall,
                "hosts_compute": compute,
                "hosts_codec": codec,
                "transport_scheduling": wall - compute - codec,
                "driver": per_round - wall,
                "gap": gap,
                "gap_compute": compute - out["floor_kernel_seconds"],
                "phase_seconds": _by_phase(dep.steps, timed, "wall"),
                "profile_driver": profiles.get(h, []),
            }
        return out
    finally:
        for h in hosts:
            if h in deps:
                deps[h].close()


def _close(a: list, b: list, tol: float = 1e-4) -> bool:
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if x is not y:
                return False
        elif not (x == y or abs(x - y) <= tol * max(1.0, abs(x), abs(y))):
            return False
    return True


# --- the table ----------------------------------------------------------------------------------
def where(fig: dict, h: dict) -> str:
    """One line: how the real round's seconds beyond the floor split, and its slowest phase."""
    parts = {
        "host compute": h["gap_compute"],
        "codecs": h["hosts_codec"],
        "transport+scheduling": h["transport_scheduling"],
        "driver": h["driver"] - (fig["floor_inprocess_seconds"] - fig["floor_kernel_seconds"]),
    }
    parts = {k: v for k, v in parts.items() if v > 0.005}
    text = ", ".join(f"{k} {v:+.2f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
    floor_ph = fig["floor_phase_seconds"]
    excess = {p: s - floor_ph.get(p, 0.0) for p, s in h["phase_seconds"].items()}
    if excess:
        p = max(excess, key=excess.get)
        text += f"; worst phase {p} {h['phase_seconds'][p]:.2f} vs {floor_ph.get(p, 0.0):.2f} s"
    return text or "—"


def table(results: dict) -> tuple[list[str], list[list[str]]]:
    header = ["protocol", "dataset", "hosts", "round s", "floor s", "ratio", "MB/round",
              "where the rest goes (s per round)"]  # fmt: skip
    rows = []
    for ds, protos in results.items():
        for label, fig in protos.items():
            if "error" in fig:
                rows.append([label, ds, "", "", "", "", "", f"failed: {fig['error']}"])
                continue
            for hk, h in fig["hosts"].items():
                mark = "" if h["ratio"] <= TARGET else " ✗"
                rows.append([
                    label, ds, f"{hk} (+{h['n_hosts'] - int(hk)})", f"{h['round_seconds']:.3f}",
                    f"{fig['floor_seconds']:.3f}", f"{h['ratio']:.2f}{mark}",
                    f"{fig['bytes_per_round'] / 1e6:.2f}", where(fig, h),
                ])  # fmt: skip
    return header, rows


def markdown(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def save(args, results: dict, rate: float):
    """Write ``out/<name>.json`` and ``out/<name>.md`` with the results so far."""
    header, rows = table(results)
    figures = {
        "memcpy_bytes_per_second": rate,
        "floor_torch_threads": args.threads,
        "target_ratio": TARGET,
        "quick": args.quick,
        "quick_data": QUICK_DATA if args.quick else None,
        "dataset_options": {d: DATASET_OPTIONS.get(d, {}) for d in results},
        "results": results,
    }
    path = write_result(args.name, figures, echo=False, write=args.write)
    md = writable(path.with_suffix(".md"), args.write)
    md.write_text(markdown(header, rows) + "\n")
    return path, md, (header, rows)


# --- the command ------------------------------------------------------------------------------
def body(argv) -> int:
    ap = ArgumentParser(MODULE, __doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="synthetic data, 1 timed round each")
    ap.add_argument("--datasets", nargs="+", default=None, help="default ml-100k ciao")
    ap.add_argument("--protocols", nargs="+", default=list(PROTOCOLS), choices=list(PROTOCOLS))
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 3; quick 1)")
    ap.add_argument(
        "--rounds-for", nargs="*", default=[], metavar="P=N", help="timed rounds of one protocol"
    )
    ap.add_argument("--hosts", type=int, nargs="+", default=[1], help="user hosts (default 1)")
    ap.add_argument("--set", nargs="*", default=[], metavar="P.KEY=V", help="a protocol parameter")
    ap.add_argument("--profile-top", type=int, default=5, help="profile entries kept (0: none)")
    ap.add_argument(
        "--floor-threads",
        type=int,
        default=1,
        help="torch threads of the floor (default 1, as a host of one CPU has)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--name", default=None, help="JSON name (default floor-DATASETS[-quick])")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args(argv)
    rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    if rounds < 1:
        raise UsageError("--rounds must be >= 1")
    rounds_for = parse_key_values(args.rounds_for, "--rounds-for")
    for k in rounds_for:
        if k not in PROTOCOLS:
            raise UsageError(f"--rounds-for {k}: unknown protocol (known: {', '.join(PROTOCOLS)})")
    overrides = defaultdict(
        dict, scoped_key_values(args.set, "--set", "expected PROTOCOL.KEY=VALUE", PROTOCOLS)
    )
    datasets = args.datasets or (["synthetic"] if args.quick else ["ml-100k", "ciao"])
    for ds in datasets:
        if ds != "synthetic":
            check_dataset(ds, args.data_dir, "--datasets")
    args.name = args.name or result_name("floor", *map(dataset_tag, datasets), quick=args.quick)
    claim_result(args.name, write=args.write, suffixes=(".json", ".md"))

    import torch

    from cluster.runtime import start_or_join
    from data.registry import load_dataset

    torch.set_num_threads(args.floor_threads)
    rate = memcpy_rate(64 if args.quick else 256)
    print(f"memcpy: {rate / 1e9:.2f} GB/s; floor torch threads: {torch.get_num_threads()}")
    start_or_join(None)
    results: dict[str, dict] = {}
    args.threads = torch.get_num_threads()
    for ds_name in datasets:
        with usage_errors(f"--datasets {ds_name}"):
            if ds_name == "synthetic":
                ds = load_dataset("synthetic", **QUICK_DATA)
            else:
                ds = load_dataset(
                    ds_name, data_dir=args.data_dir, **DATASET_OPTIONS.get(ds_name, {})
                )
        results[ds_name] = {}
        for label in sorted(args.protocols, key=RUN_ORDER.index):
            params = {
                **(QUICK_PARAMS[label] if args.quick else {}),
                **DATASET_PARAMS.get(ds_name, {}).get(label, {}),
                **overrides[label],
            }
            t0 = time.perf_counter()
            try:
                fig = measure_protocol(
                    label, ds, params=params, rounds=int(rounds_for.get(label, rounds)),
                    hosts=args.hosts, rate=rate, seed=args.seed, profile_top=args.profile_top,
                )  # fmt: skip
            except Exception as e:  # one protocol's failure must not lose the others' figures
                fig = {"error": f"{type(e).__name__}: {e}"}
            fig["wall_seconds"] = time.perf_counter() - t0
            results[ds_name][label] = fig
            summary = (
                fig.get("error")
                or ", ".join(
                    f"{hk} host(s) {h['round_seconds']:.3f} s" for hk, h in fig["hosts"].items()
                )
                + f" | floor {fig['floor_seconds']:.3f} s"
            )
            print(f"{ds_name} {label}: {summary} ({fig['wall_seconds']:.0f} s)", flush=True)
            save(args, results, rate)  # after every protocol: a long run keeps what it measured
        results[ds_name] = {k: results[ds_name][k] for k in PROTOCOLS if k in results[ds_name]}
    path, md, (header, rows) = save(args, results, rate)
    print(text_table(header, rows))
    print(f"wrote {shown_path(path)} and {shown_path(md)}")
    return 1 if any("error" in f for p in results.values() for f in p.values()) else 0


def main(argv=None) -> int:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    return run_main(f"python -m {MODULE}", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
