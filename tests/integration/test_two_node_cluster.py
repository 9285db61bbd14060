"""A real two-node Ray cluster on this machine, started as README's multi-node recipe says.

Two ``ray start`` processes (a head and a worker with one CPU and one declared GPU each: two
raylets, two object stores), token authentication on (``RAY_AUTH_MODE=token`` and a token of
this test's own in ``RAY_AUTH_TOKEN`` on every process), and ``launch.py --address HEAD --hosts
4`` run as a user would, in a subprocess. Its results and byte counts must equal the same run on
one local node (the tests' own Ray instance), with the bytes that went between the two nodes
reported apart, and each host actor must report its node and the share of a GPU it asked for
(``--gpus-per-host``). A driver without the token must fail at once, saying what to set.

The raylets get their own temporary directory and free ports, and are stopped by their process
ids (never ``ray stop``, which would stop every Ray instance on the machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).with_name("ray")
# a small fedmf run: 40 users on 4 host actors (the server gets a fifth)
DATASET = "[dataset]\nn_users = 40\nn_items = 60\n"
RUN = ["--protocol", "fedmf", "--hosts", "4", "--rounds", "3", "--seed", "0", "--no-progress"]
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
# what a run row must repeat exactly on another cluster (seconds and simulated time may differ)
SAME_IN_ROWS = ("round", "train", "metrics", "bytes", "bytes_by_kind", "bytes_crossed", "dropped")
SAME_IN_SUMMARY = (
    "metrics",
    "bytes_total",
    "bytes_by_kind",
    "bytes_eval",
    "bytes_crossed",
    "messages",
    "host_actors",
    "privacy",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**auth: str) -> dict:
    """This process's environment without Ray's address or authentication settings, plus ``auth``."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS and k != "RAY_ADDRESS"}
    env.update(auth)
    return env


