"""Row-sparse gradients of an item table: the upload format of fedmf, dmf and FedLightGCN, and
the server's averaged step on them.

Wire format: a record of [item ids (u32), rows (dense fp32, one per id)].
"""

from __future__ import annotations

import numpy as np
import torch

from adversaries.defences import aggregate_rows
from cluster import wire
from cluster.device import to_device


def encode_rows(ids: np.ndarray, rows: np.ndarray) -> bytes:
    return wire.encode_record([wire.encode_ids(ids), wire.encode_dense(rows)])


def decode_rows(payload: bytes, n_items: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, rows)``; a malformed payload or an id outside ``0..n_items-1`` raises WireError."""
    ids_b, rows_b = wire.decode_record(payload, expect=2)
    ids, rows = wire.decode_ids(ids_b), wire.decode_dense(rows_b)
    if rows.ndim != 2 or rows.shape[0] != len(ids):
        raise wire.WireError(f"item gradients: {len(ids)} ids but rows of shape {rows.shape}")
    if n_items is not None and ids.size and ids.max() >= n_items:
        raise wire.WireError(
            f"item gradients: item id {ids.max()} out of range (n_items={n_items})"
        )
    return ids, rows


def rows_size(n_rows: int, dim: int) -> int:
    """Encoded bytes of ``n_rows`` ids with their fp32 rows of width ``dim``."""
    return wire.record_size([wire.ids_size(n_rows), wire.dense_size((n_rows, dim))])


def step_on_mean(
    table: torch.nn.Parameter,
    optimizer: torch.optim.Optimizer,
    uploads: list[tuple[np.ndarray, np.ndarray]],
) -> None:
    """Sum the uploads row by row in the given order (float64), average over the uploads, and take
    one optimizer step on ``table`` (on its device). Nothing happens without uploads. The sum is
    taken in numpy on the CPU: the same additions in the same order on every device (a GPU's
    ``index_add_`` adds the rows of a repeated id in no fixed order)."""
    if not uploads:
        return
    total = np.zeros(tuple(table.shape), dtype=np.float64)
    for ids, rows in uploads:
        if len(ids) < 2 or np.all(ids[1:] > ids[:-1]):  # distinct ids: one addition per element
            total[ids] += rows  # the same sums as np.add.at, several times faster
        else:
            np.add.at(total, ids, rows)
    step_on_sum(table, optimizer, total, len(uploads))


def step_on_sum(
    table: torch.nn.Parameter, optimizer: torch.optim.Optimizer, total: np.ndarray, n: int
) -> None:
    """One optimizer step on ``table`` with the mean ``total / n`` of n uploads (float64 sum)."""
    table.grad = to_device((total / n).astype(np.float32), table.device)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def defended_step(table, optimizer, uploads: list[tuple[np.ndarray, np.ndarray]], threat) -> None:
    """The aggregating role's step on row-sparse ``uploads`` under the run's defence.

    Args:
        table: the item table (a parameter on its device).
        optimizer: its optimizer.
        uploads: ``(ids, rows)`` per upload, in the order received.
        threat: the run's :class:`adversaries.condition.Threat` (None: an honest run).

    Without a defence this is :func:`step_on_mean`; with one, the defence's row-wise aggregate
    (:func:`adversaries.defences.aggregate_rows`) followed by one optimizer step on ``table``.
    """
    if threat is None or not threat.defence:
        step_on_mean(table, optimizer, uploads)
        return
    if not uploads:
        return
    total = aggregate_rows(uploads, tuple(table.shape), threat.defence, dict(threat.defence_params))
    table.grad = to_device(total.astype(np.float32), table.device)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
