"""DGREC's wire formats (protocols/dgrec/roles.py sends them) and their sizes.

``public_items``  stage 1: the publicized item ids (``wire.encode_ids``).
``status``        (L_u, cnt_u) for eq. 4: 2 floats.
``invite``        the hop h of the invitee (``wire.encode_ids``, width 1); ``join``: an empty blob.
``share``         one gossip message: record(ids of the gradients' origins, one field per gradient),
                  each gradient bit-packed ±1 signs (``wire.encode_signs``, eq. 5) or, for the
                  Laplace and float variants, a dense float32 vector (:func:`encode_gradient`);
                  a member decodes the mean of those it holds with :func:`decode_held` (eq. 6).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from cluster import wire
from privacy.onebit import decode_onebit_mean, encode_onebit


def encode_status(loss: float, count: int) -> bytes:
    """(L_u, cnt_u) for eq. 4: dense float32 [2] (3 + 4 + 8 = 15 bytes)."""
    return wire.encode_dense(np.array([loss, count], dtype=np.float32))


def decode_status(payload: bytes) -> tuple[float, int]:
    v = wire.decode_dense(payload)
    if v.shape != (2,) or not np.isfinite(v).all() or v[0] < 0 or v[1] < 0:
        raise wire.WireError(f"status: expected [loss >= 0, count >= 0], got {v!r}")
    return float(v[0]), int(v[1])


def encode_share(origins: list[int], encoded: list[bytes]) -> bytes:
    """One gossip message: the origin user of each gradient, then each encoded gradient as is."""
    return wire.encode_record([wire.encode_ids(np.asarray(origins, dtype=np.int64)), *encoded])


def decode_share(payload: bytes) -> list[tuple[int, bytes]]:
    fields = wire.decode_record(payload)
    if not fields:
        raise wire.WireError("share: empty record")
    origins = wire.decode_ids(fields[0])
    if len(origins) != len(fields) - 1:
        raise wire.WireError(f"share: {len(origins)} origins but {len(fields) - 1} gradients")
    return [(int(o), f) for o, f in zip(origins, fields[1:])]


def encode_gradient(
    grad: torch.Tensor,
    config,
    laplace_scale: float,
    rng: np.random.Generator,
    torch_generator: Callable[[], torch.Generator],
) -> bytes:
    """A member's local gradient as it is shared (``config``: a DGRECConfig): clipped to
    [−δ, δ] and one-bit encoded, bit-packed (eq. 5, ``mechanism = "onebit"``, draws from
    ``torch_generator()``); clipped with Laplace(λ) noise from ``rng`` (``"laplace"``); or as is
    (``"float"``)."""
    c = config
    if c.mechanism == "onebit":  # eq. 5
        return wire.encode_signs(encode_onebit(grad, c.clip, c.beta, torch_generator()))
    if c.mechanism == "laplace":
        clipped = grad.clamp(-c.clip, c.clip).numpy().astype(np.float64)
        noisy = clipped + rng.laplace(0.0, laplace_scale, size=clipped.shape)
        return wire.encode_dense(noisy.astype(np.float32))
    return wire.encode_dense(grad.numpy())


def decode_held(held: dict[int, bytes], config) -> np.ndarray:
    """The mean of the encoded gradients a member holds at the end of the gossip (its own and those
    that arrived), float32 [n_s]: eq. 6 for one-bit codes, δ(e^β+1)/(e^β−1) · (1/k)·Σ_j b_j with k =
    ``len(held)``, the number actually held; the plain mean of the k vectors otherwise. Origins are
    read in increasing order. ``config``: a DGRECConfig."""
    if not held:
        raise ValueError("no gradient to decode")
    origins = sorted(held)
    if config.mechanism == "onebit":  # eq. 6
        bits = np.stack([wire.decode_signs(held[o]) for o in origins])
        return decode_onebit_mean(bits, config.clip, config.beta)
    return np.mean(
        np.stack([wire.decode_dense(held[o]) for o in origins]).astype(np.float64), axis=0
    ).astype(np.float32)


def share_message_size(k: int, n_s: int, mechanism: str = "onebit") -> int:
    """Encoded bytes of one ``share`` message carrying k gradients of n_s elements."""
    one = wire.signs_size(n_s) if mechanism == "onebit" else wire.dense_size((n_s,))
    return wire.record_size([wire.ids_size(k), *([one] * k)])
