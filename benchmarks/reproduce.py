"""Regenerate the rows of a paper's main table that our datasets allow: the paper's figure beside
ours in the paper's own mode (its calibration or its authors' code) and in the rigorous mode, the
central non-private baseline, the ratios of both modes to it, and the ε the paper claims beside
the rigorous ε of each of our runs.

    python -m benchmarks.reproduce fedpergnn|verfedgnn|dgrec|dipsgnn [--quick] [--write]
        [--name NAME] [--dataset NAME] [--data-dir DIR] [--out runs]

Every run goes through engine.compare on one loaded dataset (one split) and one Ray cluster, so
runs/<time>-compare/ holds each run's report and comparison.md (its ratio column uses compare's
default baselines, not this table's); DGREC's central HyperGNN (its own model trained by a
curator, the ceiling of the per-user model) is benchmarks/dgrec.py's, outside Ray. Figures are
the values at the end of each run; ranking figures (recall, NDCG, MRR) are fractions in every
column, a paper's percentages divided by 100. The paper's figure is shown as a figure only on the
dataset the paper measured it on; on a substitute the column says "— (the paper reports ...)".
A baseline is run only when a paper-mode or rigorous run ran (nothing to compare it against
otherwise); when none ran, the command says why in one line per run, writes nothing and exits 1.

Prints the table and writes benchmarks/out/reproduce-PAPER-DATASET[-quick].json (--name NAME:
NAME.json). A recorded result (a file git tracks) is refused before anything runs unless
--write is given; --write also puts the table in markdown into benchmarks/RESULTS.md, in the block
between ``<!-- reproduce:begin -->`` and ``<!-- reproduce:end -->``: the table of the same paper on
the same dataset is replaced, another paper's (or another dataset's) is kept; without --write
RESULTS.md is never touched. --quick: small budgets (< 10 min per paper on a 2-core machine), not
converged; the default budgets are those of the figures benchmarks/RESULTS.md records.
"""

from __future__ import annotations

import datetime
import re
import sys
import time
from pathlib import Path

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    check_dataset,
    claim_result,
    command,
    commit,
    dataset_tag,
    machine,
    result_name,
    run_main,
    shown_path,
    text_table,
    usage_errors,
    write_result,
)
from benchmarks.papers import HYPERGNN, PAPERS, Paper, Run, as_fraction, figures
from engine.compare import Entry, epsilon_cell, fmt, jsonable, md_table, one_line, paper_cell

PROG = "benchmarks.reproduce"
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
# the block of RESULTS.md that --write rewrites: one entry per (paper, dataset), each opened by
# its ENTRY marker and running to the next entry's marker or to END
BEGIN = "<!-- reproduce:begin -->"
END = "<!-- reproduce:end -->"
ENTRY = "<!-- reproduce:{key} -->"
ENTRY_RE = re.compile(r"^<!-- reproduce:(?!begin -->|end -->)(\S+) -->$", re.M)
# where the block goes in a RESULTS.md that has none yet (at its end)
HEADING = "## Papers' tables, regenerated (`benchmarks.reproduce`)"


def configs(paper: Paper, quick: bool) -> list[tuple[Run, int, object]]:
    """(run, rounds, its typed Config) for every run, before anything starts: a parameter the
    protocol does not have, or a value it refuses, raises ConfigError."""
    from protocols import get_protocol
    from protocols.base import build_config

    out = []
    for run in paper.runs:
        rounds, params = run.budget(quick)
        name = "dgrec" if run.protocol == HYPERGNN else run.protocol
        out.append((run, rounds, build_config(get_protocol(name).Config, params)))
    return out


# --- the table --------------------------------------------------------------------------------
def _value(result: dict | None, metric: str):
    if not result or result.get("status") != "ok":
        return None
    return (result.get("metrics") or {}).get(metric)


def _ratio(value, base):
    return value / base if value is not None and base else None


