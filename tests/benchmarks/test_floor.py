"""benchmarks.floor: the floor's in-process driver runs a protocol's round with the same
results and bytes as the runtime, and ``--quick`` writes the JSON (machine, date, command, each
protocol's round, floor and ratio on each transport, the empty superstep) and the tables; the echo
rows need no dataset; ``--transports`` picks the runtime's transports."""

from __future__ import annotations

import inspect
import json
import math

import pytest

from benchmarks import common, floor
from benchmarks.common import UsageError


def _transports() -> list[str]:
    """The transports this runtime has: ``calls`` always, the others once ``Deployment`` takes
    ``transport=``."""
    from nodes.deployment import Deployment

    has = "transport" in inspect.signature(Deployment.__init__).parameters
    return list(floor.TRANSPORTS) if has else ["calls"]


def test_in_process_round_runs_the_protocols_own_handlers():
    from data.synthetic import synthetic
    from engine.loop import run_rounds
    from nodes.step import RoundStats

    ds = synthetic(n_users=30, n_items=40, avg_interactions=8, seed=0)
    proto = floor._make("fedmf", ds, {"users_per_round": 16, "dim": 8}, 0)
    dep = floor.InProcess(proto.node_specs(), seed=proto.seed, shared=proto.shared())
    res = run_rounds(proto, dep, 2, eval_every=0, evaluate_last=False)
    assert [r.round for r in res] == [0, 1]
    assert math.isfinite(res[1].train["loss"])
    assert dep.ledger.total(round_=1) > 0 and dep.kernel_seconds > 0
    assert {s["phase"] for s in dep.steps} >= {"train"}
    # what a driver reads of a round (fedpergnn: .dropped, .late), as a Deployment gives it
    stats = dep.round_stats()
    assert isinstance(stats, RoundStats) and not stats.dropped and not stats.late
    assert floor.memcpy_rate(mib=8, repeats=2) > 1e8  # bytes per second


def test_quick_writes_round_floor_and_ratio(tmp_path, monkeypatch, ray_local, capsys):
    monkeypatch.setattr(common, "OUT", tmp_path)
    argv = ["--quick", "--protocols", "dmf", "--profile-top", "2", "--empty-steps", "20"]
    code = floor.main([*argv, "--transports", *_transports()])
    assert code == 0
    doc = json.loads((tmp_path / "floor-synthetic-quick.json").read_text())
    assert {"date", "command", "machine", "figures"} <= set(doc)
    fig = doc["figures"]
    assert fig["memcpy_bytes_per_second"] > 0 and fig["quick"] is True
    assert fig["transports"] == _transports()
    dmf = fig["results"]["synthetic"]["dmf"]
    assert dmf["floor_seconds"] == pytest.approx(
        dmf["floor_inprocess_seconds"] + dmf["bytes_per_round"] / fig["memcpy_bytes_per_second"]
    )
    assert list(dmf["hosts"]["1"]) == _transports()
    for t, one in dmf["hosts"]["1"].items():
        assert one["transport"] == t
        # each transport in a pass of its own, against the floor measured in that pass
        assert one["ratio"] == pytest.approx(one["round_seconds"] / one["floor_seconds"])
        # the floor's driver gives the runtime's losses and bytes
        assert one["same_losses"] and one["same_bytes"]
        assert len(one["profile_driver"]) <= 2
    assert len(dmf["profile_floor"]) <= 2
    # the empty superstep: one row per transport
    assert list(fig["empty_superstep"]) == _transports()
    assert all(e["steps"] == 20 and e["hosts"] == 3 for e in fig["empty_superstep"].values())
    table = (tmp_path / "floor-synthetic-quick.md").read_text()
    assert table.startswith(
        "| protocol | dataset | hosts | transport | round s | floor s | ratio |"
    )
    assert "| dmf | synthetic | 1 (+0) | calls |" in table
    assert "**empty superstep over 3 hosts**" in table
    assert "| transport | hosts | steps | median ms | p90 ms | transport notes |" in table
    out = capsys.readouterr().out
    assert "floor-synthetic-quick.json" in out and "empty superstep over 3 hosts" in out


