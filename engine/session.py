"""A deployed run, round after round: :class:`RunState` and :func:`drive`.

:func:`engine.runner.run` and :func:`engine.runner.resume` build the deployment and a
:class:`RunState`, then hand both to :func:`drive`, which goes through :func:`engine.loop.rounds`
and tells the run's callbacks (:class:`engine.loop.RoundCallback`) what happens: each round's
metrics.jsonl row, evaluations, a failing node, the end. Everything a run writes or shows besides
summary.json — metrics.jsonl, the progress bar, the fault lines, checkpoints, TensorBoard events,
a caller's ``on_round`` — is one of those callbacks (engine/callbacks.py). How the run ends:

- every round done: summary.json (:func:`engine.summary.run_summary`), ``on_end(summary)``;
- a node failed (:class:`NodeFailure`): its traceback in traceback.txt, the callbacks'
  ``on_failure`` (a checkpoint of the last snapshot round), a failed summary.json, the error's
  message naming both files, ``on_end(None)``;
- a host was lost for good (:class:`HostLostError`): the message says whether it can resume;
- Ctrl-C: :class:`RunInterrupted`, one line saying where it stopped and what was saved.

The report and the deployment are closed whichever way it ends.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from engine.checkpoint import Checkpoint, RunTotals
from engine.loop import RoundCallback, RoundResult, notify, notify_end, notify_round, rounds
from engine.report import RunReport, jsonable, privacy_row
from engine.summary import Failure, privacy_of, run_summary
from nodes.deployment import Deployment, HostLostError, NodeFailure

if TYPE_CHECKING:
    from data.types import RecDataset
    from engine.runner import RunSettings
    from protocols.base import Protocol


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the message (one line) names the step or round, what was saved and,
    when a checkpoint exists, the resume command."""


@dataclass
class RunState:
    """A deployed run as it goes: what it runs on, where it writes, and how far it is.

    Attributes:
        settings: the run's :class:`engine.runner.RunSettings`.
        protocol: the protocol on the driver.
        dataset: the data it runs on.
        dep: the deployment of its nodes.
        report: its run report (metrics.jsonl, summary.json).
        run_dir: the run folder.
        status: one-line status messages (``engine.runner._Status``; its ``round`` follows
            :attr:`round`).
        start: the first round this session runs (0, or the round a checkpoint resumes at).
        t_start: ``time.perf_counter()`` at the run's start (earlier sessions' seconds included).
        metrics: the latest evaluation's metrics (``{}`` before the first).
        totals: simulated seconds, faults and rejected messages so far.
        saved: the round the checkpoint on disk resumes at (None: there is none).
        round: the round under way (the last one once all are done).
        in_rounds: False once the last round is done (the summary is being written).
        result: the last round's :class:`engine.loop.RoundResult` (None before the first).
    """

    settings: RunSettings
    protocol: Protocol
    dataset: RecDataset
    dep: Deployment
    report: RunReport
    run_dir: Path
    status: Callable[..., None]
    start: int = 0
    t_start: float = field(default_factory=time.perf_counter)
    metrics: dict = field(default_factory=dict)
    totals: RunTotals = field(default_factory=RunTotals)
    saved: int | None = None
    round: int = 0
    in_rounds: bool = True
    result: RoundResult | None = None

    def __post_init__(self):
        self.run_dir = Path(self.run_dir)
        self.round = self.start

    @property
    def elapsed(self) -> float:
        """Wall seconds of the run so far."""
        return time.perf_counter() - self.t_start

    def checkpoint(self, next_round: int) -> Checkpoint:
        """The run's :class:`Checkpoint` now, between rounds, resuming at ``next_round``."""
        return Checkpoint(
            next_round=next_round,
            settings=self.settings,
            protocol=self.protocol,
            deployment=self.dep.snapshot(),
            metrics=self.metrics,
            elapsed=self.elapsed,
            totals=self.totals,
        )

    def add(self, result: RoundResult) -> None:
        """Take a finished round in: its metrics when it was evaluated, its statistics."""
        self.result = result
        if result.evaluated:
            self.metrics = result.metrics
        self.totals.add(result.stats)


def round_row(state: RunState, res: RoundResult) -> dict:
    """Round ``res``'s metrics.jsonl row (before :func:`engine.report.jsonable`)."""
    ledger, stats, rnd = state.dep.ledger, res.stats, res.round
    privacy = privacy_of(state.protocol)
    return {
        "round": rnd,
        "train": res.train,
        "metrics": res.metrics if res.evaluated else {},
        "bytes": ledger.total(round_=rnd),
        "bytes_by_kind": ledger.by_kind(round_=rnd),
        "bytes_crossed": ledger.crossed_total(round_=rnd),
        "bytes_crossed_nodes": ledger.crossed_nodes_total(round_=rnd),
        "epsilon": privacy.epsilon,
        # the typed figures (paper's claim, budget, δ spent) and the protocol's own numbers
        "privacy": privacy_row(privacy),
        "seconds": res.seconds,
        "sim_seconds": stats.sim_seconds,
        "sim_elapsed": state.totals.sim_seconds,
        "dropped": len(stats.dropped),
        "late": stats.late,
        "late_nodes": len(stats.late_nodes),
        # messages that failed their receiver's check: kind -> reason -> count
        "rejected": stats.rejected,
        "faults": stats.faults,
    }


