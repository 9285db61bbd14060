"""Run a protocol on a deployment for a number of rounds and write its run report (:func:`run`,
:func:`resume`); build the deployment of a protocol (:func:`deploy`, the one way tests, benchmarks
and the runner make one). This module prepares, deploys and restores a run and lists its
callbacks; engine/session.py goes through its rounds, engine/callbacks.py holds its outputs and
engine/summary.py its summary.json."""

from __future__ import annotations

import dataclasses
import math
import platform
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from adversaries.condition import Adversaries
from cluster.message import role_of
from cluster.runtime import gpus_needed, start_or_join
from data.types import RecDataset
from engine.callbacks import (
    CallRound,
    CheckpointWriter,
    FaultLines,
    MetricsWriter,
    ProgressBar,
    RollbackKeeper,
    tensorboard_writer,
)
from engine.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from engine.loop import RoundCallback
from engine.report import RunReport, dataset_record, new_run_dir
from engine.session import RunInterrupted, RunState, drive
from engine.session import count as _count
from engine.summary import conditions_record, gpu_note, noise_rng_name
from nodes.conditions import Conditions
from nodes.deployment import Deployment, NodeSpec, PlacementError, assign_hosts
from nodes.transport import DEFAULT_TRANSPORT
from protocols import DEFAULT_PROTOCOL, get_protocol
from protocols.base import (
    ConfigError,
    Protocol,
    ProtocolConfig,
    UnsuitableDataError,
    build_config,
)


@dataclass
class RunSettings:
    protocol: str = DEFAULT_PROTOCOL  # a registered name or package.module:Class
    rounds: int = 20
    seed: int = 0
    placement: str = "packed"
    hosts: int = 1
    # the GPU share each host asks Ray for; None: auto (a GPU each when the cluster has one per
    # host actor, else 1/⌈hosts / GPUs⌉; 0, the CPU, without GPUs: check_resources)
    gpus_per_host: float | None = 0.0
    cpus_per_host: float | None = None
    address: str | None = None
    out: str = "runs"
    # the protocol's parameters: its built Config, or overrides for build_config (names, values)
    params: ProtocolConfig | dict = field(default_factory=dict)
    progress: bool = True
    checkpoint_every: int = (
        0  # write run_dir/checkpoint.pkl every N rounds and after the last (0: never)
    )
    conditions: Conditions = field(default_factory=Conditions)  # availability, clock, faults
    # fake or compromised users, target items, the aggregating role's defence (None: honest run)
    adversaries: Adversaries | None = None
    # --audit: after the run, audit the protocol's mechanism(s) with the run's parameters at the
    # quick sample size (engine/audit.py) and write summary.json's privacy.audit
    audit: bool = False
    # --tensorboard [DIR]: each round's figures as TensorBoard event files (engine/tensorboard.py):
    # None: off; "": in <run folder>/tensorboard; DIR: in DIR/<tensorboard_run or run folder name>
    tensorboard: str | None = None
    tensorboard_run: str | None = None  # the run's folder under DIR (compare: the protocol's label)
    # --check-device: the nodes' code runs with torch's default device "meta", so a tensor a role
    # creates without its ctx.device breaks the run (what a GPU host would find later)
    check_device: bool = False
    # --transport: how supersteps travel between driver and hosts (nodes/transport.py): actor
    # calls, or the channels of a Ray compiled graph
    transport: str = DEFAULT_TRANSPORT


@dataclass
class Plan:
    """A run as it will start: the protocol built on the data, its nodes and their host actors.
    Made by :func:`prepare` before Ray starts (``launch.py --dry-run`` stops there)."""

    protocol: Protocol
    config: ProtocolConfig
    specs: list[NodeSpec]
    n_hosts: int

    def describe(self, settings: RunSettings) -> str:
        roles = Counter(role_of(s.nid) for s in self.specs)
        nodes = ", ".join(f"{n} {r}" for r, n in roles.items())
        return (
            f"{settings.protocol} on {self.protocol.dataset.name}: "
            f"{_count(settings.rounds, 'round')}, {_count(len(self.specs), 'node')} ({nodes}) on "
            f"{_count(self.n_hosts, 'host actor')} ({settings.placement})"
        )


