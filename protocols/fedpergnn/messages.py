"""FedPerGNN's payloads: every message of the protocol, its codec and its size formula."""

from __future__ import annotations

import numpy as np

from cluster import validate as v
from cluster import wire
from privacy.key_server import decode_residues, encode_residues, residue_bytes, residues_size
from privacy.oprf import TOKEN_BYTES
from protocols.sparse_rows import decode_rows, encode_rows, rows_size

# key server -> user: (N, e), as bigints (N has exactly key_bits bits, e = 65537: a fixed size)
# user -> key server: blinded values m' = H(x)·r^e mod N, one per own item; key server -> user:
# the signatures s' = m'^d mod N, in the same order. Both at the modulus' byte length
# (privacy/key_server.py), so their size is the same whatever the key and the blinding factors.
encode_blinded = encode_signed = encode_residues
decode_blinded = decode_signed = decode_residues
blinded_size = signed_size = residues_size


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


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
def gat_size(shared) -> int:
    """|θ|, the GAT backbone's weights (public sizes only)."""

    def count(sh) -> int:
        from protocols.fedpergnn.gat_model import LocalGAT

        return int(LocalGAT(sh.config.dim, sh.config.layers, seed=0).flat().numel())

    return v.per_shared(shared, "fedpergnn.gat", count)


# --- secure aggregation: an upload densified over the summed vector (nodes/secure_sum.py) -------
def item_table_length(shared) -> int:
    return shared.public.n_items * shared.config.dim


def densify_item_grads(payload: bytes, shared) -> np.ndarray:
    """The upload's rows over the whole item table [n_items · dim], zero elsewhere."""
    ids, rows = decode_item_grads(payload, shared.public.n_items)
    out = np.zeros((shared.public.n_items, shared.config.dim), dtype=np.float64)
    out[ids] = rows  # distinct ids (the codec's order)
    return out.reshape(-1)


def gat_length(shared) -> int:
    return gat_size(shared) if shared.config.backbone == "gat" else 0


def densify_gat_grads(payload: bytes, shared) -> np.ndarray:
    return wire.decode_dense(payload).astype(np.float64).reshape(-1)


def secure_bound(config) -> float:
    """What an honest upload's coordinate stays within: the clip δ, plus 20 Laplace scales where
    the user adds noise (a coordinate beyond that has probability e^−20)."""
    from protocols.fedpergnn.config import upload_laplace

    return config.clip + 20.0 * upload_laplace(config)


def _upload_cap(shared) -> float | None:
    """Uploads are clipped to [−δ, δ]; with Laplace noise on them (the thesis' calibration) they
    have no bound, and magnitudes are left to a robust aggregation."""
    from protocols.fedpergnn.config import upload_laplace

    c = shared.config
    return None if upload_laplace(c) else c.clip * (1 + 1e-6)


def check_blinded(payload: bytes, shared) -> None:
    """At most one value per item of the catalogue, each at the modulus' byte length. Whether a
    value lies below N (and above 0) is the key server's own check: N is its key."""
    width = residue_bytes(shared.config.key_bits)
    v.chunks(payload, width, max_count=shared.public.n_items)


def check_public_key(payload: bytes, shared) -> None:
    """(N, e) of the key server's modulus size (the user checks the key itself before use)."""
    v.bigints(payload, max_bits=shared.config.key_bits, count=2)


check_signed = check_blinded


def check_expand_request(payload: bytes, shared) -> None:
    """At most one token per item of the catalogue, sorted (as a user sends them), and a finite
    embedding of width d."""
    t, e = v.record(payload, 2)
    tokens = v.chunks(t, TOKEN_BYTES, max_count=shared.public.n_items)
    if any(a > b for a, b in zip(tokens, tokens[1:])):
        raise v.Invalid("order", "expand request: tokens not sorted")
    v.dense(e, (shared.config.dim,), what="embedding")


def check_expand_reply(payload: bytes, shared) -> None:
    """At most max_neighbors finite neighbour embeddings of width d, each with its count of
    shared tokens (at most the catalogue), and the tokens they add up to."""
    c, n_items = shared.config, shared.public.n_items
    e, counts_b, t = v.record(payload, 3)
    emb = v.dense(e, (None, c.dim), what="neighbour embeddings")
    if len(emb) > c.max_neighbors:
        raise v.Invalid("size", f"expand reply: {len(emb)} neighbours > {c.max_neighbors}")
    counts = v.ids(counts_b, count=len(emb), what="shared-token counts")
    if counts.size and int(counts.max()) > n_items:
        raise v.Invalid("range", f"expand reply: a count {int(counts.max())} > {n_items} items")
    tokens = v.chunks(t, TOKEN_BYTES, max_count=n_items * max(1, len(emb)))
    if int(counts.sum()) != len(tokens):
        raise v.Invalid(
            "shape", f"expand reply: counts add to {counts.sum()}, {len(tokens)} tokens"
        )


def check_item_embeddings(payload: bytes, shared) -> None:
    """E: finite [n_items, d]."""
    v.dense(payload, (shared.public.n_items, shared.config.dim), what="item embeddings")


def check_gat_weights(payload: bytes, shared) -> None:
    """θ of the GAT backbone: a finite vector of its size."""
    v.dense(payload, (gat_size(shared),), what="GAT weights")


def check_item_grads(payload: bytes, shared) -> None:
    """Rows sorted by distinct item id of the catalogue, finite, width d, within the clip bound
    where no noise is added on the device."""
    n_items, dim = shared.public.n_items, shared.config.dim
    v.rows(payload, n_items, dim, max_rows=n_items, distinct=True, cap=_upload_cap(shared))


def check_gat_grads(payload: bytes, shared) -> None:
    v.dense(payload, (gat_size(shared),), cap=_upload_cap(shared), what="GAT gradients")
