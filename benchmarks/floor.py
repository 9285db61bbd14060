"""A floor for every protocol: each protocol's training round through the real runtime
(``engine.deploy`` + ``engine.rounds``: host actors, encoded message batches, Ray), on each
transport asked for, beside its *floor* measured in the same command, round by round,
interleaved:

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

**Transports.** Every row runs on each of ``--transports`` (default ``calls channels``): actor
calls (``calls``, ``Deployment(transport="calls")``) or a Ray compiled graph (``channels``), in a
pass of its own beside a floor of its own (an open graph's hosts poll between supersteps, about
half a CPU each, and would slow a deployment run beside them). Within a pass, one deployment per
host count, all made before round 0 and driven round by round in turn with the floor, so load on
the machine falls on all of them alike; each host asks for the CPU share that lets all of them be
placed at once (``host_cpu_share(all their hosts)``, at most 1 CPU). What a transport had to say
(a compiled graph not built, torn down or rebuilt, so that supersteps went over actor calls) is
recorded (``transport_notes``) and shown in the row.

**echo.** The rows ``echo-1000`` and ``echo-10000`` are the FedAvg echo of
``benchmarks/vs_flower.py`` (``protocols/echo.py``) at 1,000 and 10,000 clients, with its privrec
side's settings: a 10,000-float32 vector down to every client and back each round, placement
``packed`` on 2 user hosts plus the server's host (``--hosts`` given: those). Echo reads no data
(its users are a synthetic set's, as in vs_flower), so its rows run whatever ``--datasets`` says,
once a command, under the dataset ``synthetic (echo)``. ``--quick`` runs ``echo-1000`` only.

**Empty superstep.** The fixed cost of a superstep that carries nothing (:func:`empty_superstep`):
3 host actors (packed, one node each) whose nodes do nothing (:class:`EmptyNode`), every node
activated, ``--empty-steps`` supersteps (each its own round) timed by the driver after a warm-up:
median and p90 in milliseconds, one row per transport.

    python -m benchmarks.floor --quick                  # synthetic, every protocol, echo-1000
    python -m benchmarks.floor [--datasets ml-100k ciao] [--rounds 3] [--hosts 1 2]
                               [--protocols fedmf dgrec echo-1000 echo-10000] [--rounds-for dgrec=1]
                               [--transports calls channels] [--empty-steps 300]

Round 0 (set-up: OPRF tokens, PSI, first expansion, neighbourhood sampling) is a warm-up, never
timed; the figures are medians of rounds 1..R. Writes ``benchmarks/out/<name>.json`` (machine,
date, command) and ``benchmarks/out/<name>.md`` (the tables); prints the tables. The name is
``--name``, else ``floor-DATASETS[-quick]`` (``floor-echo[-quick]`` when only echo rows run); a
recorded result (a file git tracks) is refused before anything runs unless ``--write`` is given.
"""

from __future__ import annotations

import argparse
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
from nodes.node import Node

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
    # benchmarks/vs_flower.py's FedAvg echo (protocols/echo.py): a 10,000-float32 vector each way
    "echo-1000": ("echo", {"dim": 10000}),
    "echo-10000": ("echo", {"dim": 10000}),
}
# the echo rows: clients of each; they read no data (their users are a synthetic set's, as
# vs_flower's), run once a command whatever --datasets says, under this dataset name, on
# vs_flower's privrec placement (packed, 2 user hosts + the server's) unless --hosts is given
ECHO_CLIENTS = {"echo-1000": 1000, "echo-10000": 10000}
ECHO_DATASET = "synthetic (echo)"
ECHO_HOSTS = 2
QUICK_ECHO = ("echo-1000",)
# the runtime's transports (nodes/deployment.py): actor calls, a Ray compiled graph
TRANSPORTS = ("calls", "channels")
EMPTY_HOSTS = 3  # the empty superstep's host actors
# --quick: a small synthetic world, and parameters that fit it
QUICK_DATA = {"n_users": 60, "n_items": 120, "avg_interactions": 12, "seed": 0}
# the loading options every recorded figure of these sets uses: ciao as the >= 10 k-core
# (2,557 users x 3,047 items), not the raw 7,375 x 105,114, whose dense per-user item tables
# (dmf) alone need ~34 GB
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
             "verfedgnn", "echo-1000", "echo-10000")  # fmt: skip


# --- the floor's driver -----------------------------------------------------------------------
def _quiet(text: str) -> None:
    pass


