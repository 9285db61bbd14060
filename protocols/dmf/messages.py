"""dmf's one payload: a user's item gradients of its sampled slots, tagged with a fresh random
nonce, sent to its neighbours and forwarded unchanged (record of [nonce blob, row-sparse
gradients of protocols/sparse_rows.py])."""

from __future__ import annotations

import numpy as np

from cluster import wire
from protocols.sparse_rows import decode_rows, encode_rows

ITEM_GRADS = "item_grads"
NONCE_BYTES = 8


def encode_item_grads(nonce: bytes, ids: np.ndarray, rows: np.ndarray) -> bytes:
    return wire.encode_record([wire.encode_blob(nonce), encode_rows(ids, rows)])


def decode_nonce(payload: bytes) -> tuple[bytes, bytes]:
    """``(nonce, the encoded gradients)``: the nonce alone decides whether the rows are needed."""
    nonce_b, grads_b = wire.decode_record(payload, expect=2)
    return wire.decode_blob(nonce_b), grads_b


def decode_grads(grads: bytes, n_items: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, rows)`` of the second part of :func:`decode_nonce`; ids outside the catalogue
    raise WireError."""
    return decode_rows(grads, n_items)
