"""The two transports of a superstep (nodes/transport.py) give the same run: actor calls, and the
channels of a Ray compiled graph. The golden runs compare both with tests/golden/runs.json
(tests/integration/test_golden.py); here: packed and dedicated placement, dropouts, adversaries, faults
(participants that raise, a killed host), checkpoints, and the typed contract itself."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing

import pytest

from adversaries import Adversaries
from data.synthetic import synthetic
from engine import RunSettings, resume, run
from engine.report import read_rows
from nodes.conditions import Conditions
from nodes.host import Host
from nodes.step import RoundStats, StepOrder, StepOutcome
from nodes.transport import (
    DEFAULT_TRANSPORT,
    TRANSPORTS,
    Channels,
    choose_transport,
    make_transport,
)

# what must be the same whichever transport: every figure of every round and of the summary
# (the wall-clock seconds aside)
ROW_KEYS = ("round", "train", "metrics", "bytes", "bytes_by_kind", "bytes_crossed", "dropped")
ROW_KEYS += ("late", "sim_seconds", "faults", "rejected", "epsilon")
SUMMARY_KEYS = ("metrics", "bytes_total", "bytes_by_kind", "bytes_eval", "bytes_crossed")
SUMMARY_KEYS += ("messages", "faults", "host_actors")


# simulated time without the measured handler seconds (speed 0): bytes over links and latency
# only, so that it is the same run to run and can be compared exactly
EXACT_CLOCK = {"user_speed": 0.0, "server_speed": 0.0}


def _data():
    return synthetic(n_users=40, n_items=60, avg_interactions=12, seed=0)


def _run(tmp_path, transport: str, **kw) -> tuple[dict, list[dict]]:
    settings = RunSettings(out=str(tmp_path / transport), progress=False, seed=0, **kw)
    run_dir, summary = run(dataclasses.replace(settings, transport=transport), _data())
    return summary, read_rows(run_dir)


def _without_seconds(faults: list[dict]) -> list[dict]:
    return [{k: v for k, v in f.items() if k != "recovery_seconds"} for f in faults]


def _same(a: tuple[dict, list[dict]], b: tuple[dict, list[dict]]) -> None:
    (sa, ra), (sb, rb) = a, b
    for key in SUMMARY_KEYS:
        va, vb = sa[key], sb[key]
        if key == "faults":
            va, vb = _without_seconds(va), _without_seconds(vb)
        assert json.dumps(va, sort_keys=True) == json.dumps(vb, sort_keys=True), key
    assert len(ra) == len(rb)
    for x, y in zip(ra, rb):
        for key in ROW_KEYS:
            vx, vy = x.get(key), y.get(key)
            if key == "faults":
                vx, vy = _without_seconds(vx), _without_seconds(vy)
            assert json.dumps(vx, sort_keys=True) == json.dumps(vy, sort_keys=True), (
                x["round"],
                key,
            )


# --- the contract ---------------------------------------------------------------------------------
def test_the_host_speaks_typed_records_only():
    """What the driver sends a host in a superstep and what it answers are the dataclasses of
    nodes/step.py: no dict crosses (the batches are the protocol's own bytes)."""
    for method, first in ((Host.step, "order"), (Host.graph_step, "orders")):
        hints = typing.get_type_hints(method)
        params = list(inspect.signature(method).parameters)
        assert params[:2] == ["self", first]
        assert hints["return"] in (StepOutcome, StepOutcome | tuple), hints["return"]
    assert typing.get_type_hints(Host.deliver)["return"] is StepOutcome
    assert typing.get_type_hints(Host.step)["order"] is StepOrder
    assert typing.get_type_hints(Host.graph_step)["orders"] == tuple[StepOrder, ...]
    for cls in (StepOrder, StepOutcome, RoundStats):
        assert dataclasses.is_dataclass(cls)
    hints = typing.get_type_hints(StepOrder)
    assert not any(typing.get_origin(t) is dict or t is dict for t in hints.values()), hints
    assert StepOrder.__dataclass_params__.frozen
    # the answer's mappings say what they map (no bare dict, no dict of anything)
    for name, t in typing.get_type_hints(StepOutcome).items():
        assert t is not dict and t is not typing.Any, name
        if typing.get_origin(t) is dict:
            assert typing.Any not in typing.get_args(t), name


def test_an_unknown_transport_is_refused_in_one_line():
    assert TRANSPORTS == ("calls", "channels")
    with pytest.raises(ValueError, match=r"one of \('auto', 'calls', 'channels'\), got 'grpc'"):
        make_transport("grpc")
    with pytest.raises(ValueError, match="got 'grpc'"):
        choose_transport("grpc", 3, 16)


def test_auto_takes_channels_only_where_every_host_has_a_cpu_and_two_are_spare():
    """A compiled graph's hosts poll between supersteps (about half a CPU each): ``auto`` takes
    channels where the cluster's CPUs cover them and the driver, else actor calls, and says
    why in the run's summary."""
    assert choose_transport("auto", 3, 5) == (
        "channels",
        "auto: channels (5 CPUs for 3 host actors)",
    )
    name, why = choose_transport("auto", 3, 4)
    assert name == "calls" and "channels from 5 CPUs" in why
    assert choose_transport("auto", 1, 2)[0] == "calls"  # this 2-core machine, one host
    assert choose_transport("channels", 6, 2) == ("channels", None)  # asked: as asked
    assert DEFAULT_TRANSPORT == "auto"


# --- the same run either way ----------------------------------------------------------------------
@pytest.mark.ray
def test_packed_with_dropouts_and_adversaries_is_the_same_over_channels(ray_local, tmp_path):
    kw = dict(
        protocol="fedmf",
        rounds=3,
        hosts=2,
        params={"dim": 8, "eval_every": 1},
        conditions=Conditions(dropout=0.3, snapshot_every=0, **EXACT_CLOCK),
        adversaries=Adversaries(fraction=0.1, attack="random", defence="median"),
    )
    calls, channels = (_run(tmp_path, t, **kw) for t in TRANSPORTS)
    assert sum(r["dropped"] for r in calls[1]) > 0  # the dropouts happened
    said = channels[0]["transport"]
    assert said["notes"] == [] and said["supersteps"]["calls"] == 0, said
    _same(calls, channels)


@pytest.mark.ray
def test_dedicated_placement_is_the_same_over_channels(ray_local, tmp_path):
    data = synthetic(n_users=6, n_items=40, avg_interactions=8, seed=0)
    kw = dict(protocol="dmf", rounds=2, placement="dedicated", params={"dim": 8})
    kw["conditions"] = Conditions(**EXACT_CLOCK)
    out = []
    for t in TRANSPORTS:
        settings = RunSettings(out=str(tmp_path / t), progress=False, transport=t, **kw)
        run_dir, summary = run(settings, data)
        out.append((summary, read_rows(run_dir)))
    assert out[1][0]["host_actors"] == 6
    _same(*out)


@pytest.mark.ray
def test_a_killed_host_is_survived_over_channels_with_the_same_results(ray_local, tmp_path):
    """The graph is torn down when its host dies, the superstep that finds it dead runs over
    actor calls (which replace it from its snapshot), and the graph is built again over the new
    actor; the run is the one actor calls give, fault record included."""
    kw = dict(
        protocol="dgrec",
        rounds=4,
        hosts=2,
        params={"pairs": 8, "eval_every": 1},
        conditions=Conditions(kill_hosts=((2, 1),), snapshot_every=1, **EXACT_CLOCK),
    )
    calls, channels = (_run(tmp_path, t, **kw) for t in TRANSPORTS)
    (fault,) = channels[0]["faults"]
    assert (fault["round"], fault["host"], fault["kind"]) == (2, 1, "host")
    notes = channels[0]["transport"]["notes"]
    assert any("torn down: host 1 was killed" in n for n in notes), notes
    assert any("graph rebuilt" in n for n in notes), notes
    # the superstep that found the host dead and the one after went over actor calls; then the
    # graph again, the batches those sent reaching their hosts as references in its orders
    assert channels[0]["transport"]["supersteps"]["calls"] == 2, channels[0]["transport"]
    _same(calls, channels)


@pytest.mark.ray
def test_a_checkpoint_taken_over_channels_resumes_over_calls(ray_local, tmp_path):
    """The mail a compiled graph delivered (held by the hosts) is in the checkpoint: a run cut
    short over channels and resumed over actor calls ends as the uninterrupted run."""
    kw = dict(protocol="dgrec", hosts=2, params={"pairs": 8, "eval_every": 1}, checkpoint_every=1)
    whole = _run(tmp_path / "whole", "calls", rounds=3, **kw)
    settings = RunSettings(
        out=str(tmp_path / "cut"), progress=False, seed=0, rounds=2, transport="channels", **kw
    )
    run_dir, _ = run(settings, _data())
    resumed_dir, summary = resume(run_dir, rounds=3, progress=False, transport="calls")
    assert summary["transport"]["name"] == "calls"
    assert summary["metrics"] == whole[0]["metrics"]
    assert summary["bytes_by_kind"] == whole[0]["bytes_by_kind"]


def test_a_graph_that_cannot_be_compiled_falls_back_to_actor_calls_and_says_so():
    t = Channels()

    class NotAnActor:
        @property
        def join_graph(self):
            raise RuntimeError("no compiled graph on this cluster")

    assert not t._build([NotAnActor()])
    assert t._broken and "no compiled graph on this cluster" in t.notes[0], t.notes


@pytest.mark.ray
def test_large_batches_go_through_the_store_over_channels_and_survive_a_killed_host(ray_local):
    """Batches of 1 MiB and more travel over a graph as object references (nodes/host.py
    ``_BY_STORE_FROM``): echo's 20 users of a host upload 20 × 80 kB a round. With a user host
    killed mid-run (its batches from the superstep before lost with it, as over actor calls),
    every round's figures, bytes and the server's vector are those of actor calls."""
    from engine import deploy
    from engine.loop import rounds
    from protocols.base import build_config
    from protocols.echo import SERVER, Echo

    data = synthetic(n_users=40, n_items=50, avg_interactions=2, seed=0)
    out = {}
    for t in TRANSPORTS:
        protocol = Echo(data, build_config(Echo.Config, {"dim": 20_000}), 0)
        kill = Conditions(kill_hosts=((2, 0),), snapshot_every=1, **EXACT_CLOCK)
        dep = deploy(protocol, "packed", 2, conditions=kill, transport=t)
        try:
            per_round = [
                (r.train, r.stats.sim_seconds, _without_seconds(r.stats.faults))
                for r in rounds(protocol, dep, 4, eval_every=0, evaluate_last=False)
            ]
            crossed = dep.ledger.crossed_total(round_=1)
            out[t] = (per_round, dep.ledger.rows(), dep.call(SERVER, "get_vector").tobytes())
            notes = dep.transport_summary()["notes"]
        finally:
            dep.close()
    assert crossed > 2 * 20 * 80_000  # both user hosts' uploads: over the 1 MiB line
    assert any("graph rebuilt" in n for n in notes), notes
    assert out["channels"] == out["calls"]


def test_the_deployment_and_the_floors_stand_in_are_one_runtime():
    """A protocol's driver speaks to :class:`nodes.step.Runtime`; the deployment and the floor's
    in-process stand-in both are one (a method missing or misnamed in either fails here)."""
    from benchmarks.floor import InProcess
    from nodes.deployment import Deployment
    from nodes.step import Runtime

    methods = ("begin_round", "superstep", "round_stats", "has_pending", "call", "close")
    for cls in (Deployment, InProcess):
        for name in methods:
            got = inspect.signature(getattr(cls, name))
            want = inspect.signature(getattr(Runtime, name))
            assert list(got.parameters) == list(want.parameters), (cls.__name__, name)
    proto = _FedmfProtocol()
    stand_in = InProcess(proto.node_specs(), seed=0, shared=proto.shared())
    assert isinstance(stand_in, Runtime)
    assert typing.get_type_hints(Deployment.round_stats)["return"] is RoundStats


def _FedmfProtocol():
    from protocols.base import build_config
    from protocols.fedmf.protocol import FedMF

    return FedMF(_data(), build_config(FedMF.Config, {"dim": 8}), seed=0)


@pytest.mark.ray
def test_graphs_share_one_driver_proxy_actor(ray_local):
    """Ray starts a proxy actor (a Python process) for every compiled graph; the transport keeps
    one for the driver's session (nodes/transport.py ``_OneProxy``): two deployments in turn,
    one proxy."""
    from ray.dag.compiled_dag_node import CompiledDAG

    from engine import deploy, run_rounds
    from protocols.base import build_config
    from protocols.fedmf.protocol import FedMF

    ids = []
    for _ in range(2):
        protocol = FedMF(_data(), build_config(FedMF.Config, {"dim": 8}), seed=0)
        dep = deploy(protocol, "packed", 1, transport="channels")
        try:
            run_rounds(protocol, dep, 1, eval_every=0)
            said = dep.transport_summary()
            assert said["notes"] == [] and said["supersteps"]["calls"] == 0, said
        finally:
            dep.close()
        ids.append(CompiledDAG.DAGDriverProxyActor._actor._actor_id)
    assert ids[0] == ids[1]