class InProcess:
    """The runtime a protocol's driver uses (:class:`nodes.step.Runtime`: ``superstep``,
    ``begin_round``, ``round_stats``, ``has_pending``, ``call``, ``ledger``, ``status``), with
    every node in this process: a superstep hands each node its messages (sorted by sender, as a host does), runs
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

    def round_stats(self):
        from nodes.step import RoundStats

        return RoundStats()  # no clock, nobody dropped or late, no fault

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


def echo_dataset(clients: int):
    """The data of an echo row: a synthetic set that only names ``clients`` users (echo reads
    nothing else from it), as benchmarks/vs_flower.py makes it."""
    from data.synthetic import synthetic

    return synthetic(n_users=clients, n_items=50, avg_interactions=2, seed=0)


def _host_share(specs, hosts: list[int], transports: list[str]) -> float:
    """The CPU share of each host when one deployment per host count and transport stands at
    once: ``host_cpu_share`` of all their hosts (at most 1 CPU each)."""
    from cluster.runtime import host_cpu_share
    from nodes.deployment import assign_hosts

    total = sum(max(assign_hosts(specs, "packed", h)) + 1 for h in hosts) * len(transports)
    return host_cpu_share(total)


def _by_phase(steps: list[dict], rnds: set[int], key: str) -> dict[str, float]:
    """Median over the rounds ``rnds`` of each phase's summed ``key``."""
    per: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for s in steps:
        if s["round"] in rnds:
            per[s["phase"]][s["round"]] += s[key]
    return {p: statistics.median(v.get(r, 0.0) for r in rnds) for p, v in per.items()}


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def measure_protocol(
    label: str, dataset, *, params: dict, rounds: int, hosts: list[int], rate: float, seed: int,
    profile_top: int, transports: list[str] = ("calls",),
) -> dict:  # fmt: skip
    """Round 0 and ``rounds`` timed rounds of ``label`` in process and on each host count and
    transport, interleaved round by round; then one profiled round of each. A deployment that
    fails (to start, or in a round) is recorded as that run's ``error``; the others go on."""
    from engine import deploy
    from engine.loop import rounds as round_loop

    floor_proto = _make(label, dataset, params, seed)
    specs = floor_proto.node_specs()
    floor_dep = InProcess(specs, seed=floor_proto.seed, shared=floor_proto.shared())
    stop = rounds + 1 + (1 if profile_top else 0)
    loops = {"floor": round_loop(floor_proto, floor_dep, stop, eval_every=0, evaluate_last=False)}
    deps: dict = {"floor": floor_dep}
    errors: dict = {}
    runs = [(h, t) for h in hosts for t in transports]
    share = _host_share(specs, hosts, transports)
    t0 = time.perf_counter()
    for key in runs:
        h, t = key
        try:
            proto = _make(label, dataset, params, seed)
            deps[key] = deploy(proto, "packed", h, cpus_per_host=share, transport=t)
        except Exception as e:  # e.g. a transport this runtime does not have
            errors[key] = _error(e)
            continue
        loops[key] = round_loop(proto, deps[key], stop, eval_every=0, evaluate_last=False)
    setup = time.perf_counter() - t0
    seconds: dict = {k: [] for k in loops}
    losses: dict = {k: [] for k in loops}
    kernels: list[float] = []
    profiles: dict = {}
    try:
        for r in range(stop):
            profiled = profile_top and r == stop - 1
            for key, loop in list(loops.items()):
                k0 = floor_dep.kernel_seconds
                try:
                    if profiled:
                        prof = cProfile.Profile()
                        prof.runcall(next, loop)
                        profiles[key] = _top(prof, profile_top)
                        continue
                    res = next(loop)
                except Exception as e:
                    if key == "floor":
                        raise
                    errors[key] = f"round {r}: {_error(e)}"
                    del loops[key]
                    continue
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
            "round0_seconds": {_key(k): v[0] for k, v in seconds.items() if v},
            "deploy_seconds": setup,
            "cpus_per_host": share,
            "bytes_per_round": bytes_round,
            "memcpy_seconds": bytes_round / rate,
            "floor_inprocess_seconds": floor_round,
            "floor_inprocess_all": seconds["floor"],
            "floor_kernel_seconds": statistics.median(kernels[1:]),
            "floor_seconds": floor,
            "floor_phase_seconds": _by_phase(floor_dep.steps, timed, "wall"),
            "losses_floor": losses["floor"],
            "profile_floor": profiles.get("floor", []),
            "hosts": {},  # user hosts -> transport -> the real round's figures
        }
        if label in ECHO_CLIENTS:
            out["clients"] = ECHO_CLIENTS[label]
        for key in runs:
            h, t = key
            by_t = out["hosts"].setdefault(str(h), {})
            if key in errors:
                by_t[t] = {"transport": t, "error": errors[key]}
                continue
            by_t[t] = _run_figures(deps[key], t, timed, seconds[key], losses, key, out)
            by_t[t]["profile_driver"] = profiles.get(key, [])
        return out
    finally:
        for key in runs:
            if key in deps:
                deps[key].close()


