"""A deployment: a protocol's logical nodes placed onto host actors, driven in supersteps.

``placement="dedicated"`` gives every node its own host actor (what a small real deployment looks
like); ``placement="packed"`` spreads the packable nodes (users) over ``hosts`` hosts in
contiguous blocks and gives every other node (server, key server, ...) a host of its own. Protocol
code is the same either way, and so are its results and byte counts.

The deployment also carries the run's :class:`nodes.conditions.Conditions`: every host applies the
availability model itself, and the deployment adds up each round's simulated seconds (a superstep
lasts as long as its slowest host says) and the participants who were offline or late.

**Faults.** At the start of every ``snapshot_every``-th round (:meth:`begin_round`) each host
snapshots its nodes into Ray's object store (the driver owns the references, so they outlive the
host). When a host actor dies (killed process, out of memory), the superstep notices, starts a
replacement in the same placement-group bundle, restores that host's nodes from its last snapshot,
and treats them as absent for the rest of the interrupted round; the fault is recorded
(:attr:`faults`). Message batches the dead host had sent and not yet delivered are lost with it;
hosts whose inputs they were run their step again without them. Without a snapshot the deployment
raises :class:`HostLostError`, one line naming the host and the round.

A participant whose handler raises (nodes/host.py, ``Host._handle``) has failed for the round: its
fault (``kind: "exception"``, node, round, phase, the exception's line) joins :attr:`faults`, and
the rest of the round's supersteps treat it as offline. A non-participant that raises, or more
than ``conditions.max_failed_fraction`` of the participants that ran in a round, raise
:class:`NodeFailure`.
"""

from __future__ import annotations

import math
import numbers
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import ray
from ray.exceptions import RayActorError

from cluster.ledger import Ledger, is_eval_phase
from cluster.message import join_batch
from cluster.runtime import PlacedActors, host_cpu_share, spawn_spread, usable_cpus
from data.partition import partition_users
from nodes.conditions import Conditions
from nodes.envelope import senders_by_role
from nodes.host import Host, dumps_specs
from nodes.node import Shared
from nodes.step import RoundStats, StepOrder, StepResult
from nodes.transport import DEFAULT_TRANSPORT, ActorCalls, choose_transport, make_transport

PLACEMENTS = ("dedicated", "packed")


class PlacementError(ValueError):
    """The nodes cannot be placed as asked (unknown placement, too many hosts)."""


class HostLostError(RuntimeError):
    """A host died and its nodes cannot be restored (no snapshot, or no replacement started)."""


class NodeFailure(RuntimeError):
    """A node whose failure stops the run: the handler of a server, key server, matcher or
    curator (any role outside ``conditions.dropout_roles``) raised, or more than
    ``conditions.max_failed_fraction`` of a round's participants did. ``str()`` is one line (node,
    round, phase, message); ``traceback`` holds the node's full traceback."""

    def __init__(self, node: str, round_: int, phase: str, message: str, traceback: str = ""):
        super().__init__(f"{node} failed in round {round_}, phase {phase!r}: {message}")
        self.node, self.round, self.phase, self.message = node, round_, phase, message
        self.traceback = traceback


@dataclass(frozen=True)
class NodeSpec:
    cls: type
    nid: str
    kwargs: dict = field(default_factory=dict)
    packable: bool = False


# dedicated placement starts one Ray actor (a whole Python process with torch, about 180 MB and
# 2 s to start) per participant; past this many a run exhausts a workstation's memory
MAX_DEDICATED = 64


def check_placement(placement: str, hosts: int) -> None:
    """The checks of a placement request that need no node: ``placement`` is one of
    :data:`PLACEMENTS`, ``hosts`` ≥ 1, and ``hosts`` is 1 with ``dedicated`` (which gives every
    node its own host). Raises :class:`PlacementError`; :func:`assign_hosts` calls it."""
    if placement not in PLACEMENTS:
        raise PlacementError(f"--placement must be one of {PLACEMENTS}, got {placement!r}")
    if isinstance(hosts, bool) or not isinstance(hosts, numbers.Integral) or hosts < 1:
        raise PlacementError(f"--hosts must be an integer >= 1, got {hosts!r}")
    if placement == "dedicated" and hosts != 1:
        raise PlacementError(
            f"--hosts {hosts}: --hosts applies to --placement packed (dedicated gives every "
            "participant its own host)"
        )


