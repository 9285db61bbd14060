"""Gaussian random projection (privacy/projection.py): determinism, E[ΦᵀΦ] = I, the
reconstruction-error formula, and block-wise streaming equal to the dense products."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privacy.projection import (
    ROW_BLOCK,
    GaussianProjection,
    SparseProjection,
    default_projection_dim,
    expected_reconstruction_error,
    project,
    projection_matrix,
    projection_rows,
    reconstruct,
)


def test_seeded_and_deterministic() -> None:
    a = projection_matrix(7, 11, seed=3)
    assert a.shape == (7, 11)
    assert torch.equal(a, projection_matrix(7, 11, seed=3))
    assert not torch.allclose(a, projection_matrix(7, 11, seed=4))


def test_row_ranges_match_the_whole_matrix_across_block_boundaries() -> None:
    q, n = 2 * ROW_BLOCK + 37, 13
    full = projection_matrix(q, n, seed=9)
    for start, stop in [(0, 5), (ROW_BLOCK - 3, ROW_BLOCK + 4), (ROW_BLOCK + 1, q), (q, q)]:
        assert torch.equal(projection_rows(q, n, 9, start, stop), full[start:stop])


def test_entries_have_variance_one_over_q() -> None:
    q, n = 300, 400
    phi = projection_matrix(q, n, seed=1).double()
    var = float(phi.var())
    # sample variance of 120k normals: relative standard error sqrt(2/120k) ≈ 0.4 %
    assert abs(var * q - 1.0) < 0.03
    assert abs(float(phi.mean())) < 5 * (1 / np.sqrt(q)) / np.sqrt(q * n)


def test_phi_t_phi_is_unbiased_for_identity() -> None:
    q, n, trials = 4, 8, 3000
    acc = torch.zeros(n, n, dtype=torch.float64)
    for seed in range(trials):
        phi = projection_matrix(q, n, seed).double()
        acc += phi.T @ phi
    mean = acc / trials
    # Var[(ΦᵀΦ)_ii] = 2/q, Var[(ΦᵀΦ)_ij] = 1/q  →  5 standard errors
    se = torch.full((n, n), np.sqrt(1 / q / trials), dtype=torch.float64)
    se.fill_diagonal_(np.sqrt(2 / q / trials))
    assert bool(((mean - torch.eye(n, dtype=torch.float64)).abs() < 5 * se).all())


def test_reconstruction_error_matches_formula_and_reconstruct_is_unbiased() -> None:
    n, d, q, trials = 6, 3, 3, 4000
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    errors, sums = [], torch.zeros_like(x)
    for seed in range(trials):
        phi = projection_matrix(q, n, seed).double()
        x_hat = reconstruct(phi, project(phi, x))
        errors.append(float((x_hat - x).pow(2).sum()))
        sums += x_hat
    errors = np.array(errors)
    se = errors.std() / np.sqrt(trials)
    expected = expected_reconstruction_error(x, q)
    assert expected == pytest.approx((n + 1) / q * float(x.pow(2).sum()))
    assert abs(errors.mean() - expected) < 4 * se
    # the test tells the formula from N/q or (N+2)/q: those differ from it by ‖X‖²/q
    assert float(x.pow(2).sum()) / q > 8 * se
    per_entry_se = np.sqrt(errors.mean() / (n * d) / trials)
    assert float((sums / trials - x).abs().max()) < 5 * per_entry_se


def test_streamed_projection_equals_dense_products() -> None:
    n, q, d = 500, 2 * ROW_BLOCK + 50, 4
    spec = GaussianProjection(q, n, seed=5)
    phi = spec.matrix()
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(1))
    y = project(spec, x)
    assert torch.allclose(y, phi @ x, atol=1e-4)
    assert torch.allclose(reconstruct(spec, y), phi.T @ (phi @ x), atol=1e-3)
    v = torch.randn(n, generator=torch.Generator().manual_seed(2))
    assert project(spec, v).shape == (q,)
    assert reconstruct(spec, project(spec, v)).shape == (n,)


def test_medium_n_streamed_error_is_close_to_formula() -> None:
    # one draw at N = 10 000, q = N/5 without a dense Φ: the error concentrates around
    # (N+1)/q·‖X‖² (relative spread ≈ √(2/q) ≈ 3 %)
    n = 10_000
    q = default_projection_dim(n)
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(3))
    spec = GaussianProjection(q, n, seed=11)
    err = float((reconstruct(spec, project(spec, x)) - x).pow(2).sum())
    assert err / expected_reconstruction_error(x, q) == pytest.approx(1.0, abs=0.2)


@pytest.mark.slow
def test_paper_scale_n_100k_streams() -> None:
    n = 100_000
    q = default_projection_dim(n)
    x = torch.randn(n, 6, generator=torch.Generator().manual_seed(4))
    spec = GaussianProjection(q, n, seed=1)
    y = project(spec, x)
    assert y.shape == (q, 6)
    err = float((reconstruct(spec, y) - x).pow(2).sum())
    assert err / expected_reconstruction_error(x, q) == pytest.approx(1.0, abs=0.1)


def test_bad_input_raises_value_error() -> None:
    phi = projection_matrix(3, 5, seed=0)
    with pytest.raises(ValueError, match="rows"):
        project(phi, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="rows"):
        reconstruct(phi, torch.zeros(5, 2))
    with pytest.raises(ValueError, match="q >= 1"):
        projection_matrix(0, 5, seed=0)
    with pytest.raises(ValueError, match="seed"):
        projection_matrix(3, 5, seed=-1)
    with pytest.raises(ValueError, match="outside"):
        projection_rows(3, 5, 0, 2, 4)
    with pytest.raises(ValueError, match="vector or a matrix"):
        project(phi, torch.zeros(5, 2, 2))
    with pytest.raises(ValueError, match="2-D"):
        project(torch.zeros(3), torch.zeros(3))


# --- the sparse (CountSketch) Φ of the authors' code ---------------------------------------------
def test_sparse_phi_has_one_signed_entry_per_column_and_is_seeded() -> None:
    phi = SparseProjection(7, 50, seed=3).matrix()
    assert torch.equal((phi != 0).sum(0), torch.ones(50, dtype=torch.long))
    assert set(phi[phi != 0].tolist()) == {-1.0, 1.0}
    assert torch.equal(phi, SparseProjection(7, 50, seed=3).matrix())
    assert not torch.equal(phi, SparseProjection(7, 50, seed=4).matrix())


def test_sparse_project_and_reconstruct_equal_the_dense_products() -> None:
    sp = SparseProjection(9, 40, seed=2)
    x = torch.randn(40, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    dense = sp.matrix().double()
    assert torch.allclose(project(sp, x), dense @ x)
    y = project(sp, x)
    assert torch.allclose(reconstruct(sp, y), dense.T @ y)
    assert project(sp, x[:, 0]).shape == (9,)


def test_sparse_reconstruction_is_unbiased_with_error_n_minus_1_over_q() -> None:
    n, q, d, draws = 60, 12, 3, 3000
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    errs, mean = [], torch.zeros_like(x)
    for seed in range(draws):
        sp = SparseProjection(q, n, seed)
        xhat = reconstruct(sp, project(sp, x))
        errs.append(float((xhat - x).pow(2).sum()))
        mean += xhat / draws
    want = (n - 1) / q * float(x.pow(2).sum())
    assert abs(np.mean(errs) / want - 1) < 0.05  # 3,000 draws: relative standard error ≈ 1.5%
    # E[X̂] = X: the per-entry standard error of the mean is ≈ sqrt(want / (n·d·draws)) ≈ 0.04
    assert float((mean - x).abs().max()) < 0.25


def test_sparse_rows_alone_in_their_bucket_are_read_exactly() -> None:
    """What the sketch does not hide: a row alone in its bucket comes back exactly (≈ e^{−N/q})."""
    n = 20_000
    q = default_projection_dim(n)
    sp = SparseProjection(q, n, seed=0)
    bucket, _ = sp.hashes()
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    xhat = reconstruct(sp, project(sp, x))
    alone = torch.bincount(bucket, minlength=q)[bucket] == 1
    assert torch.allclose(xhat[alone], x[alone])
    assert not torch.isclose(xhat[~alone], x[~alone]).all(1).any()
    assert abs(float(alone.double().mean()) / np.exp(-n / q) - 1) < 0.2
