"""Gaussian random projection of neighbour aggregates (VerFedGNN, Mai & Pang, ICML 2023, §4).

A party does not send its N×D neighbour aggregation X_p^k in the clear; it sends

    Y_p^k = Φ X_p^k,            Φ ∈ R^{q×N},  Φ_ij ~ N(0, 1/q) i.i.d.,

and the receiver reconstructs X̂ = Φᵀ Y = ΦᵀΦ X. Φ is generated from a seed the server
broadcasts, so every party holds the same Φ without it ever being sent.

Facts used by the protocol and checked in tests/privacy/test_projection.py:

* unbiased:  E_Φ[ΦᵀΦ] = I_N, hence E_Φ[X̂] = X;
* error:     E_Φ ‖ΦᵀΦX − X‖_F² = ((N + 1) / q) · ‖X‖_F²  (expectation over Φ only, X fixed).
  Derivation: ΦᵀΦ = W/q with W ~ Wishart_N(q, I), E[W²] = q(q + N + 1) I, so
  E[(ΦᵀΦ)²] = (q + N + 1)/q · I and E‖ΦᵀΦx − x‖² = xᵀ(E[(ΦᵀΦ)²] − I)x = (N + 1)/q · ‖x‖².
  With the paper's default q = N/5 the reconstruction error energy is ≈ 5‖X‖_F².

Large N. Φ is defined block-wise: rows [b·ROW_BLOCK, (b+1)·ROW_BLOCK) come from a CPU
torch.Generator seeded with a hash of (seed, b). So any row range can be regenerated on its
own, and `project`/`reconstruct` on a `GaussianProjection` stream over row blocks: memory is
O(ROW_BLOCK·N + q·D) instead of O(q·N). N = 100 000, q = 20 000 (a dense Φ would take
8 GB) streams in 100 MB blocks; each pass (project or reconstruct) draws 2·10⁹ normals,
≈ 25–50 s on 2 CPU cores.
Generation is always on the CPU so that every party (CPU or GPU) gets the same Φ; blocks are
moved to the data's device for the matrix products.

Sparse Φ (:class:`SparseProjection`, the authors' code): a CountSketch matrix with one ±1 entry
per column, Φ_{h(j), j} = s(j), h(j) uniform on [q], s(j) = ±1 with probability ½, fixed for the
run by the seed. Y = ΦX adds each row into its bucket h(j) with its sign and X̂ = ΦᵀY reads it
back, O(N·D) instead of O(q·N·D). Still unbiased (E[ΦᵀΦ] = I: the diagonal is 1, off-diagonal
entries have mean 0), with E_Φ‖ΦᵀΦX − X‖_F² = ((N − 1)/q)·‖X‖_F². What does not carry over from
the Gaussian Φ: there every coordinate of Y mixes all N rows, and Y determines X only up to the
(N − q)-dimensional null space of Φ. Here a coordinate mixes only the rows that share its bucket,
and Φ is public, so a row alone in its bucket — probability (1 − 1/q)^{N−1} ≈ e^{−N/q}, 0.7% of
rows at q = N/5 — is read exactly from Y; otherwise a row is hidden among its bucket-mates
(on average N/q of them), the sketch's l in place of the Gaussian argument's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from cluster.device import to_device

ROW_BLOCK = 256  # rows of Φ drawn from one seeded generator: part of Φ's definition


def default_projection_dim(n: int, reduction: int = 5) -> int:
    """The paper's default q = N / 5 (at least 1)."""
    if n < 1 or reduction < 1:
        raise ValueError(f"need n >= 1 and reduction >= 1, got n={n}, reduction={reduction}")
    return max(1, n // reduction)


def _block_seed(seed: int, block: int) -> int:
    state = np.random.SeedSequence([int(seed), int(block)]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def _check_dims(q: int, n: int, seed: int) -> None:
    if not isinstance(q, int | np.integer) or not isinstance(n, int | np.integer):
        raise ValueError(f"q and n must be integers, got q={q!r}, n={n!r}")
    if q < 1 or n < 1:
        raise ValueError(f"projection needs q >= 1 and n >= 1, got q={q}, n={n}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def projection_rows(
    q: int, n: int, seed: int, start: int, stop: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Rows ``start:stop`` of Φ (q×n, entries N(0, 1/q)) as a CPU tensor [stop-start, n]."""
    _check_dims(q, n, seed)
    if not 0 <= start <= stop <= q:
        raise ValueError(f"row range [{start}, {stop}) is outside [0, {q})")
    parts = []
    for block in range(start // ROW_BLOCK, -(-stop // ROW_BLOCK)):
        lo = block * ROW_BLOCK
        rows = min(ROW_BLOCK, q - lo)
        gen = torch.Generator(device="cpu").manual_seed(_block_seed(seed, block))
        chunk = torch.randn(rows, n, generator=gen, dtype=torch.float32, device="cpu")
        parts.append(chunk[max(start - lo, 0) : min(stop - lo, rows)])
    if not parts:
        return torch.zeros(0, n, dtype=dtype, device="cpu")
    out = torch.cat(parts) if len(parts) > 1 else parts[0]
    return out.mul_(1.0 / float(np.sqrt(q))).to(dtype)


def projection_matrix(q: int, n: int, seed: int) -> torch.Tensor:
    """The whole Φ ∈ R^{q×n}, entries N(0, 1/q), deterministic for ``seed`` (float32, CPU)."""
    _check_dims(q, n, seed)
    return projection_rows(q, n, seed, 0, q)


@dataclass(frozen=True)
class GaussianProjection:
    """Φ described by (q, n, seed) only; its ROW_BLOCK-row blocks are regenerated when used."""

    q: int
    n: int
    seed: int

    def __post_init__(self) -> None:
        _check_dims(self.q, self.n, self.seed)

    def blocks(self) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (first row, Φ[rows]) over the ROW_BLOCK-row blocks of Φ (CPU, float32)."""
        for start in range(0, self.q, ROW_BLOCK):
            yield (
                start,
                projection_rows(self.q, self.n, self.seed, start, min(start + ROW_BLOCK, self.q)),
            )

    def matrix(self) -> torch.Tensor:
        return projection_matrix(self.q, self.n, self.seed)


@dataclass(frozen=True)
class SparseProjection:
    """The CountSketch Φ ∈ {0, ±1}^{q×n} (module docstring) described by (q, n, seed)."""

    q: int
    n: int
    seed: int

    def __post_init__(self) -> None:
        _check_dims(self.q, self.n, self.seed)

    def hashes(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """(bucket h(j) ∈ [q], sign s(j) ∈ {±1}) for every column j, as tensors [n] on
        ``device`` (drawn on the CPU: the same Φ on every device)."""
        rng = np.random.default_rng(np.random.SeedSequence([int(self.seed), 0x5C0E]))
        bucket = rng.integers(0, self.q, self.n)
        sign = 1.0 - 2.0 * rng.integers(0, 2, self.n)
        return to_device(bucket, device), to_device(sign, device, torch.float32)

    def matrix(self) -> torch.Tensor:
        bucket, sign = self.hashes()
        phi = torch.zeros(self.q, self.n, device="cpu")
        phi[bucket, torch.arange(self.n, device="cpu")] = sign
        return phi


def make_projection(
    kind: str, q: int, n: int, seed: int
) -> GaussianProjection | SparseProjection | None:
    """Φ of ``kind`` "gaussian" or "sparse" (q×n, from ``seed``); None for "none"."""
    if kind == "gaussian":
        return GaussianProjection(q, n, seed)
    if kind == "sparse":
        return SparseProjection(q, n, seed)
    if kind == "none":
        return None
    raise ValueError(f"projection must be gaussian, sparse or none, got {kind!r}")


def _as_2d(x: torch.Tensor, name: str) -> tuple[torch.Tensor, bool]:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() == 1:
        return x.unsqueeze(1), True
    if x.dim() != 2:
        raise ValueError(f"{name} must be a vector or a matrix, got shape {tuple(x.shape)}")
    return x, False


Projection = torch.Tensor | GaussianProjection | SparseProjection


def _phi_shape(phi: Projection) -> tuple[int, int]:
    if isinstance(phi, GaussianProjection | SparseProjection):
        return phi.q, phi.n
    if not isinstance(phi, torch.Tensor) or phi.dim() != 2:
        raise ValueError("Φ must be a 2-D torch.Tensor, a GaussianProjection or a SparseProjection")
    return int(phi.shape[0]), int(phi.shape[1])


def project(phi: Projection, x: torch.Tensor) -> torch.Tensor:
    """Y = Φ X: [q, D] from X [N, D] (or [q] from a vector [N])."""
    x2, was_vector = _as_2d(x, "X")
    q, n = _phi_shape(phi)
    if x2.shape[0] != n:
        raise ValueError(f"X has {x2.shape[0]} rows but Φ has {n} columns")
    if isinstance(phi, SparseProjection):  # Y[h(j)] += s(j)·X[j]
        bucket, sign = phi.hashes(x2.device)
        y = torch.zeros(q, x2.shape[1], dtype=x2.dtype, device=x2.device)
        y.index_add_(0, bucket, x2 * sign.to(x2.dtype).unsqueeze(1))
    elif isinstance(phi, GaussianProjection):
        y = torch.empty(q, x2.shape[1], dtype=x2.dtype, device=x2.device)
        for start, rows in phi.blocks():
            y[start : start + rows.shape[0]] = rows.to(x2.device, x2.dtype) @ x2
    else:
        y = phi.to(x2.device, x2.dtype) @ x2
    return y.squeeze(1) if was_vector else y


def reconstruct(phi: Projection, y: torch.Tensor) -> torch.Tensor:
    """X̂ = Φᵀ Y: [N, D] from Y [q, D] (unbiased for X since E[ΦᵀΦ] = I)."""
    y2, was_vector = _as_2d(y, "Y")
    q, n = _phi_shape(phi)
    if y2.shape[0] != q:
        raise ValueError(f"Y has {y2.shape[0]} rows but Φ has {q} rows")
    if isinstance(phi, SparseProjection):  # X̂[j] = s(j)·Y[h(j)]
        bucket, sign = phi.hashes(y2.device)
        x = y2[bucket] * sign.to(y2.dtype).unsqueeze(1)
    elif isinstance(phi, GaussianProjection):
        x = torch.zeros(n, y2.shape[1], dtype=y2.dtype, device=y2.device)
        for start, rows in phi.blocks():
            x += rows.to(y2.device, y2.dtype).T @ y2[start : start + rows.shape[0]]
    else:
        x = phi.to(y2.device, y2.dtype).T @ y2
    return x.squeeze(1) if was_vector else x


def expected_reconstruction_error(x: torch.Tensor, q: int) -> float:
    """E_Φ ‖ΦᵀΦX − X‖_F² = ((N + 1)/q)·‖X‖_F² for fixed X [N, D] (N = rows of X)."""
    x2, _ = _as_2d(x, "X")
    if q < 1:
        raise ValueError(f"q must be >= 1, got {q}")
    n = x2.shape[0]
    return (n + 1) / q * float(x2.double().pow(2).sum())
