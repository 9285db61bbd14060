"""The run report: ``runs/<time>-<protocol>/`` with the resolved config, per-round metrics, the
summary (a stable contract, see :data:`SUMMARY_KEYS`) and PNG plots."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

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


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy / torch scalars
        return _jsonable(x.item())
    return x


class RunReport:
    def __init__(self, run_dir: Path, resume_after: int | None = None):
        """``resume_after=r`` continues an existing report: rows of rounds after ``r`` (written
        before an interruption, after the checkpoint) are dropped, the rest kept."""
        self.dir = Path(run_dir)
        self.rows: list[dict] = []
        if resume_after is not None:
            lines = (self.dir / "metrics.jsonl").read_text().splitlines()
            self.rows = [r for r in map(json.loads, lines) if r["round"] <= resume_after]
        self._metrics = open(self.dir / "metrics.jsonl", "w")
        for row in self.rows:
            self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()

    def write_config(self, config: dict) -> None:
        (self.dir / "config.json").write_text(json.dumps(_jsonable(config), indent=2) + "\n")

    def add_round(self, row: dict) -> None:
        row = _jsonable(row)
        self.rows.append(row)
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()

    def write_summary(self, summary: dict) -> None:
        missing = [k for k in SUMMARY_KEYS if k not in summary]
        if missing:
            raise ValueError(f"summary lacks {missing}")
        (self.dir / "summary.json").write_text(json.dumps(_jsonable(summary), indent=2) + "\n")

    def close(self) -> None:
        self._metrics.close()
        if self.rows:
            self.plot()

    def plot(self) -> None:
        rounds = [r["round"] for r in self.rows]
        metric_names = sorted({k for r in self.rows for k in r.get("metrics", {})})
        if metric_names:
            have_sim = any(r.get("sim_elapsed") for r in self.rows)
            fig, axes = plt.subplots(1, 2 if have_sim else 1, figsize=(11 if have_sim else 6, 4))
            axes = list(axes) if have_sim else [axes]
            xs = [("round", "round")] + ([("sim_elapsed", "simulated seconds")] if have_sim else [])
            for ax, (key, label) in zip(axes, xs):
                for name in metric_names:
                    pts = [
                        (r[key], r["metrics"][name])
                        for r in self.rows
                        if r.get("metrics", {}).get(name) is not None and r.get(key) is not None
                    ]
                    if pts:
                        ax.plot(*zip(*pts), marker="o", label=name)
                ax.set_xlabel(label)
                ax.set_title(f"metrics vs {label}")
                ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(self.dir / "metrics.png", dpi=100)
            plt.close(fig)
        series = {
            "dropped participants": [r.get("dropped", 0) or 0 for r in self.rows],
            "late messages": [r.get("late", 0) or 0 for r in self.rows],
            "faulted nodes": [sum(f["nodes"] for f in r.get("faults") or []) for r in self.rows],
        }
        if any(any(v) for v in series.values()):
            fig, ax = plt.subplots(figsize=(6, 4))
            for label, ys in series.items():
                if any(ys):
                    ax.plot(rounds, ys, marker=".", label=label)
            ax.set_xlabel("round")
            ax.set_title("absence per round")
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(self.dir / "participation.png", dpi=100)
            plt.close(fig)
        kinds = sorted({k for r in self.rows for k in r.get("bytes_by_kind", {})})
        if kinds:
            fig, ax = plt.subplots(figsize=(6, 4))
            for kind in kinds:
                cum, ys = 0, []
                for r in self.rows:
                    cum += r.get("bytes_by_kind", {}).get(kind, 0)
                    ys.append(cum)
                ax.plot(rounds, ys, label=kind)
            ax.set_xlabel("round")
            ax.set_ylabel("cumulative bytes")
            ax.set_yscale("symlog")
            ax.legend(fontsize=7)
            fig.tight_layout()
            fig.savefig(self.dir / "bytes.png", dpi=100)
            plt.close(fig)
        eps = [(r["round"], r["epsilon"]) for r in self.rows if r.get("epsilon") is not None]
        if eps:
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot(*zip(*eps), marker=".")
            ax.set_xlabel("round")
            ax.set_ylabel("ε spent (worst unit)")
            fig.tight_layout()
            fig.savefig(self.dir / "epsilon.png", dpi=100)
            plt.close(fig)