def _key(key) -> str:
    """A run's key in the JSON: ``floor``, or ``HOSTS/TRANSPORT``."""
    return key if isinstance(key, str) else f"{key[0]}/{key[1]}"


def _run_figures(dep, transport: str, timed: set[int], seconds, losses, key, fig) -> dict:
    """One real deployment's round against the floor ``fig``, and where its seconds go."""
    steps = [s for s in dep.steps if s["round"] in timed]
    per_round = statistics.median(seconds[1:])
    n = len(timed)
    wall = sum(s["wall"] for s in steps) / n
    compute = sum(s["compute_max"] for s in steps) / n
    codec = sum(s["codec_max"] for s in steps) / n
    real_bytes = statistics.median(dep.ledger.total(round_=t) for t in timed)
    return {
        "transport": transport,
        "n_hosts": dep.n_hosts,
        "cpus_per_host": dep.cpus_per_host,
        "round_seconds": per_round,
        "round_all": seconds,
        "ratio": per_round / fig["floor_seconds"],
        "floor_seconds": fig["floor_seconds"],  # of this run's own pass
        "losses": losses[key],
        "same_losses": _close(losses[key], losses["floor"]),
        "bytes_per_round": real_bytes,
        "same_bytes": real_bytes == fig["bytes_per_round"],
        "crossed_bytes_per_round": statistics.median(
            dep.ledger.crossed_total(round_=t) for t in timed
        ),
        # where the round's seconds go (means over the timed rounds)
        "supersteps_wall": wall,
        "hosts_compute": compute,
        "hosts_codec": codec,
        "transport_scheduling": wall - compute - codec,
        "driver": per_round - wall,
        "gap": per_round - fig["floor_seconds"],
        "gap_compute": compute - fig["floor_kernel_seconds"],
        "phase_seconds": _by_phase(dep.steps, timed, "wall"),
        **_transport_record(dep),
    }


def _transport_record(dep) -> dict:
    """What the deployment's transport had to say (a compiled graph not built, torn down or
    rebuilt: the supersteps that went over actor calls instead), and its graph's compile time."""
    return {
        "transport_notes": dep.transport_summary()["notes"],
        "compile_seconds": getattr(dep.transport, "compile_seconds", None),  # (a graph's only)
    }


# --- the empty superstep ------------------------------------------------------------------------
class EmptyNode(Node):
    """A participant that does nothing: activated, its handler receives nothing and sends
    nothing (the nodes of :func:`empty_superstep`)."""

    role = "user"
    ACCEPTS: dict = {}

    def handle(self, phase: str, inbox) -> None:
        pass


def empty_superstep(
    hosts: int = EMPTY_HOSTS, transport: str = "calls", steps: int = 300, warmup: int = 20
) -> dict:
    """The fixed cost of a superstep that carries nothing: ``hosts`` host actors (packed, one
    :class:`EmptyNode` each) on ``transport``; ``warmup`` supersteps, then ``steps`` timed ones
    (the driver's clock around ``dep.superstep(r, "train", activate=every node)``, each
    superstep its own round ``r``). Median, p90, min and max in milliseconds. Ray must be
    started or joined already."""
    from cluster.message import node_id
    from nodes.deployment import Deployment, NodeSpec

    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    specs = [NodeSpec(EmptyNode, node_id("user", i), packable=True) for i in range(hosts)]
    nids = [s.nid for s in specs]
    t0 = time.perf_counter()
    dep = Deployment(specs, seed=0, placement="packed", hosts=hosts, transport=transport)
    setup = time.perf_counter() - t0
    times = []
    try:
        for r in range(warmup + steps):
            t1 = time.perf_counter()
            dep.superstep(r, "train", activate=nids)
            if r >= warmup:
                times.append(time.perf_counter() - t1)
        n_hosts, cpus, said = dep.n_hosts, dep.cpus_per_host, _transport_record(dep)
    finally:
        dep.close()
    ms = np.array(times) * 1e3
    return {
        "transport": transport,
        "hosts": n_hosts,
        "nodes": len(specs),
        "cpus_per_host": cpus,
        "steps": steps,
        "warmup": warmup,
        "deploy_seconds": setup,
        "median_ms": float(np.median(ms)),
        "p90_ms": float(np.percentile(ms, 90)),
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        **said,
    }


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
        text += "; " if text else ""
        text += f"worst phase {p} {h['phase_seconds'][p]:.2f} vs {floor_ph.get(p, 0.0):.2f} s"
    notes = h.get("transport_notes") or []
    if notes:  # e.g. no compiled graph: the row's supersteps went (partly) over actor calls
        text += ("; " if text else "") + f"transport: {notes[0]}"
        text += f" (+{len(notes) - 1} more)" if len(notes) > 1 else ""
    return text or "—"


