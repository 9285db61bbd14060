"""Checkpoints of a run, so a long benchmark can go in pieces (``--checkpoint-every``, ``--resume``).

A checkpoint is taken between rounds and holds everything the next round depends on: the run's
settings, the protocol object on the driver (its config, dataset, accountant and counters), every
node's state and RNG on every host, the undelivered message batches, the ledger, the last metrics
and the wall time spent so far. Resuming rebuilds the deployment with the same placement, puts
the state back and continues: the rounds after it are the rounds an uninterrupted run would have
made (tests/test_checkpoint.py). The file is a pickle — load only checkpoints you made yourself.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

CHECKPOINT_NAME = "checkpoint.pkl"
PREVIOUS_NAME = "checkpoint.prev.pkl"
FORMAT = 2  # version of the checkpoint layout; a checkpoint of another version is refused


class CheckpointError(ValueError):
    """A missing, unreadable or foreign checkpoint; the message names the file."""


def save_checkpoint(run_dir: Path, state: dict) -> Path:
    """Write ``state`` to ``run_dir/checkpoint.pkl`` atomically: into a temporary file, fsync'd,
    then renamed over the old one, which is kept as ``checkpoint.prev.pkl``. A crash at any point
    leaves a complete checkpoint behind (the old or the new one)."""
    run_dir = Path(run_dir)
    path, prev = run_dir / CHECKPOINT_NAME, run_dir / PREVIOUS_NAME
    tmp = path.with_suffix(".tmp")
    try:
        with open(tmp, "wb") as f:
            pickle.dump({"format": FORMAT, **state}, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if path.exists():
        os.replace(path, prev)
    os.replace(tmp, path)
    dir_fd = os.open(run_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the renames themselves reach the disk
    finally:
        os.close(dir_fd)
    return path


def load_checkpoint(run_dir: str | Path) -> dict:
    """The last good checkpoint of ``run_dir``: ``checkpoint.pkl``, or the one before it when that
    one is missing or unreadable (a crash between the two renames of :func:`save_checkpoint`, a
    damaged disk)."""
    path, prev = Path(run_dir) / CHECKPOINT_NAME, Path(run_dir) / PREVIOUS_NAME
    try:
        return _load(path)
    except CheckpointError:
        if prev.is_file():
            try:
                return _load(prev)
            except CheckpointError:
                pass
        raise


# Module paths that format-1 checkpoints name their classes by (e.g. protocols.runner.RunSettings),
# mapped to the modules that define those classes: such a checkpoint unpickles and is refused by
# its format number in one line, not by a missing module.
_MOVED = {
    "protocols.runner": "engine.runner",
    "protocols.report": "engine.report",
    "protocols.checkpoint": "engine.checkpoint",
    "protocols.compare": "engine.compare",
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        return super().find_class(_MOVED.get(module, module), name)


def _load(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(
            f"{path}: no checkpoint (was the run started with --checkpoint-every?)"
        )
    try:
        with open(path, "rb") as f:
            state = _Unpickler(f).load()
    except Exception as e:  # truncated, corrupt or written by another program
        raise CheckpointError(
            f"{path}: not a readable privrec checkpoint ({type(e).__name__}: {e})"
        ) from None
    needed = {"format", "next_round", "settings", "protocol", "deployment", "metrics", "elapsed"}
    if not isinstance(state, dict) or not needed <= set(state):
        raise CheckpointError(f"{path}: not a privrec checkpoint")
    if state["format"] != FORMAT:
        raise CheckpointError(
            f"{path}: checkpoint format {state['format']}, this version reads {FORMAT}"
        )
    return state