def test_echo_rows_need_no_data_and_their_floor_has_the_real_bytes(
    tmp_path, monkeypatch, ray_local
):
    """echo-1000 as vs_flower runs it (10,000 float32 each way, packed on 2 user hosts + the
    server's), whatever --datasets names; the in-process floor counts the real round's bytes."""
    monkeypatch.setattr(common, "OUT", tmp_path)
    argv = ["--protocols", "echo-1000", "--datasets", "no-such-set", "--rounds", "1"]
    argv += ["--profile-top", "0", "--empty-steps", "0", "--transports", *_transports()]
    assert floor.main(argv) == 0
    fig = json.loads((tmp_path / "floor-echo.json").read_text())["figures"]
    assert list(fig["results"]) == [floor.ECHO_DATASET]
    echo = fig["results"][floor.ECHO_DATASET]["echo-1000"]
    assert echo["clients"] == 1000 and echo["params"] == {"dim": 10000}
    # every client gets the vector and sends it back: 2 x 1,000 x 40,000 bytes and the headers
    assert 80_000_000 <= echo["bytes_per_round"] < 81_000_000
    for t, run in echo["hosts"]["2"].items():
        assert run["n_hosts"] == 3, t  # 2 user hosts + the server's
        assert run["bytes_per_round"] == echo["bytes_per_round"] and run["same_bytes"]
        assert run["round_seconds"] > 0 and run["ratio"] > 0
        assert run["transport_notes"] == []  # channels: every superstep over the graph
    table = (tmp_path / "floor-echo.md").read_text()
    assert f"| echo-1000 | {floor.ECHO_DATASET} | 2 (+1) | calls |" in table
    assert "synthetic (no dataset)" in table
    assert "empty superstep" not in table  # --empty-steps 0


@pytest.mark.parametrize("transport", floor.TRANSPORTS)
def test_empty_superstep_has_a_positive_finite_cost(transport, ray_local):
    if transport not in _transports():
        pytest.skip(f"this runtime has no transport {transport!r} yet")
    e = floor.empty_superstep(3, transport, steps=30, warmup=5)
    assert e["transport"] == transport and e["hosts"] == 3 and e["nodes"] == 3
    assert e["steps"] == 30
    for k in ("median_ms", "p90_ms", "min_ms"):
        assert math.isfinite(e[k]) and e[k] > 0, k
    assert e["min_ms"] <= e["median_ms"] <= e["p90_ms"] <= e["max_ms"]
    assert e["transport_notes"] == []  # no fall-back to actor calls


def test_transports_and_protocols_on_the_command_line():
    args = floor.parse([])
    assert args.transports == ["calls", "channels"]
    assert {"echo-1000", "echo-10000", "dmf"} <= set(args.protocols)
    assert args.datasets == ["ml-100k", "ciao"] and args.name == "floor-ml-100k-ciao"
    assert args.hosts == [1] and args.echo_hosts == [2]  # echo: vs_flower's placement
    assert floor.parse(["--transports", "channels"]).transports == ["channels"]
    assert floor.parse(["--transports", "calls", "calls"]).transports == ["calls"]
    quick = floor.parse(["--quick"])
    assert "echo-1000" in quick.protocols and "echo-10000" not in quick.protocols
    assert quick.name == "floor-synthetic-quick" and quick.transports == ["calls", "channels"]
    only_echo = floor.parse(["--protocols", "echo-10000", "--datasets", "x", "--hosts", "3"])
    assert only_echo.datasets == [] and only_echo.name == "floor-echo"
    assert only_echo.echo_hosts == [3]
    with pytest.raises(UsageError, match="--transports: invalid choice: 'grpc'"):
        floor.parse(["--transports", "grpc"])
    with pytest.raises(UsageError, match="--transports: expected at least one"):
        floor.parse(["--transports"])


def test_a_mistake_is_one_line(capsys):
    assert floor.main(["--rounds", "0"]) == 2
    assert capsys.readouterr().err.strip() == "python -m benchmarks.floor: --rounds must be >= 1"
    assert floor.main(["--rounds-for", "nope=1"]) == 2
    assert "--rounds-for nope: unknown protocol" in capsys.readouterr().err
    assert floor.main(["--transports", "calls", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--transports: invalid choice: 'nope'" in err and "\n" not in err
    assert floor.main(["--empty-steps", "-1"]) == 2
    assert "--empty-steps must be >= 0" in capsys.readouterr().err
