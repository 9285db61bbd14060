"""Golden runs: every protocol and centralized baseline, a fixed seed, a small synthetic world and
one or two rounds, against the figures recorded in tests/golden/runs.json — the guard that a
refactoring leaves behaviour unchanged.

Every golden run also checks that the nodes compute on their device: handlers run with torch's
default device "meta" (``check_device``, cluster/device.py), so a tensor a role makes without its
``ctx.device`` breaks the run, as it would on a GPU host — while the figures stay those of the CPU.

Bytes by kind, participants and every integer are compared exactly. Metrics, losses and ε are
compared to 1e-6 relative: the file is recorded on one x86 CPU and CI may run on another whose
SIMD math kernels (Sleef, BLAS micro-kernels) round a few last bits differently; a change of
behaviour moves them far more than that.

Record again (after a change of behaviour that is meant, stated in the commit):
    python -m tests.integration.test_golden --update
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from data.synthetic import synthetic
from engine import RunSettings, run
from engine.report import read_rows
from nodes.conditions import Conditions
from nodes.transport import TRANSPORTS

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "runs.json"
REL = 1e-6

# (label, protocol, rounds, parameters): small enough to run all in about a minute
CASES: list[tuple[str, str, int, dict]] = [
    ("fedmf", "fedmf", 2, {"dim": 8, "eval_every": 1}),
    ("dmf", "dmf", 2, {"dim": 8, "eval_every": 1}),
    (
        "fedlightgcn",
        "fedlightgcn",
        2,
        {"dim": 8, "negatives": 16, "key_bits": 1024, "users_per_round": 0, "eval_every": 1},
    ),
    ("fedpergnn-gat", "fedpergnn", 2, {"backbone": "gat", "key_bits": 1024, "eval_every": 1}),
    ("dgrec", "dgrec", 2, {"pairs": 8, "eval_every": 1}),
    ("dlgnn", "dlgnn", 2, {"eval_every": 1}),
    ("verfedgnn", "verfedgnn", 2, {"parties": 2, "psi_key_bits": 1024, "eval_every": 1}),
    ("dipsgnn", "dipsgnn", 1, {"epochs": 1, "hidden_dim": 8, "user_dim": 4, "eval_every": 1}),
    ("central:bprmf", "central", 2, {"model": "bprmf", "dim": 8, "eval_every": 1}),
    ("central:lightgcn", "central", 2, {"model": "lightgcn", "dim": 8, "eval_every": 1}),
    ("central:gcn", "central", 2, {"model": "gcn", "eval_every": 1}),
    ("central:gat", "central", 2, {"model": "gat", "eval_every": 1}),
    ("central:dipsgnn", "central", 1, {"model": "dipsgnn", "dim": 8, "user_dim": 4}),
]


def test_every_builtin_protocol_has_a_golden_run():
    """A protocol added to the registry is added here too (echo and ping are the runtime's own
    test workloads, checked by the floor and the transport tests)."""
    from protocols import BUILTIN

    covered = {protocol for _, protocol, _, _ in CASES}
    assert set(BUILTIN) - {"echo", "ping"} <= covered, sorted(set(BUILTIN) - covered)


def dataset():
    return synthetic(n_users=40, n_items=60, avg_interactions=12, seed=0)


def figures(summary: dict, rows: list[dict]) -> dict:
    """What must not change: metrics, bytes by kind, ε, and each round's loss and bytes."""
    privacy = summary.get("privacy") or {}
    return {
        "metrics": summary["metrics"],
        "bytes_total": summary["bytes_total"],
        "bytes_by_kind": summary["bytes_by_kind"],
        "epsilon": privacy.get("epsilon"),
        "rounds": [
            {"round": r["round"], "loss": (r.get("train") or {}).get("loss"), "bytes": r["bytes"]}
            for r in rows
        ],
    }


def golden_run(
    protocol: str,
    rounds: int,
    params: dict,
    out: Path,
    check_device: bool = True,
    transport: str = "calls",
) -> dict:
    settings = RunSettings(
        protocol=protocol,
        rounds=rounds,
        seed=0,
        params=dict(params),
        out=str(out),
        progress=False,
        conditions=Conditions(snapshot_every=0),
        check_device=check_device,
        transport=transport,
    )
    run_dir, summary = run(settings, dataset())
    said = summary["transport"]
    assert said["name"] == transport and said["notes"] == [], said
    if transport == "channels":  # every superstep went over the graph
        assert said["supersteps"]["calls"] == 0 and said["supersteps"]["channels"] > 0, said
    rows = read_rows(run_dir)
    # honest traffic passes every receiver's check (cluster/validate.py): nothing is rejected
    assert summary.get("rejected", {}) == {}, (
        f"{protocol}: valid messages rejected {summary['rejected']}"
    )
    assert all(not r.get("rejected") for r in rows), f"{protocol}: valid messages rejected"
    return figures(summary, rows)


def same(got, want, where: str) -> None:
    """Equal structure; integers and strings exactly, floats to ``REL``."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys {got} vs {want}"
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: length"
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        if math.isnan(want) or math.isinf(want):
            assert str(got) == str(want), f"{where}: {got} vs {want}"
        else:
            assert got == pytest.approx(want, rel=REL, abs=1e-12), f"{where}: {got} vs {want}"
    else:
        assert got == want, f"{where}: {got!r} vs {want!r}"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_golden_run(case, transport, ray_local, tmp_path):
    """The same figures whichever transport carries the supersteps (nodes/transport.py)."""
    label, protocol, rounds, params = case
    want = json.loads(GOLDEN.read_text())[label]
    got = golden_run(protocol, rounds, params, tmp_path, transport=transport)
    got = json.loads(json.dumps(got))
    same(got, want, label)


def _update() -> None:
    import tempfile

    import ray
    import torch

    from cluster.runtime import start_or_join

    torch.set_num_threads(1)  # as tests/conftest.py sets it for the test run
    start_or_join(None)
    recorded = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, protocol, rounds, params in CASES:
            recorded[label] = golden_run(protocol, rounds, params, Path(tmp))
            print(label, recorded[label]["metrics"], flush=True)
    ray.shutdown()
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python -m tests.integration.test_golden --update")
    _update()
