"""FedPerGNN's payloads: every message of the protocol, its codec and its size formula."""

from __future__ import annotations

import numpy as np

from cluster import wire
from privacy.oprf import TOKEN_BYTES
from protocols.sparse_rows import decode_rows, encode_rows, rows_size


def encode_tokens(tokens: list[bytes]) -> bytes:
    return wire.encode_chunks(tokens, TOKEN_BYTES)


def decode_tokens(payload: bytes) -> list[bytes]:
    return wire.decode_chunks(payload, TOKEN_BYTES)


# user -> key server: "send me your public key (N, e)" (a user that missed the key server's
# round-0 broadcast asks for it when it catches up); an empty blob
def encode_key_request() -> bytes:
    return wire.encode_blob(b"")


def decode_key_request(payload: bytes) -> None:
    if wire.decode_blob(payload):
        raise wire.WireError("key request: expected an empty blob")


KEY_REQUEST_SIZE = wire.blob_size(0)


# user -> matcher: my item tokens (sorted) and my embedding e_u
def encode_expand_request(tokens: list[bytes], embedding: np.ndarray) -> bytes:
    return wire.encode_record([encode_tokens(tokens), wire.encode_dense(embedding)])


def decode_expand_request(payload: bytes) -> tuple[list[bytes], np.ndarray]:
    t, e = wire.decode_record(payload, expect=2)
    emb = wire.decode_dense(e)
    if emb.ndim != 1:
        raise wire.WireError(f"expand request: embedding of shape {emb.shape}, expected a vector")
    return decode_tokens(t), emb


def expand_request_size(n_items: int, dim: int) -> int:
    return wire.record_size([wire.blob_size(TOKEN_BYTES * n_items), wire.dense_size((dim,))])


# matcher -> user: anonymous neighbour embeddings, and per neighbour the tokens it shares with me
def encode_expand_reply(embeddings: np.ndarray, shared: list[list[bytes]]) -> bytes:
    counts = np.array([len(s) for s in shared], dtype=np.int64)
    flat = [t for s in shared for t in s]
    return wire.encode_record(
        [wire.encode_dense(embeddings), wire.encode_ids(counts), encode_tokens(flat)]
    )


def decode_expand_reply(payload: bytes) -> tuple[np.ndarray, list[list[bytes]]]:
    e, c, t = wire.decode_record(payload, expect=3)
    emb, counts, flat = wire.decode_dense(e), wire.decode_ids(c), decode_tokens(t)
    if emb.ndim != 2 or emb.shape[0] != len(counts) or int(counts.sum()) != len(flat):
        raise wire.WireError(
            f"expand reply: {emb.shape} embeddings, {len(counts)} counts, {len(flat)} tokens"
        )
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return emb, [flat[bounds[j] : bounds[j + 1]] for j in range(len(counts))]


def expand_reply_size(n_neighbours: int, n_shared_total: int, dim: int) -> int:
    return wire.record_size(
        [
            wire.dense_size((n_neighbours, dim)),
            wire.ids_size(n_neighbours),
            wire.blob_size(TOKEN_BYTES * n_shared_total),
        ]
    )


# user -> server: perturbed item-embedding gradients, rows sorted by item id
encode_item_grads = encode_rows


def decode_item_grads(payload: bytes, n_items: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, rows)``; ids out of range, or not sorted and distinct, raise WireError."""
    ids, rows = decode_rows(payload, n_items)
    if np.any(np.diff(ids) <= 0):
        raise wire.WireError("item gradients: ids not sorted and distinct")
    return ids, rows


item_grads_size = rows_size


def upload_counts(n_interacted: int, n_items: int, negatives: int, pseudo: int) -> tuple[int, int]:
    """(negatives, pseudo items) one user with |I_u| = n_interacted uploads: M pseudo items (at
    most the items it has not touched) and then up to |Ĩ_u| negatives among the items left."""
    m = min(pseudo, n_items - n_interacted)
    return min(negatives, n_items - n_interacted - m), m


def upload_rows(n_interacted: int, n_items: int, negatives: int, pseudo: int) -> int:
    """Rows of one upload: every interacted item, its negatives and its pseudo items."""
    n_neg, m = upload_counts(n_interacted, n_items, negatives, pseudo)
    return n_interacted + n_neg + m
