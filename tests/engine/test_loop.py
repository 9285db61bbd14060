"""One round loop: the tests and the benchmarks advance protocols through
``engine.rounds`` / ``engine.run_rounds``, never by calling ``.run_round(`` or ``.begin_round(``
themselves, so every round they measure or check is a round as the runner makes it (run
conditions, snapshots, injected kills, evaluation points, round statistics)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("tests", "benchmarks")
DRIVERS = ("run_round", "begin_round")

# (file, enclosing function, method) → why that call may stay. Only tests whose point is a
# phase driven by hand, superstep by superstep, belong here; a whole round never does.
ALLOWED = {
    ("tests/integration/test_faults.py", "_three_nodes", "begin_round"): (
        "a hand-built Deployment of three test nodes and no protocol: one round of three "
        "supersteps, driven by hand to check the simulated clock and the deadline"
    ),
    (
        "tests/protocols/dgrec/test_dropout.py",
        "test_a_member_decodes_what_reached_it_when_a_host_dies_mid_gossip",
        "begin_round",
    ): (
        "round 0's DGREC gossip is driven superstep by superstep to kill a host between two "
        "gossip steps; the next round goes through engine.rounds"
    ),
}


def driver_calls(path: Path) -> list[tuple[str, str, int]]:
    """(enclosing function, method, line) of every ``<expr>.run_round(…)`` / ``.begin_round(…)``
    call in the file's code (the syntax tree: comments and strings do not count)."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = where
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = child.name if where == "<module>" else f"{where}.{child.name}"
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in DRIVERS
            ):
                found.append((where, child.func.attr, child.lineno))
            visit(child, inner)

    visit(ast.parse(path.read_text(), filename=str(path)), "<module>")
    return found


def scanned_files() -> list[Path]:
    return sorted(p for d in SCANNED for p in (ROOT / d).rglob("*.py"))


def _outermost(where: str) -> str:
    """The top-level function a call is in (nested helpers belong to their test)."""
    return where.split(".")[0]


def test_no_round_is_driven_by_hand():
    offending, used = [], set()
    for path in scanned_files():
        rel = path.relative_to(ROOT).as_posix()
        for where, method, line in driver_calls(path):
            key = (rel, _outermost(where), method)
            if key in ALLOWED:
                used.add(key)
            else:
                offending.append(f"{rel}:{line} ({where}) calls .{method}(")
    assert not offending, "go through engine.rounds / run_rounds instead:\n" + "\n".join(offending)
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"allowed calls that are gone (drop them from ALLOWED): {stale}"


def test_the_scan_reads_code_not_comments(tmp_path):
    src = tmp_path / "sample.py"
    src.write_text(
        "# protocol.run_round(dep, 0) in a comment\n"
        "'''dep.begin_round(0) in a docstring'''\n"
        "def f(protocol, dep):\n"
        "    text = 'protocol.run_round(dep, 1)'\n"
        "    for r in range(2):\n"
        "        dep.begin_round(r)\n"
        "        protocol.run_round(dep, r)\n"
        "class C:\n"
        "    def g(self, dep):\n"
        "        self.proto.run_round(dep, 0)\n"
    )
    assert driver_calls(src) == [
        ("f", "begin_round", 6),
        ("f", "run_round", 7),
        ("C.g", "run_round", 10),
    ]


# --- the run's record and its observers (engine/checkpoint.py, engine/loop.py) ------------------


def _signed(payload: dict) -> bytes:
    """A checkpoint file of ``payload`` signed with this machine's key, as save_checkpoint lays
    it out (engine/checkpoint.py's module docstring)."""
    import hashlib
    import hmac
    import pickle

    from engine import checkpoint as ck

    body = pickle.dumps(payload)
    head = ck._LAYOUT.pack(ck.MAGIC, ck.FORMAT, len(body))
    return head + hmac.new(ck._signing_key(), head + body, hashlib.sha256).digest() + body


def test_a_checkpoint_file_holds_a_plain_dict_and_loads_as_a_checkpoint(tmp_path, monkeypatch):
    from engine.checkpoint import (
        CHECKPOINT_NAME,
        FORMAT,
        Checkpoint,
        RunTotals,
        load_checkpoint,
        save_checkpoint,
    )

    monkeypatch.setenv("PRIVREC_HOME", str(tmp_path / "home"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fields = {
        "next_round": 2,
        "settings": {"rounds": 4},
        "protocol": "a protocol",
        "deployment": {"hosts": []},
        "metrics": {"recall@20": 0.5},
        "elapsed": 1.5,
    }
    totals = {"sim_seconds": 3.0, "faults": [{"kind": "host"}], "rejected": {"m": {"size": 2}}}
    # a dict with its totals as a dict, as every privrec of this format writes the file
    (run_dir / CHECKPOINT_NAME).write_bytes(_signed({"format": FORMAT, **fields, "totals": totals}))
    loaded = load_checkpoint(run_dir)
    assert loaded == Checkpoint(**fields, totals=RunTotals(**totals))
    assert loaded.payload() == {"format": FORMAT, **fields, "totals": totals}
    # a dict without totals: nothing added up yet
    (run_dir / CHECKPOINT_NAME).write_bytes(_signed({"format": FORMAT, **fields}))
    assert load_checkpoint(run_dir).totals == RunTotals()
    # save_checkpoint writes the same plain dict
    save_checkpoint(run_dir, loaded)
    assert load_checkpoint(run_dir) == loaded


def test_run_totals_add_up_the_rounds():
    from engine.checkpoint import RunTotals
    from nodes.step import RoundStats

    totals = RunTotals()
    totals.add(RoundStats(sim_seconds=1.5, rejected={"m": {"size": 1}}, faults=[{"round": 0}]))
    totals.add(RoundStats(sim_seconds=2.0, rejected={"m": {"size": 2, "tag": 1}, "n": {"x": 1}}))
    assert totals == RunTotals(
        sim_seconds=3.5,
        faults=[{"round": 0}],
        rejected={"m": {"size": 3, "tag": 1}, "n": {"x": 1}},
    )


def test_an_observer_defines_only_the_hooks_it_needs():
    from engine.loop import RoundCallback, notify, notify_end, notify_round

    seen = []

    class Rows:  # not a RoundCallback: on_round only
        def on_round(self, row):
            seen.append(("rows", row["round"]))

    class Ends(RoundCallback):
        def on_end(self, summary):
            seen.append(("end", summary))
            raise OSError("disk full")

    class Last(RoundCallback):
        def before_round(self, state, rnd):
            seen.append(("before", rnd))

        def on_end(self, summary):
            seen.append(("last end", summary))

    callbacks = [Rows(), Ends(), Last()]
    notify(callbacks, "before_round", None, 0)
    notify_round(callbacks, {"round": 0})
    with pytest.raises(OSError, match="disk full"):  # raised after every callback was told
        notify_end(callbacks, None)
    assert seen == [("before", 0), ("rows", 0), ("end", None), ("last end", None)]