def metric_label(metric: str) -> str:
    """The metric with the unit of its figures: ranking figures are fractions (0 to 1)."""
    if metric.partition("@")[0] in ("recall", "ndcg", "mrr", "hit", "precision"):
        return f"{metric} (fraction)"
    if metric in ("rmse", "test_rmse"):
        return f"{metric} (rating scale)"
    return metric


def same_dataset(paper_dataset: str, ours: str | None) -> bool:
    """Whether our dataset is the one the paper measured its figure on (names compared without
    case and punctuation: "ML-1M" is "ml-1m"); ``ours`` None: not known, taken to be."""
    if ours is None:
        return True
    key = lambda name: re.sub(r"[^a-z0-9]", "", str(name).lower())  # noqa: E731
    return key(paper_dataset) == key(ours)


def _paper_value(figures: dict, metric: str, ours: str | None = None) -> float | None:
    """The paper's figure on our scale; None where it was not recorded or where it belongs to
    another dataset than ``ours``."""
    value = figures.get("method", {}).get(metric)
    if value is None or not same_dataset(figures["on"], ours):
        return None
    return as_fraction(figures, value)


def _paper_cell(figures: dict, baseline: str, metric: str, ours: str | None = None) -> str:
    """The paper's figure on our scale, where it was printed in percent that figure, and its
    ratio to the paper's baseline; on another dataset than the paper's (``ours``), no figure:
    ``— (the paper reports Book-Crossing: 9.68 %, 0.9738 × LightGCN)``, its ratio being the
    one thing a reader may set beside ours."""
    value = _paper_value(figures, metric)
    if value is None:
        return "not recorded"
    name, theirs = figures.get(baseline, (None, {}))
    base = as_fraction(figures, theirs[metric]) if theirs.get(metric) else None
    if not same_dataset(figures["on"], ours):
        printed = f"{fmt(figures['method'][metric])} %" if figures.get("percent") else fmt(value)
        ratio = f", {fmt(value / base)} × {name}" if base else ""
        return f"— (the paper reports {figures['on']}: {printed}{ratio})"
    cell = f"{fmt(value)} ({figures['on']}"
    if figures.get("percent"):
        cell += f", printed {fmt(figures['method'][metric])} %"
    if base:
        cell += f"; {fmt(value / base)} × {name} {fmt(base)}"
    return cell + ")"


def build_rows(
    name: str, paper: Paper, results: dict[str, dict], dataset: str | None = None
) -> list[dict]:
    """One row per (paper-mode run, baseline, metric); ``results``: label → compare row
    (``status``, ``metrics``, ``epsilon``, ``delta``, ``private``, ``epsilon_paper``);
    ``dataset``: the name of ours (the paper's figure is a figure only on its own dataset;
    None: not known)."""
    paper_figures = figures(name)
    rigorous = (paper.mode("rigorous") or [None])[0]
    rows = []
    for run in paper.mode("paper"):
        mine = results.get(run.label)
        strict = results.get(rigorous.label) if rigorous else mine
        for base in paper.mode("baseline"):
            b = results.get(base.label)
            for metric in paper.metrics:
                value, value_r, value_b = (_value(x, metric) for x in (mine, strict, b))
                rows.append(
                    {
                        "row": f"{run.label} vs {base.label}",
                        "metric": metric,
                        "paper_figure": _paper_cell(paper_figures, base.label, metric, dataset),
                        "paper_value": _paper_value(paper_figures, metric, dataset),
                        "paper_dataset": paper_figures["on"],
                        "paper_mode": value,
                        "rigorous_mode": value_r,
                        "same_run": rigorous is None,
                        "baseline": base.label,
                        "baseline_value": value_b,
                        "ratio_paper_mode": _ratio(value, value_b),
                        "ratio_rigorous_mode": _ratio(value_r, value_b),
                        "epsilon_claimed": paper_cell(mine or {}),
                        "epsilon_paper_mode": epsilon_cell(mine or {}),
                        "epsilon_rigorous_mode": epsilon_cell(strict or {}),
                    }
                )
    return rows


