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


# The longest test files first, so that the two xdist workers finish together: pyproject's
# ``--no-loadscope-reorder`` makes xdist hand the files out in this order (by default it puts the
# files with most tests first, and a long file with few tests then runs alone at the end). Ordered
# by the per-file sums of ``pytest --durations=0``; a file not listed follows, in collection order.
LONGEST_FIRST = [
    "integration/test_two_node_cluster.py",
    "benchmarks/test_tune.py",
    "integration/test_gpu_placement.py",
    "integration/test_golden.py",
    "integration/test_dropout.py",
    "integration/test_faults.py",
    "nodes/test_transport.py",
    "privacy/test_noise.py",
    "integration/test_adversaries.py",
    "engine/test_checkpoint.py",
    "protocols/dipsgnn/test_protocol.py",
    "integration/test_hostile_handlers.py",
    "protocols/verfedgnn/test_protocol.py",
    "docs/test_readme.py",
    "nodes/test_deployment.py",
    "privacy/test_key_server.py",
    "benchmarks/test_floor.py",
    "cli/test_main.py",
    "cluster/test_runtime.py",
    "benchmarks/test_cli.py",
    "engine/test_runner.py",
    "integration/test_attack_malformed.py",
    "protocols/dgrec/test_protocol.py",
    "protocols/dgrec/test_dropout.py",
    "protocols/fedpergnn/test_dropout.py",
    "nodes/test_secure_sum.py",
    "engine/test_report.py",
    "integration/test_participant_faults.py",
    "protocols/fedpergnn/test_protocol.py",
    "cluster/test_device.py",
    "engine/test_audit.py",
    "protocols/fedmf/test_protocol.py",
]


TESTS = Path(__file__).resolve().parent


def _name(path) -> str:
    """A test file's path under tests/ (``engine/test_runner.py``): names repeat across folders."""
    return Path(path).resolve().relative_to(TESTS).as_posix()


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(
        key=lambda item: rank.get(_name(item.path), len(rank))
    )  # stable: a file's order kept


TEST_CPUS = 8


def start_test_ray():
    """The tests' local Ray instance, started
    once and kept for the following tests (re-started if a test shut it down). Under pytest-xdist
    (pyproject's addopts: ``-n 2 --dist loadfile``) each worker process has its own instance, and a
    test file's tests all run on one worker, so a module fixture is built once. It has 8 logical
    CPUs: deployments of up to 8 hosts then ask 1 CPU a host, so their host actors are reset and
    reused between tests (cluster/runtime.py keeps idle actors that ask for the same resources)
    instead of started (a process that imports torch: seconds each)."""
    import ray

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # as benchmarks/tune.py sets it for its own Ray: its trials' processes inherit it from here
    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", "60")
    if not ray.is_initialized():
        ray.init(  # "local": never the two-node test's `ray start` cluster, which plain init joins
            address="local",
            num_cpus=TEST_CPUS,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
    return ray


@pytest.fixture
def ray_local():
    """:func:`start_test_ray` for one test."""
    yield start_test_ray()


@pytest.fixture(autouse=True, scope="session")
def _privrec_home(tmp_path_factory):
    """Checkpoint keys (engine/checkpoint.py) in a temporary folder, never the user's ~/.privrec;
    a run in a subprocess inherits it."""
    os.environ["PRIVREC_HOME"] = str(tmp_path_factory.mktemp("privrec_home"))
    yield


@pytest.fixture(autouse=True)
def _no_dashboard_left_asked():
    """``use_dashboard()`` is process state (--dashboard): a test that asks for it does
    not leave it asked for the tests after it on the same worker."""
    from cluster import runtime

    before = dict(runtime._DASHBOARD)
    yield
    runtime._DASHBOARD.clear()
    runtime._DASHBOARD.update(before)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny tensors run many times faster on one thread on a loaded 2-core machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# The test files whose runs draw their PNGs: the report's own tests, a golden run of every
# protocol (each protocol's rows plotted), and the command line as a user runs it. Elsewhere a
# run's plots are skipped (seconds of matplotlib a run; RESULTS.md has the figures): nothing else
# looks at them.
PLOTTING_TESTS = {
    "engine/test_report.py",
    "integration/test_golden.py",
    "cli/test_main.py",
    "docs/test_readme.py",
    "benchmarks/test_scale.py",
    "docs/test_tutorial.py",
}


@pytest.fixture(autouse=True)
def _run_plots_only_where_checked(request, monkeypatch):
    if _name(request.path) not in PLOTTING_TESTS:
        import engine.report

        monkeypatch.setattr(engine.report, "plot_run", lambda rows, out_dir: [])
    yield