def prepare(settings: RunSettings, dataset: RecDataset) -> Plan:
    """Everything of a run that can be built and checked before Ray starts: the Config, the
    protocol on the data (which refuses data it cannot run on), the node specs, the placement
    and the run conditions against them; ``--tensorboard`` without the tensorboard package."""
    if getattr(settings, "tensorboard", None) is not None:
        from engine.tensorboard import require

        require()  # TensorBoardMissing: one line naming `pip install tensorboard`
    proto_cls = get_protocol(settings.protocol)
    config = settings.params
    if not isinstance(config, ProtocolConfig):
        config = build_config(proto_cls.Config, dict(config))
    elif type(config) is not proto_cls.Config:
        raise ConfigError(f"params: a {type(config).__name__}, not {proto_cls.Config.__name__}")
    if settings.rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {settings.rounds}")
    try:
        protocol = proto_cls(dataset, config, settings.seed)
        protocol.check_data()
    except ConfigError:
        raise
    except ValueError as e:  # the protocol refuses the data, before Ray starts
        raise UnsuitableDataError(str(e)) from e
    protocol.set_adversaries(settings.adversaries)  # AdversaryError: no such role, bad targets
    protocol.check_rounds(settings.rounds)  # ConfigError: more rounds than the config allows
    protocol.check_secure_aggregation(settings.conditions.secure_aggregation)
    specs = protocol.node_specs()
    return Plan(protocol, config, specs, check_plan(settings, specs))


def run(
    settings: RunSettings,
    dataset: RecDataset,
    dataset_info: dict | None = None,
    *,
    on_round: Callable[[dict], None] | None = None,  # each metrics.jsonl row, as written
    callbacks: list[RoundCallback] | tuple = (),
) -> tuple[Path, dict]:
    """Run ``settings`` on ``dataset`` and write its run report under ``settings.out``.

    Args:
        settings: the run (protocol, rounds, placement, conditions, outputs).
        dataset: the data it runs on.
        dataset_info: more about the dataset for config.json (where it came from).
        on_round: called with each metrics.jsonl row, as written (a callback's ``on_round``).
        callbacks: observers of the run (:class:`engine.loop.RoundCallback`), told after the
            metrics.jsonl writer and before ``--tensorboard``'s writer and the runner's own.

    Returns:
        The run folder and summary.json's dict.

    Raises:
        ConfigError, UnsuitableDataError, PlacementError: the run cannot start (before Ray
            starts, where it can be told then).
        NodeFailure: a node failed; summary.json says ``failed``, the message names
            traceback.txt and how to resume.
        HostLostError: a host was lost and could not be replaced.
        RunInterrupted: Ctrl-C; one line saying where it stopped and what was saved.
    """
    step = f"building {settings.protocol} on the data"
    try:
        plan = prepare(settings, dataset)
        step = "starting Ray"
        cluster = start_or_join(settings.address, status=_Status(settings))
    except KeyboardInterrupt:
        raise RunInterrupted(_interrupted_early(step, settings)) from None
    protocol, config, specs = plan.protocol, plan.config, plan.specs
    check_resources(settings, cluster, plan.n_hosts)
    run_dir = new_run_dir(settings.out, plan.protocol.name)
    report = RunReport(run_dir)
    report.write_config(
        {
            "settings": {
                **dataclasses.asdict(settings),
                "conditions": conditions_record(settings),
            },
            "protocol_config": dataclasses.asdict(config),
            # where the privacy mechanisms drew their noise (--secure-rng; privacy/noise.py)
            "privacy": {"noise_rng": noise_rng_name(settings)},
            "dataset": dataset_record(dataset, dataset_info),
            "cluster": dataclasses.asdict(cluster),
            "python": sys.version.split()[0],
            "machine": platform.node(),
        }
    )
    try:
        dep = _deploy(settings, protocol, specs)
    except BaseException as e:  # nothing ran: leave no half-written run folder behind
        report.close()
        shutil.rmtree(run_dir, ignore_errors=True)
        if isinstance(e, KeyboardInterrupt):
            raise RunInterrupted(_interrupted_early("starting the host actors", settings)) from None
        raise
    state = RunState(settings, protocol, dataset, dep, report, run_dir, _Status(settings))
    return drive(state, lambda st: _callbacks(st, on_round, callbacks))


def _interrupted_early(step: str, settings: RunSettings) -> str:
    """Ctrl-C before a run's first round: what it was doing; nothing was written."""
    return (
        f"{settings.protocol}: interrupted while {step}, before its first round (of "
        f"{settings.rounds}); nothing was written"
    )