def table(results: dict) -> tuple[list[str], list[list[str]]]:
    header = ["protocol", "dataset", "hosts", "transport", "round s", "floor s", "ratio",
              "MB/round", "where the rest goes (s per round)"]  # fmt: skip
    rows = []
    for ds, protos in results.items():
        for label, fig in protos.items():
            if "error" in fig:
                rows.append([label, ds, "", "", "", "", "", "", f"failed: {fig['error']}"])
                continue
            for hk, by_t in fig["hosts"].items():
                for t, h in by_t.items():
                    if "error" in h:
                        rows.append([label, ds, hk, t, "", f"{fig['floor_seconds']:.3f}", "",
                                     "", f"failed: {h['error']}"])  # fmt: skip
                        continue
                    mark = "" if h["ratio"] <= TARGET else " ✗"
                    rows.append([
                        label, ds, f"{hk} (+{h['n_hosts'] - int(hk)})", t,
                        f"{h['round_seconds']:.3f}",
                        f"{h.get('floor_seconds', fig['floor_seconds']):.3f}",
                        f"{h['ratio']:.2f}{mark}", f"{fig['bytes_per_round'] / 1e6:.2f}",
                        where(fig, h),
                    ])  # fmt: skip
    return header, rows


EMPTY_TITLE = f"empty superstep over {EMPTY_HOSTS} hosts"


def empty_table(empty: dict) -> tuple[list[str], list[list[str]]]:
    """The empty superstep's rows, one per transport."""
    header = ["transport", "hosts", "steps", "median ms", "p90 ms", "transport notes"]
    rows = []
    for t, e in empty.items():
        if "error" in e:
            rows.append([t, "", "", "", "", f"failed: {e['error']}"])
        else:
            rows.append([t, str(e["hosts"]), str(e["steps"]), f"{e['median_ms']:.2f}",
                         f"{e['p90_ms']:.2f}", "; ".join(e.get("transport_notes", []))])  # fmt: skip
    return header, rows


def _notes(results: dict, empty: dict) -> list[str]:
    notes = []
    if ECHO_DATASET in results:
        notes.append(
            f"{ECHO_DATASET}: benchmarks/vs_flower.py's FedAvg echo, synthetic (no dataset): "
            "N clients, a 10,000-float32 vector down to each and back per round"
        )
    if empty:
        notes.append(
            f"{EMPTY_TITLE}: packed, one node each that sends nothing, every node activated; "
            "the driver's wall per superstep after a warm-up"
        )
    return notes


