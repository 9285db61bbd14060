"""``--audit``: after a run, the privacy audits of its mechanism(s) at the quick sample size
(seconds), written to summary.json as ``privacy.audit``.

The engine knows the audits only through the protocol's declaration, :meth:`Protocol.audits
<protocols.base.Protocol.audits>`: each is a :class:`privacy.audit.Audit` built with the run's own
parameters (its clip, noise scale, β, σ, feature layout), calling the mechanism's own code on the
worst-case neighbouring inputs of its privacy unit, with the accountant's figure for that one
release and the paper's claim. :func:`audit_run` runs them with :func:`privacy.audit.run_audit`
(a 95 % lower bound with the threshold chosen on one half of the runs and bounded on the other,
Clopper–Pearson on both error rates; the same at 1 − 10⁻⁶ for the verdict), at
:func:`privacy.audit.quick_samples` runs per hypothesis, from the run's seed, drawing the noise
from the secure generator when the run did (``--secure-rng``).

A mechanism's record: ``mechanism`` (what was audited), ``kind`` (``"epsilon"`` at ``delta``;
``"delta"``: δ at ε = ``epsilon``, for a mechanism without a finite ε; ``"rdp"``: Rényi ε at
``order``; the three figures below are of that kind), ``rigorous_epsilon`` (the accountant's
figure of one release), ``paper_epsilon`` (the paper's claim of the same kind, else None;
``paper_claim`` says what it states), ``lower_bound_95``, ``lower_bound_strict`` (at 1 − 10⁻⁶),
``samples`` (runs per hypothesis), ``verdict`` (consistent: the lower bound is ≤ the rigorous
figure; a claim below the lower bound is refuted by measurement), ``code_path``, ``wall_s``.
At the quick size an audit cannot show an ε much above ln(n/3.7) ≈ 8.6: a lower bound, never an
estimate. ``python -m benchmarks.audit`` runs the full catalogue at full size.
"""

from __future__ import annotations

import dataclasses
import math

from privacy import audit as pa


def audit_record(record: dict) -> dict:
    """The summary.json record of one audit, from :func:`privacy.audit.run_audit`'s."""
    paper = record.get("paper")
    same = paper is not None and paper["kind"] == record["kind"]
    return {
        "mechanism": record["name"],
        "kind": record["kind"],
        "delta": record["delta"],
        "epsilon": record["epsilon"],
        "order": record["order"],
        "rigorous_epsilon": record["rigorous"],
        "paper_epsilon": paper["value"] if same else None,
        "paper_claim": paper["text"] if paper else None,
        "lower_bound_95": record["lower_bound"],
        "lower_bound_strict": record["lower_bound_strict"],
        "samples": record["samples_per_hypothesis"],
        "verdict": record["verdict"],
        "code_path": record["code_path"],
        "wall_s": record["wall_s"],
    }


def audit_run(protocol, seed: int = 0, secure: bool = False, samples: int | None = None) -> list:
    """Run ``protocol``'s declared audits (``protocol.audits()``) at their quick size (or
    ``samples`` runs per hypothesis) from ``seed``; ``secure``: the noise from the secure
    generator. Returns one :func:`audit_record` per mechanism ([] when it declares none)."""
    out = []
    with pa.secure_generators(secure):
        for i, audit in enumerate(protocol.audits()):
            n = pa.quick_samples(audit) if samples is None else samples
            audit = dataclasses.replace(audit, samples=n)
            out.append(audit_record(pa.run_audit(audit, seed=seed + i)))
    return out


def is_consistent(record: dict) -> bool:
    """Whether an audit found no bug: its verdict is not INCONSISTENT."""
    return not record["verdict"].startswith("INCONSISTENT")


def headline(records: list[dict] | None) -> float | None:
    """The largest ε lower bound (95 %) among the ε audits of a run (None: none was audited in ε)."""
    bounds = [r["lower_bound_95"] for r in records or () if r["kind"] == "epsilon"]
    return max(bounds) if bounds else None


def describe(record: dict) -> str:
    """``record``'s lower bound in a few words, of its kind (``δ 0.3``, ``RDP(1.5) 0.4``), with
    ``INCONSISTENT`` when it is above the rigorous figure."""
    lb = record["lower_bound_95"]
    value = "∞" if math.isinf(lb) else f"{lb:.3g}"
    kind = record["kind"]
    what = f"RDP({record['order']:g}) " if kind == "rdp" else "δ " if kind == "delta" else ""
    flag = "" if is_consistent(record) else " INCONSISTENT"
    return f"{what}{value}{flag}"