def check_plan(settings: RunSettings, specs: list[NodeSpec]) -> int:
    """Check what can be checked of a run before Ray starts: the placement of ``specs`` (which
    caps dedicated actors), the run conditions against the nodes, rounds and hosts, and a GPU
    request on a local machine without one. Returns the number of host actors."""
    n_hosts = max(assign_hosts(specs, settings.placement, settings.hosts)) + 1
    settings.conditions.check_run([s.nid for s in specs], settings.rounds, n_hosts)
    if (settings.gpus_per_host or 0) > 0 and settings.address is None and not _local_gpus():
        raise _no_gpu(settings, "this machine has no CUDA GPU")
    return n_hosts


def auto_gpu_share(gpus: float, n_hosts: int) -> float:
    """The GPU share of each of ``n_hosts`` host actors when ``--gpus-per-host`` is not given, on
    a cluster of ``gpus`` GPUs: 1 (a GPU each) when there are as many GPUs as hosts, else
    1/⌈hosts / GPUs⌉ (3 hosts on 2 GPUs: 0.5 each, two on one GPU, one on the other), to 4
    decimals (Ray's resolution, rounded down); 0, the CPU, on a cluster without a whole GPU."""
    whole = math.floor(gpus + 1e-9)
    if whole < 1:
        return 0.0
    return math.floor(1e4 / math.ceil(max(1, n_hosts) / whole)) / 1e4


def check_resources(settings: RunSettings, cluster, n_hosts: int = 1) -> None:
    """The automatic GPU share (``gpus_per_host`` None) for ``n_hosts`` host actors on this
    cluster (:func:`auto_gpu_share`). A GPU request on a joined cluster without GPUs, or with
    fewer GPUs than ``n_hosts`` shares take (Ray puts at most ⌊1/share⌋ of them on one GPU),
    fails at once, not after Ray's scheduler has waited for GPUs that will never come."""
    if settings.gpus_per_host is None:
        settings.gpus_per_host = auto_gpu_share(cluster.gpus, n_hosts)
    share = settings.gpus_per_host
    if share > 0 and cluster.gpus <= 0:
        raise _no_gpu(settings, "the Ray cluster has no GPU")
    need = gpus_needed(n_hosts, share)
    if share > 0 and need > cluster.gpus + 1e-9:
        fits = auto_gpu_share(cluster.gpus, n_hosts)
        raise PlacementError(
            f"--gpus-per-host {share:g}: {n_hosts} host actors of that share need {need} GPUs, "
            f"the Ray cluster has {cluster.gpus:g} ("
            + (f"--gpus-per-host {fits:g} fits, as does leaving it out; " if fits else "")
            + "0 computes on CPU)"
        )


