"""Run a protocol on a deployment for a number of rounds and write its run report; build the
deployment of a protocol (:func:`deploy`, the one way tests, benchmarks and the runner make one)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle
import platform
import shutil
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from adversaries.condition import Adversaries
from cluster.message import role_of
from cluster.runtime import gpus_needed, start_or_join
from data.types import RecDataset
from engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from engine.figures import is_number, main_metric
from engine.loop import RoundCallback, notify_end, notify_round, rounds
from engine.report import RunReport, dataset_record, new_run_dir, privacy_row
from nodes.conditions import Conditions
from nodes.deployment import (
    Deployment,
    HostLostError,
    NodeFailure,
    NodeSpec,
    PlacementError,
    assign_hosts,
)
from nodes.transport import DEFAULT_TRANSPORT
from protocols import DEFAULT_PROTOCOL, get_protocol
from protocols.base import (
    ConfigError,
    PrivacyReport,
    Protocol,
    ProtocolConfig,
    UnsuitableDataError,
    build_config,
    resolve_aliases,
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


def _count(n: int, noun: str) -> str:
    """``1 host actor``, ``2 host actors``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
    """Run ``settings`` on ``dataset`` and write its run report under ``settings.out``; returns
    the run folder and summary.json's dict. ``callbacks`` (:class:`engine.loop.RoundCallback`)
    are told each round's metrics.jsonl row and the end of the run (``--tensorboard`` adds its
    writer); ``on_round(row)`` is a callback's ``on_round`` alone. Ctrl-C raises
    :class:`RunInterrupted`: one line saying where it stopped and what was saved."""
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
                "conditions": _conditions_record(settings),
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
    return _drive(
        settings,
        config,
        protocol,
        dataset,
        dep,
        report,
        run_dir,
        0,
        {},
        0.0,
        {},
        on_round,
        callbacks=callbacks,
    )


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


