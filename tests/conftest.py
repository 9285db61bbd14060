"""Shared fixtures: one local Ray instance for the tests that need it, and the data directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_shared_data = pytest.mark.skipif(
    not SHARED_DATA.is_dir(),
    reason=f"real datasets not found at {SHARED_DATA} (they live beside the checkout in ../shared/data)",
)


def start_test_ray():
    """The tests' local Ray instance (4 logical CPUs; hosts ask for fractions of them), started
    once and kept for the following tests (re-started if a test shut it down). Under pytest-xdist
    (pyproject's addopts: ``-n 2 --dist loadfile``) each worker process has its own instance, and a
    test file's tests all run on one worker, so a module fixture is built once."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    if not ray.is_initialized():
        ray.init(  # "local": never the two-node test's `ray start` cluster, which plain init joins
            address="local",
            num_cpus=4,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
    return ray


@pytest.fixture
def ray_local():
    """:func:`start_test_ray` for one test."""
    yield start_test_ray()


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny tensors run many times faster on one thread on a loaded 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
