"""DP-SGD baseline for DIPSGNN: the noise multiplier reproduces dp-accounting's ε, per-user
gradients from vmap equal one-by-one backward passes, clipping and noise have the stated sizes,
and the protocol switch spends what it was calibrated for."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting import rdp

from data.sequences import training_prefixes
from models.gated_session_gnn import DIPSGNN
from models.session_training import _batch
from privacy.calibration import dpsgd_epsilon, dpsgd_noise_multiplier
from protocols.dipsgnn.dpsgd import (
    clip_per_user,
    dpsgd_step,
    dpsgd_steps_per_epoch,
    per_user_gradients,
    prefixes_by_user,
)

N_ITEMS, N_FEATS = 15, 4
SEQS = [
    np.array([1, 4, 1, 7, 3, 9]),
    np.array([3, 2]),  # one training prefix
    np.array([5, 6, 2, 6, 0, 11, 12, 14]),
    np.array([8]),  # no training prefix (padding only)
]


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = DIPSGNN(N_ITEMS, N_FEATS, hidden_dim=8, user_dim=3, steps=2)
    examples, _ = training_prefixes(SEQS, train_fraction=1.0)
    feats = torch.randn(len(SEQS), N_FEATS)
    by_user = prefixes_by_user(examples, len(SEQS))
    fallback = [s[:1] for s in SEQS]
    return model, examples, feats, by_user, fallback


def _independent_epsilon(z: float, n: int, b: int, steps: int, delta: float) -> float:
    """dp-accounting directly, with its DEFAULT RDP orders."""
    acc = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.SampledWithoutReplacementDpEvent(n, b, dp_accounting.GaussianDpEvent(z))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return acc.get_epsilon(delta)


def test_noise_multiplier_reproduces_dp_accounting_epsilon():
    n, b, steps, delta, eps = 200, 20, 40, 1e-5, 5.0
    z = dpsgd_noise_multiplier(eps, delta, n, b, steps)
    assert dpsgd_epsilon(z, n, b, steps, delta) == pytest.approx(eps, abs=1e-3)
    assert _independent_epsilon(z, n, b, steps, delta) == pytest.approx(eps, abs=0.02)
    # the smallest such z: 1% less noise overspends
    assert _independent_epsilon(0.99 * z, n, b, steps, delta) > eps
    # at this z, more steps or a larger sampling rate overspend
    assert dpsgd_epsilon(z, n, b, 2 * steps, delta) > eps
    assert dpsgd_epsilon(z, n, 2 * b, steps, delta) > eps


def test_accounting_bad_input():
    with pytest.raises(ValueError, match="batch_size"):
        dpsgd_epsilon(1.0, 10, 11, 5, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        dpsgd_noise_multiplier(0.0, 1e-5, 10, 2, 5)
    with pytest.raises(ValueError, match="noise_multiplier"):
        dpsgd_epsilon(-1.0, 10, 2, 5, 1e-5)
    assert dpsgd_epsilon(0.0, 10, 2, 5, 1e-5) == math.inf
    assert dpsgd_epsilon(1.0, 10, 2, 0, 1e-5) == 0.0
    assert dpsgd_steps_per_epoch(10, 3) == 4
    with pytest.raises(ValueError):
        dpsgd_steps_per_epoch(10, 11)


def test_vmapped_per_user_gradients_equal_one_by_one():
    model, examples, feats, by_user, fallback = _setup()
    rows = np.array([0, 1, 2, 3])
    grads, losses = per_user_gradients(
        model, examples, by_user, rows, feats, fallback, max_weight=1.0
    )
    for r in rows:
        model.zero_grad(set_to_none=True)
        idx = by_user[r]
        if len(idx) == 0:  # a user without prefixes contributes nothing
            for g in grads.values():
                assert torch.count_nonzero(g[r]) == 0
            assert float(losses[r]) == 0.0
            continue
        t = _batch(
            model, [examples.prefixes[i] for i in idx], examples.user[idx], feats, 1.0, "cpu"
        )
        loss = model.loss(model(**t), torch.as_tensor(examples.target[idx]))
        loss.backward()
        assert float(losses[r]) == pytest.approx(float(loss.detach()), rel=1e-5)
        for name, p in model.named_parameters():
            torch.testing.assert_close(grads[name][r], p.grad, rtol=1e-4, atol=1e-6)


def test_clipping_bounds_each_user_and_keeps_small_gradients():
    torch.manual_seed(1)
    grads = {"a": torch.randn(5, 3, 4), "b": torch.randn(5, 7)}
    grads["a"][0] *= 1e-3
    grads["b"][0] *= 1e-3
    clipped = clip_per_user(grads, 1.0)
    norms = torch.sqrt(sum(g.flatten(1).pow(2).sum(1) for g in clipped.values()))
    assert torch.all(norms <= 1.0 + 1e-5)
    assert torch.allclose(norms[1:], torch.ones(4))
    for k in grads:
        torch.testing.assert_close(clipped[k][0], grads[k][0])
    with pytest.raises(ValueError, match="clip_norm"):
        clip_per_user(grads, 0.0)


def test_step_adds_noise_of_std_z_2c_over_b():
    rows = np.array([0, 1, 2])
    z, clip = 0.7, 0.05
    results = {}
    for name, mult in (("clean", 0.0), ("noisy", z)):
        model, examples, feats, by_user, fallback = _setup()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        dpsgd_step(
            model,
            opt,
            examples,
            by_user,
            rows,
            feats,
            fallback,
            clip_norm=clip,
            noise_multiplier=mult,
            max_weight=1.0,
            noise=torch.Generator().manual_seed(5),
        )
        results[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
    # the clean step is the mean of the clipped per-user gradients
    model, examples, feats, by_user, fallback = _setup()
    grads, _ = per_user_gradients(model, examples, by_user, rows, feats, fallback, max_weight=1.0)
    clipped = clip_per_user(grads, clip)
    mean = torch.cat([clipped[n].mean(0).flatten() for n, _ in model.named_parameters()])
    torch.testing.assert_close(results["clean"], mean, rtol=1e-5, atol=1e-7)
    noise = results["noisy"] - results["clean"]
    want = z * 2 * clip / len(rows)
    se = want / math.sqrt(2 * noise.numel())  # standard error of a std estimate
    assert abs(float(noise.std()) - want) < 5 * se
    assert abs(float(noise.mean())) < 5 * want / math.sqrt(noise.numel())
