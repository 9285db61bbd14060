"""A local Ray instance is started with privrec's system config (cluster/runtime.py)."""

from __future__ import annotations

import pytest

from cluster import runtime


class _Stop(Exception):
    pass


def test_a_local_instance_frees_unreferenced_batches_often(monkeypatch):
    seen = {}

    def fake_init(**kwargs):
        seen.update(kwargs)
        raise _Stop

    monkeypatch.setattr(runtime.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime.ray, "init", fake_init)
    with pytest.raises(_Stop):
        runtime.start_or_join(None)
    assert seen["address"] == "local"
    period = seen["_system_config"]["free_objects_period_milliseconds"]
    assert 0 < period < 1000  # Ray's default is 1,000 ms: a 10,000-client round's length


def test_a_local_instance_listens_only_on_this_machine(monkeypatch):
    """privrec's own instance is started on the loopback interface (node address and dashboard),
    and Ray is kept from replacing that address with the machine's outward one during the
    start only."""
    from ray._private import ray_constants

    seen = {}

    def fake_init(**kwargs):
        seen.update(kwargs, cluster_mode=ray_constants.ENABLE_RAY_CLUSTER)
        raise _Stop

    before = ray_constants.ENABLE_RAY_CLUSTER
    monkeypatch.setattr(runtime.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime.ray, "init", fake_init)
    with pytest.raises(_Stop):
        runtime.start_or_join(None)
    assert seen["_node_ip_address"] == "127.0.0.1" == runtime.LOCAL_HOST
    assert seen["dashboard_host"] == "127.0.0.1" and seen["include_dashboard"] is False
    assert seen["cluster_mode"] is False  # what keeps Ray from resolving 127.0.0.1 away
    assert ray_constants.ENABLE_RAY_CLUSTER == before  # restored after the start
    # joining a cluster passes none of it
    seen.clear()
    monkeypatch.setattr(runtime, "_probe", lambda address: None)
    with pytest.raises(_Stop):
        runtime.start_or_join("10.0.0.1:6379")
    assert "_node_ip_address" not in seen and seen["cluster_mode"] == before


_LISTENERS = """
import json, psutil, ray
from cluster.runtime import start_or_join
info = start_or_join(num_cpus=1)
ray.get(ray.remote(lambda: 1).remote())  # a worker process too
addresses = set()
for p in psutil.Process().children(recursive=True) + [psutil.Process()]:
    try:
        conns = p.net_connections(kind="inet")
    except psutil.Error:
        continue
    addresses |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
print(json.dumps([info.address, sorted(addresses)]))
ray.shutdown()
"""


@pytest.mark.ray
def test_every_socket_of_a_local_instance_is_on_the_loopback_interface():
    """Started for real (in a subprocess, apart from the tests' own instance): the GCS address is
    127.0.0.1 and every Ray process of the instance listens on the loopback interface only."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run(
        [sys.executable, "-c", _LISTENERS],
        cwd=Path(runtime.__file__).parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    gcs, addresses = json.loads(done.stdout.strip().splitlines()[-1])
    assert gcs.startswith("127.0.0.1:"), gcs
    assert addresses, done.stdout
    assert all(a in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for a in addresses), addresses
