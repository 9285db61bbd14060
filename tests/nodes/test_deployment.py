"""The runtime on a real local Ray instance: supersteps, routing, ledger, placement, determinism."""

from __future__ import annotations

import sys
import time

import pytest
import ray
import ray.cloudpickle

from cluster.message import node_id
from nodes.deployment import (
    Deployment,
    NodeSpec,
    PlacementError,
    assign_hosts,
    check_placement,
    mean_report,
)
from tests import toy_protocol

ray.cloudpickle.register_pickle_by_value(toy_protocol)  # workers cannot import the tests folder

pytestmark = pytest.mark.ray


def ring_specs(n):
    return [
        NodeSpec(toy_protocol.RingNode, node_id("user", i), {"n": n}, packable=True)
        for i in range(n)
    ]


def test_assign_hosts_packed_and_dedicated():
    specs = ring_specs(5) + [NodeSpec(toy_protocol.Echo, "server/0")]
    assert assign_hosts(specs, "packed", 2) == [0, 0, 0, 1, 1, 2]
    assert assign_hosts(specs, "dedicated", 1) == [0, 1, 2, 3, 4, 5]
    with pytest.raises(PlacementError, match="hosts"):
        assign_hosts(specs, "packed", 9)
    with pytest.raises(PlacementError, match="placement"):
        assign_hosts(specs, "scattered", 1)
    with pytest.raises(PlacementError, match="--hosts applies to --placement packed"):
        assign_hosts(specs, "dedicated", 3)
    for hosts in (0, 1.5, True):
        with pytest.raises(PlacementError, match="--hosts must be"):
            check_placement("packed", hosts)
    check_placement("packed", 4)
    check_placement("dedicated", 1)


RING = 3  # nodes in the ring runs: few, as a dedicated run starts a host actor (a process) each


def run_ring(placement, hosts, rounds=3):
    dep = Deployment(ring_specs(RING), seed=7, placement=placement, hosts=hosts, tap=True)
    try:
        values = []
        for r in range(rounds):
            res = dep.superstep(r, "pass", activate=["user"])
            values.append(sorted(res.reports["value"]))
        received = [dep.call(node_id("user", i), "get_received") for i in range(RING)]
        return (
            values,
            received,
            dep.ledger.rows(),
            dep.ledger.crossed_total(),
            len(dep.tapped),
            dep.has_pending(),
        )
    finally:
        dep.close()


def test_ring_delivery_ledger_and_placement_invariance(ray_local):
    # the one-host run last: its host actor is kept idle and reused by the next test's
    packed2 = run_ring("packed", 2)
    dedicated = run_ring("dedicated", 1)
    packed1 = run_ring("packed", 1)
    values, received, rows, crossed, n_tapped, pending = packed2
    # every node received exactly one token per round after the first, from its predecessor
    for i, rec in enumerate(received):
        assert [src for src, _ in rec] == [node_id("user", (i - 1) % RING)] * 2
    # ledger: RING messages of 8 bytes per round
    assert sum(r["bytes"] for r in rows) == 3 * RING * 8 == 8 * n_tapped
    assert pending  # the last round's tokens are still in flight
    # the same seed gives the same values, deliveries and logical bytes whatever the placement
    for other in (packed1, dedicated):
        assert other[0] == values and other[1] == received and other[2] == rows
    # only packing onto one host keeps every byte inside one process
    assert packed1[3] == 0 and crossed > 0 and dedicated[3] > crossed


def test_unknown_destination_is_a_clear_error(ray_local):
    class Stray(toy_protocol.Echo):
        def handle(self, phase, inbox):
            self.send("x", "user/99", b"")

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    dep = Deployment([NodeSpec(Stray, "server/0")], seed=0, placement="dedicated")
    try:
        with pytest.raises(
            Exception, match="EnvelopeError: server/0 sent 'x' to unknown node 'user/99'"
        ):
            dep.superstep(0, "p", activate=["server"])
    finally:
        dep.close()


