"""Hosts with a GPU share are spread over every GPU (cluster/runtime.py ``_spawn_over_gpus``),
the default share uses the GPUs a cluster has, and a run on GPUs Ray schedules but CUDA cannot
see computes on the CPU and says so — the logical GPUs of ``ray start --num-gpus 2`` on this
CPU-only machine, which is also how a checkpoint written by hosts with GPUs is shown to resume
on a machine without one."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from cluster.runtime import gpu_bundles
from engine.runner import RunSettings, check_resources, gpu_note

ROOT = Path(__file__).resolve().parents[1]


def test_fractional_shares_go_round_robin_over_the_gpus():
    assert gpu_bundles(2, 0.5, gpus=2) == [[0], [1]]  # two hosts, two GPUs: one each
    assert gpu_bundles(4, 0.5, gpus=2) == [[0, 2], [1, 3]]
    assert gpu_bundles(5, 0.2, gpus=2) == [[0, 2, 4], [1, 3]]
    assert gpu_bundles(3, 0.5, gpus=8) == [[0], [1], [2]]  # never more bundles than hosts
    assert gpu_bundles(3, 0.5, gpus=1) == [[0, 2], [1]]  # 1.5 GPUs asked: two bundles (no room)


def test_the_default_share_uses_the_clusters_gpus():
    def share(gpus, hosts, asked=None):
        settings = RunSettings(gpus_per_host=asked)
        check_resources(settings, SimpleNamespace(gpus=gpus), hosts)
        return settings.gpus_per_host

    assert share(0, 3) == 0.0  # no GPU: the CPU
    assert share(2, 3) == 0.6666 and share(8, 3) == 1.0 and share(1, 1) == 1.0
    assert share(2, 3, asked=0.0) == 0.0  # --gpus-per-host 0 forces the CPU
    assert share(2, 3, asked=0.25) == 0.25


def test_gpu_ids_without_cuda_are_said_once():
    cpu = {"device": "cpu", "gpu_ids": []}
    assert gpu_note([cpu, cpu]) is None
    assert gpu_note([{"device": "cuda:0", "gpu_ids": ["0"]}]) is None
    note = gpu_note([{"device": "cpu", "gpu_ids": ["1"]}, {"device": "cpu", "gpu_ids": ["0"]}])
    assert note.startswith("Ray gave host actors GPU ids 0, 1 but CUDA sees no GPU")


@pytest.mark.ray
def test_logical_gpus_spread_hosts_and_the_checkpoint_resumes_on_the_cpu(tmp_path, ray_local):
    from tests.test_two_node_cluster import RAY, _env, _free_port, _RayStart, _report

    if not RAY.exists():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    import launch

    config = tmp_path / "small.toml"
    config.write_text("[dataset]\nn_users = 40\nn_items = 60\n")
    run = ["--protocol", "fedmf", "--hosts", "2", "--rounds", "2", "--seed", "0"]
    run += ["--no-progress", "--config", str(config)]
    env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    temp_dir = tempfile.mkdtemp(prefix="privrec-ray-")
    port = _free_port()
    head = _RayStart(
        ["--head", "--port", str(port), "--temp-dir", temp_dir, "--num-cpus", "2"]
        + ["--num-gpus", "2", "--disable-usage-stats", "--object-store-memory", str(200 * 1024**2)]
        + ["--include-dashboard", "false", "--dashboard-port", str(_free_port())]
        + ["--ray-client-server-port", str(_free_port())]
        + ["--dashboard-agent-listen-port", str(_free_port())],
        env,
        tmp_path / "head.log",
    )
    try:
        # meanwhile, the reference on this process's CPU-only local Ray
        assert launch.main([*run, "--out", str(tmp_path / "cpu")]) == 0
        head.wait_started()
        gpus = subprocess.run(
            [sys.executable, "launch.py", *run, "--address", f"127.0.0.1:{port}"]
            + ["--gpus-per-host", "0.5", "--checkpoint-every", "1", "--out", str(tmp_path / "gpu")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert gpus.returncode == 0, gpus.stderr[-3000:]
    finally:
        head.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)

    cpu_summary, _, _ = _report(tmp_path / "cpu")
    gpu_summary, gpu_config, _ = _report(tmp_path / "gpu")
    placed = gpu_summary["host_placement"]  # two user hosts and the server's, 0.5 GPU each
    assert [h["gpu_ids"] for h in placed[:2]] in ([["0"], ["1"]], [["1"], ["0"]]), placed
    assert {g for h in placed for g in h["gpu_ids"]} == {"0", "1"}
    assert all(h["device"] == "cpu" for h in placed)
    assert "CUDA sees no GPU" in gpu_summary["gpu_note"] and cpu_summary["gpu_note"] is None
    assert gpu_config["settings"]["gpus_per_host"] == 0.5
    for key in ("metrics", "bytes_total", "bytes_by_kind"):
        assert gpu_summary[key] == cpu_summary[key], key

    # the checkpoint written on the GPU hosts resumes on this machine, which has no GPU
    (run_dir,) = [p for p in (tmp_path / "gpu").iterdir() if (p / "checkpoint.pkl").is_file()]
    assert launch.main(["--resume", str(run_dir), "--rounds", "3", "--no-progress"]) == 0
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["rounds"] == 3 and all(h["gpu_ids"] == [] for h in resumed["host_placement"])
