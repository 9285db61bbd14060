"""Compare protocols on one dataset: run each on the same data, split and Ray cluster, and write
``runs/<time>-compare/`` with ``comparison.json``, ``comparison.md`` and the comparison plots.

    python launch.py compare --dataset ml-100k --protocols A,B,NAME:VALUE
    python launch.py                       # the main job: compare --quick on the synthetic data

A protocol is named as on ``--protocol``; ``NAME:VALUE`` runs NAME with its ``LABEL_PARAM`` set
to VALUE (``CENTRAL:MODEL`` is ``--protocol CENTRAL --model MODEL`` when the protocol CENTRAL
declares ``LABEL_PARAM = "model"``). Every protocol is set beside the non-private baseline it declares
(:meth:`Protocol.central_baseline`), which is added to the list unless ``baselines=False`` and
run only when a protocol it serves ran (else listed as skipped, in one line); the table gives
the ratio of the two main metrics (each protocol declares its own, :meth:`Protocol.main_metric`),
and the trivial baselines every run reports (summary.json ``baselines``: popularity for recall@K,
the mean rating for RMSE) stand under the protocols as reference rows, and as levels in the plots.

Per protocol the table (and ``comparison.json``, which holds every figure of the table) has: the
main metric and its ratio to the baseline, bytes per round (by kind in a second table), total
bytes, the rigorous ε (with its δ) beside the figure the paper states (an ε, or a δ shown as
"δ = ..." where the paper states a δ) and, when the runs were audited with ``--audit``, each
mechanism's empirical 95 % lower bound, attack leakage where an
attack was run, wall seconds (the rounds, and the start-up of its actors apart) and simulated
deployment seconds. A protocol that cannot run (it raises: the data lack ratings, a parameter
does not fit, a host was lost) is listed with its one-line reason, whole (under the terminal's
table, wrapped), and the comparison goes on.

The main job's small settings are each protocol's ``QUICK`` declaration: a demonstration of the
product on the embedded synthetic data, not the protocols' accuracy (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from engine.audit import describe, headline
from engine.figures import fmt, fmt_bytes, jsonable, main_metric, one_line

__all__ = [
    "CompareError",
    "Entry",
    "compare",
    "fmt",
    "fmt_bytes",
    "jsonable",
    "main_metric",
    "one_line",
    "parse_label",
    "plan",
    "render_markdown",
    "render_text",
]


class CompareError(ValueError):
    """A comparison that cannot be set up (an unknown protocol, a duplicate label)."""


@dataclass
class Entry:
    """One protocol of a comparison."""

    label: str  # as named on --protocols: "NAME" or "NAME:VALUE"
    protocol: str
    params: dict = field(default_factory=dict)
    rounds: int = 20
    added: bool = False  # a baseline added to the list (not named by the user)
    # the labels of the entries this one is the baseline of: it runs only when one of them ran
    # (empty: it runs whatever else did, as every entry the user named)
    serves: tuple[str, ...] = ()


def parse_label(label: str) -> tuple[str, dict]:
    """``"NAME"`` → ``(NAME, {})``; ``"NAME:VALUE"`` → ``(NAME, {NAME's LABEL_PARAM: VALUE})``;
    a class given by its import path (``"pkg.module:Class"``) is one protocol."""
    from protocols import is_import_path

    label = label.strip()
    if is_import_path(label):
        _protocol_class(label)
        return label, {}
    name, colon, value = label.partition(":")
    cls = _protocol_class(name)
    if not colon:
        return name, {}
    if cls.LABEL_PARAM is None or not value:
        raise CompareError(f"{label!r}: {name} takes no NAME:VALUE label")
    return name, {cls.LABEL_PARAM: value}


def _protocol_class(name: str):
    from protocols import get_protocol

    try:
        return get_protocol(name)
    except ValueError as e:
        raise CompareError(str(e)) from None


def baseline_of(protocol: str, params: dict) -> str | None:
    """The label of the non-private centralized baseline a protocol is measured against, as the
    protocol declares it."""
    return _protocol_class(protocol).central_baseline(params)


def plan(
    labels: list[str] | tuple[str, ...],
    *,
    rounds: int | None = None,
    per_label: dict[str, dict] | None = None,
    baselines: bool = True,
    quick: bool = False,
    default_rounds: int = 20,
) -> list[Entry]:
    """The entries of a comparison: ``labels`` in order, then the missing baselines.

    Rounds and parameters of an entry, later ones winning: ``default_rounds``, the protocol's
    quick settings (``quick=True``; :meth:`Protocol.quick_settings`), ``per_label[label]`` (a ``rounds`` key and protocol parameters,
    e.g. from the ``[compare.<label>]`` tables of a config file), then ``rounds`` for every entry.
    An added baseline takes over the shape parameters of the protocol it serves (the embedding
    size, the layers; the protocol's ``BASELINE_SHARES``) unless its own settings say otherwise."""
    per_label = dict(per_label or {})
    entries: list[Entry] = []
    seen: set[str] = set()

    def make(label: str, added: bool, inherited: dict) -> Entry:
        protocol, params = parse_label(label)
        settings = _protocol_class(protocol).quick_settings(params) if quick else {}
        settings.update(per_label.get(label, {}))
        n = settings.pop("rounds", default_rounds)
        if rounds is not None:
            n = rounds
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CompareError(f"{label}: rounds must be an integer >= 1, got {n!r}")
        if "model" in settings and "model" in params and settings["model"] != params["model"]:
            raise CompareError(f"{label}: model is given by the label ({params['model']})")
        return Entry(label, protocol, {**inherited, **params, **settings}, n, added)

    for label in labels:
        label = label.strip()
        if not label:
            continue
        if label in seen:
            raise CompareError(f"{label!r} is named twice")
        seen.add(label)
        entries.append(make(label, False, {}))
    if baselines:
        named = list(entries)
        bases = {e.label: baseline_of(e.protocol, e.params) for e in named}
        for e in named:
            base = bases[e.label]
            if base is None or base in seen:
                continue
            seen.add(base)
            shared = _protocol_class(e.protocol).BASELINE_SHARES
            inherited = {dst: e.params[src] for src, dst in shared.items() if src in e.params}
            base_name, base_params = parse_label(base)
            if (quick and _protocol_class(base_name).quick_settings(base_params)) or (
                base in per_label
            ):
                inherited = {}  # the baseline's own settings decide its shape
            added = make(base, True, inherited)
            added.serves = tuple(label for label, b in bases.items() if b == base)
            entries.append(added)
    unknown = sorted(set(per_label) - seen)
    if unknown:
        raise CompareError(f"settings for protocol(s) not in the comparison: {unknown}")
    return entries


# --- running -------------------------------------------------------------------------------------
def new_compare_dir(out: str | Path) -> Path:
    from engine.report import new_run_dir

    return new_run_dir(out, "compare")


def compare(
    entries: list[Entry],
    dataset,
    base,
    *,
    dataset_info: dict | None = None,
    log=None,
) -> tuple[Path, dict]:
    """Run every entry on ``dataset`` (the same object, so the same split) on one Ray cluster and
    write the comparison report under ``base.out``; ``base`` (a :class:`RunSettings`) gives what
    every run shares (seed, placement, hosts, cluster, conditions), each entry its protocol, rounds
    and parameters. Returns the report's folder and the comparison (``comparison.json``)."""
    from cluster.runtime import start_or_join
    from engine.report import dataset_record
    from engine.runner import RunInterrupted, run

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    t_all = time.perf_counter()
    cmp_dir = new_compare_dir(base.out)
    cluster = start_or_join(base.address, status=log if base.progress else None)
    rows: list[dict] = []
    summaries: dict[str, dict] = {}
    for i, e in enumerate(entries):
        skip = skip_reason(e, rows)
        if skip is not None:
            log(f"[{i + 1}/{len(entries)}] {e.label}: not run, {skip}")
            rows.append({**_entry_record(e), "status": "skipped", "reason": skip})
            continue
        log(f"[{i + 1}/{len(entries)}] {e.label}: {e.rounds} round(s)")
        settings = dataclasses.replace(
            base, protocol=e.protocol, rounds=e.rounds, out=str(cmp_dir), params=dict(e.params)
        )
        if getattr(base, "tensorboard", None) is not None:  # side by side: one log folder
            tb = (
                Path(base.tensorboard) / cmp_dir.name
                if base.tensorboard
                else cmp_dir / "tensorboard"
            )
            settings.tensorboard, settings.tensorboard_run = str(tb), e.label
        t0 = time.perf_counter()
        try:
            _, summary = run(settings, dataset, dataset_info)
        except KeyboardInterrupt as stop:  # one line: which protocol, where, what was saved
            raise RunInterrupted(
                f"comparison interrupted at [{i + 1}/{len(entries)}] {e.label} "
                f"({str(stop) or 'before its first round'}); comparison.md was not written, the "
                f"finished runs' reports are in {cmp_dir}"
            ) from None
        except Exception as exc:  # noqa: BLE001 — a protocol that cannot run is listed, not fatal
            reason = one_line(exc)
            log(f"    {e.label} did not run: {reason}")
            rows.append(
                {
                    **_entry_record(e),
                    "status": "failed",
                    "reason": reason,
                    "error": "".join(traceback.format_exception_only(type(exc), exc)).strip(),
                }
            )
            continue
        summaries[e.label] = summary
        rows.append({**_entry_record(e), **protocol_row(summary, time.perf_counter() - t0)})
    _attach_baselines(rows, entries)
    references = reference_rows(rows, summaries)
    comparison = {
        "dataset": dataset_record(
            dataset, {"split": dataset_info["split"]} if "split" in (dataset_info or {}) else None
        ),
        "seed": base.seed,
        "placement": base.placement,
        "hosts": base.hosts,
        "cluster": {"nodes": cluster.nodes, "cpus": cluster.cpus, "gpus": cluster.gpus},
        "protocols": rows,
        # trivial baselines every run reports (summary.json "baselines"): the level a protocol
        # must beat to have learned anything (popularity ranking; the mean rating for RMSE)
        "references": references,
        "wall_seconds": None,
        "plots": [],
    }
    comparison["plots"], plot_error = _plots(rows, cmp_dir, references)
    if plot_error:
        comparison["plots_error"] = plot_error
    comparison["wall_seconds"] = time.perf_counter() - t_all
    comparison = jsonable(comparison)
    (cmp_dir / "comparison.json").write_text(json.dumps(comparison, indent=2) + "\n")
    (cmp_dir / "comparison.md").write_text(render_markdown(comparison))
    return cmp_dir, comparison


def skip_reason(e: Entry, rows: list[dict]) -> str | None:
    """Why baseline ``e`` is not run (None: it runs): every entry it serves has been tried and
    none ran, so there is nothing to measure against it."""
    if not e.serves:
        return None
    tried = {r["label"]: r["status"] for r in rows}
    if any(tried.get(label) != "failed" and tried.get(label) != "skipped" for label in e.serves):
        return None  # one ran, or has yet to run
    names = ", ".join(e.serves)
    return f"skipped: the baseline of {names}, which did not run"


def _entry_record(e: Entry) -> dict:
    return {
        "label": e.label,
        "protocol": e.protocol,
        "params": dict(e.params),
        "rounds": e.rounds,
        "added_baseline": e.added,
    }


def paper_figure(privacy: dict) -> dict | None:
    """The privacy figure the protocol's paper states, from a summary's privacy record (its
    ``paper_claim``, :class:`protocols.base.PaperClaim`): ``{"value": x, "what": "..."}``."""
    privacy = privacy or {}
    claim = privacy.get("paper_claim")
    if claim:
        return {
            "value": claim["value"],
            "what": claim["what"],
            "kind": claim.get("kind", "epsilon"),  # "delta": a δ (at ε = 0), never an ε
            "composed": claim.get("composed"),
        }
    budget = privacy.get("epsilon_budget")
    if budget is None:
        return None
    return {"value": budget, "what": "ε budget (calibrated)", "kind": "epsilon", "composed": None}


# the trivial baselines of summary.json "baselines" (models/baselines.py), as the tables name them
REFERENCES = {"popularity": "popularity", "mean_rating": "mean rating"}


def reference_rows(rows: list[dict], summaries: dict[str, dict]) -> list[dict]:
    """The trivial baselines beside the protocols: for each main metric of the protocols that
    ran, the value of every trivial baseline of their summary.json ``baselines`` that reports
    it (popularity for recall@K, the mean rating for RMSE), and the protocols below it."""
    out: dict[tuple[str, str], dict] = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("metric") is None:
            continue
        trivial = (summaries.get(r["label"]) or {}).get("baselines") or {}
        for key, figures in trivial.items():
            value = (figures or {}).get(r["metric"])
            if value is None or (key, r["metric"]) in out:
                continue
            out[(key, r["metric"])] = {
                "label": REFERENCES.get(key, key.replace("_", " ")),
                "baseline": key,
                "metric": r["metric"],
                "better": r["better"],
                "value": value,
            }
    for ref in out.values():
        ref["below"] = [r["label"] for r in rows if _worse(r, ref)]
    return list(out.values())


def _worse(r: dict, ref: dict) -> bool:
    """Whether protocol row ``r`` did worse than reference ``ref`` on the reference's metric."""
    if r.get("status") != "ok" or r.get("metric") != ref["metric"] or r.get("value") is None:
        return False
    return r["value"] > ref["value"] if ref["better"] == "lower" else r["value"] < ref["value"]


def attack_figures(summary: dict) -> dict:
    """Attack measurements of the run: metrics named ``attack_*`` (measured at an evaluation) and
    the PrivacyReport's ``attacks`` (``privacy.attacks`` in summary.json)."""
    # attack_*: leakage measured at an evaluation; target_*: exposure of an attack's target
    # items among honest users (adversaries/), beside the main metric
    metrics = summary.get("metrics") or {}
    out = {k: v for k, v in metrics.items() if k.startswith(("attack_", "target_"))}
    out.update((summary.get("privacy") or {}).get("attacks") or {})
    return out


def protocol_row(summary: dict, seconds_total: float) -> dict:
    """The comparison's figures of one run, from its summary.json."""
    metrics = summary.get("metrics") or {}
    privacy = summary.get("privacy") or {}
    name, better = main_metric(metrics, summary.get("main_metric"))
    rounds = max(1, int(summary["rounds"]))
    by_kind = summary.get("bytes_by_kind") or {}
    eps = privacy.get("epsilon")
    delta = privacy.get("privacy_delta")
    wall = summary.get("wall_seconds")
    return {
        "status": "ok",
        "metric": name,
        "better": better,
        "value": metrics.get(name) if name else None,
        "baseline": None,
        "baseline_value": None,
        "ratio": None,
        "bytes_per_round": summary["bytes_total"] / rounds,
        "bytes_per_round_by_kind": {k: v / rounds for k, v in sorted(by_kind.items())},
        "bytes_total": summary["bytes_total"],
        "epsilon": eps,
        "delta": delta if eps is not None else None,  # ∞ at δ: no finite guarantee at that δ
        "private": privacy.get("mechanism") != "none",  # applies a privacy mechanism
        "epsilon_paper": paper_figure(privacy),
        # --audit: each mechanism's empirical lower bound (engine/audit.py; None: not audited)
        "audit": privacy.get("audit"),
        "epsilon_audit": headline(privacy.get("audit")),
        "attack": attack_figures(summary),
        "wall_seconds": wall,
        "startup_seconds": max(0.0, seconds_total - (wall or 0.0)),
        "sim_seconds": summary.get("sim_seconds"),
        "metrics": metrics,
        "run_dir": summary.get("run_dir"),
    }


def _attach_baselines(rows: list[dict], entries: list[Entry]) -> None:
    by_label = {r["label"]: r for r in rows}
    for e, r in zip(entries, rows):
        base = baseline_of(e.protocol, e.params)
        if r["status"] != "ok" or base is None:
            continue
        r["baseline"] = base
        b = by_label.get(base)
        if b is None or b["status"] != "ok" or b["metric"] != r["metric"]:
            continue
        r["baseline_value"] = b["value"]
        if r["value"] is not None and b["value"]:
            r["ratio"] = r["value"] / b["value"]


def _plots(
    rows: list[dict], cmp_dir: Path, references: list[dict] | None = None
) -> tuple[list[str], str | None]:
    """The comparison plots of engine.report.plot_comparison (when that exists), one line
    per protocol that ran and a level per reference (:func:`reference_runs`); ``(paths, None)``
    or ``([], reason)`` if plotting failed."""
    from engine import report

    plot = getattr(report, "plot_comparison", None)
    if plot is None:
        return [], None
    runs: dict[str, list[dict]] = {}
    for r in rows:
        if r["status"] == "ok" and r.get("run_dir"):
            try:
                runs[r["label"]] = report.read_rows(Path(r["run_dir"]))
            except report.RunDirError:
                continue
    if not runs:
        return [], None
    runs.update(reference_runs(runs, references or []))
    try:
        paths = plot(runs, cmp_dir) or []
    except Exception as exc:  # noqa: BLE001 — plots are a courtesy; the tables are written anyway
        return [], one_line(exc)
    return [str(Path(p)) for p in paths], None


def reference_runs(runs: dict[str, list[dict]], references: list[dict]) -> dict[str, list]:
    """The references as runs of the plots (``label -> metrics.jsonl-like rows``): the reference's
    value at the first and the last evaluated round of the runs plotting its metric, with no byte
    sent (the bytes plot draws it as a dashed level, like a central baseline)."""
    from engine import report

    plotted = getattr(report, "_plotted_metric", None)
    out: dict[str, list[dict]] = {}
    for ref in references:
        metric = ref["metric"]
        rounds = [
            r["round"]
            for rows in runs.values()
            if plotted is None or plotted(rows) == metric
            for r in rows
            if (r.get("metrics") or {}).get(metric) is not None and r.get("round") is not None
        ]
        if not rounds:
            continue
        label = f"{ref['label']} (reference)"
        if label in out or label in runs:
            label = f"{ref['label']}, {metric} (reference)"
        out[label] = [
            {"round": x, "bytes": 0, "metrics": {metric: ref["value"]}}
            for x in sorted({min(rounds), max(rounds)})
        ]
    return out


# --- rendering ----------------------------------------------------------------------------------
def epsilon_cell(r: dict) -> str:
    if r.get("status", "ok") != "ok":
        return "— (did not run)"  # not a figure of the protocol: it spent nothing
    if not r.get("private", True):
        return "none (non-private)"
    if r.get("epsilon") is None:
        return "— (no DP)"
    cell = fmt(r["epsilon"])
    if r.get("delta") is not None:
        cell += f" (δ={fmt(r['delta'])})"
    return cell


def audit_cell(r: dict) -> str:
    """The audit's 95 % lower bound(s), one per audited mechanism ("—": audited, no mechanism)."""
    records = r.get("audit")
    if records is None or r.get("status", "ok") != "ok":
        return "—"
    return "; ".join(describe(a) for a in records) or "— (no mechanism)"


def audited(rows: list[dict]) -> bool:
    """Whether any run of the comparison was audited (--audit): the audit column is shown."""
    return any(r.get("audit") is not None for r in rows)


def paper_cell(r: dict) -> str:
    """The privacy figure the paper states: an ε as ``0.54 (RDP ε at order 1.5)``, a δ (a claim
    of kind "delta", :class:`protocols.base.PaperClaim`) as ``δ = 0.3333 (...)``, never as an ε."""
    p = r.get("epsilon_paper")
    if not p:
        return "—"
    if p.get("kind") == "delta":
        cell = f"δ = {fmt(p['value'])} ({p['what']}"
        if p.get("composed") is not None:
            cell += f"; δ = {fmt(p['composed'])} over the run"
        return cell + ")"
    return f"{fmt(p['value'])} ({p['what']})"


def paper_short(r: dict) -> str:
    """The paper's figure in a few characters: ``0.54``, or ``δ=0.3333`` for a δ."""
    p = r.get("epsilon_paper") or {}
    if p.get("value") is None:
        return "—"
    return f"δ={fmt(p['value'])}" if p.get("kind") == "delta" else fmt(p["value"])


def attack_cell(r: dict) -> str:
    attack = r.get("attack") or {}
    if not attack:
        return "—"
    shown = {k: v for k, v in attack.items() if k.endswith("f1")} or dict(list(attack.items())[:2])
    return "; ".join(f"{k}={fmt(v)}" for k, v in shown.items())


def metric_cell(r: dict) -> str:
    if r.get("metric") is None:
        return "—"
    arrow = "↑" if r.get("better") == "higher" else "↓"
    return f"{r['metric']} {arrow} {fmt(r['value'])}"


def ratio_cell(r: dict) -> str:
    if r.get("baseline") is None:
        return "—"
    if r.get("ratio") is None:
        return f"— ({r['baseline']} did not run)"
    return f"{fmt(r['ratio'])} × {r['baseline']} ({fmt(r['baseline_value'])})"


COLUMNS = (
    "protocol",
    "rounds",
    "main metric",
    "vs central baseline",
    "bytes/round",
    "total bytes",
    "ε rigorous",
    "paper's claim (ε or δ)",
    "attack leakage",
    "wall s",
    "start-up s",
    "sim s",
)
AUDIT_COLUMN = "ε audit (95 % lower bound)"  # after "ε rigorous" when the runs were audited


def columns(rows: list[dict]) -> tuple[str, ...]:
    """The main table's columns: :data:`COLUMNS`, with :data:`AUDIT_COLUMN` beside the rigorous
    ε when any run was audited (--audit)."""
    if not audited(rows):
        return COLUMNS
    at = COLUMNS.index("ε rigorous") + 1
    return COLUMNS[:at] + (AUDIT_COLUMN,) + COLUMNS[at:]


def table_row(r: dict, with_audit: bool = False) -> list[str]:
    """The cells of one protocol's line of the main table (``with_audit``: the audit column)."""
    width = len(COLUMNS) + with_audit
    if r["status"] != "ok":
        return [r["label"], fmt(r["rounds"]), status_text(r)] + ["—"] * (width - 3)
    return [
        r["label"],
        fmt(r["rounds"]),
        metric_cell(r),
        ratio_cell(r),
        fmt_bytes(r["bytes_per_round"]),
        fmt_bytes(r["bytes_total"]),
        epsilon_cell(r),
        *([audit_cell(r)] if with_audit else []),
        paper_cell(r),
        attack_cell(r),
        fmt(r["wall_seconds"]),
        fmt(r["startup_seconds"]),
        fmt(r["sim_seconds"]),
    ]


def status_text(r: dict) -> str:
    """A protocol that did not run, with its whole reason: ``failed: <reason>`` or ``skipped:
    ...`` (the reason of a skipped baseline says so itself)."""
    reason = r.get("reason") or ""
    return reason if r["status"] == "skipped" else f"failed: {reason}"


def reference_row(ref: dict, width: int) -> list[str]:
    """A trivial baseline's line of the main table: its metric, the rest "—"."""
    cells = [f"{ref['label']} (reference)", "—", metric_cell(ref)]
    return cells + ["—"] * (width - len(cells))


def below_lines(references: list[dict], rows: list[dict]) -> list[str]:
    """One line per reference some protocol fell below: ``Below popularity (recall@20 0.23):
    <label> 0.075, <label> 0.06.``"""
    value = {r["label"]: r.get("value") for r in rows}
    return [
        f"Below {ref['label']} ({ref['metric']} {fmt(ref['value'])}): "
        + ", ".join(f"{label} {fmt(value.get(label))}" for label in ref["below"])
        + "."
        for ref in references
        if ref.get("below")
    ]


def md_table(header, rows) -> list[str]:
    def esc(c: str) -> str:
        return str(c).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(comparison: dict) -> str:
    """comparison.md: the main table, bytes per round by kind, and the failures' reasons."""
    d = comparison["dataset"]
    rows = comparison["protocols"]
    lines = [
        f"# Comparison on {d['name']}",
        "",
        f"{d['n_users']} users, {d['n_items']} items, {d['train']} training and {d['test']} test "
        f"interactions (the same split for every protocol); seed {comparison['seed']}, "
        f"placement {comparison['placement']}, {comparison['hosts']} host(s); "
        f"{fmt(comparison['wall_seconds'])} s in all.",
        "",
    ]
    with_audit = audited(rows)
    refs = comparison.get("references") or []
    header = columns(rows)
    lines += md_table(
        header,
        [table_row(r, with_audit) for r in rows] + [reference_row(x, len(header)) for x in refs],
    )
    below = below_lines(refs, rows)
    lines += ["", *below] if below else []
    lines += [
        "",
        "Main metric: recall@k for ranking (↑ better), RMSE for rating prediction (↓ better); "
        "the ratio is this protocol's value over its central baseline's. "
        + (
            "A reference is a trivial baseline every run reports (summary.json baselines): "
            "popularity ranks each user's unseen items by their training counts, the mean rating "
            "predicts every rating by the training mean; below it, a protocol learned less than "
            "counting. "
            if refs
            else ""
        )
        + "ε rigorous: what the protocol's accountant proves for the rounds run; paper's claim: "
        "the figure the paper states (an ε, or a δ where the paper states a δ at ε = 0). "
        + (
            "ε audit: with --audit, the empirical 95 % lower bound of each mechanism's audit "
            "(one release, the run's parameters; summary.json's privacy.audit beside the "
            "accountant's figure for that release). "
            if with_audit
            else ""
        )
        + "wall s: the rounds; start-up s: starting its actors and the data they hold; "
        "sim s: simulated deployment time (device speeds and links).",
        "",
        "## Bytes per round by kind",
        "",
    ]
    kinds = [
        [r["label"], kind, fmt_bytes(v)]
        for r in rows
        if r["status"] == "ok"
        for kind, v in r["bytes_per_round_by_kind"].items()
    ]
    lines += md_table(("protocol", "kind", "bytes/round"), kinds) if kinds else ["(none)"]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines += ["", "## Did not run", ""]
        lines += [f"- {r['label']}: {r['reason']}" for r in failed]
    if comparison.get("plots"):
        lines += ["", "## Plots", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in comparison["plots"]]
    if comparison.get("plots_error"):
        lines += ["", f"Plots were not drawn: {comparison['plots_error']}"]
    return "\n".join(lines) + "\n"


# the terminal's table: what a reader needs first, in at most TEXT_WIDTH columns (comparison.md
# keeps every column); (header, cell of a row, widest cell before it is cut with "…")
TEXT_WIDTH = 120
_TEXT_COLUMNS = (
    ("protocol", lambda r: r["label"], 24),  # "mean rating (reference)" whole
    (
        "main metric",
        lambda r: metric_cell(r) if r["status"] in ("ok", "reference") else status_text(r),
        24,
    ),
    ("× central", lambda r: _ratio_short(r), 9),
    ("bytes/round", lambda r: fmt_bytes(r.get("bytes_per_round")), 11),
    ("ε rigorous", lambda r: epsilon_cell(r) if r["status"] == "ok" else "—", 22),
    ("ε audit", lambda r: audit_cell(r), 14),  # only when the runs were audited
    ("paper", lambda r: paper_short(r), 8),
    ("wall s", lambda r: fmt(r.get("wall_seconds")), 7),
)


def _reference_text_row(ref: dict) -> dict:
    """A reference as a row of the terminal table (its metric; the rest "—")."""
    return {
        "label": f"{ref['label']} (reference)",
        "status": "reference",
        "metric": ref["metric"],
        "better": ref["better"],
        "value": ref["value"],
    }


def _ratio_short(r: dict) -> str:
    if r.get("status") != "ok" or r.get("baseline") is None:
        return "—"
    return fmt(r["ratio"]) if r.get("ratio") is not None else "n/a"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(comparison: dict) -> str:
    """The main table for the terminal, at most :data:`TEXT_WIDTH` columns wide: protocol, main
    metric, its ratio to the central baseline, bytes per round, rigorous ε (when the runs were
    audited, --audit: the audit's lower bound beside it, in place of bytes per round), the
    paper's figure and wall seconds, then the references (trivial baselines, "(reference)") and
    who fell below them; a protocol that did not run has its reason cut to its column and
    whole under the table, wrapped to the width (comparison.md has every column and the bytes by
    kind)."""
    rows = comparison["protocols"]
    refs = comparison.get("references") or []
    # audited: the audit's lower bound in place of bytes/round (comparison.md has both)
    hidden = "bytes/round" if audited(rows) else "ε audit"
    shown = [c for c in _TEXT_COLUMNS if c[0] != hidden]
    table = rows + [_reference_text_row(x) for x in refs]
    cols = [(h, [_cut(cell(r), w) for r in table]) for h, cell, w in shown]
    widths = [max(len(h), *(len(c) for c in cells)) if cells else len(h) for h, cells in cols]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line([h for h, _ in cols]), line(["-" * w for w in widths])]
    out += [line([cells[i] for _, cells in cols]) for i in range(len(table))]
    notes = below_lines(refs, rows)
    notes += [f"{r['label']} did not run: {r['reason']}" for r in rows if r["status"] != "ok"]
    for note in notes:
        out += textwrap.wrap(note, TEXT_WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join(out)