COLUMNS = (
    "row",
    "metric",
    "paper's figure",
    "ours, paper mode",
    "ours, rigorous mode",
    "central baseline",
    "ratio (paper / rigorous mode)",
    "ε claimed",
    "ε rigorous (paper / rigorous mode)",
)


def table_cells(r: dict) -> list[str]:
    same = r["same_run"]
    ratio = fmt(r["ratio_paper_mode"])
    return [
        r["row"],
        metric_label(r["metric"]),
        r["paper_figure"],
        fmt(r["paper_mode"]),
        "same run" if same else fmt(r["rigorous_mode"]),
        f"{fmt(r['baseline_value'])} ({r['baseline']})",
        ratio if same else f"{ratio} / {fmt(r['ratio_rigorous_mode'])}",
        r["epsilon_claimed"],
        r["epsilon_paper_mode"]
        if same
        else f"{r['epsilon_paper_mode']} / {r['epsilon_rigorous_mode']}",
    ]


def entry_key(name: str, dataset: str) -> str:
    """The key of a table in RESULTS.md's block: ``PAPER:DATASET`` (``dgrec:ml-100k``)."""
    return f"{name}:{dataset_tag(dataset)}"


def render(name: str, paper: Paper, rows: list[dict], results: dict, info: dict) -> str:
    """The markdown entry that --write puts into RESULTS.md's block: its marker, a heading
    (paper, dataset, budgets; no date), a line with the command, the JSON, when, where and on
    which commit it was measured, the table, its caption and the runs that did not run."""
    mode = "quick budgets" if info["quick"] else "full budgets"
    key = info.get("key") or entry_key(name, info["dataset"].split(" ")[0])
    measured = f"measured {info['date']} on {info['machine']}"
    if info.get("commit"):
        measured += f", commit {info['commit']}"
    lines = [
        ENTRY.format(key=key),
        f"### {name} on {key.partition(':')[2]} ({mode})",
        "",
        f"`{info['command']}` → `out/{info['json']}` ({info['seconds']:.0f} s in all; {measured})",
        "",
        *md_table(COLUMNS, [table_cells(r) for r in rows]),
        "",
        f"{paper.title}. Datasets: {paper.datasets}; ours: {info['dataset']}. {paper.note}. "
        "Rounds: "
        + ", ".join(f"{label} {res.get('rounds')}" for label, res in results.items())
        + ". Values at the end of each run; ranking figures are fractions in every column (a "
        "paper's percentages divided by 100); ratio = ours / central baseline. ε rigorous: the "
        "accountant's figure for the rounds run (∞: no finite guarantee at that δ).",
    ]
    if info["quick"]:
        lines[-1] += " **Quick budgets: not converged**, a check that the command runs"
        lines[-1] += f"; {paper.quick_note}." if paper.quick_note else "."
    failed = [(k, v.get("reason")) for k, v in results.items() if v.get("status") != "ok"]
    lines += [f"- did not run: {k}: {why}" for k, why in failed]
    return "\n".join(lines) + "\n"


def entries(text: str) -> dict[str, str]:
    """The entries of RESULTS.md's block, key → its markdown (marker included), in order; {}
    where the block is missing. A marker outside the block is not an entry."""
    if BEGIN not in text or END not in text:
        return {}
    inner = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    found = list(ENTRY_RE.finditer(inner))
    out = {}
    for m, nxt in zip(found, [*found[1:], None]):
        out[m.group(1)] = inner[m.start() : nxt.start() if nxt else len(inner)].strip("\n") + "\n"
    return out