def test_a_bigger_deployment_reuses_every_idle_actor_and_starts_only_the_rest(ray_local):
    """On one node idle host actors are parked one by one: a deployment of 3 hosts after one of 2
    resets those 2 (in their order) and starts a single new process; one of 1 after it takes one
    of the 3; the ring's results are the same on each."""
    from cluster.runtime import drain_idle

    def one_run(hosts):
        dep = Deployment(ring_specs(6), seed=7, placement="packed", hosts=hosts)
        try:
            pids = [i["pid"] for i in dep.host_info()]
            reports = [dep.superstep(r, "pass", activate=["user"]).reports for r in range(2)]
            return pids, reports, dep.ledger.rows()
        finally:
            dep.close()

    drain_idle()
    two, *ring2 = one_run(2)
    three, *ring3 = one_run(3)
    one, *ring1 = one_run(1)
    assert len(set(two)) == 2 and len(set(three)) == 3
    assert three[:2] == two  # the two idle actors, reset, in their order; one new process
    assert one[0] in three
    assert ring2[0] == ring3[0] == ring1[0]  # what the nodes report does not depend on placement


def test_a_protocol_without_torch_keeps_it_out_of_its_hosts(ray_local):
    """Echo never imports torch: its host processes (fresh ones, after every idle actor is
    killed) do not load it (about 180 MiB a process); a node that asks for its device gets one."""
    from cluster.runtime import drain_idle
    from data.synthetic import synthetic
    from engine import deploy, rounds
    from protocols.base import build_config
    from protocols.echo import Echo

    drain_idle()
    protocol = Echo(synthetic(n_users=6, seed=0), build_config(Echo.Config, {"dim": 4}), 0)
    dep = deploy(protocol, "packed", 2)
    try:
        done = list(rounds(protocol, dep, 2, eval_every=0, evaluate_last=False))
        info = dep.host_info()
    finally:
        dep.close()  # (its idle actors serve later deployments: torch loads when they need it)
    assert [r.train["uploads"] for r in done] == [6, 6]
    assert [i["torch_loaded"] for i in info] == [False, False, False]
    assert all(i["device"] == "cpu" and i["torch_threads"] == 1 for i in info)


def test_mean_report_is_order_independent():
    vals = [0.1, 1e16, -1e16, 0.2] * 10
    assert mean_report({"x": vals}, "x") == mean_report({"x": list(reversed(vals))}, "x")


def test_a_reused_host_actor_computes_what_a_fresh_one_does(ray_local):
    """A released deployment's host actors are reset and reused by the next deployment of the
    same shape (no new process); what runs on them equals what ran on them fresh, torch's
    global RNG included (whose state at a process's start differs between processes)."""
    from cluster.runtime import drain_idle

    def one_run():
        # 2 hosts: the ring's, and user/9's (not packable)
        specs = ring_specs(4) + [NodeSpec(toy_protocol.GlobalDraw, node_id("user", 9))]
        dep = Deployment(specs, seed=7, placement="packed", hosts=1)
        try:
            pids = [i["pid"] for i in dep.host_info()]
            steps = [dep.superstep(r, "pass", activate=["user"]).reports for r in range(2)]
            return pids, steps, dep.call("user/9", "draw"), dep.ledger.rows()
        finally:
            dep.close()

    def seeded(run):  # what the nodes' own RNGs make: the same in any process
        steps = [{k: v for k, v in r.items() if k != "draw"} for r in run[0]]
        return steps, run[2]

    drain_idle()
    fresh_pids, *fresh = one_run()
    reused_pids, *reused = one_run()
    assert reused_pids == fresh_pids  # the same processes, reset
    assert reused == fresh  # torch's global RNG too is back where the fresh process had it
    drain_idle()
    again_pids, *again = one_run()
    assert set(again_pids).isdisjoint(fresh_pids) and seeded(again) == seeded(fresh)


def test_a_node_that_cannot_start_leaves_no_host_behind(ray_local):
    """A deployment whose node's constructor raises gives its host actors' resources back at once
    (the next deployment must not wait for Python's cycle collector to free them)."""
    from cluster.runtime import drain_idle

    drain_idle()  # no idle host to reuse: the deployment starts a new one
    time.sleep(0.5)
    free = ray.available_resources().get("CPU", 0.0)
    with pytest.raises(Exception, match="no data for this node"):
        Deployment([NodeSpec(toy_protocol.BrokenAtStart, "server/0")], seed=0)
    for _ in range(100):
        if ray.available_resources().get("CPU", 0.0) >= free:
            break
        time.sleep(0.05)
    assert ray.available_resources().get("CPU", 0.0) >= free