def markdown(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def document(results: dict, empty: dict) -> str:
    """The markdown file: the table, the empty superstep's table, the notes."""
    parts = [markdown(*table(results))]
    if empty:
        parts.append(f"**{EMPTY_TITLE}**\n\n" + markdown(*empty_table(empty)))
    parts += [f"_{n}_" for n in _notes(results, empty)]
    return "\n\n".join(parts) + "\n"


def printed(results: dict, empty: dict) -> str:
    """The terminal's form of :func:`document`."""
    parts = [text_table(*table(results))]
    if empty:
        parts.append(f"{EMPTY_TITLE}\n" + text_table(*empty_table(empty)))
    return "\n\n".join([*parts, *_notes(results, empty)])


def save(args, results: dict, rate: float, empty: dict):
    """Write ``out/<name>.json`` and ``out/<name>.md`` with the results so far."""
    figures = {
        "memcpy_bytes_per_second": rate,
        "floor_torch_threads": args.threads,
        "target_ratio": TARGET,
        "quick": args.quick,
        "quick_data": QUICK_DATA if args.quick and args.datasets else None,
        "dataset_options": {d: DATASET_OPTIONS.get(d, {}) for d in results if d != ECHO_DATASET},
        "transports": args.transports,
        "echo": {
            "workload": "benchmarks/vs_flower.py's FedAvg echo (protocols/echo.py), synthetic: "
            "no dataset; a 10,000-float32 vector down to every client and back each round",
            "clients": {k: ECHO_CLIENTS[k] for k in args.protocols if k in ECHO_CLIENTS},
            "placement": "packed",
            "hosts": args.echo_hosts,
        },
        "empty_superstep": empty,  # transport -> median/p90 ms of an empty superstep
        "results": results,
    }
    path = write_result(args.name, figures, echo=False, write=args.write)
    md = writable(path.with_suffix(".md"), args.write)
    md.write_text(document(results, empty))
    return path, md


# --- the command ------------------------------------------------------------------------------
def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def parse(argv) -> argparse.Namespace:
    """The command line, checked and resolved: ``protocols`` (the default: every protocol and
    both echo rows; ``--quick``: ``echo-1000`` only), ``transports`` (duplicates dropped),
    ``datasets`` (none when only echo rows run: echo reads no data), ``rounds``, ``hosts`` and
    ``echo_hosts``, ``rounds_for``, ``overrides`` and ``name``. Touches no file and no data."""
    ap = ArgumentParser(MODULE, __doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="synthetic data, 1 timed round each")
    ap.add_argument("--datasets", nargs="+", default=None, help="default ml-100k ciao")
    ap.add_argument(
        "--protocols",
        nargs="+",
        default=None,
        choices=list(PROTOCOLS),
        help="default: all (--quick: echo-1000, not echo-10000)",
    )
    ap.add_argument(
        "--transports",
        nargs="+",
        default=list(TRANSPORTS),
        choices=list(TRANSPORTS),
        help="the runtime's transports, each row on each (default: calls channels)",
    )
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 3; quick 1)")
    ap.add_argument(
        "--rounds-for", nargs="*", default=[], metavar="P=N", help="timed rounds of one protocol"
    )
    ap.add_argument(
        "--hosts",
        type=int,
        nargs="+",
        default=None,
        help=f"user hosts (default 1; echo {ECHO_HOSTS}, as benchmarks/vs_flower.py)",
    )
    ap.add_argument("--set", nargs="*", default=[], metavar="P.KEY=V", help="a protocol parameter")
    ap.add_argument("--profile-top", type=int, default=5, help="profile entries kept (0: none)")
    ap.add_argument(
        "--empty-steps",
        type=int,
        default=300,
        help=f"timed supersteps of the {EMPTY_TITLE} per transport (default 300; 0: none)",
    )
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
    args.rounds = args.rounds if args.rounds is not None else (1 if args.quick else 3)
    if args.rounds < 1:
        raise UsageError("--rounds must be >= 1")
    if args.empty_steps < 0:
        raise UsageError("--empty-steps must be >= 0")
    if args.hosts is not None and min(args.hosts) < 1:
        raise UsageError("--hosts must be >= 1")
    args.rounds_for = parse_key_values(args.rounds_for, "--rounds-for")
    for k in args.rounds_for:
        if k not in PROTOCOLS:
            raise UsageError(f"--rounds-for {k}: unknown protocol (known: {', '.join(PROTOCOLS)})")
    args.overrides = defaultdict(
        dict, scoped_key_values(args.set, "--set", "expected PROTOCOL.KEY=VALUE", PROTOCOLS)
    )
    if args.protocols is None:
        args.protocols = [p for p in PROTOCOLS if not args.quick or p not in ECHO_CLIENTS]
        args.protocols += list(QUICK_ECHO if args.quick else ())
    args.protocols = _unique(args.protocols)
    args.transports = _unique(args.transports)
    args.echo_hosts = args.hosts or [ECHO_HOSTS]
    args.hosts = args.hosts or [1]
    if any(p not in ECHO_CLIENTS for p in args.protocols):
        args.datasets = args.datasets or (["synthetic"] if args.quick else ["ml-100k", "ciao"])
    else:  # echo rows only: no data
        args.datasets = []
    tags = list(map(dataset_tag, args.datasets)) or ["echo"]
    args.name = args.name or result_name("floor", *tags, quick=args.quick)
    return args