def assign_hosts(specs: list[NodeSpec], placement: str, hosts: int) -> list[int]:
    """Host index of every spec: packable nodes in contiguous balanced blocks over ``hosts`` hosts,
    then one host per remaining node. ``dedicated``: one host per node. Every check of the
    placement is here (:func:`check_placement`, the dedicated actor cap, hosts ≤ packable nodes)."""
    check_placement(placement, hosts)
    if placement == "dedicated":
        if len(specs) > MAX_DEDICATED:
            raise PlacementError(
                f"--placement dedicated would start {len(specs)} actors, one per participant "
                f"(each a Python process of about 180 MB); at most {MAX_DEDICATED} — use "
                "--placement packed --hosts N"
            )
        return list(range(len(specs)))
    packable = [i for i, s in enumerate(specs) if s.packable]
    if packable and hosts > len(packable):
        raise PlacementError(
            f"{hosts} hosts is more than the {len(packable)} participants that can be packed"
        )
    out = [0] * len(specs)
    n_packed_hosts = hosts if packable else 0
    if packable:
        for j, h in zip(packable, partition_users(len(packable), n_packed_hosts)):
            out[j] = int(h)
    nxt = n_packed_hosts
    for i, s in enumerate(specs):
        if not s.packable:
            out[i] = nxt
            nxt += 1
    return out


