"""The run's own outputs, each a :class:`engine.loop.RoundCallback` (engine/session.py tells them):

- :class:`MetricsWriter`: each round's row into metrics.jsonl;
- :class:`CallRound`: ``run(on_round=f)``'s ``f(row)``;
- :class:`FaultLines`: a status line per host lost and replaced, per round whose handlers raised;
- :class:`ProgressBar`: the tqdm bar, with the loss and the main metric;
- :class:`CheckpointWriter`: ``--checkpoint-every N``'s checkpoints;
- :class:`RollbackKeeper`: the driver's state at the start of each snapshot round, checkpointed
  when a node stops the run;
- :func:`tensorboard_writer`: ``--tensorboard``'s event files (engine/tensorboard.py).

A new output of a run is a new callback here, listed by ``engine.runner._callbacks``.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Callable

from engine.checkpoint import Checkpoint, save_checkpoint
from engine.figures import is_number, main_metric
from engine.loop import RoundCallback
from engine.report import RunReport
from engine.session import RunState, count


class MetricsWriter(RoundCallback):
    """Appends each round's row to the run's metrics.jsonl (:meth:`RunReport.add_round`); first
    in the list, so a callback told after it finds the round in the file."""

    def __init__(self, report: RunReport):
        self.report = report

    def on_round(self, row: dict) -> None:
        self.report.add_round(row)


class CallRound(RoundCallback):
    """``run(on_round=f)``: ``f(row)`` after each round (benchmarks.tune reports each evaluation
    to Ray Tune this way)."""

    def __init__(self, fn: Callable[[dict], None]):
        self.fn = fn

    def on_round(self, row: dict) -> None:
        self.fn(row)


class FaultLines(RoundCallback):
    """After each round, its faults as status lines above the progress bar (:func:`fault_lines`;
    printed every time, not once per text)."""

    def on_start(self, state: RunState) -> None:
        self.state = state

    def on_round(self, row: dict) -> None:
        for line in fault_lines(self.state.result.stats.faults):
            self.state.status(line, once=False)


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
            f"{count(len(raised), 'participant')} raised and sat out the round (first: "
            f"{first['node']} in phase {first['phase']!r}: {first['error']})"
        )
    return lines


class ProgressBar(RoundCallback):
    """The run's progress bar (off without ``settings.progress``): a round per step, "(evaluating)"
    while the protocol evaluates, the loss and main metric as postfix (:func:`progress_postfix`);
    closed when the run ends, so it is not redrawn under the next run's (compare). ``bar``: the
    tqdm class to draw it with."""

    def __init__(self, bar):
        self.make_bar = bar
        self.bar = None

    def on_start(self, state: RunState) -> None:
        self.state = state
        self.bar = self.make_bar(
            desc=state.settings.protocol,
            unit="round",
            initial=state.start,
            total=state.settings.rounds,
            disable=not state.settings.progress,
        )

    def on_evaluating(self, state: RunState, evaluating: bool) -> None:
        name = state.settings.protocol
        self.bar.set_description_str(
            f"{name} (evaluating)" if evaluating else name, refresh=evaluating
        )

    def on_round(self, row: dict) -> None:
        state = self.state
        self.bar.update(1)
        declared = state.protocol.main_metric()
        self.bar.set_postfix(progress_postfix(state.result.train, state.metrics, declared))

    def on_end(self, summary: dict | None) -> None:
        if self.bar is not None:
            self.bar.close()


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


class CheckpointWriter(RoundCallback):
    """``--checkpoint-every N``: the run's checkpoint after every N-th round and after the last
    (:meth:`RunState.checkpoint`); ``state.saved`` follows it."""

    def on_start(self, state: RunState) -> None:
        self.state = state

    def on_round(self, row: dict) -> None:
        state, rnd = self.state, row["round"]
        every = state.settings.checkpoint_every
        if every and ((rnd + 1) % every == 0 or rnd == state.settings.rounds - 1):
            save_checkpoint(state.run_dir, state.checkpoint(rnd + 1))
            state.saved = rnd + 1


class RollbackKeeper(RoundCallback):
    """With ``--snapshot-every K``, the driver's side of the hosts' snapshot at the start of every
    K-th round (:meth:`Deployment.begin_round`): the protocol, the undelivered messages, the ledger,
    the metrics and totals then. When a node stops the run (a failing server), that round becomes
    a checkpoint with the hosts' snapshots of it, unless the checkpoint on disk is as late."""

    def __init__(self):
        self.kept: Checkpoint | None = None  # protocol pickled, deployment without the hosts

    def before_round(self, state: RunState, rnd: int) -> None:
        every = state.settings.conditions.snapshot_every
        if every and rnd % every == 0:
            self.kept = Checkpoint(
                next_round=rnd,
                settings=state.settings,
                protocol=pickle.dumps(state.protocol, protocol=pickle.HIGHEST_PROTOCOL),
                deployment=state.dep.between_rounds(),
                metrics=state.metrics,
                elapsed=state.elapsed,
                totals=copy.deepcopy(state.totals),
            )

    def on_failure(self, state: RunState, error: Exception) -> None:
        kept = self.kept
        if kept is None or (state.saved is not None and kept.next_round <= state.saved):
            return
        hosts = state.dep.host_snapshots(kept.next_round)
        if hosts is None:  # a host replaced since, or one took no snapshot of that round
            return
        checkpoint = dataclasses.replace(
            kept,
            protocol=pickle.loads(kept.protocol),
            deployment={**kept.deployment, "hosts": hosts},
        )
        save_checkpoint(state.run_dir, checkpoint)
        state.saved = kept.next_round


def tensorboard_writer(state: RunState) -> RoundCallback | None:
    """``--tensorboard``'s :class:`engine.tensorboard.TensorBoardWriter` for the run (None
    without the flag), its folder from :func:`engine.tensorboard.log_dir`."""
    settings = state.settings
    tb = getattr(settings, "tensorboard", None)  # (a checkpoint of an older run has no field)
    if tb is None:
        return None
    from engine.tensorboard import TensorBoardWriter, log_dir

    folder = log_dir(tb, state.run_dir, getattr(settings, "tensorboard_run", None))
    record = {
        "protocol": settings.protocol,
        "dataset": state.dataset.name,
        "seed": settings.seed,
        "rounds": settings.rounds,
        "placement": settings.placement,
        "hosts": settings.hosts,
        "protocol_config": dataclasses.asdict(state.protocol.config),
        "run_dir": str(state.run_dir),
    }
    return TensorBoardWriter(folder, start=state.start, config=record)
