"""VerFedGNN's payloads (protocols/verfedgnn/roles.py sends them): the public-parameter record
and the byte counts of one iteration by kind, written out from the wire formats (§5.3).

Aggregates travel as one dense [L_j, q, D] tensor per exchange step (``wire.encode_dense``);
gradients as a sparse ternary vector (``wire.encode_ternary``) or, for the Laplace and
no-mechanism variants, a dense fp32 vector.
"""

from __future__ import annotations

import numpy as np
import torch

from cluster import validate as v
from cluster import wire
from privacy.key_server import decode_residues, encode_residues, residue_bytes, residues_size

# PSI: key server -> party (N, e) as bigints; party -> key server the blinded values of its ids,
# key server -> party their signatures, both at the modulus' byte length (privacy/key_server.py:
# the same size whatever the key and the blinding factors)
encode_blinded = encode_signed = encode_residues
decode_blinded = decode_signed = decode_residues
blinded_size = signed_size = residues_size


def encode_public(seed: int, participants: np.ndarray, theta: torch.Tensor) -> bytes:
    return wire.encode_record(
        [
            wire.encode_ids(np.array([seed], dtype=np.int64), width=8),
            wire.encode_ids(np.asarray(participants, dtype=np.int64), width=4),
            wire.encode_dense(theta.detach()),
        ]
    )


def decode_public(payload: bytes) -> tuple[int, np.ndarray, np.ndarray]:
    seed_b, parts_b, theta_b = wire.decode_record(payload, expect=3)
    seed = wire.decode_ids(seed_b)
    if seed.shape != (1,):
        raise wire.WireError("public parameters: the seed field must hold one id")
    theta = wire.decode_dense(theta_b)
    if theta.ndim != 1:
        raise wire.WireError(f"public parameters: θ must be a vector, got shape {theta.shape}")
    return int(seed[0]), wire.decode_ids(parts_b), theta


def decode_gradient(payload: bytes, n_public: int, src: str = "a party") -> np.ndarray:
    """A party's released gradient of θ: sparse ternary, or dense fp32 (Laplace, none). A length
    other than ``n_public`` raises WireError before anything of that length is allocated."""
    tag = wire.peek_tag(payload)
    if tag == "ternary":
        g = wire.decode_ternary(payload, length=n_public)
    elif tag == "dense":
        g = wire.decode_dense(payload, max_numel=n_public).astype(np.float32)
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


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
# θ's length and the projection's row count follow from the aligned users (the PSI's outcome,
# not a public value): the receiving handler compares them with its own θ and Φ.
def check_blinded(payload: bytes, shared) -> None:
    """One blinded value per user a party knows (at most N common users and its
    ``psi_extra_users`` own ones), each at the PSI modulus' byte length. Whether a value lies in
    1..N−1 is the key server's own check (N is its key)."""
    most = shared.public.n_users + shared.config.psi_extra_users
    v.chunks(payload, residue_bytes(shared.config.psi_key_bits), max_count=most)


check_signed = check_blinded


def check_public_key(payload: bytes, shared) -> None:
    v.bigints(payload, max_bits=shared.config.psi_key_bits, count=2)


def check_tokens(payload: bytes, shared) -> None:
    """At most one token per id a party knows (the common users and its ``psi_extra_users``),
    sorted and distinct."""
    from privacy.oprf import TOKEN_BYTES

    most = shared.public.n_users + shared.config.psi_extra_users
    tokens = v.chunks(payload, TOKEN_BYTES, max_count=most)
    if any(a >= b for a, b in zip(tokens, tokens[1:])):
        raise v.Invalid("order", "PSI tokens: not sorted and distinct")


def check_intersection(payload: bytes, shared) -> None:
    n, c = shared.public.n_users, shared.config
    # ids of the parties' id space: the N common users, then each party's own extra ones
    v.ids(payload, n + c.parties * c.psi_extra_users, max_count=n, what="PSI intersection")


def check_public(payload: bytes, shared) -> None:
    """Φ's seed, the participants A_t among the P parties, and a finite θ."""
    seed_b, parts_b, theta_b = v.record(payload, 3)
    v.ids(seed_b, count=1, what="seed of Φ")
    P = shared.config.parties
    v.ids(parts_b, P, max_count=P, what="participants")
    v.dense(theta_b, (None,), what="θ")


def check_aggregates(payload: bytes, shared) -> None:
    """Y = Φ X: a finite [L_j, q, D] tensor."""
    v.dense(payload, (None, None, shared.config.dim), what="aggregates")


def theta_size_bound(shared) -> int:
    """The most coordinates θ can have: its length grows with the aligned users (one embedding
    row each), at most the N users and a party's own ``psi_extra_users`` (a lone party aligns
    with itself). A public bound: θ's exact length is the PSI's outcome, which the server's
    handler compares with its own θ."""

    def count(sh) -> int:
        from protocols.verfedgnn.aggregation import party_model, public_parameters

        one = np.zeros(1, dtype=np.int64)

        def size(n_users: int) -> int:
            model = party_model(sh.config, n_users, 1, sh.public.n_items, one, one, 0)
            return sum(p.numel() for p in public_parameters(model))

        most = sh.public.n_users + sh.config.psi_extra_users
        s1, s2 = size(1), size(2)
        return s1 + (most - 1) * (s2 - s1)

    return v.per_shared(shared, "verfedgnn.theta", count)


def check_gradient(payload: bytes, shared) -> None:
    """∂θ: a sparse ternary vector (bounded by its scale) or a finite dense vector (Laplace and
    no-mechanism variants: magnitudes left to a robust aggregation), of at most θ's largest
    length (:func:`theta_size_bound`): a declared length beyond it is dropped before anything of
    that length is allocated."""
    tag = v.decoded(wire.peek_tag, payload)
    most = theta_size_bound(shared)
    if tag == "ternary":
        length = v.ternary(payload)[0]  # read without densifying
        if length > most:
            raise v.Invalid("size", f"gradient: declared length {length} > θ's {most}")
    elif tag == "dense":  # a view of the payload's own bytes: nothing allocated
        if v.dense(payload, (None,), what="gradient").size > most:
            raise v.Invalid("size", f"gradient: more than θ's {most} coordinates")
    else:
        raise v.Invalid("malformed", f"gradient: unexpected codec {tag}")
