"""benchmarks.floor (issue 25): the floor's in-process driver runs a protocol's round with the same
results and bytes as the runtime, and ``--quick`` writes the JSON (machine, date, command, each
protocol's round, floor and ratio) and the table."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import common, floor


def test_in_process_round_runs_the_protocols_own_handlers():
    from data.synthetic import synthetic
    from engine.loop import run_rounds

    ds = synthetic(n_users=30, n_items=40, avg_interactions=8, seed=0)
    proto = floor._make("fedmf", ds, {"users_per_round": 16, "dim": 8}, 0)
    dep = floor.InProcess(proto.node_specs(), seed=proto.seed, shared=proto.shared())
    res = run_rounds(proto, dep, 2, eval_every=0, evaluate_last=False)
    assert [r.round for r in res] == [0, 1]
    assert math.isfinite(res[1].train["loss"])
    assert dep.ledger.total(round_=1) > 0 and dep.kernel_seconds > 0
    assert {s["phase"] for s in dep.steps} >= {"train"}
    assert floor.memcpy_rate(mib=8, repeats=2) > 1e8  # bytes per second


def test_quick_writes_round_floor_and_ratio(tmp_path, monkeypatch, ray_local, capsys):
    monkeypatch.setattr(common, "OUT", tmp_path)
    code = floor.main(["--quick", "--protocols", "dmf", "--profile-top", "2"])
    assert code == 0
    doc = json.loads((tmp_path / "floor-synthetic-quick.json").read_text())
    assert {"date", "command", "machine", "figures"} <= set(doc)
    fig = doc["figures"]
    assert fig["memcpy_bytes_per_second"] > 0 and fig["quick"] is True
    dmf = fig["results"]["synthetic"]["dmf"]
    assert dmf["floor_seconds"] == pytest.approx(
        dmf["floor_inprocess_seconds"] + dmf["bytes_per_round"] / fig["memcpy_bytes_per_second"]
    )
    one = dmf["hosts"]["1"]
    assert one["ratio"] == pytest.approx(one["round_seconds"] / dmf["floor_seconds"])
    # the floor's driver gives the runtime's losses and bytes
    assert one["same_losses"] and one["same_bytes"]
    assert len(dmf["profile_floor"]) <= 2 and len(one["profile_driver"]) <= 2
    table = (tmp_path / "floor-synthetic-quick.md").read_text()
    assert table.startswith("| protocol | dataset | hosts | round s | floor s | ratio |")
    assert "| dmf | synthetic |" in table
    assert "floor-synthetic-quick.json" in capsys.readouterr().out


def test_a_mistake_is_one_line(capsys):
    assert floor.main(["--rounds", "0"]) == 2
    assert capsys.readouterr().err.strip() == "python -m benchmarks.floor: --rounds must be >= 1"
    assert floor.main(["--rounds-for", "nope=1"]) == 2
    assert "--rounds-for nope: unknown protocol" in capsys.readouterr().err