def body(argv) -> int:
    args = parse(argv)
    for ds in args.datasets:
        if ds != "synthetic":
            check_dataset(ds, args.data_dir, "--datasets")
    claim_result(args.name, write=args.write, suffixes=(".json", ".md"))

    import torch

    from cluster.runtime import start_or_join
    from data.registry import load_dataset

    torch.set_num_threads(args.floor_threads)
    rate = memcpy_rate(64 if args.quick else 256)
    print(f"memcpy: {rate / 1e9:.2f} GB/s; floor torch threads: {torch.get_num_threads()}")
    start_or_join(None)
    results: dict[str, dict] = {}
    empty: dict[str, dict] = {}
    args.threads = torch.get_num_threads()
    if args.empty_steps:
        for t in args.transports:
            try:
                empty[t] = empty_superstep(EMPTY_HOSTS, t, args.empty_steps)
                said = f"median {empty[t]['median_ms']:.2f} ms, p90 {empty[t]['p90_ms']:.2f} ms"
            except Exception as e:
                empty[t] = {"transport": t, "error": _error(e)}
                said = empty[t]["error"]
            print(f"{EMPTY_TITLE}, {t}: {said}", flush=True)
        save(args, results, rate, empty)
    labels = sorted(args.protocols, key=RUN_ORDER.index)
    plan = [(ds, [p for p in labels if p not in ECHO_CLIENTS]) for ds in args.datasets]
    plan.append((ECHO_DATASET, [p for p in labels if p in ECHO_CLIENTS]))
    for ds_name, protos in plan:
        if not protos:
            continue
        ds = None  # echo: each row makes its own (echo_dataset)
        if ds_name != ECHO_DATASET:
            with usage_errors(f"--datasets {ds_name}"):
                if ds_name == "synthetic":
                    ds = load_dataset("synthetic", **QUICK_DATA)
                else:
                    ds = load_dataset(
                        ds_name, data_dir=args.data_dir, **DATASET_OPTIONS.get(ds_name, {})
                    )
        results[ds_name] = {}
        for label in protos:
            params = {
                **(QUICK_PARAMS.get(label, {}) if args.quick else {}),
                **DATASET_PARAMS.get(ds_name, {}).get(label, {}),
                **args.overrides[label],
            }
            echo = label in ECHO_CLIENTS
            t0 = time.perf_counter()
            try:
                # one pass per transport, each beside a floor of its own: an open compiled
                # graph's hosts poll between supersteps and would slow a deployment beside them
                fig = None
                for t in args.transports:
                    got = measure_protocol(
                        label, echo_dataset(ECHO_CLIENTS[label]) if echo else ds, params=params,
                        rounds=int(args.rounds_for.get(label, args.rounds)),
                        hosts=args.echo_hosts if echo else args.hosts, rate=rate,
                        seed=args.seed, profile_top=args.profile_top, transports=[t],
                    )  # fmt: skip
                    if fig is None:
                        fig = got
                    else:
                        for hk, by_t in got["hosts"].items():
                            fig["hosts"].setdefault(hk, {}).update(by_t)
            except Exception as e:  # one protocol's failure must not lose the others' figures
                fig = {"error": _error(e)}
            fig["wall_seconds"] = time.perf_counter() - t0
            results[ds_name][label] = fig
            print(f"{ds_name} {label}: {_summary(fig)} ({fig['wall_seconds']:.0f} s)", flush=True)
            save(args, results, rate, empty)  # after every protocol: a long run keeps what it has
        results[ds_name] = {k: results[ds_name][k] for k in PROTOCOLS if k in results[ds_name]}
    path, md = save(args, results, rate, empty)
    print(printed(results, empty))
    print(f"wrote {shown_path(path)} and {shown_path(md)}")
    failed = any("error" in f for p in results.values() for f in p.values())
    failed |= any(
        "error" in run
        for p in results.values()
        for f in p.values()
        for by_t in f.get("hosts", {}).values()
        for run in by_t.values()
    )
    return 1 if failed or any("error" in e for e in empty.values()) else 0


def _summary(fig: dict) -> str:
    if "error" in fig:
        return fig["error"]
    runs = [
        f"{hk} host(s) {t} " + (f"{h['round_seconds']:.3f} s" if "error" not in h else "failed")
        for hk, by_t in fig["hosts"].items()
        for t, h in by_t.items()
    ]
    return ", ".join(runs) + f" | floor {fig['floor_seconds']:.3f} s"


def main(argv=None) -> int:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    return run_main(f"python -m {MODULE}", body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
