"""dmf's one payload: a user's item gradients of its sampled slots, tagged with a fresh random
nonce, sent to its neighbours and forwarded unchanged (record of [nonce blob, row-sparse
gradients of protocols/sparse_rows.py])."""

from __future__ import annotations

import numpy as np

from cluster import validate as v
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


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
def check_item_grads(payload: bytes, shared) -> None:
    """A nonce of NONCE_BYTES and at most 2P finite rows of width d + 1 (the bias column), ids in
    the catalogue; magnitudes are left to a robust aggregation."""
    nonce_b, grads_b = v.record(payload, 2)
    v.blob(nonce_b, size=NONCE_BYTES)
    c = shared.config
    v.rows(grads_b, shared.public.n_items, c.dim + 1, max_rows=2 * c.pairs, what="item gradients")
