"""VerFedGNN's payloads (protocols/verfedgnn/roles.py sends them): the public-parameter record
and the byte counts of one iteration by kind, written out from the wire formats (§5.3).

Aggregates travel as one dense [L_j, q, D] tensor per exchange step (``wire.encode_dense``);
gradients as a sparse ternary vector (``wire.encode_ternary``) or, for the Laplace and
no-mechanism variants, a dense fp32 vector.
"""

from __future__ import annotations

import numpy as np
import torch

from cluster import wire


def encode_public(seed: int, participants: np.ndarray, theta: torch.Tensor) -> bytes:
    return wire.encode_record(
        [
            wire.encode_ids(np.array([seed], dtype=np.int64), width=8),
            wire.encode_ids(np.asarray(participants, dtype=np.int64), width=4),
            wire.encode_dense(theta.detach()),
        ]
    )


def decode_public(payload: bytes) -> tuple[int, np.ndarray, torch.Tensor]:
    seed_b, parts_b, theta_b = wire.decode_record(payload, expect=3)
    seed = wire.decode_ids(seed_b)
    if seed.shape != (1,):
        raise wire.WireError("public parameters: the seed field must hold one id")
    theta = wire.decode_dense(theta_b)
    if theta.ndim != 1:
        raise wire.WireError(f"public parameters: θ must be a vector, got shape {theta.shape}")
    return int(seed[0]), wire.decode_ids(parts_b), torch.from_numpy(theta)


def decode_gradient(payload: bytes, n_public: int, src: str = "a party") -> np.ndarray:
    """A party's released gradient of θ: sparse ternary, or dense fp32 (Laplace, none)."""
    tag = wire.peek_tag(payload)
    if tag == "ternary":
        g = wire.decode_ternary(payload)
    elif tag == "dense":
        g = wire.decode_dense(payload).astype(np.float32)
    else:
        raise wire.WireError(f"gradient from {src}: unexpected codec {tag}")
    if g.shape != (n_public,):
        raise wire.WireError(f"gradient from {src}: shape {g.shape}, expected ({n_public},)")
    return g


def public_size(n_public: int, s: int) -> int:
    """Bytes of one ``public_params`` message."""
    return wire.record_size(
        [wire.ids_size(1, 8), wire.ids_size(s, 4), wire.dense_size((n_public,))]
    )


def iteration_bytes(
    *, n_public: int, s: int, rows: int, dim: int, schedule: list[list[int]], grad_sizes: list[int]
) -> dict[str, int]:
    """Bytes of one iteration by kind (§5.3 written out in the wire formats): S downloads of θ,
    S(S−1) projected aggregate tensors [L_j, q, D] per exchange step, one gradient per party."""
    return {
        "public_params": s * public_size(n_public, s),
        "aggregates": s * (s - 1) * sum(wire.dense_size((len(st), rows, dim)) for st in schedule),
        "gradient": sum(grad_sizes),
    }


def paper_iteration_floats(*, n_public: int, s: int, rows: int, dim: int, n_layers: int) -> dict:
    """The paper's cost counted in numbers sent (no headers): S·|θ| down, S(S−1)·K·q·D between
    parties; the quantized upload costs about nnz·(32 + 1) bits per party (index + sign)."""
    return {"public_params": s * n_public, "aggregates": s * (s - 1) * n_layers * rows * dim}
