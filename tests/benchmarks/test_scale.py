"""benchmarks/scale.py: the quick sweep writes its figures (positive, finite), and a wrong protocol
name is one line and exit status 2."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from benchmarks.common import OUT

REPO = Path(__file__).resolve().parents[2]


def _scale(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.ray
@pytest.mark.slow  # a fresh Ray instance per size in child processes: 112 s at load average 13
def test_quick_sweep_records_time_bytes_and_memory(tmp_path):
    name = f"test-scale-{uuid.uuid4().hex[:8]}"
    try:
        done = _scale(["--quick", "--name", name, "--out", str(tmp_path / "runs")], REPO)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        doc = json.loads((OUT / f"{name}.json").read_text())
        assert (OUT / f"{name}.png").stat().st_size > 0
    finally:
        for suffix in (".json", ".png"):
            (OUT / f"{name}{suffix}").unlink(missing_ok=True)
    fedmf = doc["figures"]["protocols"]["fedmf"]
    assert [s["users"] for s in fedmf["sizes"]] == [200, 400]
    assert fedmf["largest_population_reached_here"] == 400 and fedmf["stopped"] is None
    for size in fedmf["sizes"]:
        assert size["status"] == "ok", size
        assert size["timed_rounds"] == [1, 2]
        for key in (
            "seconds_per_round",
            "bytes_per_round",
            "peak_rss_mib",
            "peak_pss_mib",
            "rss_mib_per_1000_users",
            "pss_mib_per_1000_users",
        ):
            assert math.isfinite(size[key]) and size[key] > 0, (key, size[key])
        assert size["params"]["eval_every"] == 0
    machines = fedmf["extrapolation"]["machines_of_this_size_needed"]
    assert all(n >= 1 for n in machines.values())


def test_an_unknown_protocol_is_one_line_and_exit_status_2(tmp_path):
    done = _scale(["--protocol", "fedmff", "--name", "never-written"], tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("benchmarks.scale: --protocol fedmff"), lines
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == [] and not (OUT / "never-written.json").exists()


def test_combine_keeps_the_later_figure_and_the_stop_of_the_size_that_did_not_run(
    monkeypatch, tmp_path
):
    from benchmarks import scale

    def sizes(*pairs):
        return [{"users": u, "status": st, "peak_pss_mib": 1000.0 + u / 10} for u, st in pairs]

    refused = {
        "sizes": sizes((1000, "ok"), (10000, "skipped")),
        "stopped": "10000 users would not fit",
    }
    ran = {"sizes": sizes((10000, "ok")), "stopped": None}
    for name, fig in (("refused", refused), ("ran", ran)):
        doc = {"command": name, "figures": {"protocols": {"p": fig}}}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    monkeypatch.setattr(scale, "OUT", tmp_path)
    later_ran, _ = scale.combine(["refused", "ran"], [])
    assert later_ran["p"]["stopped"] is None
    assert later_ran["p"]["largest_population_reached_here"] == 10000
    later_refused, _ = scale.combine(["ran", "refused"], [])
    assert later_refused["p"]["stopped"] == "10000 users would not fit"
    assert later_refused["p"]["largest_population_reached_here"] == 1000
