"""``python -m benchmarks.gpu``: the plan fits the device-time budget and names every protocol,
a machine without CUDA is refused in one line, and the stand-in (``--device cpu``) writes the
table's figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu
from protocols import protocol_names

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.gpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_plan_covers_every_protocol_within_the_budget():
    covered = {c.protocol for c in gpu.PLAN} | {c.label for c in gpu.PLAN}
    # every protocol that computes (echo and ping carry bytes only), the plugin included
    wanted = set(protocol_names()) - {"echo", "ping", "fedpergnn"} | {"fedpergnn-gat", "pfedrec"}
    assert wanted <= covered, wanted - covered
    assert gpu.budget(gpu.PLAN) <= gpu.BUDGET_S
    done = _run("--dry-run")
    assert done.returncode == 0, done.stderr
    for case in gpu.PLAN:
        assert case.label in done.stdout
    assert f"at most {gpu.budget(gpu.PLAN)} s of device time" in done.stdout


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="the refusal is for machines without CUDA"
)
def test_without_cuda_the_run_is_refused_in_one_line():
    done = _run()
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "python -m benchmarks.gpu: this machine has no CUDA GPU: --dry-run prints the plan, "
        "--device cpu runs it with the GPU leg on the CPU"
    ]
    assert _run("--only", "nope", "--dry-run").returncode == 2


@pytest.mark.slow  # two launch.py runs of a few rounds each (about 30 s on 2 cores)
def test_the_stand_in_writes_the_figures(tmp_path):
    done = _run("--device", "cpu", "--quick", "--only", "central:bprmf", "--name", "gpu-test")
    out = ROOT / "benchmarks" / "out"
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        doc = json.loads((out / "gpu-test.json").read_text())
        (run,) = doc["figures"]["runs"]
        assert run["cpu"]["status"] == run["gpu"]["status"] == "ok"
        assert run["cpu"]["s_per_round"] > 0 and run["gpu"]["s_per_round"] > 0
        assert run["compare"]["same_bytes"] is True and run["compare"]["metrics_close"] is True
        assert run["gpu_mib"] is None  # no nvidia-smi on the stand-in
        assert "central:bprmf" in (out / "gpu-test.md").read_text()
    finally:
        for suffix in (".json", ".md"):
            (out / f"gpu-test{suffix}").unlink(missing_ok=True)


def test_the_carry_keeps_what_the_wheels_hold_less_rays_unused_parts(tmp_path, monkeypatch):
    """``--prepare-carry`` unpacks the wheels pip downloads for the lent machine's Python: the
    executables keep their mode (Ray's gcs_server, raylet), the libraries a wheel bundles beside
    its package (gmpy2.libs) travel, Ray's unused parts do not; the plan's datasets go beside."""
    import os
    import stat
    import tarfile
    import zipfile

    def fake_pip(cmd, **kwargs):
        assert cmd[cmd.index("--python-version") + 1] == "3.12" and "--no-deps" in cmd
        into = Path(cmd[cmd.index("-d") + 1])
        into.mkdir(parents=True)
        with zipfile.ZipFile(into / "fake-1.0-cp312-cp312-manylinux2014_x86_64.whl", "w") as z:
            for name, mode in [
                ("ray/core/src/ray/gcs/gcs_server", 0o755),
                ("ray/__init__.py", 0o644),
                ("ray/rllib/__init__.py", 0o644),
                ("gmpy2.libs/libgmp-x.so.10", 0o755),
            ]:
                info = zipfile.ZipInfo(name)
                info.external_attr = (stat.S_IFREG | mode) << 16
                z.writestr(info, b"x")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(gpu.subprocess, "run", fake_pip)
    data = tmp_path / "data"
    for name in gpu.CARRY_DATA:
        (data / name).mkdir(parents=True)
        (data / name / "ratings.txt").write_text("1 2\n")
    site, datasets = gpu.prepare_carry(tmp_path / "carry", data_dir=data)
    out = tmp_path / "site"
    with tarfile.open(site) as tar:
        tar.extractall(out, filter="tar")
    assert os.access(out / "ray/core/src/ray/gcs/gcs_server", os.X_OK)
    assert (out / "gmpy2.libs/libgmp-x.so.10").is_file() and (out / "ray/__init__.py").is_file()
    assert not (out / "ray/rllib").exists()
    with tarfile.open(datasets) as tar:
        assert {n.split("/")[0] for n in tar.getnames()} == {"ciao", "gowalla", "ml-100k"}