def gpu_note(host_info: list[dict]) -> str | None:
    """What to say when Ray gave hosts GPU ids that CUDA cannot see (a node started with
    ``ray start --num-gpus N`` on a machine without CUDA): they compute on the CPU."""
    ids = sorted({g for i in host_info if i["device"] == "cpu" for g in i["gpu_ids"]})
    if not ids:
        return None
    return (
        f"Ray gave host actors GPU ids {', '.join(ids)} but CUDA sees no GPU in their processes: "
        "they compute on the CPU"
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
    """Continue the run in ``run_dir`` from its checkpoint up to ``rounds`` rounds in all (None:
    the run's own plan), on the same placement (``gpus_per_host``: another GPU share per host;
    None keeps the run's, except that a run that had GPUs resumes on the CPU of a local machine
    without one — the nodes' state moves to the device of the host that restores it); its metrics.jsonl and summary.json are continued
    as if never interrupted. ``params`` changes protocol parameters from the next round on, only
    those the protocol's Config names ``RESUMABLE`` (step sizes read afresh every round,
    reporting); config.json records the change and the new plan. ``tensorboard`` turns
    ``--tensorboard`` on (a run that had it goes on writing its event files anyway);
    ``callbacks`` as for :func:`run`; ``transport``: the superstep's transport (None: the
    run's own)."""
    try:
        state, start, rounds = resume_plan(run_dir, rounds, params)
    except KeyboardInterrupt:
        raise RunInterrupted(
            f"interrupted while reading the checkpoint of {run_dir}; nothing was changed"
        ) from None
    state["protocol"].check_rounds(rounds)
    planned = state["settings"].rounds
    settings = dataclasses.replace(
        state["settings"], rounds=rounds, address=address, progress=progress
    )
    protocol = state["protocol"]
    if params:
        params = resolve_aliases(type(protocol.config), params)
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
        dep.restore(state["deployment"])
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
    return _drive(
        settings,
        protocol.config,
        protocol,
        protocol.dataset,
        dep,
        report,
        Path(run_dir),
        start,
        state["metrics"],
        state["elapsed"],
        state.get("totals", {}),
        callbacks=callbacks,
        saved=start,
    )


def resume_plan(
    run_dir: str | Path, rounds: int | None, params: dict | None = None
) -> tuple[dict, int, int]:
    """The checkpoint of ``run_dir``, the round it resumes at and the rounds it will run in all:
    ``rounds``, or the run's own plan when None; ``params`` (the protocol parameters to change)
    are checked against the Config's ``RESUMABLE``."""
    state = load_checkpoint(run_dir)
    start = state["next_round"]
    planned = state["settings"].rounds
    if params:  # a parameter that cannot change is refused before the rounds are looked at
        config = state["protocol"].config
        _resumed_config(config, resolve_aliases(type(config), params))
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
    return state, start, rounds


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the message (one line) names the step or round, what was saved and,
    when a checkpoint exists, the resume command."""


def _resume_hint(run_dir) -> str:
    if (Path(run_dir) / "checkpoint.pkl").is_file():
        return f"; resume with --resume {run_dir}"
    return "; no checkpoint was written"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _interrupted_in_round(
    settings: RunSettings, run_dir: Path, rnd: int, saved: int | None, after_last: bool
) -> str:
    """Ctrl-C in round ``rnd`` (0-based, as metrics.jsonl counts), or after the last round while
    the report was written (``after_last``); ``saved``: the round the run's checkpoint resumes
    at (None: it has none)."""
    n = settings.rounds
    if after_last:
        text = (
            f"interrupted after the last round ({n - 1}) while writing the report; "
            f"{run_dir}/metrics.jsonl holds every round, summary.json was not written"
        )
        if saved is not None:
            text += f"; --resume {run_dir} --rounds N (N > {n}) continues the run"
        return text
    done = f"{_count(rnd, 'finished round')} in {run_dir}/metrics.jsonl"
    if saved is not None:
        if saved < rnd - 1:
            again = f"; rounds {saved}–{rnd - 1} run again"
        else:
            again = f"; round {saved} runs again" if saved == rnd - 1 else ""
        return (
            f"interrupted in round {rnd}; resume with --resume {run_dir}: it goes on from round "
            f"{saved} (the {_ordinal(saved + 1)} of {n}), where its checkpoint was written{again}"
        )
    where = f"interrupted in round {rnd} (the {_ordinal(rnd + 1)} of {n})"
    every = settings.checkpoint_every
    if every:
        first = min(every, n) - 1
        return (
            f"{where}, before its first checkpoint (--checkpoint-every {every} writes one when "
            f"round {first} is done): nothing to resume; {done}"
        )
    return f"{where}; no checkpoint was written (run with --checkpoint-every N to resume); {done}"


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


def fault_lines(faults: list[dict]) -> list[str]:
    """The status lines of a round's faults: one per host lost and replaced, one for the
    participants whose handler raised (they sat the round out)."""
    lines = []
    for f in faults:
        if f.get("kind") == "host":
            took = f.get("recovery_seconds")
            lines.append(
                f"host {f['host']} ({f['node_ids']}) died in phase {f['phase']!r}: "
                f"{f['recovery']}" + (f" ({took:.1f} s)" if is_number(took) else "")
            )
    raised = [f for f in faults if f.get("kind") == "exception"]
    if raised:
        first = raised[0]
        lines.append(
            f"{_count(len(raised), 'participant')} raised and sat out the round (first: "
            f"{first['node']} in phase {first['phase']!r}: {first['error']})"
        )
    return lines


def progress_postfix(train: dict, metrics: dict, declared=None) -> dict[str, str]:
    """The progress bar's figures: the round's training loss (``loss``, else the first figure
    named like a loss) and the protocol's main metric (``declared``, its
    :meth:`Protocol.main_metric`; else :func:`engine.figures.main_metric`'s guess) from its
    latest evaluation, 4 significant digits."""
    out = {}
    losses = [k for k in train if k == "loss" or k.startswith("loss") or k.endswith("loss")]
    loss = "loss" if "loss" in losses else (losses[0] if losses else None)
    if loss is not None and is_number(train[loss]):
        out[loss] = f"{train[loss]:.4g}"
    name, _ = main_metric(metrics, declared)
    if name is not None and is_number(metrics[name]):
        out[name] = f"{metrics[name]:.4g}"
    return out


def privacy_of(protocol: Protocol) -> PrivacyReport:
    """``protocol.privacy()``, which the contract makes a :class:`PrivacyReport`."""
    report = protocol.privacy()
    if not isinstance(report, PrivacyReport):
        raise TypeError(
            f"{type(protocol).__name__}.privacy() returned a {type(report).__name__}, not a "
            "protocols.base.PrivacyReport"
        )
    return report


def _adversaries_record(protocol: Protocol) -> dict | None:
    """summary.json's ``adversaries``: the attack, how many fake and compromised users, the
    targets and the defence (None: an honest run without target items)."""
    plan = getattr(protocol, "adversary_plan", None)
    return plan.summary() if plan is not None else None


def noise_rng_name(settings: RunSettings) -> str:
    """The report's ``privacy.noise_rng``: ``"seeded"`` (every node's noise from its stream seeded
    from (seed, node id): reproducible) or ``"secure (ChaCha20, OS key)"`` (``--secure-rng``)."""
    from privacy.noise import describe

    return describe(settings.conditions.secure_rng)


def secure_aggregation_record(settings: RunSettings) -> dict:
    """summary.json's ``privacy.secure_aggregation`` with ``--secure-aggregation``: its parameters
    and what it adds to the privacy figures and what it does not (nodes/secure_sum.py)."""
    from nodes.secure_sum import guarantee

    cfg = settings.conditions.secure_aggregation
    return {} if cfg is None else {"secure_aggregation": guarantee(cfg)}


def _conditions_record(settings: RunSettings) -> dict:
    c = dataclasses.asdict(settings.conditions)
    c.pop("online_rounds", None)
    return c


def _stop(
    e: NodeFailure, settings, dataset, dep, run_dir: Path, rollback: dict | None, faults: list
) -> None:
    """A run stopped by a failing node: its traceback in ``run_dir/traceback.txt``, a resumable
    checkpoint (the last one written, or one of the start of the last snapshot round when that
    is later: every host's snapshot of that round and the driver's state then), summary.json with
    ``status: "failed"``, and ``e``'s message extended to one line naming both files."""
    run_dir = Path(run_dir)
    tb_path = run_dir / "traceback.txt"
    tb_path.write_text(e.traceback or "".join(traceback.format_exception(e)))
    try:
        saved = load_checkpoint(run_dir)["next_round"]
    except CheckpointError:
        saved = None
    hosts = dep.host_snapshots(rollback["next_round"]) if rollback else None
    if hosts is not None and (saved is None or rollback["next_round"] > saved):
        save_checkpoint(
            run_dir,
            {
                "next_round": rollback["next_round"],
                "settings": settings,
                "protocol": pickle.loads(rollback["protocol"]),
                "deployment": {**rollback["between"], "hosts": hosts},
                "metrics": rollback["metrics"],
                "elapsed": rollback["elapsed"],
                "totals": rollback["totals"],
            },
        )
        saved = rollback["next_round"]
    error = {"node": e.node, "round": e.round, "phase": e.phase, "error": e.message}
    summary = {
        "status": "failed",
        "error": error,
        "protocol": settings.protocol,
        "dataset": dataset.name,
        "seed": settings.seed,
        "placement": settings.placement,
        "hosts": settings.hosts,
        "rounds": settings.rounds,
        "faults": faults,
        "traceback": str(tb_path),
        "resumes_at_round": saved,  # None: no checkpoint
        "run_dir": str(run_dir),
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    hint = (
        f"resume: python launch.py --resume {run_dir}"
        if saved is not None
        else "no checkpoint (--snapshot-every 0 and no --checkpoint-every)"
    )
    e.args = (f"{e} (traceback: {tb_path}; {hint})",)


def _drive(
    settings,
    config,
    protocol,
    dataset,
    dep,
    report,
    run_dir,
    start,
    metrics,
    elapsed,
    totals,
    on_round=None,
    *,
    callbacks=(),
    saved: int | None = None,
):
    """Rounds ``start`` … ``settings.rounds − 1`` of a deployed run, its report and summary.
    ``saved``: the round the run's checkpoint on disk resumes at (None: none yet)."""
    from models.baselines import trivial_baselines  # (torch: imported only when a run reports)

    t_start = time.perf_counter() - elapsed
    current = start
    in_rounds = True  # False once the last round is done (the report is being written)
    sim_total = totals.get("sim_seconds", 0.0)
    faults = list(totals.get("faults", []))
    rejected = {k: dict(v) for k, v in totals.get("rejected", {}).items()}  # kind -> reason -> n
    rollback: dict | None = None  # the state at the start of the last snapshot round
    bar = None
    callbacks = list(callbacks)
    if on_round is not None:
        callbacks.insert(0, _OnRound(on_round))
    finished = None  # summary.json's dict once written (the callbacks' on_end)
    try:
        callbacks += _own_callbacks(settings, config, dataset, run_dir, start)
        bar = tqdm(
            desc=settings.protocol,
            unit="round",
            initial=start,
            total=settings.rounds,
            disable=not settings.progress,
        )
        status = dep.status = _Status(settings)

        every_snap = settings.conditions.snapshot_every

        def before_round(rnd: int) -> None:
            nonlocal current, rollback
            current = status.round = rnd
            if every_snap and rnd % every_snap == 0:
                # the driver's side of the hosts' snapshot of this round (Deployment.begin_round):
                # with it a failing server leaves a checkpoint of this round (_stop)
                rollback = {
                    "next_round": rnd,
                    "protocol": pickle.dumps(protocol, protocol=pickle.HIGHEST_PROTOCOL),
                    "between": dep.between_rounds(),
                    "metrics": metrics,
                    "elapsed": time.perf_counter() - t_start,
                    "totals": copy.deepcopy(
                        {"sim_seconds": sim_total, "faults": faults, "rejected": rejected}
                    ),
                }

        def evaluating(on: bool) -> None:
            name = settings.protocol
            bar.set_description_str(f"{name} (evaluating)" if on else name, refresh=on)

        for res in rounds(
            protocol,
            dep,
            settings.rounds,
            start=start,
            before_round=before_round,
            evaluating=evaluating,
        ):
            rnd, train, stats = res.round, res.train, res.stats
            last = rnd == settings.rounds - 1
            if res.evaluated:
                metrics = res.metrics
            privacy = privacy_of(protocol)
            sim_total += stats.sim_seconds
            faults.extend(stats.faults)
            for kind, by_reason in stats.rejected.items():
                total = rejected.setdefault(kind, {})
                for reason, n in by_reason.items():
                    total[reason] = total.get(reason, 0) + n
            row = {
                "round": rnd,
                "train": train,
                "metrics": metrics if res.evaluated else {},
                "bytes": dep.ledger.total(round_=rnd),
                "bytes_by_kind": dep.ledger.by_kind(round_=rnd),
                "bytes_crossed": dep.ledger.crossed_total(round_=rnd),
                "bytes_crossed_nodes": dep.ledger.crossed_nodes_total(round_=rnd),
                "epsilon": privacy.epsilon,
                # the typed figures (paper's claim, budget, δ spent) and the protocol's own numbers
                "privacy": privacy_row(privacy),
                "seconds": res.seconds,
                "sim_seconds": stats.sim_seconds,
                "sim_elapsed": sim_total,
                "dropped": len(stats.dropped),
                "late": stats.late,
                "late_nodes": len(stats.late_nodes),
                # messages that failed their receiver's check: kind -> reason -> count
                "rejected": stats.rejected,
                "faults": stats.faults,
            }
            # the callbacks (--tensorboard's writer; benchmarks.tune's on_round, by which a
            # trial reports each evaluation to Tune) get the row as metrics.jsonl holds it
            notify_round(callbacks, report.add_round(row))
            for line in fault_lines(stats.faults):  # a host lost and replaced, ...
                status(line, once=False)
            bar.update(1)
            bar.set_postfix(progress_postfix(train, metrics, protocol.main_metric()))
            every_ckpt = settings.checkpoint_every
            if every_ckpt and ((rnd + 1) % every_ckpt == 0 or last):
                save_checkpoint(
                    run_dir,
                    {
                        "next_round": rnd + 1,
                        "settings": settings,
                        "protocol": protocol,
                        "deployment": dep.snapshot(),
                        "metrics": metrics,
                        "elapsed": time.perf_counter() - t_start,
                        "totals": {
                            "sim_seconds": sim_total,
                            "faults": faults,
                            "rejected": rejected,
                        },
                    },
                )
                saved = rnd + 1
        in_rounds = False
        if dep.has_pending():
            raise RuntimeError("messages were left undelivered at the end of the run")
        wall = time.perf_counter() - t_start
        audit = {}
        if getattr(settings, "audit", False):  # (a checkpoint of an older run has no field)
            from engine.audit import audit_run

            audit["audit"] = audit_run(
                protocol, seed=settings.seed, secure=settings.conditions.secure_rng
            )
        placement = dep.host_info()
        summary = {
            "status": "ok",  # "failed": a node stopped the run (see _stop)
            "protocol": settings.protocol,
            "dataset": dataset.name,
            # format, files (sha256) and sizes, from data.registry.load_dataset
            "dataset_provenance": dataset.meta.get("provenance"),
            "seed": settings.seed,
            "placement": settings.placement,
            "hosts": settings.hosts,  # --hosts as asked: the actors a packed placement puts users on
            "host_actors": dep.n_hosts,  # every host actor started, the server's own ones too
            # where each host actor ran: its Ray node, the GPUs Ray gave it, the device it used
            "host_placement": [
                {k: i[k] for k in ("index", "node_id", "gpu_ids", "device", "nodes")}
                for i in placement
            ],
            "gpu_note": gpu_note(placement),  # GPU ids CUDA cannot see (None: none)
            # how supersteps travelled, and what the transport had to say (a graph rebuilt...)
            "transport": dep.transport_summary(),
            "rounds": settings.rounds,
            "metrics": metrics,
            "bytes_total": dep.ledger.total(),
            "bytes_by_kind": dep.ledger.by_kind(),
            "bytes_eval": dep.ledger.eval_total(),
            "bytes_crossed": dep.ledger.crossed_total(),
            "bytes_crossed_nodes": dep.ledger.crossed_nodes_total(),  # between Ray nodes
            "messages": dep.ledger.messages(),
            "main_metric": dataclasses.asdict(protocol.main_metric()),
            "privacy": {
                **privacy_of(protocol).as_dict(),
                "noise_rng": noise_rng_name(settings),  # seeded, or secure (--secure-rng)
                **secure_aggregation_record(settings),  # --secure-aggregation: what it adds
                **audit,  # --audit: each mechanism's empirical lower bound (engine/audit.py)
            },
            "wall_seconds": wall,
            "sim_seconds": sim_total,
            "faults": faults,
            "rejected": {k: dict(sorted(v.items())) for k, v in sorted(rejected.items())},
            "conditions": _conditions_record(settings),
            "adversaries": _adversaries_record(protocol),
            "baselines": trivial_baselines(dataset, k=config.eval_k),
            "run_dir": str(run_dir),
        }
        report.write_summary(summary)
        finished = summary
    except HostLostError as e:
        raise HostLostError(f"{e}{_resume_hint(run_dir)}") from None
    except NodeFailure as e:
        _stop(e, settings, dataset, dep, run_dir, rollback, faults + dep.round_stats().faults)
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(
            _interrupted_in_round(settings, Path(run_dir), current, saved, not in_rounds)
        ) from None
    finally:
        if bar is not None:  # a bar left open is redrawn under the next run's (compare)
            bar.close()
        try:
            notify_end(callbacks, finished)  # None: the run stopped
        except Exception:
            if finished is not None:  # (a stopped run's own error is the one to report)
                raise
        finally:
            report.close()
            dep.close()
    return run_dir, summary


class _OnRound(RoundCallback):
    """``run(on_round=f)``: ``f(row)`` after each round."""

    def __init__(self, fn: Callable[[dict], None]):
        self.fn = fn

    def on_round(self, row: dict) -> None:
        self.fn(row)


def _own_callbacks(settings, config, dataset, run_dir, start: int) -> list[RoundCallback]:
    """The callbacks the settings ask for: ``--tensorboard``'s writer."""
    tb = getattr(settings, "tensorboard", None)  # (a checkpoint of an older run has no field)
    if tb is None:
        return []
    from engine.tensorboard import TensorBoardWriter, log_dir

    folder = log_dir(tb, run_dir, getattr(settings, "tensorboard_run", None))
    record = {
        "protocol": settings.protocol,
        "dataset": dataset.name,
        "seed": settings.seed,
        "rounds": settings.rounds,
        "placement": settings.placement,
        "hosts": settings.hosts,
        "protocol_config": dataclasses.asdict(config),
        "run_dir": str(run_dir),
    }
    return [TensorBoardWriter(folder, start=start, config=record)]
