"""The engine: runs protocols on deployments. It sits between ``launch.py`` and the protocols:
launch, the tests and the benchmarks use it; nothing under protocols/, nodes/, models/, privacy/,
data/ or cluster/ imports it.

    from engine import RunSettings, deploy, resume, run

    run_dir, summary = run(RunSettings(protocol="fedmf", rounds=20), dataset)   # a run report
    dep = deploy(protocol, "packed", hosts=2, tap=True)   # the deployment run() would make

Its modules: :mod:`engine.runner` (the round loop, :func:`run`, :func:`resume`, :func:`deploy`),
:mod:`engine.report` (run directories, metrics.jsonl, summary.json, plots),
:mod:`engine.checkpoint` (``--checkpoint-every``, ``--resume``) and :mod:`engine.compare`
(``launch.py compare``). The names below are imported when first used, so importing
``engine.compare`` or ``engine.checkpoint`` does not start importing Ray.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.runner import RunSettings, deploy, resume, run

__all__ = ["RunSettings", "deploy", "resume", "run"]


def __getattr__(name: str):
    if name in __all__:
        return getattr(importlib.import_module("engine.runner"), name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
