"""summary.json: the one record of how a run ended, built by :func:`run_summary`.

A run that finished has ``status: "ok"`` and every figure (metrics, bytes, privacy, time,
faults, placement, baselines); :data:`engine.report.SUMMARY_KEYS` are the stable part. A run a node
stopped has ``status: "failed"``, what it is (protocol, dataset, seed, placement, hosts, rounds,
faults, run folder) and what stopped it: ``error`` (node, round, phase, message), ``traceback``
(the file holding it) and ``resumes_at_round`` (None: no checkpoint). A run stopped by Ctrl-C
writes none (its message says so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from protocols.base import PrivacyReport, Protocol

if TYPE_CHECKING:
    from engine.session import RunState


@dataclass
class Failure:
    """What stopped a run, as summary.json's failed-run fields hold it.

    Attributes:
        error: ``{"node", "round", "phase", "error"}`` of the failing node.
        traceback: the file holding the node's traceback.
        resumes_at_round: the round the run's checkpoint resumes at (None: it has none).
    """

    error: dict
    traceback: Path
    resumes_at_round: int | None


def run_summary(state: RunState, failure: Failure | None = None) -> dict:
    """summary.json's dict of the run in ``state``: ``status: "ok"`` with every figure when
    ``failure`` is None, else ``status: "failed"`` with the failure's fields (module docstring).
    ``--audit`` runs its audit here (engine/audit.py)."""
    settings, dep = state.settings, state.dep
    faults = list(state.totals.faults)
    if failure is not None:  # the failing round's faults so far
        faults += dep.round_stats().faults
    summary = {
        "status": "ok" if failure is None else "failed",
        "protocol": settings.protocol,
        "dataset": state.dataset.name,
        "seed": settings.seed,
        "placement": settings.placement,
        "hosts": settings.hosts,  # --hosts as asked: the actors a packed placement puts users on
        "rounds": settings.rounds,
        "faults": faults,
    }
    if failure is None:
        summary.update(_outcome(state))
    else:
        summary.update(
            error=failure.error,
            traceback=str(failure.traceback),
            resumes_at_round=failure.resumes_at_round,
        )
    summary["run_dir"] = str(state.run_dir)
    return summary


def _outcome(state: RunState) -> dict:
    """The figures of a finished run (the ok summary's fields besides the run's identity)."""
    from models.baselines import trivial_baselines  # (torch: imported only when a run reports)

    settings, protocol, dep, totals = state.settings, state.protocol, state.dep, state.totals
    wall = state.elapsed  # the rounds' wall time, without the audit's
    audit = {}
    if getattr(settings, "audit", False):  # (a checkpoint of an older run has no field)
        from engine.audit import audit_run

        audit["audit"] = audit_run(
            protocol, seed=settings.seed, secure=settings.conditions.secure_rng
        )
    placement = dep.host_info()
    return {
        # format, files (sha256) and sizes, from data.registry.load_dataset
        "dataset_provenance": state.dataset.meta.get("provenance"),
        "host_actors": dep.n_hosts,  # every host actor started, the server's own ones too
        # where each host actor ran: its Ray node, the GPUs Ray gave it, the device it used
        "host_placement": [
            {k: i[k] for k in ("index", "node_id", "gpu_ids", "device", "nodes")} for i in placement
        ],
        "gpu_note": gpu_note(placement),  # GPU ids CUDA cannot see (None: none)
        # how supersteps travelled, and what the transport had to say (a graph rebuilt...)
        "transport": dep.transport_summary(),
        "metrics": state.metrics,
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
        "sim_seconds": totals.sim_seconds,
        "rejected": {k: dict(sorted(v.items())) for k, v in sorted(totals.rejected.items())},
        "conditions": conditions_record(settings),
        "adversaries": adversaries_record(protocol),
        "baselines": trivial_baselines(state.dataset, k=protocol.config.eval_k),
    }


def privacy_of(protocol: Protocol) -> PrivacyReport:
    """``protocol.privacy()``, which the contract makes a :class:`PrivacyReport`."""
    report = protocol.privacy()
    if not isinstance(report, PrivacyReport):
        raise TypeError(
            f"{type(protocol).__name__}.privacy() returned a {type(report).__name__}, not a "
            "protocols.base.PrivacyReport"
        )
    return report


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


def adversaries_record(protocol: Protocol) -> dict | None:
    """summary.json's ``adversaries``: the attack, how many fake and compromised users, the
    targets and the defence (None: an honest run without target items)."""
    plan = getattr(protocol, "adversary_plan", None)
    return plan.summary() if plan is not None else None


def noise_rng_name(settings) -> str:
    """The report's ``privacy.noise_rng``: ``"seeded"`` (every node's noise from its stream seeded
    from (seed, node id): reproducible) or ``"secure (ChaCha20, OS key)"`` (``--secure-rng``)."""
    from privacy.noise import describe

    return describe(settings.conditions.secure_rng)


def secure_aggregation_record(settings) -> dict:
    """summary.json's ``privacy.secure_aggregation`` with ``--secure-aggregation``: its parameters
    and what it adds to the privacy figures and what it does not (nodes/secure_sum.py)."""
    from nodes.secure_sum import guarantee

    cfg = settings.conditions.secure_aggregation
    return {} if cfg is None else {"secure_aggregation": guarantee(cfg)}


def conditions_record(settings) -> dict:
    """The run conditions as config.json and summary.json hold them (without the per-round
    availability table ``online_rounds``)."""
    c = dataclasses.asdict(settings.conditions)
    c.pop("online_rounds", None)
    return c