def drive(
    state: RunState, callbacks: Callable[[RunState], list[RoundCallback]]
) -> tuple[Path, dict]:
    """Rounds ``state.start`` … ``settings.rounds − 1`` of a deployed run, then its summary.

    Args:
        state: the run, deployed (its report open; its deployment restored when it resumes).
        callbacks: makes the run's callbacks, in the order they are told; called inside the
            run, so that one that cannot start still has the report and deployment closed.

    Returns:
        The run folder and summary.json's dict.

    Raises:
        NodeFailure: a node failed; its message names traceback.txt and how to resume.
        HostLostError: a host was lost for good; its message says whether the run resumes.
        RunInterrupted: Ctrl-C; its message says where it stopped and what was saved.
    """
    settings, dep = state.settings, state.dep
    dep.status = state.status
    cbs: list[RoundCallback] = []
    finished = None  # summary.json's dict once written (the callbacks' on_end)

    def before_round(rnd: int) -> None:
        state.round = state.status.round = rnd
        notify(cbs, "before_round", state, rnd)

    def evaluating(on: bool) -> None:
        notify(cbs, "on_evaluating", state, on)

    try:
        cbs += callbacks(state)
        notify(cbs, "on_start", state)
        for res in rounds(
            state.protocol,
            dep,
            settings.rounds,
            start=state.start,
            before_round=before_round,
            evaluating=evaluating,
        ):
            state.add(res)
            # every callback gets the row as metrics.jsonl holds it
            notify_round(cbs, jsonable(round_row(state, res)))
        state.in_rounds = False
        if dep.has_pending():
            raise RuntimeError("messages were left undelivered at the end of the run")
        summary = run_summary(state)
        state.report.write_summary(summary)
        finished = summary
    except HostLostError as e:
        raise HostLostError(f"{e}{resume_hint(state.run_dir)}") from None
    except NodeFailure as e:
        _fail(state, e, cbs)
        raise
    except KeyboardInterrupt:
        raise RunInterrupted(interrupted_in_round(state)) from None
    finally:
        try:
            notify_end(cbs, finished)  # None: the run stopped
        except Exception:
            if finished is not None:  # (a stopped run's own error is the one to report)
                raise
        finally:
            state.report.close()
            dep.close()
    return state.run_dir, finished


def _fail(state: RunState, e: NodeFailure, callbacks: list[RoundCallback]) -> None:
    """A run stopped by a failing node: its traceback in ``run_dir/traceback.txt``, the
    callbacks' ``on_failure`` (the rollback keeper checkpoints the last snapshot round when that
    is later than the checkpoint on disk), summary.json with ``status: "failed"``, and ``e``'s
    message extended to one line naming both files."""
    tb_path = state.run_dir / "traceback.txt"
    tb_path.write_text(e.traceback or "".join(traceback.format_exception(e)))
    notify(callbacks, "on_failure", state, e)
    error = {"node": e.node, "round": e.round, "phase": e.phase, "error": e.message}
    summary = run_summary(state, Failure(error, tb_path, state.saved))
    state.report.write_summary(summary)
    hint = (
        f"resume: python launch.py --resume {state.run_dir}"
        if state.saved is not None
        else "no checkpoint (--snapshot-every 0 and no --checkpoint-every)"
    )
    e.args = (f"{e} (traceback: {tb_path}; {hint})",)


def resume_hint(run_dir) -> str:
    """``; resume with --resume DIR`` when the run folder has a checkpoint, else says none."""
    if (Path(run_dir) / "checkpoint.pkl").is_file():
        return f"; resume with --resume {run_dir}"
    return "; no checkpoint was written"


def count(n: int, noun: str) -> str:
    """``1 host actor``, ``2 host actors``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def interrupted_in_round(state: RunState) -> str:
    """Ctrl-C in round ``state.round`` (0-based, as metrics.jsonl counts), or after the last round
    while the report was written; ``state.saved``: the round the run's checkpoint resumes at
    (None: it has none)."""
    settings, run_dir, rnd, saved = state.settings, state.run_dir, state.round, state.saved
    n = settings.rounds
    if not state.in_rounds:
        text = (
            f"interrupted after the last round ({n - 1}) while writing the report; "
            f"{run_dir}/metrics.jsonl holds every round, summary.json was not written"
        )
        if saved is not None:
            text += f"; --resume {run_dir} --rounds N (N > {n}) continues the run"
        return text
    done = f"{count(rnd, 'finished round')} in {run_dir}/metrics.jsonl"
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
