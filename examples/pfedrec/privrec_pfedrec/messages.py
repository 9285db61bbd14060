"""PFedRec's payloads. Only the item embedding table travels, both ways, as a dense fp32 tensor
[|I|, d] (cluster/wire.py's ``dense`` codec): the score functions never leave the devices.

==========================  ==================  =============================================
kind                        direction           payload
==========================  ==================  =============================================
``item_table``              server → client     the global item embeddings E (step 1)
``item_table_upload``       client → server     the client's fine-tuned (and, with LDP,
                                                clipped and noised) item table Ẽ_u (step 3)
``eval_item_table``         server → client     E again, for evaluation (ledgered apart)
==========================  ==================  =============================================

Every message has :func:`table_size` bytes: ``11 + 4·|I|·d`` (tag, dtype, ndim, two u32
dimensions, the fp32 data), whatever the client's data — its length says nothing about how
many items it has. Decoders check the shape and that every value is finite; anything else
raises :class:`cluster.wire.WireError`.
"""

from __future__ import annotations

import numpy as np
import torch

from cluster import validate as v
from cluster import wire

ITEM_TABLE = "item_table"  # step 1
ITEM_UPLOAD = "item_table_upload"  # step 3
EVAL_ITEM_TABLE = "eval_item_table"  # evaluation


def table_size(n_items: int, dim: int) -> int:
    """Encoded bytes of one item table: ``wire.dense_size((n_items, dim))`` = 11 + 4·n·d."""
    return wire.dense_size((n_items, dim))


def encode_table(table: torch.Tensor | np.ndarray) -> bytes:
    return wire.encode_dense(table)


def decode_table(payload: bytes, n_items: int, dim: int) -> np.ndarray:
    """The [n_items, dim] float32 table of ``payload``; a wrong shape or a non-finite value
    raises WireError."""
    table = wire.decode_dense(payload)
    if table.shape != (n_items, dim) or table.dtype != np.float32:
        raise wire.WireError(
            f"item table: expected float32 [{n_items}, {dim}], got {table.dtype} {table.shape}"
        )
    if not np.isfinite(table).all():
        raise wire.WireError("item table: non-finite values")
    return table


def check_table(payload: bytes, shared) -> None:
    """What a receiver accepts (``ACCEPTS``, cluster/validate.py): a finite [n_items, dim] table;
    the host's screen drops and counts anything else before a handler sees it."""
    c, n_items = shared.config, shared.public.n_items
    v.dense(payload, (n_items, c.dim), what="item table")


def table_length(shared) -> int:
    """Coordinates of one table, as secure aggregation sums it."""
    return shared.public.n_items * shared.config.dim


def densify_table(payload: bytes, shared) -> np.ndarray:
    """A client's upload as the summed vector (it is dense already)."""
    table = decode_table(payload, shared.public.n_items, shared.config.dim)
    return table.astype(np.float64).reshape(-1)
