"""The run report: ``runs/<time>-<protocol>/`` with the resolved config, per-round metrics, the
summary (a stable contract, see :data:`SUMMARY_KEYS`) and PNG plots."""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from engine.figures import fmt_bytes, is_number, main_metric  # noqa: E402

SUMMARY_KEYS = (
    "protocol",
    "dataset",
    "seed",
    "placement",
    "hosts",
    "rounds",
    "metrics",
    "bytes_total",
    "bytes_by_kind",
    "privacy",
    "wall_seconds",
)


def dataset_record(dataset, extra: dict | None = None) -> dict:
    """The dataset as run reports and comparisons name it: its name and sizes, then ``extra``."""
    return {
        "name": dataset.name,
        "n_users": dataset.n_users,
        "n_items": dataset.n_items,
        "train": len(dataset.train),
        "test": len(dataset.test),
        **(extra or {}),
    }


def new_run_dir(out: str | Path, protocol: str) -> Path:
    base = Path(out)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = base / f"{stamp}-{protocol}"
    n = 1
    while path.exists():
        n += 1
        path = base / f"{stamp}-{protocol}-{n}"
    path.mkdir(parents=True)
    return path


def jsonable(x):
    """``x`` as metrics.jsonl and summary.json hold it: non-finite floats None, dict keys strings,
    tuples lists, numpy and torch scalars Python numbers."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
        return jsonable(x.item())
    return x


class RunDirError(ValueError):
    """The folder is not a readable launch.py run directory."""


def read_rows(run_dir: Path) -> list[dict]:
    """metrics.jsonl rows; a resumed run may repeat rounds after its checkpoint: the last
    written row of each round wins (it is the one the finished run continued from)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no metrics.jsonl (not a launch.py run directory?)")
    by_round: dict[int, dict] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            by_round[int(row["round"])] = row
        except (ValueError, KeyError, TypeError) as err:
            raise RunDirError(f"{path}:{number}: not a metrics row ({err})") from None
    if not by_round:
        raise RunDirError(f"{path}: no rows")
    return [by_round[r] for r in sorted(by_round)]


class RunReport:
    def __init__(self, run_dir: Path, resume_after: int | None = None):
        """``resume_after=r`` continues an existing report: rows of rounds after ``r`` (written
        before an interruption, after the checkpoint) are dropped, the rest kept."""
        self.dir = Path(run_dir)
        self.rows: list[dict] = []
        if resume_after is not None:
            self.rows = [r for r in read_rows(self.dir) if r["round"] <= resume_after]
        self._metrics = open(self.dir / "metrics.jsonl", "w")
        for row in self.rows:
            self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()

    def write_config(self, config: dict) -> None:
        (self.dir / "config.json").write_text(json.dumps(jsonable(config), indent=2) + "\n")

    def record_change(
        self, from_round: int, config: dict, params: dict, rounds: int | None = None
    ) -> None:
        """config.json after a resume: the new plan (``settings.rounds``), the new
        ``protocol_config``, and the resume appended to its ``resumed_with`` list."""
        path = self.dir / "config.json"
        record = json.loads(path.read_text()) if path.is_file() else {}
        record["protocol_config"] = config
        entry = {"from_round": from_round, "params": params}
        if rounds is not None:
            entry["rounds"] = rounds
            record.setdefault("settings", {})["rounds"] = rounds
        record.setdefault("resumed_with", []).append(entry)
        self.write_config(record)

    def add_round(self, row: dict) -> dict:
        """Append ``row`` to metrics.jsonl; returns it as written (the round callbacks' row)."""
        row = jsonable(row)
        self.rows.append(row)
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()
        return row

    def write_summary(self, summary: dict) -> None:
        """summary.json (engine/summary.py). A finished run's holds every :data:`SUMMARY_KEYS`; a
        failed run's (``status: "failed"``) holds what stopped it, a value JSON cannot hold
        written as its ``str``."""
        failed = summary.get("status") == "failed"
        missing = [] if failed else [k for k in SUMMARY_KEYS if k not in summary]
        if missing:
            raise ValueError(f"summary lacks {missing}")
        text = json.dumps(jsonable(summary), indent=2, default=str if failed else None)
        (self.dir / "summary.json").write_text(text + "\n")

    def close(self) -> None:
        self._metrics.close()
        if self.rows:
            self.plot()

    def plot(self) -> list[Path]:
        """Write the run's PNGs; returns the paths written."""
        return plot_run(self.rows, self.dir)


