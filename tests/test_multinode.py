"""Two Ray nodes that declare fake GPUs: hosts are spread over both and each gets its GPU share."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ray


def test_hosts_spread_over_nodes_with_gpu_shares():
    import ray
    from ray.cluster_utils import Cluster

    from data.synthetic import synthetic
    from engine import deploy, run_rounds
    from protocols.base import build_config
    from protocols.fedmf.protocol import FedMF

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": 1})
    cluster.add_node(num_cpus=2, num_gpus=1)
    try:
        ray.init(
            address=cluster.address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
        cluster.wait_for_nodes()
        ds = synthetic(n_users=8, n_items=30, avg_interactions=6, seed=1)
        proto = FedMF(
            ds, build_config(FedMF.Config, {"dim": 4, "users_per_round": 4, "pairs": 2}), seed=0
        )
        dep = deploy(proto, "packed", hosts=3, gpus_per_host=0.5)
        try:
            info = dep.host_info()
            assert len({i["node_id"] for i in info}) == 2, info  # spread over both nodes
            assert all(len(i["gpu_ids"]) == 1 for i in info), info  # each host got its GPU share
            assert all(
                i["device"] == "cpu" for i in info
            )  # no CUDA here: compute falls back to the CPU
            run_rounds(proto, dep, 1, eval_every=0, evaluate_last=False)
            assert dep.ledger.total() > 0 and dep.ledger.crossed_total() > 0
        finally:
            dep.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