class Deployment:
    def __init__(
        self,
        specs: list[NodeSpec],
        *,
        seed: int,
        shared: Shared | None = None,
        placement: str = "packed",
        hosts: int = 1,
        cpus_per_host: float | None = None,
        gpus_per_host: float = 0.0,
        tap: bool = False,
        conditions: Conditions | None = None,
        status: Callable[[str], None] | None = None,
        default_device: str | None = None,
        transport: str = DEFAULT_TRANSPORT,
    ):
        """``tap=True`` keeps a copy of every message sent (tests scan them for private data).
        ``status`` (:attr:`status`) takes one-line descriptions of long steps.
        ``default_device``: torch's default device while the nodes' code runs on the hosts
        ("meta": a tensor a node creates without its ``ctx.device`` breaks the run).
        ``transport``: how supersteps travel, ``calls``, ``channels`` or ``auto`` (the one that
        suits the cluster's CPUs; nodes/transport.py)."""
        self._calls = ActorCalls()  # starved hosts run their superstep again over actor calls
        # status(text): what the deployment or its protocol is busy with, for a step that takes
        # more than a few seconds (the runner prints it when progress is on; by default nothing)
        self.status: Callable[[str], None] = status if status is not None else _quiet
        self.conditions = conditions if conditions is not None else Conditions()
        shared = shared if shared is not None else Shared()
        self.seed = seed
        ids = [s.nid for s in specs]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate node ids in the deployment")
        self.specs = specs
        self.host_of_spec = assign_hosts(specs, placement, hosts)
        self.n_hosts = max(self.host_of_spec) + 1
        self.placement = placement
        if cpus_per_host is None:
            # Fractions of the cluster's CPUs, at most one each: a host's work is mostly serial.
            cpus_per_host = host_cpu_share(self.n_hosts)
        self.cpus_per_host = cpus_per_host
        # (before any actor starts: an unknown name is refused first)
        transport, why = choose_transport(transport, self.n_hosts, usable_cpus())
        self.transport = make_transport(transport)
        if why:
            self.transport.notes.append(why)
        self.gpus_per_host = gpus_per_host
        self.status(
            f"starting {_count(self.n_hosts, 'host actor')} for {_count(len(specs), 'node')}…"
        )
        conditions = self.conditions  # (the constructor's arguments hold no reference to self)
        self.placed: PlacedActors = spawn_spread(
            Host,
            self.n_hosts,
            num_cpus=cpus_per_host,
            num_gpus=gpus_per_host,
            args_for=lambda i: (
                (i, seed, shared, cpus_per_host, conditions, default_device),
                {},
            ),
        )
        try:
            self._set_up_hosts(specs)
        except BaseException:  # a node's constructor raised: no half-set-up host is kept
            self.placed.kill()
            raise
        self.ledger = Ledger()
        # _pending[dst] = [(source host, batch reference)]: a batch dies with its source host
        self._pending: list[list] = [[] for _ in range(self.n_hosts)]
        self._pending_local = [0] * self.n_hosts
        self.steps: list[dict] = []
        self.tap = tap
        self.tapped: list = []
        self.faults: list[dict] = []
        self._snapshots: list[list] = [
            [] for _ in range(self.n_hosts)
        ]  # (round, ref), newest first
        self._absent: dict[int, int] = {}  # host -> the round its nodes lost to a fault
        self._gone: set[int] = set()  # hosts dead since they sent batches not yet delivered
        self._seq = 0  # supersteps so far (StepOrder.seq)
        self._round: int | None = None
        self._new_round_stats(None)

    def _set_up_hosts(self, specs: list[NodeSpec]) -> None:
        """Give every host its nodes and the route."""
        self.hosts = self.placed.handles
        self.route = {s.nid: h for s, h in zip(specs, self.host_of_spec)}
        self._by_host: dict[int, list] = defaultdict(list)
        for s, h in zip(specs, self.host_of_spec):
            self._by_host[h].append((s.cls, s.nid, s.kwargs))
        self._route_ref = ray.put(self.route)
        self._senders_ref = ray.put(senders_by_role({s.cls for s in specs}))
        ray.get(
            [
                self.hosts[h].add_nodes.remote(dumps_specs(self._by_host[h]))
                for h in range(self.n_hosts)
            ]
        )
        ray.get([h.set_route.remote(self._route_ref, self._senders_ref) for h in self.hosts])
        # the Ray node (machine, or raylet) each host runs on: batches between hosts on different
        # nodes are counted apart (Ledger.crossed_nodes)
        self.host_nodes: list[str] = [i["node_id"] for i in self.host_info()]

    # --- rounds: snapshots, injected faults, simulated time ------------------------------------
    def _new_round_stats(self, round_: int | None) -> None:
        self._round = round_
        self._sim = 0.0
        self._stats = {"dropped": set(), "late": 0, "late_nodes": set(), "undelivered": 0}
        self._rejected: dict[str, dict[str, int]] = {}  # kind -> reason -> messages
        # participants whose handler raised this round, by kind of phase (training: True), and
        # how many participants ran a handler per host: the share that failed
        self._failed: dict[bool, list[str]] = {True: [], False: []}
        self._ran: dict[bool, dict[int, int]] = {True: {}, False: {}}

    def begin_round(self, round_: int) -> None:
        """Start round ``round_``: fire the faults injected for it (``kill_hosts``), then take the
        hosts' snapshots when one is due."""
        self._new_round_stats(round_)
        for r, h in self.conditions.kill_hosts:
            if r == round_:
                self.kill_host(h)
        every = self.conditions.snapshot_every
        if every and round_ % every == 0:
            for h, host in enumerate(self.hosts):
                kept = self._snapshots[h]
                if kept:  # once the newest is complete, the ones before it are not needed
                    done, _ = ray.wait([kept[0][1]], timeout=0)
                    kept = kept[:1] if done else kept[:2]
                self._snapshots[h] = [(round_, host.snapshot.remote())] + kept
            if not self.transport.in_order_with_calls:  # taken before the round's supersteps
                ray.wait([k[0][1] for k in self._snapshots], num_returns=self.n_hosts)

    def kill_host(self, h: int) -> int:
        """SIGKILL host ``h``'s process, as an operator's ``kill -9`` would (a local cluster only);
        the deployment notices at its next superstep. Returns the killed pid."""
        if not 0 <= h < self.n_hosts:
            raise ValueError(f"kill_hosts: no host {h} (the deployment has {self.n_hosts})")
        pid = ray.get(self.hosts[h].info.remote())["pid"]
        self._gone.add(h)
        self.transport.invalidate(f"host {h} was killed")
        os.kill(pid, signal.SIGKILL)
        for _ in range(500):  # until the process is gone, so the next call finds it dead
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        return pid

    def round_stats(self) -> RoundStats:
        """The current round so far (:class:`nodes.step.RoundStats`)."""
        st = self._stats
        return RoundStats(
            sim_seconds=self._sim,
            dropped=sorted(st["dropped"]),
            late=st["late"],
            late_nodes=sorted(st["late_nodes"]),
            undelivered=st["undelivered"],
            rejected={k: dict(v) for k, v in sorted(self._rejected.items())},
            faults=[f for f in self.faults if f["round"] == self._round],
        )

    # --- driving -------------------------------------------------------------------------------
    def superstep(
        self,
        round_: int,
        phase: str,
        activate: tuple[str, ...] | list[str] = (),
        *,
        availability: bool = True,
    ) -> StepResult:
        """Deliver every pending message, run the handlers of the nodes that received messages or
        are named in ``activate`` (a role name means all nodes of that role), collect their output.
        Evaluation phases (``eval*``) ignore availability and the simulated clock;
        ``availability=False`` exempts a set-up step that a protocol runs before its participants
        go about their rounds (e.g. organisations aligning users), still on the clock."""
        if round_ != self._round:
            self._new_round_stats(round_)
        t0 = time.perf_counter()
        training = not is_eval_phase(phase)
        failed = self._failed[training]
        lost = tuple(sorted(g for g, r in self._absent.items() if r == round_))
        self._seq += 1

        def order(h: int) -> StepOrder:
            return StepOrder(
                seq=self._seq,
                round=round_,
                phase=phase,
                activate=tuple(activate),
                tap=self.tap,
                availability=training and availability,
                clock=training,
                t_start=self._sim,
                absent=h in lost,
                absent_hosts=lost,
                failed=tuple(failed),
                drop_sources=tuple(sorted(self._gone)),
            )

        answers = self.transport.run(
            self.hosts, [order(h) for h in range(self.n_hosts)], self._pending
        )
        results = answers.outcomes
        dead = answers.dead
        for h in dead:
            self._recover(h, round_, phase)
        if answers.starved:
            if not dead:
                raise HostLostError(f"round {round_} {phase}: message batches lost, no host died")
            self._gone.update(dead)
            alive = [
                [(s, r) for s, r in self._pending[h] if s not in dead] for h in answers.starved
            ]
            again = self._calls.run(
                [self.hosts[h] for h in answers.starved], [order(h) for h in answers.starved], alive
            )
            if again.dead or again.starved:
                raise HostLostError(f"round {round_} {phase}: hosts lost while recovering")
            results.update({h: again.outcomes[i] for i, h in enumerate(answers.starved)})
        self._gone.clear()  # every batch a dead host had sent is delivered or dropped by now
        failures = [r.failure for r in results.values() if r.failure is not None]
        if failures:  # a server, key server, matcher...: the run stops
            f = min(failures, key=lambda f: f.node)
            raise NodeFailure(f.node, f.round, f.phase, f.error, f.traceback)
        wall = time.perf_counter() - t0
        reports = self._merge(round_, phase, training, results, dead)
        step_sim = max((r.sim for r in results.values()), default=0.0)
        self._sim += step_sim if training else 0.0
        compute = max((r.timing.compute for r in results.values()), default=0.0)
        codec = max((r.timing.decode + r.timing.encode for r in results.values()), default=0.0)
        self.steps.append(
            {
                "round": round_,
                "phase": phase,
                "wall": wall,
                "compute_max": compute,
                "codec_max": codec,
                "sim": step_sim,
            }
        )
        if failed:
            self._check_failures(round_, phase, training)
        return StepResult(reports, wall, compute, codec)

    def _merge(self, round_: int, phase: str, training: bool, results: dict, dead: list) -> dict:
        """Add the hosts' outcomes up: the next superstep's pending batches (a reference where the
        driver holds it, None where the destination host does), the ledger, the messages tapped,
        the round's tallies and the participants whose handler raised. Returns the reports."""
        pending: list[list] = [[] for _ in range(self.n_hosts)]
        reports: dict[str, list[float]] = defaultdict(list)
        raised = []  # participants whose handler raised (hosts' fault records)
        stats = self._stats
        for src in sorted(results):
            res = results[src]
            for dst, size in res.batch_bytes.items():
                if dst not in dead:  # a replacement host starts with an empty mailbox
                    pending[dst].append((src, res.batches.get(dst)))
                if self.host_nodes[dst] != self.host_nodes[src]:
                    self.ledger.record_crossed_nodes(round_, phase, size)
            if res.ledger is not None:
                self.ledger.merge(res.ledger)
            self.tapped.extend(res.tapped)
            for name, values in res.reports.items():
                reports[name].extend(values)
            stats["dropped"].update(res.dropped)
            stats["late"] += res.late
            stats["late_nodes"].update(res.late_nodes)
            stats["undelivered"] += res.undelivered
            raised.extend(res.faults)
            self._ran[training][src] = res.participants
            for (kind, reason), n in res.rejected.items():
                by_reason = self._rejected.setdefault(kind, {})
                by_reason[reason] = by_reason.get(reason, 0) + n
        self._pending = pending
        self._pending_local = [
            results[h].pending_local if h in results else 0 for h in range(self.n_hosts)
        ]
        failed = self._failed[training]
        for f in sorted(raised, key=lambda f: f.node):  # the same whatever the placement
            failed.append(f.node)
            stats["dropped"].add(f.node)
            self.faults.append({"kind": "exception", **asdict(f), "nodes": 1})
        return dict(reports)

    def _check_failures(self, round_: int, phase: str, training: bool) -> None:
        """Stop the run (:class:`NodeFailure`) when more than ``max_failed_fraction`` of the
        participants that ran a handler this round (training and evaluation counted apart) have
        raised."""
        failed = self._failed[training]
        ran = sum(self._ran[training].values())
        limit = self.conditions.max_failed_fraction
        if len(failed) > limit * ran:
            first = next(
                f for f in self.faults if f.get("kind") == "exception" and f["node"] == failed[0]
            )
            raise NodeFailure(
                f"{len(failed)} of the {ran} participants that ran",
                round_,
                phase,
                f"more than max_failed_fraction = {limit:g} raised (first: {first['node']}, "
                f"phase {first['phase']!r}: {first['error']})",
            )

    def _recover(self, h: int, round_: int, phase: str) -> None:
        """Replace dead host ``h``, restore its nodes from their last snapshot, and mark them absent
        for the rest of ``round_``."""
        nodes = [nid for _, nid, _ in self._by_host[h]]
        where = f"host {h} ({_describe(nodes)}) died in round {round_}, phase {phase!r}"
        blob, snap_round = None, None
        for r, ref in self._snapshots[h]:
            try:
                blob, snap_round = ray.get(ref), r
                break
            except RayActorError:
                continue  # the host died before it could take this snapshot
        if blob is None:
            raise HostLostError(
                f"{where}: no snapshot to restore it from (snapshot_every = "
                f"{self.conditions.snapshot_every})"
            )
        t0 = time.perf_counter()
        try:
            ray.kill(self.hosts[h])
        except Exception:  # already gone
            pass
        try:
            new = self.placed.respawn(h)
            ray.get(new.add_nodes.remote(dumps_specs(self._by_host[h])))
            ray.get(new.set_route.remote(self._route_ref, self._senders_ref))
            ray.get(new.restore.remote(blob, False))
            self.host_nodes[h] = ray.get(new.info.remote())["node_id"]
        except Exception as e:
            raise HostLostError(
                f"{where}: its replacement did not start ({type(e).__name__}: {e})"
            ) from e
        self.hosts[h] = new
        self.transport.invalidate(f"host {h} was replaced")
        self._snapshots[h] = [(snap_round, ray.put(blob))]
        self._absent[h] = round_
        self._pending[h] = []
        for g in range(self.n_hosts):
            self._pending[g] = [(src, ref) for src, ref in self._pending[g] if src != h]
        self._stats["dropped"].update(nodes)
        self.faults.append(
            {
                "kind": "host",  # a dead host, replaced (a handler's exception: "exception")
                "round": round_,
                "phase": phase,
                "host": h,
                "nodes": len(nodes),
                "node_ids": _describe(nodes),
                "recovery": f"replaced; nodes restored from the snapshot of round {snap_round}, "
                f"absent for the rest of round {round_}",
                "recovery_seconds": time.perf_counter() - t0,
            }
        )

    # --- checkpoints ---------------------------------------------------------------------------
    def snapshot(self) -> dict:
        """The whole deployment's state between supersteps: every host's nodes, the message
        batches not yet delivered, and the ledger (see engine/checkpoint.py)."""
        return {
            "route": dict(self.route),
            "hosts": ray.get([h.snapshot.remote() for h in self.hosts]),
            "pending": self._pending_batches(),
            "ledger": self.ledger.export(),
        }

    def _pending_batches(self) -> list[list[bytes]]:
        """The batches not yet delivered, by destination host, joined: from the object store, or
        from the host that holds them (a compiled graph delivered them already)."""
        held = {}
        for dst, refs in enumerate(self._pending):
            if any(ref is None for _, ref in refs):
                held[dst] = dict(ray.get(self.hosts[dst].held_mail.remote()))
        return [
            [join_batch(ray.get(ref)) if ref is not None else held[dst][src] for src, ref in refs]
            for dst, refs in enumerate(self._pending)
        ]

    def between_rounds(self) -> dict:
        """What :meth:`snapshot` holds besides the hosts' nodes, taken now (between rounds): the
        route, the undelivered batches and the ledger. With :meth:`host_snapshots` of the same
        round it makes a :meth:`snapshot` of that round (the runner's checkpoint of the last
        snapshot round when a server fails)."""
        return {
            "route": dict(self.route),
            "pending": self._pending_batches(),
            "ledger": self.ledger.export(),
        }

    def host_snapshots(self, round_: int) -> list[bytes] | None:
        """Every host's snapshot taken at the start of ``round_`` (:meth:`begin_round`), or None
        when some host has none of that round (a host replaced since, or none was taken)."""
        refs = []
        for kept in self._snapshots:
            ref = next((ref for r, ref in kept if r == round_), None)
            if ref is None:
                return None
            refs.append(ref)
        try:
            return ray.get(refs)
        except RayActorError:
            return None

    def restore(self, state: dict) -> None:
        """Put a :meth:`snapshot` back; the deployment must have been made with the same nodes
        and placement."""
        if state["route"] != self.route:
            raise PlacementError(
                "the checkpoint was taken with another placement of the nodes on hosts"
            )
        self._pending_local = ray.get(
            [h.restore.remote(blob) for h, blob in zip(self.hosts, state["hosts"], strict=True)]
        )
        self._pending = [[(-1, ray.put(b)) for b in batches] for batches in state["pending"]]
        self.ledger = Ledger()
        self.ledger.merge(state["ledger"])

    def has_pending(self) -> bool:
        return any(self._pending) or any(self._pending_local)

    def call(self, nid: str, method: str, *args, **kwargs):
        """Run a method of one node and return its result (inspection, not protocol traffic)."""
        return ray.get(self.hosts[self.route[nid]].call.remote(nid, method, *args, **kwargs))

    def host_info(self) -> list[dict]:
        return ray.get([h.info.remote() for h in self.hosts])

    def transport_summary(self) -> dict:
        """The transport for the run's summary: its name and what it had to say (a graph torn
        down, rebuilt, or not built)."""
        out = {"name": self.transport.name, "notes": list(self.transport.notes)}
        if hasattr(self.transport, "supersteps"):
            out["supersteps"] = dict(self.transport.supersteps)  # over the graph, over calls
        return out

    def close(self) -> None:
        self.transport.close()  # a compiled graph holds the actors: torn down before they are
        self.placed.release()


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _quiet(text: str) -> None:
    """The default :attr:`Deployment.status`: says nothing."""