# --- what the rows say ---------------------------------------------------------------------------
def privacy_row(report) -> dict:
    """A :class:`protocols.base.PrivacyReport` as one metrics.jsonl row holds it: the numbers of
    its details (:func:`privacy_scalars`) and its typed figures (``epsilon``, ``epsilon_budget``,
    ``delta_spent``, ``paper_value``, ``paper_kind``, ``paper_what``, ``paper_composed``)."""
    return {**privacy_scalars(report.details), **report.figures()}


def privacy_scalars(privacy: dict) -> dict:
    """The numbers of ``protocol.privacy()`` for one metrics row: numeric entries, and those of
    nested dicts one level down as ``outer.inner`` (``paper_stated_rdp.epsilon``); text, flags
    and deeper structures (an accountant's per-label tables) are left to summary.json."""
    out = {}
    for k, v in (privacy or {}).items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if is_number(v2):
                    out[f"{k}.{k2}"] = v2
        elif is_number(v):
            out[k] = v
    return out


def _num(x) -> float | None:
    """A finite float, or None (null, "inf", NaN, text)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _loss_keys(rows: list[dict]) -> list[str]:
    keys = {k for r in rows for k, v in (r.get("train") or {}).items() if _num(v) is not None}
    return sorted(k for k in keys if k == "loss" or k.startswith("loss") or k.endswith("loss"))


def _metric_names(rows: list[dict]) -> list[str]:
    return sorted(
        {k for r in rows for k, v in (r.get("metrics") or {}).items() if _num(v) is not None}
    )


def _plotted_metric(rows: list[dict]) -> str | None:
    """The metric a comparison plot draws for a run: its main metric over every evaluated row,
    else its first metric by name."""
    names = _metric_names(rows)
    name, _ = main_metric({k: 0.0 for k in names})
    return name or (names[0] if names else None)


def privacy_points(row: dict) -> dict:
    """One row's privacy figures, as :meth:`protocols.base.PrivacyReport.figures` wrote them:
    ``epsilon`` (rigorous, spent so far), ``epsilon_paper`` and its ``paper_label`` (the paper's
    ε claim), ``epsilon_budget``, and for a mechanism that spends δ at ε = 0 ``delta`` (rigorous)
    and ``delta_paper`` (the paper's, composed); a figure the row lacks is None."""
    p = row.get("privacy") or {}
    out = {
        "epsilon": _num(row.get("epsilon", p.get("epsilon"))),
        "epsilon_paper": None,
        "paper_label": None,
        "epsilon_budget": _num(p.get("epsilon_budget")),
        "delta": None,
        "delta_paper": None,
    }
    if p.get("paper_kind") == "delta":
        out["delta"], out["delta_paper"] = _num(p.get("delta_spent")), _num(p.get("paper_composed"))
    elif _num(p.get("paper_value")) is not None:
        out["epsilon_paper"] = _num(p["paper_value"])
        out["paper_label"] = f"paper: {p.get('paper_what') or 'stated ε'}"
    return out


def spends_privacy(rows: list[dict]) -> bool:
    """Whether some row has spent a finite ε > 0 or (ε = 0 mechanisms) a δ > 0."""
    for r in rows:
        pts = privacy_points(r)
        if (pts["epsilon"] or 0) > 0 or (pts["delta"] or 0) > 0:
            return True
    return False


def _series(rows: list[dict], x_key: str, get) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        x, y = _num(r.get(x_key)), get(r)
        if x is not None and y is not None:
            xs.append(x)
            ys.append(y)
    return xs, ys


# --- drawing -------------------------------------------------------------------------------------
def _human_bytes(n: float, _pos=None) -> str:
    """A byte count on a plot's axis (matplotlib's FuncFormatter signature)."""
    return fmt_bytes(n, ".3g")


def _style(n_points: int) -> dict:
    return {"marker": "o", "markersize": 4} if n_points <= 30 else {}


def _log_if_spread(ax, values, axis="y") -> None:
    pos = [v for v in values if v is not None and v > 0]
    if pos and max(pos) / min(pos) > 100:
        (ax.set_yscale if axis == "y" else ax.set_xscale)("log")


def _round_axis(ax, rounds) -> None:
    """Integer round ticks over the whole run (a lone evaluation sits at its round)."""
    rounds = sorted({r for r in rounds if r is not None})
    if not rounds:
        return
    lo, hi = rounds[0], rounds[-1]
    pad = max((hi - lo) * 0.04, 0.5 if hi - lo < 2 else 0.0)
    ax.set_xlim(lo - pad, hi + pad)
    if len(rounds) <= 12:
        ax.set_xticks(rounds)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig, path: Path, right: float = 1.0) -> Path:
    fig.tight_layout(rect=(0, 0, right, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_run(rows: list[dict], out_dir: Path) -> list[Path]:
    """metrics.png, participation.png (absences), bytes.png and privacy.png for one run's rows;
    returns the paths written."""
    out_dir = Path(out_dir)
    written = []
    for draw in (_plot_metrics, _plot_participation, _plot_bytes, _plot_privacy):
        path = draw(rows, out_dir)
        if path is not None:
            written.append(path)
    return written


def _plot_metrics(rows: list[dict], out_dir: Path) -> Path | None:
    """Training loss at every round (top) and each metric at each evaluation (bottom, markers,
    values written beside a lone evaluation), against round and simulated seconds."""
    losses, names = _loss_keys(rows), _metric_names(rows)
    if not losses and not names:
        return None
    xs = [("round", "round")]
    if any(_num(r.get("sim_elapsed")) for r in rows):
        xs.append(("sim_elapsed", "simulated seconds"))
    panels = [p for p, have in (("loss", losses), ("metrics", names)) if have]
    fig, axes = plt.subplots(
        len(panels),
        len(xs),
        figsize=(5.5 * len(xs), 3.4 * len(panels)),
        squeeze=False,
        sharex="col",
    )
    n_eval = sum(
        1 for r in rows if any(_num(v) is not None for v in (r.get("metrics") or {}).values())
    )
    for col, (x_key, x_label) in enumerate(xs):
        for row_i, panel in enumerate(panels):
            ax = axes[row_i][col]
            if panel == "loss":
                all_y = []
                for key in losses:
                    px, py = _series(
                        rows, x_key, lambda r, k=key: _num((r.get("train") or {}).get(k))
                    )
                    ax.plot(px, py, label=f"train {key}", **_style(len(px)))
                    all_y += py
                _log_if_spread(ax, all_y)
                ax.set_ylabel("training loss")
                ax.set_title(f"training loss per round vs {x_label}", fontsize=10)
            else:
                for name in names:
                    px, py = _series(
                        rows, x_key, lambda r, k=name: _num((r.get("metrics") or {}).get(k))
                    )
                    last = f" (last {py[-1]:.4g})" if py else ""
                    ax.plot(px, py, marker="o", markersize=6, label=f"{name}{last}")
                ax.set_ylabel("metric")
                ax.set_title(f"metrics at each evaluation ({n_eval}) vs {x_label}", fontsize=10)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="best")
            if row_i == len(panels) - 1:
                ax.set_xlabel(x_label)
        # the metric panel spans the whole run, so a lone evaluation sits at its round
        px, _ = _series(rows, x_key, lambda r: 0.0)
        if x_key == "round":
            _round_axis(axes[0][col], px)
        elif px:
            lo, hi = min(px), max(px)
            pad = (hi - lo) * 0.05 or 0.5
            axes[0][col].set_xlim(lo - pad, hi + pad)
    return _save(fig, out_dir / "metrics.png")


def _plot_participation(rows: list[dict], out_dir: Path) -> Path | None:
    rounds = [r["round"] for r in rows]
    series = {
        "dropped participants": [r.get("dropped", 0) or 0 for r in rows],
        "late messages": [r.get("late", 0) or 0 for r in rows],
        "faulted nodes": [sum(f["nodes"] for f in r.get("faults") or []) for r in rows],
    }
    if not any(any(v) for v in series.values()):
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, ys in series.items():
        if any(ys):
            ax.plot(rounds, ys, marker=".", label=label)
    ax.set_xlabel("round")
    ax.set_title("absence per round")
    ax.legend(fontsize=7)
    return _save(fig, out_dir / "participation.png")


def _plot_bytes(rows: list[dict], out_dir: Path) -> Path | None:
    """Bytes sent in each round by message kind (log scale: set-up rounds dwarf the others) and
    the cumulative total stacked by kind."""
    kinds = sorted({k for r in rows for k in r.get("bytes_by_kind") or {}})
    if not kinds:
        return None
    rounds = [r["round"] for r in rows]
    colors = plt.get_cmap("tab20" if len(kinds) > 10 else "tab10")
    fig, (ax, ax_cum) = plt.subplots(1, 2, figsize=(12.5, 4))
    cum = []
    for i, kind in enumerate(kinds):
        per = [(r.get("bytes_by_kind") or {}).get(kind, 0) or 0 for r in rows]
        shown = [v if v > 0 else math.nan for v in per]  # a kind absent from a round: a gap
        ax.plot(rounds, shown, color=colors(i), label=kind, **_style(len(rows)))
        cum.append(list(itertools.accumulate(per)))
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("bytes in the round")
    ax.yaxis.set_major_formatter(FuncFormatter(_human_bytes))
    sent = [v for c in cum for v in (c[0], *(b - a for a, b in zip(c, c[1:]))) if v > 0]
    if sent and max(sent) < 10 * min(sent):
        ax.yaxis.set_minor_formatter(FuncFormatter(_human_bytes))  # less than a decade
    else:
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title("bytes per round by message kind (gaps: none sent)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    fig.legend(*ax.get_legend_handles_labels(), fontsize=8, loc="center right", title="kind")
    if len(rows) > 1:
        ax_cum.stackplot(rounds, cum, colors=[colors(i) for i in range(len(kinds))], labels=kinds)
    else:
        bottom = 0
        for i, c in enumerate(cum):
            ax_cum.bar(rounds, c, bottom=bottom, color=colors(i), label=kinds[i], width=0.5)
            bottom += c[0]
    ax_cum.set_xlabel("round")
    for a in (ax, ax_cum):
        _round_axis(a, rounds)
    ax_cum.set_ylabel("cumulative bytes")
    ax_cum.yaxis.set_major_formatter(FuncFormatter(_human_bytes))
    total = sum(c[-1] for c in cum)
    ax_cum.set_title(f"cumulative bytes by kind (total {_human_bytes(total)})", fontsize=10)
    ax_cum.grid(alpha=0.3)
    return _save(fig, out_dir / "bytes.png", right=0.86)


def _plot_privacy(rows: list[dict], out_dir: Path) -> Path | None:
    """ε spent so far at each round, rigorous (worst unit) beside the paper's claim and a budget;
    δ for a mechanism that spends δ at ε = 0. None when no privacy is spent."""
    if not spends_privacy(rows):
        return None
    pts = [(r["round"], privacy_points(r)) for r in rows]
    have_eps = any((p["epsilon"] or 0) > 0 for _, p in pts)
    have_delta = any(p["delta"] is not None for _, p in pts)
    panels = (["epsilon"] if have_eps else []) + (["delta"] if have_delta else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        lines = (
            [
                ("epsilon", "rigorous ε (worst unit)", "-"),
                ("epsilon_paper", None, "--"),
                ("epsilon_budget", "ε budget", ":"),
            ]
            if panel == "epsilon"
            else [
                ("delta", "rigorous δ at ε = 0", "-"),
                ("delta_paper", "paper's δ, composed", "--"),
            ]
        )
        all_y = []
        for key, label, ls in lines:
            xy = [(x, p[key]) for x, p in pts if p[key] is not None]
            if not xy:
                continue
            if label is None:
                label = next(p["paper_label"] for _, p in pts if p["paper_label"])
            px, py = zip(*xy)
            rigorous = key in ("epsilon", "delta")
            ax.plot(
                px,
                py,
                linestyle=ls,
                label=label,
                linewidth=2.5 if rigorous else 1.5,
                zorder=3 if rigorous else 2,
                **_style(len(px)),
            )
            all_y += py
        _round_axis(ax, [x for x, _ in pts])
        if panel == "epsilon":
            _log_if_spread(ax, all_y)
            ax.set_ylabel("ε spent so far")
            ax.set_title("privacy spent: ε vs round", fontsize=10)
        else:
            ax.set_ylabel("δ spent so far")
            ax.set_ylim(-0.02, 1.05)
            ax.set_title("privacy spent: δ vs round", fontsize=10)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    return _save(fig, out_dir / "privacy.png")


# --- several runs --------------------------------------------------------------------------------
def plot_comparison(runs: dict[str, list[dict]], out_dir: Path) -> list[Path]:
    """Comparison plots of several runs, one line per run (``label -> metrics.jsonl rows``):
    ``compare_metric.png`` (each run's main metric vs round, one panel per metric),
    ``compare_bytes.png`` (the same metric vs cumulative bytes sent, log scale; a run that sent
    nothing, the central baseline, is a dashed level) and ``compare_privacy.png`` (ε vs round,
    rigorous solid, the paper's claim dashed, for the runs that spend ε). Returns the paths
    written (a plot with nothing to show is not written)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    colors = plt.get_cmap("tab10" if len(runs) <= 10 else "tab20")
    color = {label: colors(i % colors.N) for i, label in enumerate(runs)}
    by_metric: dict[str, list[str]] = {}
    for label, rows in runs.items():
        name = _plotted_metric(rows)
        if name is not None:
            by_metric.setdefault(name, []).append(label)
    written = []
    if by_metric:
        for kind in ("round", "bytes"):
            fig, axes = plt.subplots(
                1, len(by_metric), figsize=(6.5 * len(by_metric), 4.5), squeeze=False
            )
            for ax, (name, labels) in zip(axes[0], sorted(by_metric.items())):
                for label in labels:
                    _compare_line(ax, kind, name, label, runs[label], color[label])
                ax.set_ylabel(name)
                if kind == "bytes":
                    ax.set_xlabel("cumulative bytes sent")
                    ax.set_title(f"{name} vs bytes sent", fontsize=10)
                else:
                    ax.set_xlabel("round")
                    ax.set_title(f"{name} vs round", fontsize=10)
                    _round_axis(ax, [r.get("round") for label in labels for r in runs[label]])
                ax.grid(alpha=0.3, which="both")
                ax.legend(fontsize=7)
            name = "compare_metric.png" if kind == "round" else "compare_bytes.png"
            written.append(_save(fig, out_dir / name))
    path = _compare_privacy(runs, color, out_dir)
    if path is not None:
        written.append(path)
    return written


def _compare_line(ax, kind: str, name: str, label: str, rows: list[dict], color) -> None:
    cum, xs, ys = 0.0, [], []
    for r in rows:
        cum += _num(r.get("bytes")) or 0
        y = _num((r.get("metrics") or {}).get(name))
        if y is not None:
            xs.append(cum if kind == "bytes" else r["round"])
            ys.append(y)
    if not xs:
        return
    if kind == "round":
        ax.plot(xs, ys, marker="o", markersize=5, color=color, label=label)
    elif cum > 0:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(_human_bytes))
        ax.plot(
            xs, ys, marker="o", markersize=5, color=color, label=f"{label} ({_human_bytes(cum)})"
        )
    else:  # nothing sent: no place on a log axis, a level to compare against
        ax.axhline(ys[-1], color=color, linestyle="--", label=f"{label} (0 bytes sent)")


def _compare_privacy(runs: dict[str, list[dict]], color: dict, out_dir: Path) -> Path | None:
    spenders, delta_only = {}, []
    for label, rows in runs.items():
        if any((privacy_points(r)["epsilon"] or 0) > 0 for r in rows):
            spenders[label] = rows
        elif spends_privacy(rows):
            delta_only.append(label)
    if not spenders:
        return None
    fig, ax = plt.subplots(figsize=(10, 4.8))
    all_y = []
    for label, rows in spenders.items():
        pts = [(r["round"], privacy_points(r)) for r in rows]
        xy = [(x, p["epsilon"]) for x, p in pts if p["epsilon"] is not None]
        ax.plot(
            *zip(*xy),
            color=color[label],
            label=f"{label}: rigorous ε",
            linewidth=2,
            **_style(len(xy)),
        )
        all_y += [y for _, y in xy]
        claim = [(x, p["epsilon_paper"]) for x, p in pts if p["epsilon_paper"] is not None]
        if claim:
            what = next(p["paper_label"] for _, p in pts if p["paper_label"])
            ax.plot(*zip(*claim), color=color[label], linestyle="--", label=f"{label}: {what}")
            all_y += [y for _, y in claim]
    _log_if_spread(ax, all_y)
    _round_axis(ax, [r.get("round") for rows in spenders.values() for r in rows])
    ax.set_xlabel("round")
    ax.set_ylabel("ε spent so far")
    ax.set_title("privacy: rigorous ε (solid) vs the paper's claim (dashed)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if delta_only:
        fig.text(0.01, 0.01, f"spend δ at ε = 0 (not drawn): {', '.join(delta_only)}", fontsize=7)
    return _save(fig, out_dir / "compare_privacy.png")