def write_results(block: str, key: str, path: Path | None = None) -> bool:
    """Put entry ``block`` (starting with its marker) into the block of ``path`` (None:
    :data:`RESULTS`): the entry of the same ``key`` is replaced where it stands, a new key goes
    at the end of the block; a file without the block gets it, under :data:`HEADING`, at its end.
    Returns whether an entry was replaced."""
    path = RESULTS if path is None else path
    text = path.read_text()
    if BEGIN not in text or END not in text or text.index(END) < text.index(BEGIN):
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{BEGIN}\n{END}\n"
    kept = entries(text)
    replaced = key in kept
    kept[key] = block.strip("\n") + "\n"
    inner = "\n".join(kept.values())
    start = text.index(BEGIN) + len(BEGIN)
    path.write_text(text[:start] + "\n" + inner + text[text.index(END) :])
    return replaced


# --- running ----------------------------------------------------------------------------------
def hypergnn(dataset, rounds: int, params: dict) -> dict:
    """DGREC's model trained centrally (benchmarks/dgrec.py), as a compare row."""
    from benchmarks.dgrec import central_hypergnn

    try:
        fig = central_hypergnn(dataset, rounds, params, eval_every=rounds)
    except Exception as exc:  # noqa: BLE001 — listed like a protocol that could not run
        return {"status": "failed", "reason": one_line(exc), "rounds": rounds}
    metrics = {"recall@20": fig["recall@20"], "ndcg@20": fig["ndcg@20"]}
    return {
        "status": "ok",
        "metrics": metrics,
        "private": False,
        "epsilon": None,
        "rounds": rounds,
        "params": params,
        "wall_seconds": fig["wall_seconds"],
    }


def run_lines(planned: list[tuple[Run, int, object]], dataset: str) -> list[str]:
    """One line per run, in the order they run (compare's runs, then the central HyperGNN):
    ``run 2/3: fedlightgcn calibration=thesis (rigorous mode) on ml-100k, 300 rounds``."""
    order = [*in_compare(planned, True), *in_compare(planned, False)]
    return [
        f"run {i}/{len(order)}: {run.label} ({_mode(run)}) on {dataset}, {rounds} rounds"
        for i, (run, rounds, _) in enumerate(order, 1)
    ]


def _mode(run: Run) -> str:
    return "baseline" if run.mode == "baseline" else f"{run.mode} mode"


def in_compare(planned: list[tuple[Run, int, object]], inside: bool) -> list:
    """The planned runs that go through engine.compare (``inside``), or the others (DGREC's
    central HyperGNN)."""
    return [p for p in planned if (p[0].protocol != HYPERGNN) == inside]


def progress_log(lines: list[str]):
    """engine.compare's log on stderr, its line announcing run ``i`` (``[i/n] ...``) replaced by
    ``lines[i - 1]``; its other lines (a run that did not run, the report) as they are."""

    def log(message: str) -> None:
        start = re.match(r"\[(\d+)/\d+\] ", message)
        if start and 1 <= int(start.group(1)) <= len(lines):
            message = lines[int(start.group(1)) - 1]
        print(message, file=sys.stderr, flush=True)

    return log


def plan(name: str, args) -> list[tuple[Run, int, object]]:
    """The runs of paper ``name`` with their checked Configs, and the dataset argument checked
    (known, its folder there), before anything is read or started; else a UsageError."""
    if name not in PAPERS:
        raise UsageError(f"unknown paper {name!r} (known: {', '.join(PAPERS)})")
    paper = PAPERS[name]
    with usage_errors(f"benchmarks/papers.py, {name}"):
        planned = configs(paper, args.quick)
    check_dataset(args.dataset or paper.dataset, args.data_dir)
    if Path(args.out).is_file():
        raise UsageError(f"--out {args.out}: a file, not a folder")
    claim_result(output_name(name, args), write=args.write)
    return planned


def output_name(name: str, args) -> str:
    """``--name``, else ``reproduce-PAPER-DATASET[-quick]``: a run on another dataset or budget
    never takes the file of another."""
    if getattr(args, "name", None):
        return args.name
    dataset = args.dataset or PAPERS[name].dataset
    return result_name("reproduce", name, dataset_tag(dataset), quick=args.quick)