def _no_gpu(settings: RunSettings, where: str) -> PlacementError:
    return PlacementError(
        f"--gpus-per-host {settings.gpus_per_host:g}: {where} (leave it at 0 to compute on CPU)"
    )


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resume(
    run_dir: str | Path,
    rounds: int | None = None,
    *,
    address: str | None = None,
    progress: bool = True,
    checkpoint_every: int | None = None,
    params: dict | None = None,
    tensorboard: str | None = None,
    callbacks: list[RoundCallback] | tuple = (),
    gpus_per_host: float | None = None,
    transport: str | None = None,
) -> tuple[Path, dict]:
    """Continue the run in ``run_dir`` from its checkpoint, on the same placement; its
    metrics.jsonl and summary.json are continued as if never interrupted.

    Args:
        run_dir: the run folder holding the checkpoint.
        rounds: the rounds to have run in all (None: the run's own plan).
        address: the Ray cluster to join (None: a local one).
        progress: show the progress bar and status lines.
        checkpoint_every: another ``--checkpoint-every`` (None: the run's).
        params: protocol parameters to change from the next round on, by their Config names;
            only those the Config names ``RESUMABLE`` (step sizes read afresh every round,
            reporting). config.json records the change and the new plan.
        tensorboard: turns ``--tensorboard`` on (a run that had it goes on writing anyway).
        callbacks: as for :func:`run`.
        gpus_per_host: another GPU share per host (None: the run's, except that a run that had
            GPUs resumes on the CPU of a local machine without one; the nodes' state moves to
            the device of the host that restores it).
        transport: the superstep's transport (None: the run's own).

    Returns:
        The run folder and summary.json's dict.

    Raises:
        CheckpointError: no checkpoint to resume, or ``rounds`` not beyond the rounds done.
        ConfigError: a parameter that cannot change, or an unknown one.
        NodeFailure, HostLostError, RunInterrupted: as for :func:`run`.
    """
    try:
        ckpt, start, rounds = resume_plan(run_dir, rounds, params)
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"interrupted while reading the checkpoint of {run_dir}; nothing was changed"
        ) from None
    ckpt.protocol.check_rounds(rounds)
    planned = ckpt.settings.rounds
    settings = dataclasses.replace(ckpt.settings, rounds=rounds, address=address, progress=progress)
    protocol = ckpt.protocol
    if params:
        protocol.config = _resumed_config(protocol.config, params)
        settings.params = (
            protocol.config
            if isinstance(settings.params, ProtocolConfig)
            else {**settings.params, **params}
        )
    if checkpoint_every is not None:
        settings.checkpoint_every = checkpoint_every
    if tensorboard is not None:
        settings.tensorboard = tensorboard
    if getattr(settings, "tensorboard", None) is not None:
        from engine.tensorboard import require

        require()
    if transport is not None:
        settings.transport = transport
    if gpus_per_host is not None:
        settings.gpus_per_host = gpus_per_host
    elif settings.gpus_per_host and settings.address is None and not _local_gpus():
        _Status(settings)(
            f"the run had {settings.gpus_per_host:g} GPU per host; this machine has no CUDA GPU: "
            "it resumes on the CPU"
        )
        settings.gpus_per_host = 0.0
    # injected faults (--kill-host) are a test of the interrupted run, not replayed on resume
    settings.conditions = dataclasses.replace(settings.conditions, kill_hosts=())
    specs = protocol.node_specs()
    assign_hosts(specs, settings.placement, settings.hosts)
    step, report, dep = "starting Ray", None, None
    try:
        start_or_join(settings.address, status=_Status(settings))
        step = "starting the host actors"
        report = RunReport(Path(run_dir), resume_after=start - 1)
        dep = _deploy(settings, protocol, specs)
        step = "restoring the nodes from the checkpoint"
        dep.restore(ckpt.deployment)
    except BaseException as e:
        if report is not None:
            report.close()
        if dep is not None:
            dep.close()
        if isinstance(e, KeyboardInterrupt):
            raise RunInterrupted(
                f"interrupted while {step}, before round {start}; the checkpoint is unchanged: "
                f"resume with --resume {run_dir}"
            ) from None
        raise
    if params or rounds != planned:
        report.record_change(
            start, dataclasses.asdict(protocol.config), params or {}, rounds=rounds
        )
    state = RunState(
        settings,
        protocol,
        protocol.dataset,
        dep,
        report,
        Path(run_dir),
        _Status(settings),
        start=start,
        t_start=time.perf_counter() - ckpt.elapsed,
        metrics=ckpt.metrics,
        totals=ckpt.totals,
        saved=start,
    )
    return drive(state, lambda st: _callbacks(st, None, callbacks))


def _callbacks(
    state: RunState,
    on_round: Callable[[dict], None] | None,
    callbacks: list[RoundCallback] | tuple,
) -> list[RoundCallback]:
    """A run's callbacks, in the order they are told: metrics.jsonl first (the others' row is
    the row written), the caller's ``on_round`` and ``callbacks``, ``--tensorboard``'s writer,
    then the fault lines, the progress bar, the checkpoint writer and the rollback keeper."""
    own = [MetricsWriter(state.report)]
    if on_round is not None:
        own.append(CallRound(on_round))
    tb = tensorboard_writer(state)
    return [
        *own,
        *callbacks,
        *([tb] if tb is not None else []),
        FaultLines(),
        ProgressBar(tqdm),  # this module's tqdm, which a test may replace with its own bar class
        CheckpointWriter(),
        RollbackKeeper(),
    ]


def resume_plan(
    run_dir: str | Path, rounds: int | None, params: dict | None = None
) -> tuple[Checkpoint, int, int]:
    """The checkpoint of ``run_dir``, the round it resumes at and the rounds it will run in all:
    ``rounds``, or the run's own plan when None; ``params`` (the protocol parameters to change)
    are checked against the Config's ``RESUMABLE``."""
    ckpt = load_checkpoint(run_dir)
    start, planned = ckpt.next_round, ckpt.settings.rounds
    if params:  # a parameter that cannot change is refused before the rounds are looked at
        _resumed_config(ckpt.protocol.config, params)
    if rounds is None:
        if start >= planned:
            raise CheckpointError(
                f"{run_dir}: all {planned} planned rounds are done; give --rounds N (N > "
                f"{planned}) to continue it"
            )
        rounds = planned
    if rounds <= start:
        raise CheckpointError(
            f"{run_dir}: --rounds must exceed the {start} rounds already done, got {rounds}"
        )
    return ckpt, start, rounds