class _RayStart:
    """One ``ray start ... --block`` in a session of its own: the node lives as long as it."""

    def __init__(self, args: list[str], env: dict, log: Path):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(RAY), "start", *args, "--block"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=ROOT,
                start_new_session=True,
            )

    def wait_started(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            if "Ray runtime started" in text:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.25)
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
        pytest.fail(f"`ray start` did not start (exit {self.proc.poll()}):\n{tail}")

    def stop(self) -> None:
        """SIGTERM (``ray start --block`` then stops the processes it started), then SIGKILL
        whatever is left of its process group."""
        if self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def launch_process(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    """``python launch.py ARGV`` in a process of its own (a driver that joins a cluster), its
    output captured."""
    return subprocess.run(
        [sys.executable, "launch.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _report(out: Path) -> tuple[dict, dict, list[dict]]:
    """(summary, config, metrics rows) of the only run under ``out``."""
    (run_dir,) = [p for p in out.iterdir() if (p / "summary.json").is_file()]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return (
        json.loads((run_dir / "summary.json").read_text()),
        json.loads((run_dir / "config.json").read_text()),
        rows,
    )


def test_two_raylets_give_one_nodes_results_and_bytes(tmp_path, ray_local, capsys):
    if not RAY.exists():
        pytest.skip(f"no `ray` command beside {sys.executable}")
    import cli

    config = tmp_path / "small.toml"
    config.write_text(DATASET)
    token = secrets.token_hex(32)
    cluster_env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    # sockets live under the temporary directory: a short one keeps them under 108 characters
    temp_dir = tempfile.mkdtemp(prefix="privrec-ray-")
    port = _free_port()
    head_address = f"127.0.0.1:{port}"
    # each node declares one GPU (Ray schedules it like a real one; torch finds no CUDA here)
    common = ["--num-cpus", "1", "--num-gpus", "1", "--disable-usage-stats"]
    common += ["--object-store-memory", str(200 * 1024**2)]
    nodes: list[_RayStart] = []
    try:
        nodes.append(
            _RayStart(
                ["--head", "--port", str(port), "--temp-dir", temp_dir, *common]
                + ["--include-dashboard", "false", "--dashboard-port", str(_free_port())]
                + ["--ray-client-server-port", str(_free_port())]
                + ["--dashboard-agent-listen-port", str(_free_port())],
                cluster_env,
                tmp_path / "head.log",
            )
        )
        # meanwhile, the reference: the same command line on one local node (this process's Ray)
        assert cli.main([*RUN, "--config", str(config), "--out", str(tmp_path / "one")]) == 0
        capsys.readouterr()
        nodes[0].wait_started()
        nodes.append(
            _RayStart(
                ["--address", head_address, *common]
                + ["--dashboard-agent-listen-port", str(_free_port())],
                cluster_env,
                tmp_path / "worker.log",
            )
        )
        # a driver without the token fails at once, in a line that says what to set
        t0 = time.monotonic()
        refused = subprocess.run(
            [sys.executable, "launch.py", *RUN, "--address", head_address]
            + ["--config", str(config), "--out", str(tmp_path / "refused")],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        last = refused.stderr.strip().splitlines()[-1]
        assert last.startswith("launch.py: --address: "), refused.stderr
        assert "asks for a token: export RAY_AUTH_MODE=token" in last, refused.stderr
        assert "gcs_client" not in refused.stderr  # no retries, no log of Ray's core
        assert time.monotonic() - t0 < 60
        nodes[1].wait_started()

        on_cluster = [*RUN, "--address", head_address, "--gpus-per-host", "0.2"]
        on_cluster += ["--config", str(config), "--transport"]
        two = launch_process([*on_cluster, "calls", "--out", str(tmp_path / "two")], cluster_env)
        assert two.returncode == 0, two.stderr[-3000:]
        # the same over the channels of a compiled graph, whose hosts span both nodes
        out = ["--out", str(tmp_path / "channels")]
        channels = launch_process([*on_cluster, "channels", *out], cluster_env)
        assert channels.returncode == 0, channels.stderr[-3000:]
    finally:
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)

    one_summary, one_config, one_rows = _report(tmp_path / "one")
    two_summary, two_config, two_rows = _report(tmp_path / "two")
    assert one_config["cluster"]["nodes"] == 1 and two_config["cluster"]["nodes"] == 2
    assert two_config["cluster"]["cpus"] == 2.0
    for key in SAME_IN_SUMMARY:
        assert two_summary[key] == one_summary[key], key
    assert len(two_rows) == len(one_rows) == 3
    for a, b in zip(one_rows, two_rows):
        assert {k: a[k] for k in SAME_IN_ROWS} == {k: b[k] for k in SAME_IN_ROWS}
    # the hosts were spread over both nodes: some batches crossed them, not all (5 hosts, 2 nodes)
    assert one_summary["bytes_crossed_nodes"] == 0
    assert 0 < two_summary["bytes_crossed_nodes"] < two_summary["bytes_crossed"]
    assert sum(r["bytes_crossed_nodes"] for r in two_rows) == two_summary["bytes_crossed_nodes"]
    assert all(r["bytes_crossed_nodes"] == 0 for r in one_rows)
    # each host actor got its GPU share from the node it ran on and, with no CUDA, computed on CPU
    placed = two_summary["host_placement"]
    assert len(placed) == 5 and len({h["node_id"] for h in placed}) == 2, placed
    assert all(len(h["gpu_ids"]) == 1 and h["device"] == "cpu" for h in placed), placed
    assert all(h["gpu_ids"] == [] for h in one_summary["host_placement"])
    ch_summary, _, ch_rows = _report(tmp_path / "channels")
    for key in (*SAME_IN_SUMMARY, "bytes_crossed_nodes"):
        assert ch_summary[key] == two_summary[key], key
    for a, b in zip(two_rows, ch_rows):
        assert {k: a[k] for k in SAME_IN_ROWS} == {k: b[k] for k in SAME_IN_ROWS}
    assert len({h["node_id"] for h in ch_summary["host_placement"]}) == 2
    said = ch_summary["transport"]
    assert said["notes"] == [] and said["supersteps"]["calls"] == 0, said  # a graph spans nodes


def test_default_cpu_share_fits_every_host_on_small_nodes(monkeypatch):
    """Two 1-CPU nodes take the five host actors of ``--hosts 4`` (the server has its own):
    1/3 CPU each, where the even share of the cluster, 0.4, fits only two a node."""
    from cluster import runtime

    def cluster(*cpus):
        monkeypatch.setattr(runtime.ray, "cluster_resources", lambda: {"CPU": float(sum(cpus))})
        monkeypatch.setattr(
            runtime.ray, "nodes", lambda: [{"Alive": True, "Resources": {"CPU": c}} for c in cpus]
        )

    cluster(1, 1)
    assert runtime.host_cpu_share(5) == 0.3333
    assert runtime.host_cpu_share(4) == 0.5 and runtime.host_cpu_share(2) == 1.0
    cluster(4)  # one node: the even share, as before
    assert runtime.host_cpu_share(5) == 0.8 and runtime.host_cpu_share(3) == 1.0
    cluster(2, 2)
    assert runtime.host_cpu_share(5) == 0.6666  # 0.8 fits two a node: 4 < 5
    cluster(8, 8)
    assert runtime.host_cpu_share(5) == 1.0


def test_crossed_node_bytes_survive_export_and_merge():
    from cluster.ledger import Ledger

    a = Ledger()
    a.record((0, "train", "grad", "user", "server"), 100)
    a.record_crossed(0, "train", 60)
    a.record_crossed_nodes(0, "train", 40)
    a.record_crossed_nodes(1, "train", 5)
    b = Ledger()
    b.merge(a.export())
    assert b.crossed_nodes_total() == 45 and b.crossed_nodes_total(round_=0) == 40
    old = dataclasses.asdict(a.export())  # a checkpoint's, as older ones hold it: a dict...
    del old["crossed_nodes"]  # ... written before crossed-node bytes were counted
    c = Ledger()
    c.merge(old)
    assert c.crossed_nodes_total() == 0 and c.crossed_total() == 60 and c.total() == 100


def test_a_refused_token_is_told_apart_from_other_connection_errors(monkeypatch):
    from cluster import runtime

    try:
        try:
            raise RuntimeError("Failed to connect to GCS: RPC error: InvalidAuthToken: missing")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from inner
    except ConnectionError as e:
        assert runtime._is_auth_failure(e)
    assert not runtime._is_auth_failure(ConnectionError("Could not find any running Ray instance"))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert "export RAY_AUTH_MODE=token" in runtime._auth_message("10.0.0.1:6379")
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert "refused this machine's token" in runtime._auth_message("10.0.0.1:6379")
