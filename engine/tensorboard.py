"""``--tensorboard [DIR]``: a run's figures as TensorBoard event files, written while it runs.

    python launch.py --protocol NAME --dataset ml-100k --tensorboard       # runs/<run>/tensorboard
    tensorboard --logdir runs/<run>/tensorboard
    python launch.py compare --quick --tensorboard                         # one run per protocol
    tensorboard --logdir runs/<time>-compare/tensorboard

Every round writes, at step = the round (0-based, as metrics.jsonl's ``round``), the figures of
its metrics.jsonl row (:func:`scalars`): ``train/*`` (loss and the protocol's training figures),
``metrics/*`` at each evaluation, ``bytes/total``, ``bytes/<kind>`` and the bytes that crossed
hosts and Ray nodes, ``privacy/*`` (ε spent so far, δ, the budget and the protocol's own
numbers), ``time/*`` (wall, simulated round and simulated elapsed seconds) and
``participants/*`` (dropped, late). The values are the row's as metrics.jsonl holds it (a
non-finite ε is not written there, nor here).

Where: without DIR, ``<run folder>/tensorboard``; with DIR, ``DIR/<run folder's name>``, so that
several runs logging to one DIR appear side by side. ``compare`` puts each protocol's run under
its label in one log folder of the comparison (``<comparison>/tensorboard/<label>``, or
``DIR/<comparison's name>/<label>``). A resumed run goes on writing in the same folder; events of
the rounds it makes again are purged (TensorBoard's ``purge_step``).

The ``tensorboard`` package is optional: :func:`require` refuses ``--tensorboard`` without it in
one line naming ``pip install tensorboard`` (launch.py calls it before Ray starts).
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

from engine.figures import is_number
from engine.loop import RoundCallback

SUBFOLDER = "tensorboard"  # <run folder>/tensorboard without DIR
INSTALL = "pip install tensorboard"


class TensorBoardMissing(ImportError):
    """``--tensorboard`` without the tensorboard package (one line, naming the install)."""


def require() -> None:
    """Raise :class:`TensorBoardMissing` unless TensorBoard event files can be written here."""
    try:
        importlib.import_module("tensorboard")
        importlib.import_module("torch.utils.tensorboard")
    except ImportError:
        raise TensorBoardMissing(
            f"--tensorboard needs the tensorboard package, which is not installed ({INSTALL})"
        ) from None


def run_name(label: str) -> str:
    """A run's folder name under a log folder: ``label`` with path separators and characters
    some file systems refuse (the colon of a ``NAME:VALUE`` label) made ``_``."""
    return re.sub(r"[^\w.@+=-]+", "_", label).strip("_") or "run"


def log_dir(setting: str, run_dir: Path, name: str | None = None) -> Path:
    """The event folder of a run: ``run_dir/tensorboard`` when ``setting`` is empty (the flag
    without DIR), else ``setting/<name or run_dir's name>``."""
    if not setting:
        return Path(run_dir) / SUBFOLDER
    return Path(setting) / run_name(name or Path(run_dir).name)


def _numbers(prefix: str, values: dict | None) -> dict[str, float]:
    return {f"{prefix}/{k}": float(v) for k, v in (values or {}).items() if is_number(v)}


def scalars(row: dict) -> dict[str, float]:
    """The TensorBoard scalars of one metrics.jsonl row, by tag (module docstring)."""
    out = _numbers("train", row.get("train"))
    out.update(_numbers("metrics", row.get("metrics")))
    out.update(
        _numbers(
            "bytes",
            {
                "total": row.get("bytes"),
                "crossed_hosts": row.get("bytes_crossed"),
                "crossed_nodes": row.get("bytes_crossed_nodes"),
            },
        )
    )
    out.update(_numbers("bytes", row.get("bytes_by_kind")))
    out.update(_numbers("privacy", row.get("privacy")))
    if "privacy/epsilon" not in out and is_number(row.get("epsilon")):
        out["privacy/epsilon"] = float(row["epsilon"])
    out.update(
        _numbers(
            "time",
            {
                "wall_seconds": row.get("seconds"),
                "sim_seconds": row.get("sim_seconds"),
                "sim_elapsed": row.get("sim_elapsed"),
            },
        )
    )
    out.update(
        _numbers(
            "participants",
            {
                "dropped": row.get("dropped"),
                "late_messages": row.get("late"),
                "late_nodes": row.get("late_nodes"),
            },
        )
    )
    return out


class TensorBoardWriter(RoundCallback):
    """The round callback of ``--tensorboard``: each round's :func:`scalars` into event files
    in ``folder`` (flushed every round, so TensorBoard shows a run while it goes), the run's
    settings and protocol parameters as text at the start, closed when the run ends.
    ``start > 0`` (a resumed run) purges the events of the rounds from ``start`` on that the
    interrupted run wrote after its checkpoint."""

    def __init__(self, folder: str | Path, *, start: int = 0, config: dict | None = None):
        require()
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(self.folder), purge_step=start if start > 0 else None)
        if config:
            text = json.dumps(config, indent=2, default=str)
            self.writer.add_text("config", "```\n" + text + "\n```", global_step=start)

    def on_round(self, row: dict) -> None:
        step = int(row["round"])
        for tag, value in scalars(row).items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def on_end(self, summary: dict | None) -> None:
        self.writer.close()