def _resumed_config(config: ProtocolConfig, params: dict) -> ProtocolConfig:
    """``config`` with ``params`` (current names) changed, checked; only ``RESUMABLE`` fields may
    change."""
    cls = type(config)
    frozen = sorted(set(params) - set(cls.RESUMABLE))
    if frozen:
        raise ConfigError(
            f"{', '.join(frozen)}: cannot change when a run resumes "
            f"(may change: {', '.join(cls.RESUMABLE)})"
        )
    return build_config(cls, {**dataclasses.asdict(config), **params})


def deploy(
    protocol: Protocol,
    placement: str = "packed",
    hosts: int = 1,
    *,
    tap: bool = False,
    conditions: Conditions | None = None,
    gpus_per_host: float = 0.0,
    cpus_per_host: float | None = None,
    specs: list[NodeSpec] | None = None,
    status: Callable[[str], None] | None = None,
    default_device: str | None = None,
    transport: str = DEFAULT_TRANSPORT,
) -> Deployment:
    """The deployment of ``protocol``'s nodes on Ray (started or joined already): its node specs
    (or ``specs``, when the caller made them already), its seed and shared values, on ``hosts``
    hosts placed by ``placement``. ``tap=True`` keeps a copy of every message sent (tests scan
    them for private data); ``conditions`` are the run conditions (none by default); ``status``
    takes one-line descriptions of long steps (:attr:`Deployment.status`; none by default). The
    caller closes it (``dep.close()``)."""
    return Deployment(
        protocol.node_specs() if specs is None else specs,
        seed=protocol.seed,
        shared=shared_of(protocol),
        placement=placement,
        hosts=hosts,
        cpus_per_host=cpus_per_host,
        gpus_per_host=gpus_per_host,
        tap=tap,
        conditions=conditions,
        status=status,
        default_device=default_device,
        transport=transport,
    )


def shared_of(protocol: Protocol):
    """``protocol.shared()`` with the run's adversary condition as its nodes read it
    (``Shared.threat``: target items, defence) when ``set_adversaries`` planned one."""
    shared = protocol.shared()
    plan = getattr(protocol, "adversary_plan", None)
    if plan is not None:
        shared = dataclasses.replace(shared, threat=plan.threat)
    return shared


def _deploy(settings: RunSettings, protocol: Protocol, specs: list[NodeSpec]) -> Deployment:
    dep = deploy(
        protocol,
        settings.placement,
        settings.hosts,
        conditions=settings.conditions,
        gpus_per_host=settings.gpus_per_host,
        cpus_per_host=settings.cpus_per_host,
        specs=specs,
        status=_Status(settings),
        default_device="meta" if settings.check_device else None,
        # (a checkpoint's settings from before transports: the default)
        transport=getattr(settings, "transport", DEFAULT_TRANSPORT),
    )
    note = gpu_note(dep.host_info()) if (settings.gpus_per_host or 0) > 0 else None
    if note:
        dep.status(note)
    return dep


class _Status:
    """One-line descriptions of a run's long steps on stderr, only with ``settings.progress``:
    starting Ray and the host actors, what the protocol reports through
    :attr:`Deployment.status` (e.g. a key exchange before the first round) and hosts lost and
    replaced, named by the round they belong to (:attr:`round`). Printed with ``tqdm.write``,
    above the progress bar. A text is printed once (a step a protocol repeats every round, such
    as a graph expansion, says so at its first round only) unless ``once=False`` (faults)."""

    def __init__(self, settings: RunSettings):
        self.enabled = settings.progress
        self.name = settings.protocol
        self.round: int | None = None
        self._said: set[str] = set()

    def __call__(self, text: str, once: bool = True) -> None:
        if not self.enabled or (once and text in self._said):
            return
        self._said.add(text)
        where = self.name if self.round is None else f"{self.name} round {self.round}"
        tqdm.write(f"{where}: {text}", file=sys.stderr)
