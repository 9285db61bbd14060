"""DIPSGNN's payloads (protocols/dipsgnn/roles.py sends them), with the checks the receiver makes.

``features``      user → curator: the perturbed (Algorithm 3) or clean feature vector, dense fp32
                  of the public layout's length (privacy/feature_perturbation.py builds it).
``sequence``      user → curator: the training part s[:n_tr] of the behaviour sequence (ids).
``eval_context``  user → curator: the held-out context s[n_tr:L-1] (ids).
``topk``          curator → user: the top-K lists of the user's test prefixes, row after row (ids).
"""

from __future__ import annotations

import numpy as np

from cluster import validate as v
from cluster import wire


def encode_features(x: np.ndarray) -> bytes:
    return wire.encode_dense(x)


def decode_features(payload: bytes, n_slots: int, src: str) -> np.ndarray:
    x = wire.decode_dense(payload)
    if x.shape != (n_slots,):
        raise wire.WireError(f"features from {src}: shape {x.shape}")
    return x


def encode_items(items: np.ndarray) -> bytes:
    """A run of item ids: the ``sequence`` upload or the ``eval_context``."""
    return wire.encode_ids(items)


def decode_sequence(payload: bytes, n_items: int, src: str) -> np.ndarray:
    seq = wire.decode_ids(payload)
    if seq.size and seq.max() >= n_items:
        raise wire.WireError(f"sequence from {src}: item id out of range")
    return seq


def decode_context(payload: bytes) -> np.ndarray:
    return wire.decode_ids(payload)


def encode_topk(top: np.ndarray) -> bytes:
    """The [positions, K] top-K lists of one user, flattened."""
    return wire.encode_ids(top.reshape(-1))


def decode_topk(payload: bytes, n_targets: int, n_items: int, node: str) -> np.ndarray:
    """[n_targets, K] top-K lists, one row per held-out target, of distinct item ids."""
    flat = wire.decode_ids(payload)
    if flat.size % max(n_targets, 1) or flat.size == 0:
        raise wire.WireError(f"{node}: top-K list of {flat.size} ids for {n_targets}")
    if flat.max() >= n_items:
        raise wire.WireError(f"{node}: top-K item id out of range")
    top = flat.reshape(n_targets, -1)
    if any(len(np.unique(row)) != len(row) for row in top):
        raise wire.WireError(f"{node}: a top-K list repeats an item")
    return top


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
def check_features(payload: bytes, shared) -> None:
    """A finite vector of the public layout's length."""
    v.dense(payload, (shared.public.n_feature_slots,), what="features")


def check_items(payload: bytes, shared) -> None:
    """A run of item ids of the catalogue (``sequence``, ``eval_context``, ``topk``)."""
    v.ids(payload, shared.public.n_items, what="item ids")
