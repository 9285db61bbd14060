"""Run conditions without Ray: the availability draw, traces, the per-node time formula, validation,
and checkpoints that survive a crash while being written."""

from __future__ import annotations

import json
import math
import pickle

import pytest

from engine.checkpoint import (
    CHECKPOINT_NAME,
    PREVIOUS_NAME,
    Checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from nodes.conditions import LINKS, Conditions, ConditionsError


def test_offline_draw_has_the_asked_rate_and_depends_only_on_seed_round_and_node():
    c = Conditions(dropout=0.3)
    users = [f"user/{i}" for i in range(4000)]
    rate = sum(c.offline(0, 5, u) for u in users) / len(users)
    assert abs(rate - 0.3) < 4 * math.sqrt(0.3 * 0.7 / len(users))  # 4 standard errors
    # a function of (seed, round, node id): asking again, or in another order, gives the same set
    assert [c.offline(0, 5, u) for u in reversed(users)] == [c.offline(0, 5, u) for u in users][
        ::-1
    ]
    # another round or another seed draws another set
    assert [c.offline(0, 6, u) for u in users] != [c.offline(0, 5, u) for u in users]
    assert [c.offline(1, 5, u) for u in users] != [c.offline(0, 5, u) for u in users]
    # datacenter roles are never offline by default; parties are
    assert not any(c.offline(0, r, "server/0") for r in range(200))
    assert any(c.offline(0, r, "party/1") for r in range(200))
    assert not any(Conditions().offline(0, r, "user/1") for r in range(200))


def test_trace_overrides_the_draw_for_the_nodes_it_names(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"user/1": [[0, 3], 7], "party/0": [2]}))
    c = Conditions(dropout=0.5, trace=str(trace))
    assert [r for r in range(10) if not c.offline(0, r, "user/1")] == [0, 1, 2, 7]
    assert [r for r in range(10) if not c.offline(0, r, "party/0")] == [2]
    # a node the trace does not name follows the dropout draw
    assert any(c.offline(0, r, "user/2") for r in range(20))
    assert not all(c.offline(0, r, "user/2") for r in range(20))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"user/1": ["sometimes"]}))
    with pytest.raises(ConditionsError, match="user/1"):
        Conditions(trace=str(bad))
    with pytest.raises(ConditionsError, match="cannot read"):
        Conditions(trace=str(tmp_path / "missing.json"))


def test_node_seconds_is_handler_time_times_speed_plus_transfers_plus_latency():
    c = Conditions(user_speed=3.0, speed_spread=0.0)
    mobile, dc = LINKS["mobile"], LINKS["datacenter"]
    got = c.node_seconds(0, "user/4", 0.5, received=2_000_000, sent=1_000_000)
    assert got == pytest.approx(0.5 * 3.0 + 2e6 / mobile.down + 1e6 / mobile.up + mobile.latency)
    assert c.node_seconds(0, "server/0", 0.5, received=10, sent=0) == pytest.approx(
        0.5 + 10 / dc.down + dc.latency
    )
    # a node that neither received nor sent pays no latency
    assert c.node_seconds(0, "user/4", 0.25, received=0, sent=0) == pytest.approx(0.75)
    # the speed factors spread log-normally around user_speed and are fixed per node
    spread = Conditions(user_speed=2.0, speed_spread=0.5)
    speeds = [spread.speed(0, f"user/{i}") for i in range(2000)]
    assert speeds == [spread.speed(0, f"user/{i}") for i in range(2000)]
    logs = sorted(math.log(s / 2.0) for s in speeds)
    assert abs(logs[len(logs) // 2]) < 0.05  # median 2.0
    assert 0.45 < (logs[int(0.8413 * len(logs))] - logs[len(logs) // 2]) < 0.55  # σ = 0.5


@pytest.mark.parametrize(
    "values, name",
    [
        ({"dropout": 1.0}, "dropout"),
        ({"dropout": -0.1}, "dropout"),
        ({"deadline": -1.0}, "deadline"),
        ({"user_link": "carrier-pigeon"}, "user_link"),
        ({"snapshot_every": -1}, "snapshot_every"),
        ({"droput": 0.1}, "droput"),
    ],
)
def test_impossible_conditions_are_refused_with_the_parameter_named(values, name):
    with pytest.raises(ConditionsError, match=name):
        Conditions.from_dict(values)


def test_a_crash_while_writing_a_checkpoint_leaves_the_previous_one_loadable(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, Checkpoint(next_round=3, **_fields()))

    class Crash(Exception):
        pass

    def dump_half_then_die(obj, f, protocol=None):
        f.write(pickle.dumps(obj)[:20])  # part of the new checkpoint reached the file
        raise Crash

    monkeypatch.setattr(pickle, "dump", dump_half_then_die)
    with pytest.raises(Crash):
        save_checkpoint(tmp_path, Checkpoint(next_round=4, **_fields()))
    monkeypatch.undo()
    assert load_checkpoint(tmp_path).next_round == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_NAME]  # no temporary left

    # a crash between the two renames (the newest file is missing) or a damaged newest file: the
    # previous checkpoint is taken
    save_checkpoint(tmp_path, Checkpoint(next_round=4, **_fields()))
    assert load_checkpoint(tmp_path).next_round == 4
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"\x80\x05trunc")
    assert load_checkpoint(tmp_path).next_round == 3
    (tmp_path / CHECKPOINT_NAME).unlink()
    assert (tmp_path / PREVIOUS_NAME).is_file()
    assert load_checkpoint(tmp_path).next_round == 3


def _fields() -> dict:
    return {
        "settings": None,
        "protocol": None,
        "deployment": None,
        "metrics": {},
        "elapsed": 0.0,
    }