def _describe(nids: list[str]) -> str:
    return ", ".join(nids) if len(nids) <= 3 else f"{nids[0]} … {nids[-1]}, {len(nids)} nodes"


def mean_report(reports: dict[str, list[float]], name: str) -> float:
    """Exact (order-independent) mean of a reported figure over the nodes that reported it."""
    values = reports.get(name, [])
    return math.fsum(values) / len(values) if values else float("nan")


def training_figures(train: StepResult, aggregate: StepResult | None = None) -> dict[str, float]:
    """A round's training figures: the mean reported ``loss``, how many nodes reported one
    (``participants``) and, given the aggregation step, how many updates were ``skipped``."""
    out = {
        "loss": mean_report(train.reports, "loss"),
        "participants": len(train.reports.get("loss", [])),
    }
    if aggregate is not None:
        out["skipped"] = len(aggregate.reports.get("skipped", []))
        r = aggregate.reports
        if "secagg_users" in r or "secagg_failed" in r:  # with --secure-aggregation
            out["secagg_users"] = sum(r.get("secagg_users", []))
            out["secagg_failed"] = len(r.get("secagg_failed", []))
    return out


def mean_reports(reports: dict[str, list[float]]) -> dict[str, float]:
    """Every reported figure's :func:`mean_report`, by name (e.g. a superstep's metrics)."""
    return {name: mean_report(reports, name) for name in sorted(reports)}
