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
from data.sequences import train_length


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
    problem = topk_problem(flat, n_targets)
    if problem == "shape":
        raise wire.WireError(f"{node}: top-K list of {flat.size} ids for {n_targets}")
    if flat.max() >= n_items:
        raise wire.WireError(f"{node}: top-K item id out of range")
    if problem is not None:
        raise wire.WireError(f"{node}: a top-K list repeats an item")
    return flat.reshape(n_targets, -1)


def topk_problem(top_flat: np.ndarray, n_targets: int) -> str | None:
    """Why a user's flat ``topk`` list cannot be its [n_targets, K] lists (a
    ``cluster.validate.REASONS`` reason), or None when it can."""
    if n_targets < 1 or top_flat.size == 0 or top_flat.size % n_targets:
        return "shape"
    top = top_flat.reshape(n_targets, -1)
    if any(len(np.unique(row)) != len(row) for row in top):
        return "malformed"
    return None


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
def longest_upload(config) -> int:
    """The most items of a ``sequence`` upload: the training part s[:n_tr] of a sequence of the
    public ``max_len`` (a fake user's made-up sequence is no longer, adversaries/attacks/); the
    noise of eq. 7 is calibrated for no more."""
    return max(2, train_length(config.max_len, config.train_fraction))


def check_features(payload: bytes, shared) -> None:
    """A finite vector of the public layout's length."""
    v.dense(payload, (shared.public.n_feature_slots,), what="features")


def check_items(payload: bytes, shared) -> None:
    """A run of item ids of the catalogue."""
    v.ids(payload, shared.public.n_items, what="item ids")


def check_sequence(payload: bytes, shared) -> None:
    """The training part of a sequence: ids of the catalogue, at least one (n_tr >= 1: an empty
    one would make an empty test prefix) and at most :func:`longest_upload`."""
    most = longest_upload(shared.config)
    if not len(v.ids(payload, shared.public.n_items, max_count=most, what="sequence")):
        raise v.Invalid("size", "sequence: no item")


def check_context(payload: bytes, shared) -> None:
    """The held-out context s[n_tr:L-1]: ids of the catalogue, fewer than ``max_len``."""
    v.ids(payload, shared.public.n_items, max_count=shared.config.max_len, what="context")


def topk_width(shared) -> int:
    """K of the curator's top-K lists (the largest K any figure reads)."""
    from models.gated_session_gnn import KS

    threat = shared.threat
    return max(max(KS), shared.config.eval_k, threat.er_k if threat is not None else 0)


def check_topk(payload: bytes, shared) -> None:
    """Top-K lists of ids of the catalogue, at most one list per position of a ``max_len``
    sequence."""
    most = shared.config.max_len * topk_width(shared)
    v.ids(payload, shared.public.n_items, max_count=most, what="top-K lists")
