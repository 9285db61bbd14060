"""fedmf's payloads: the item factors Q (server → user, dense fp32) and a user's item gradients
of its sampled slots (user → server, row-sparse: protocols/sparse_rows.py)."""

from __future__ import annotations

import numpy as np
import torch

from cluster import validate as v
from cluster import wire
from protocols.sparse_rows import decode_rows, encode_rows

ITEM_FACTORS = "item_factors"  # round step 1
EVAL_ITEM_FACTORS = "eval_item_factors"  # evaluation
ITEM_GRADS = "item_grads"  # round step 2


def encode_item_factors(q: torch.Tensor | np.ndarray) -> bytes:
    return wire.encode_dense(q)


def decode_item_factors(payload: bytes) -> np.ndarray:
    return wire.decode_dense(payload)


def encode_item_grads(ids: np.ndarray, rows: np.ndarray) -> bytes:
    return encode_rows(ids, rows)


def decode_item_grads(payload: bytes, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, rows)``; an id outside the catalogue raises WireError."""
    return decode_rows(payload, n_items)


def item_table_length(shared) -> int:
    """Coordinates of an upload densified over the item table (secure aggregation)."""
    return shared.public.n_items * shared.config.dim


def densify_item_grads(payload: bytes, shared) -> np.ndarray:
    """An upload's rows over the whole item table [n_items · dim], zero elsewhere."""
    ids, rows = decode_item_grads(payload, shared.public.n_items)
    out = np.zeros((shared.public.n_items, shared.config.dim), dtype=np.float64)
    np.add.at(out, ids, rows)
    return out.reshape(-1)


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
def check_item_factors(payload: bytes, shared) -> None:
    """Q: finite fp32 [n_items, dim]."""
    v.dense(payload, (shared.public.n_items, shared.config.dim), what="item factors")


def check_item_grads(payload: bytes, shared) -> None:
    """At most 2P rows (P positive and P negative slots) of finite width-d gradients, ids in the
    catalogue. BPR gradients have no natural bound: magnitudes are the aggregator's defence."""
    c = shared.config
    v.rows(payload, shared.public.n_items, c.dim, max_rows=2 * c.pairs, what="item gradients")