def ran(paper: Paper, results: dict) -> bool:
    """Whether a paper-mode or rigorous run of ``paper`` ran: else no baseline has anything to
    be compared with."""
    return any(
        (results.get(run.label) or {}).get("status") == "ok"
        for run in paper.runs
        if run.mode != "baseline"
    )


def reproduce(name: str, args) -> dict:
    from data.registry import load_dataset
    from engine import RunSettings
    from engine.compare import compare
    from nodes.conditions import Conditions

    planned = plan(name, args)
    paper = PAPERS[name]
    t0 = time.perf_counter()
    dataset_name = args.dataset or paper.dataset
    say(f"{name}: {len(planned)} runs on {dataset_name}; loading the data")
    with usage_errors(f"--dataset {dataset_name}"):
        dataset = load_dataset(dataset_name, args.data_dir, seed=0, **paper.load)
    lines = run_lines(planned, dataset.name)
    if getattr(args, "dry_run", False):
        print("\n".join(lines))
        print(f"(dry run: {len(lines)} runs planned on {dataset.name}; nothing started)")
        return {}
    measured = tuple(run.label for run in paper.runs if run.mode != "baseline")
    entries = [
        Entry(
            run.label,
            run.protocol,
            run.budget(args.quick)[1],
            rounds,
            # a baseline runs only when a run it is the baseline of ran (engine.compare)
            serves=measured if run.mode == "baseline" else (),
        )
        for run, rounds, _ in in_compare(planned, True)
    ]
    # no per-host snapshots: they exist to recover a dead host and cost a pickling per round
    base = RunSettings(seed=0, out=args.out, progress=True, conditions=Conditions(snapshot_every=0))
    cmp_dir, comparison = compare(
        entries, dataset, base, dataset_info=dataset.meta, log=progress_log(lines)
    )
    results = {r["label"]: r for r in comparison["protocols"]}
    for line, (run, rounds, _) in zip(lines[len(entries) :], in_compare(planned, False)):
        if not ran(paper, results):
            reason = f"skipped: the baseline of {', '.join(measured)}, which did not run"
            say(f"{line.split(':')[0]}: {run.label}: not run, {reason}")
            results[run.label] = {"status": "skipped", "reason": reason, "rounds": rounds}
            continue
        say(line)
        results[run.label] = hypergnn(dataset, rounds, run.budget(args.quick)[1])
    if not ran(paper, results):
        print(f"{name} on {dataset.name}: nothing to reproduce, no paper-mode or rigorous run ran")
        print("\n".join(not_run_lines(results)))
        print(f"runs and comparison: {shown_path(cmp_dir)} (nothing written to benchmarks/out)")
        return {}
    rows = build_rows(name, paper, results, dataset.name)
    out_name = output_name(name, args)
    m = machine()
    info = {
        "key": entry_key(name, dataset.name),
        "commit": commit(),
        "quick": args.quick,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{m['host']}, {m['cores']} cores, {m.get('mem_gib')} GiB, torch "
        f"{m['torch']}, {m['cuda'] or 'CPU only'}",
        "command": command(),
        "json": f"{out_name}.json",
        "dataset": f"{dataset.name} ({dataset.n_users} users, {dataset.n_items} items, "
        f"{len(dataset.train)} / {len(dataset.test)})",
        "seconds": time.perf_counter() - t0,
    }
    keep = "status reason protocol params rounds metrics epsilon delta epsilon_paper bytes_total"
    keep = (*keep.split(), "wall_seconds", "run_dir")
    runs = {k: {f: v[f] for f in keep if f in v} for k, v in results.items()}
    markdown = render(name, paper, rows, results, info)
    figures = {"paper": name, **info, "rows": rows, "runs": runs, "compare_dir": str(cmp_dir)}
    path = write_result(
        out_name, jsonable({**figures, "markdown": markdown}), echo=False, write=args.write
    )
    update = args.write and not args.no_append
    replaced = write_results(markdown, info["key"]) if update else False
    print(summary(name, rows, results, info))
    print(f"runs and comparison: {shown_path(cmp_dir)}")
    print(f"wrote {shown_path(path)}")
    if update:
        done = "replaced the table" if replaced else "added the table"
        print(f"{done} of {info['key']} in {shown_path(RESULTS)}")
    return figures


