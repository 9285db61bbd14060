"""Where a node's tensors live: on ``ctx.device``, the device Ray gave its host.

A role makes its tensors there (``torch.zeros(..., device=self.device)``, a model through
:func:`build` / ``Node.build``, numpy data through :func:`to_device` / ``Node.tensor``), keeps its model state there, and
lets tensors leave it only where a message is encoded (the codecs of ``cluster/wire.py`` take a
tensor on any device) or where the host pickles its state (``nodes/host.py``: snapshots,
checkpoints and rollbacks hold CPU copies, placed back on the restoring host's device).

:func:`checking` is how a CPU-only machine finds a tensor made off the node's device before a
GPU host does: while the nodes' code runs, torch's default device is ``meta`` and
``torch.from_numpy`` gives ``meta`` tensors, so a tensor made without ``self.device`` (or
:func:`to_device`) is a shapeless placeholder that breaks the run at its first use beside a
real one (``--check-device``; tests/cluster/test_device.py runs every protocol's golden run so).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

# the real torch.from_numpy, whatever checking() puts in its place meanwhile
_from_numpy = torch.from_numpy


def to_device(data, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``data`` (a numpy array, anything ``np.asarray`` takes, or a tensor) as a tensor on
    ``device``, of ``dtype`` when given. A numpy array on the CPU shares its memory, as
    ``torch.from_numpy`` does; elsewhere it is copied once."""
    if not isinstance(data, torch.Tensor):
        data = _from_numpy(np.asarray(data))
    return data.to(device=device, dtype=dtype)


def from_numpy(array: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` itself, for the host's own (de)serialisation of node state."""
    return _from_numpy(array)


def build(factory: Callable[[], torch.nn.Module], device) -> torch.nn.Module:
    """The module ``factory()`` makes, its parameters initialised on the CPU and then moved to
    ``device``: the same initial numbers on every device (torch's CPU generator draws them), and
    the same on a checked run (:func:`checking`) as on any other."""
    with torch.device("cpu"):
        module = factory()
    return module.to(device)


@contextlib.contextmanager
def checking(default: str = "meta") -> Iterator[None]:
    """Run the enclosed code with torch's default device ``default`` and ``torch.from_numpy``
    giving tensors on it (see the module's docstring)."""

    def on_default(array):  # as if from_numpy took torch's default device (build() sets the CPU)
        return _from_numpy(array).to(torch.get_default_device())

    # torch's optimizers keep their step counters on the CPU on purpose (torch.tensor(0.0)): an
    # optimizer's step runs with the CPU as default device, as it does outside the check
    inside: list = []

    def cpu_in_step(optimizer, args, kwargs):
        inside.append(torch.device("cpu"))
        inside[-1].__enter__()

    def end_of_step(optimizer, args, kwargs):
        if inside:
            inside.pop().__exit__(None, None, None)

    hooks = [
        register_optimizer_step_pre_hook(cpu_in_step),
        register_optimizer_step_post_hook(end_of_step),
    ]
    torch.from_numpy = on_default
    try:
        with torch.device(default):
            yield
            while inside:  # a step that raised never reached its post hook
                inside.pop().__exit__(None, None, None)
    finally:
        torch.from_numpy = _from_numpy
        for h in hooks:
            h.remove()
