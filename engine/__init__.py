"""The engine: runs protocols on deployments. It sits between ``launch.py`` and the protocols:
launch, the tests and the benchmarks use it; nothing under protocols/, nodes/, models/, privacy/,
data/ or cluster/ imports it.

    from engine import RunSettings, deploy, resume, rounds, run

    run_dir, summary = run(RunSettings(protocol=NAME, rounds=20), dataset)   # a run report
    dep = deploy(protocol, "packed", hosts=2, tap=True)   # the deployment run() would make
    for r in rounds(protocol, dep, 5):                    # the one round loop, by hand
        print(r.round, r.train, r.metrics)

Its modules: :mod:`engine.loop` (the one round loop, :func:`rounds`, and
:class:`~engine.loop.RoundCallback`), :mod:`engine.runner` (:func:`run`, :func:`resume`,
:func:`deploy`), :mod:`engine.session` (a deployed run round after round, telling its
callbacks), :mod:`engine.callbacks` (the run's own outputs: metrics.jsonl, progress bar,
checkpoints, ...), :mod:`engine.summary` (summary.json), :mod:`engine.report` (run directories,
metrics.jsonl, plots), :mod:`engine.checkpoint` (``--checkpoint-every``, ``--resume``) and
:mod:`engine.compare` (``launch.py compare``). The names below are imported when first used, so importing
``engine.compare`` or ``engine.checkpoint`` does not start importing Ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.loop import RoundCallback, RoundResult, rounds, run_rounds
    from engine.runner import RunSettings, deploy, resume, run

_WHERE = {
    "RunSettings": "engine.runner",
    "deploy": "engine.runner",
    "resume": "engine.runner",
    "run": "engine.runner",
    "rounds": "engine.loop",
    "run_rounds": "engine.loop",
    "RoundResult": "engine.loop",
    "RoundCallback": "engine.loop",
}
__all__ = [
    "RoundCallback",
    "RoundResult",
    "RunSettings",
    "deploy",
    "resume",
    "rounds",
    "run",
    "run_rounds",
]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
