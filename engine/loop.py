"""The one round loop. Every run — the runner's, a benchmark's, a test's — advances a protocol
through :func:`rounds`, so every round goes through :meth:`Deployment.begin_round` (run conditions,
snapshots, injected host kills) before the protocol's own step:

    for r in rounds(protocol, dep, 5):          # rounds 0..4, evaluated at the end
        print(r.round, r.train, r.metrics, r.stats.dropped)

Round t (0-based) of ``rounds(protocol, dep, stop, start=s)``, for t = s, …, stop − 1:

1. ``dep.begin_round(t)`` — who is offline, snapshots every ``snapshot_every`` rounds, kills;
2. ``train = protocol.run_round(dep, t)`` — the protocol's supersteps;
3. ``metrics = protocol.evaluate(dep, t)`` when t + 1 is a multiple of ``eval_every`` (the
   protocol's ``config.eval_every`` unless given; 0: never) or t is the last round;
4. ``stats = dep.round_stats()`` — simulated seconds, dropped, late and faulted participants.

Observers of a run (:class:`RoundCallback`) are given to :func:`engine.runner.run` /
:func:`engine.runner.resume` as ``callbacks``; the runner's own outputs (metrics.jsonl, the
progress bar, checkpoints, ``--tensorboard``'s writer: engine/callbacks.py) are callbacks too, told
in the order the run lists them (engine/session.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from nodes.step import RoundStats


@dataclass
class RoundResult:
    """What one round did: the protocol's training figures, its metrics when it was evaluated
    (None otherwise), the deployment's round statistics and the round's wall seconds."""

    round: int
    train: dict
    metrics: dict | None
    stats: RoundStats = field(default_factory=RoundStats)
    seconds: float = 0.0

    @property
    def evaluated(self) -> bool:
        return self.metrics is not None


class RoundCallback:
    """An observer of a run (engine/session.py drives the hooks; each does nothing here):

    - ``on_start(state)``: once, before the first round; ``state`` is the run's
      :class:`engine.session.RunState`, which a callback may keep (it changes as the run goes);
    - ``before_round(state, rnd)``: before round ``rnd`` starts;
    - ``on_evaluating(state, evaluating)``: True before the protocol's evaluation, False after;
    - ``on_round(row)``: after each round, with the row metrics.jsonl holds (round, train,
      metrics when evaluated, bytes by kind, privacy, simulated seconds, ...);
    - ``on_failure(state, error)``: a node stopped the run (:class:`nodes.deployment.NodeFailure`),
      before summary.json says so;
    - ``on_end(summary)``: once when the run ends: summary.json's dict, or None when the run
      stopped (a node failed, Ctrl-C, an error).
    """

    def on_start(self, state) -> None:
        pass

    def before_round(self, state, rnd: int) -> None:
        pass

    def on_evaluating(self, state, evaluating: bool) -> None:
        pass

    def on_round(self, row: dict) -> None:
        pass

    def on_failure(self, state, error: Exception) -> None:
        pass

    def on_end(self, summary: dict | None) -> None:
        pass


def notify(callbacks, hook: str, *args) -> None:
    """``cb.<hook>(*args)`` for every callback that has the hook, in order (an observer that is
    not a :class:`RoundCallback` may define only the hooks it needs)."""
    for cb in callbacks:
        method = getattr(cb, hook, None)
        if method is not None:
            method(*args)


def notify_round(callbacks, row: dict) -> None:
    """``cb.on_round(row)`` for every callback, in order."""
    notify(callbacks, "on_round", row)


def notify_end(callbacks, summary: dict | None) -> None:
    """``cb.on_end(summary)`` for every callback; each is told even when one before it raised
    (the first error is raised after all were told)."""
    error = None
    for cb in callbacks:
        try:
            if hasattr(cb, "on_end"):
                cb.on_end(summary)
        except Exception as e:  # noqa: BLE001 — the others still close their files
            error = error or e
    if error is not None:
        raise error


def rounds(
    protocol,
    dep,
    stop: int,
    *,
    start: int = 0,
    eval_every: int | None = None,
    evaluate_last: bool = True,
    before_round: Callable[[int], None] | None = None,
    evaluating: Callable[[bool], None] | None = None,
) -> Iterator[RoundResult]:
    """Rounds ``start`` … ``stop − 1`` of ``protocol`` on ``dep``, one :class:`RoundResult` each.

    ``eval_every`` overrides the protocol's ``config.eval_every``; ``evaluate_last=False`` skips
    the evaluation of the last round unless ``eval_every`` asks for it. ``before_round(t)`` is
    called before round t starts and ``evaluating(True/False)`` around an evaluation (the runner's
    progress bar uses both)."""
    if eval_every is None:
        eval_every = getattr(protocol.config, "eval_every", 0)
    for t in range(start, stop):
        if before_round is not None:
            before_round(t)
        t0 = time.perf_counter()
        dep.begin_round(t)
        train = protocol.run_round(dep, t)
        due = (eval_every > 0 and (t + 1) % eval_every == 0) or (evaluate_last and t == stop - 1)
        metrics = None
        if due:
            if evaluating is not None:
                evaluating(True)
            metrics = protocol.evaluate(dep, t)
            if evaluating is not None:
                evaluating(False)
        stats = dep.round_stats()
        yield RoundResult(t, train, metrics, stats, time.perf_counter() - t0)


def run_rounds(protocol, dep, stop: int, **kwargs) -> list[RoundResult]:
    """All of :func:`rounds` at once: the list of the rounds' results."""
    return list(rounds(protocol, dep, stop, **kwargs))
