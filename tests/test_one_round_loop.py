"""One round loop (issue 27): the tests and the benchmarks advance protocols through
``engine.rounds`` / ``engine.run_rounds``, never by calling ``.run_round(`` or ``.begin_round(``
themselves, so every round they measure or check is a round as the runner makes it (run
conditions, snapshots, injected kills, evaluation points, round statistics)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("tests", "benchmarks")
DRIVERS = ("run_round", "begin_round")

# (file, enclosing function, method) → why that call may stay. Only tests whose point is a
# phase driven by hand, superstep by superstep, belong here; a whole round never does.
ALLOWED = {
    ("tests/test_faults.py", "_three_nodes", "begin_round"): (
        "a hand-built Deployment of three test nodes and no protocol: one round of three "
        "supersteps, driven by hand to check the simulated clock and the deadline"
    ),
    (
        "tests/test_dropout_decentralized.py",
        "test_a_member_decodes_what_reached_it_when_a_host_dies_mid_gossip",
        "begin_round",
    ): (
        "round 0's DGREC gossip is driven superstep by superstep to kill a host between two "
        "gossip steps; the next round goes through engine.rounds"
    ),
    ("benchmarks/fedlightgcn_round.py", "_rounds_before_loop", "begin_round"): (
        "--before-tree times an older checkout that has no engine.rounds: this stand-in is "
        "used only when `from engine import rounds` fails there"
    ),
    ("benchmarks/fedlightgcn_round.py", "_rounds_before_loop", "run_round"): (
        "the same stand-in for checkouts older than engine.rounds"
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
    return sorted(p for d in SCANNED for p in (ROOT / d).glob("*.py"))


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