def say(message: str) -> None:
    """A line of progress, on stderr beside the runs' progress bars."""
    print(message, file=sys.stderr, flush=True)


SUMMARY_COLUMNS = (
    "row",
    "metric",
    "paper's figure",
    "paper mode",
    "rigorous mode",
    "central",
    "ratio",
    "ε rigorous",
)


def _paper_short(r: dict) -> str:
    """The paper's figure for the terminal: the number on its own dataset, else
    ``— (Book-Crossing)``."""
    if r["paper_value"] is not None:
        return fmt(r["paper_value"])
    other = r["paper_figure"].startswith("— (the paper reports")
    return f"— ({r['paper_dataset']})" if other else "—"


def summary(name: str, rows: list[dict], results: dict, info: dict) -> str:
    """The table for the terminal: our figures and the paper's on one scale, each mode's ratio
    to the central baseline, the rigorous ε; the runs that did not run."""
    cells = []
    for r in rows:
        same = r["same_run"]
        ratio = fmt(r["ratio_paper_mode"])
        cells.append(
            [
                r["row"],
                metric_label(r["metric"]),
                _paper_short(r),
                fmt(r["paper_mode"]),
                "same run" if same else fmt(r["rigorous_mode"]),
                fmt(r["baseline_value"]),
                ratio if same else f"{ratio} / {fmt(r['ratio_rigorous_mode'])}",
                r["epsilon_rigorous_mode"],
            ]
        )
    mode = "quick budgets, not converged" if info["quick"] else "full budgets"
    lines = [
        f"{name}, {mode}, on {info['dataset']}: {info['seconds']:.0f} s",
        "values at the end of each run; ratio = ours / central (paper mode / rigorous mode)",
        text_table(SUMMARY_COLUMNS, cells),
    ]
    lines += not_run_lines(results)
    return "\n".join(lines)


def not_run_lines(results: dict) -> list[str]:
    """``did not run: LABEL: reason``, whole, for every run that did not run."""
    return [
        f"did not run: {k}: {v.get('reason')}"
        for k, v in results.items()
        if v.get("status") != "ok"
    ]


def main(argv: list[str] | None = None) -> int:
    return run_main(PROG, _main, argv)


def _main(argv: list[str] | None) -> int:
    p = ArgumentParser(PROG, __doc__)
    p.add_argument("paper", help=f"one of {', '.join(PAPERS)}")
    p.add_argument("--quick", action="store_true", help="small budgets (< 10 min), not converged")
    p.add_argument(
        "--name", default=None, help="benchmarks/out/NAME.json (default reproduce-PAPER-DATASET)"
    )
    p.add_argument(
        "--write",
        action="store_true",
        help=WRITE_HELP + "; and replace this paper's table (on this dataset) in RESULTS.md",
    )
    p.add_argument(
        "--no-append",
        "--no-results",
        dest="no_append",
        action="store_true",
        help="with --write: leave RESULTS.md as it is",
    )
    p.add_argument("--dataset", default=None, help="another dataset (default: the paper's row)")
    p.add_argument("--data-dir", default=None, help="default: ../shared/data beside the checkout")
    p.add_argument("--out", default="runs", help="where the runs and comparison go")
    p.add_argument(
        "--dry-run", action="store_true", help="check, load the data, list the runs and stop"
    )
    args = p.parse_args(argv)
    done = reproduce(args.paper, args)
    return 0 if done or getattr(args, "dry_run", False) else 1


if __name__ == "__main__":
    sys.exit(main())
