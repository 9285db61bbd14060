"""Hosts with a GPU share are spread over every GPU (cluster/runtime.py ``_spawn_over_gpus``),
the default share uses the GPUs a cluster has, a share the cluster's GPUs cannot hold is refused
at once, and a run on GPUs Ray schedules but CUDA cannot see computes on the CPU and says so —
the logical GPUs of ``ray start --num-gpus 2`` on this CPU-only machine, which is also how a host
killed on a GPU is shown to come back on the same GPU, and a checkpoint written by hosts with
GPUs to resume on a machine without one."""

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

from cluster.runtime import gpu_bundles, gpu_memory_budget, gpus_needed
from engine.runner import RunSettings, check_resources, gpu_note
from nodes.deployment import PlacementError

ROOT = Path(__file__).resolve().parents[2]


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

    assert share(0, 3) == 0.0 and share(0.5, 2) == 0.0  # no whole GPU: the CPU
    assert share(8, 3) == 1.0 and share(1, 1) == 1.0 and share(2, 2) == 1.0  # a GPU each
    # more hosts than GPUs: as few to a GPU as fit (3 on 2: 0.5 each, not 2/3, which need 3)
    assert share(2, 3) == 0.5 and share(2, 4) == 0.5 and share(2, 5) == 0.3333
    assert share(1, 3) == 0.3333 and gpus_needed(3, 0.3333) == 1
    assert share(2, 3, asked=0.0) == 0.0  # --gpus-per-host 0 forces the CPU
    assert share(2, 3, asked=0.25) == 0.25


def test_a_share_the_gpus_cannot_hold_is_refused_at_once():
    assert gpus_needed(3, 0.6) == 3 and gpus_needed(3, 0.5) == 2 and gpus_needed(2, 1.0) == 2
    assert gpus_needed(4, 0.0) == 0 and gpus_needed(2, 2.0) == 4
    with pytest.raises(PlacementError) as refused:
        check_resources(RunSettings(gpus_per_host=0.6), SimpleNamespace(gpus=2), 3)
    assert str(refused.value) == (
        "--gpus-per-host 0.6: 3 host actors of that share need 3 GPUs, the Ray cluster has 2 "
        "(--gpus-per-host 0.5 fits, as does leaving it out; 0 computes on CPU)"
    )
    with pytest.raises(PlacementError, match="the Ray cluster has no GPU"):
        check_resources(RunSettings(gpus_per_host=0.5), SimpleNamespace(gpus=0), 1)


def test_a_gpu_hosts_memory_budget_is_its_share_less_the_reserve():
    gib = 2**30
    assert gpu_memory_budget(0.5, 80 * gib) == 36 * gib
    assert gpu_memory_budget(1.0, 80 * gib) == gpu_memory_budget(2.0, 80 * gib) == 72 * gib


def test_gpu_ids_without_cuda_are_said_once():
    cpu = {"device": "cpu", "gpu_ids": []}
    assert gpu_note([cpu, cpu]) is None
    assert gpu_note([{"device": "cuda:0", "gpu_ids": ["0"]}]) is None
    note = gpu_note([{"device": "cpu", "gpu_ids": ["1"]}, {"device": "cpu", "gpu_ids": ["0"]}])
    assert note.startswith("Ray gave host actors GPU ids 0, 1 but CUDA sees no GPU")


