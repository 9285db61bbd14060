"""The element-wise kernels that batched local training relies on give an element the same bits
wherever it sits in its tensor (models/bpr.py explains why softplus and sigmoid are not used).
A failure here names the kernel that breaks batched == one-by-one on this machine."""

from __future__ import annotations

import pytest
import torch

from models.bpr import neg_log_sigmoid, sigmoid

KERNELS = {"neg_log_sigmoid": neg_log_sigmoid, "sigmoid": sigmoid}


def _value_and_grad(f, x):
    x = x.clone().requires_grad_(True)
    y = f(x)
    y.sum().backward()
    return y.detach(), x.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_result_does_not_depend_on_position(name, dtype):
    f = KERNELS[name]
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    whole, whole_grad = _value_and_grad(f, x)
    for offset in range(0, 67):  # every offset within a 512-bit block, twice over
        for length in (1, 5, 17, 37, 70, 301):
            part, part_grad = _value_and_grad(f, x[offset : offset + length])
            assert torch.equal(part, whole[offset : offset + length]), (name, offset, length)
            assert torch.equal(part_grad, whole_grad[offset : offset + length]), (
                name,
                offset,
                length,
            )


def test_kernels_compute_what_they_are_named():
    x = torch.linspace(-30, 30, 1001, dtype=torch.float64)
    assert torch.allclose(neg_log_sigmoid(x), torch.nn.functional.softplus(-x), rtol=1e-12)
    assert torch.allclose(sigmoid(x), torch.sigmoid(x), rtol=1e-12, atol=1e-300)