@pytest.mark.ray
def test_logical_gpus_spread_hosts_and_the_checkpoint_resumes_on_the_cpu(tmp_path, ray_local):
    from tests.integration.test_two_node_cluster import (
        RAY,
        _env,
        _free_port,
        _RayStart,
        _report,
        launch_process,
    )

    if not RAY.exists():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    import cli

    config = tmp_path / "small.toml"
    config.write_text("[dataset]\nn_users = 40\nn_items = 60\n")
    # host 1 killed at round 1 and replaced (on the GPU run: in its bundle, on its GPU)
    run = ["--protocol", "fedmf", "--hosts", "2", "--rounds", "2", "--seed", "0"]
    run += ["--kill-host", "1:1", "--no-progress", "--config", str(config)]
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
        assert cli.main([*run, "--out", str(tmp_path / "cpu"), "--transport", "calls"]) == 0
        head.wait_started()
        gpu_run = [a for a in run if a != "--no-progress"]  # with its status lines
        gpus = launch_process(
            [*gpu_run, "--address", f"127.0.0.1:{port}", "--gpus-per-host", "0.5"]
            + ["--checkpoint-every", "1", "--out", str(tmp_path / "gpu")]
            + ["--transport", "channels"],  # the reference goes over actor calls
            env,
        )
        assert gpus.returncode == 0, gpus.stderr[-3000:]
    finally:
        head.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)

    cpu_summary, _, _ = _report(tmp_path / "cpu")
    gpu_summary, gpu_config, _ = _report(tmp_path / "gpu")
    # two user hosts and the server's, 0.5 GPU each, round-robin over two whole-GPU bundles:
    # hosts 0 and 2 on one GPU, host 1 (killed at round 1, its replacement in its bundle) on the
    # other
    placed = gpu_summary["host_placement"]
    assert [h["gpu_ids"] for h in placed[:2]] in ([["0"], ["1"]], [["1"], ["0"]]), placed
    assert placed[2]["gpu_ids"] == placed[0]["gpu_ids"], placed
    assert all(h["device"] == "cpu" for h in placed)
    for summary in (gpu_summary, cpu_summary):
        assert [(f["kind"], f["host"]) for f in summary["faults"]] == [("host", 1)]
    assert "CUDA sees no GPU" in gpu_summary["gpu_note"] and cpu_summary["gpu_note"] is None
    assert gpus.stderr.count("CUDA sees no GPU") == 1, gpus.stderr[-3000:]  # said once
    assert gpu_config["settings"]["gpus_per_host"] == 0.5
    # over a compiled graph: torn down with host 1, built again over its replacement
    notes = gpu_summary["transport"]["notes"]
    assert gpu_summary["transport"]["name"] == "channels" and cpu_summary["transport"]["name"] == (
        "calls"
    )
    assert any("graph rebuilt" in n for n in notes), notes
    for key in ("metrics", "bytes_total", "bytes_by_kind"):
        assert gpu_summary[key] == cpu_summary[key], key

    # the checkpoint written on the GPU hosts resumes on this machine, which has no GPU
    (run_dir,) = [p for p in (tmp_path / "gpu").iterdir() if (p / "checkpoint.pkl").is_file()]
    assert cli.main(["--resume", str(run_dir), "--rounds", "3", "--no-progress"]) == 0
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["rounds"] == 3 and all(h["gpu_ids"] == [] for h in resumed["host_placement"])


# A driver of its own (this process's Ray has no GPU): a local instance declaring 2 logical GPUs,
# actors of 0.5 GPU placed, released, reused, one killed and replaced, then a deployment of
# another shape that needs the GPUs the idle ones hold.
SPREAD_DRIVER = """
import json, os, signal, time
import ray
from cluster import runtime

class Probe:
    def __init__(self, i):
        self.i = i
    def reset(self, i):
        self.i = i
    def info(self):
        return {"i": self.i, "gpus": [str(g) for g in ray.get_gpu_ids()], "pid": os.getpid()}

ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False,
         log_to_driver=False, logging_level="ERROR")
out = {}
def spawn(count, gpus):
    return runtime.spawn_spread(Probe, count, num_cpus=0.5, num_gpus=gpus,
                                args_for=lambda i: ((i,), {}))
def infos(placed):
    return ray.get([h.info.remote() for h in placed.handles])
a = spawn(3, 0.5)
out["first"] = infos(a)
a.release()
out["idle"] = len(runtime._IDLE)
b = spawn(3, 0.5)
out["reused"] = [i["pid"] for i in infos(b)] == [i["pid"] for i in out["first"]]
os.kill(out["first"][1]["pid"], signal.SIGKILL)
time.sleep(1)
b.respawn(1)
out["replaced"] = infos(b)
b.release()
c = spawn(2, 1.0)  # whole GPUs: the idle group holding both is killed to make room
out["whole"] = infos(c)
c.kill()
print(json.dumps(out))
"""


@pytest.mark.ray
def test_gpu_groups_are_reused_and_a_replacement_keeps_its_gpu():
    from tests.integration.test_two_node_cluster import _env

    done = subprocess.run(
        [sys.executable, "-c", SPREAD_DRIVER],
        cwd=ROOT,
        env={**_env(), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    gpus = [i["gpus"] for i in out["first"]]
    assert sorted(map(tuple, gpus[:2])) == [("0",), ("1",)] and gpus[2] == gpus[0], gpus
    assert out["idle"] == 1 and out["reused"]  # parked whole, reset by the same shape
    replaced = out["replaced"]
    assert replaced[1]["pid"] != out["first"][1]["pid"] and replaced[1]["gpus"] == gpus[1]
    assert sorted(i["gpus"][0] for i in out["whole"]) == ["0", "1"]
