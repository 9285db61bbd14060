"""The shape of the tree: the engine never names a built-in protocol (it knows protocols only
through their declarations), adversaries know no protocol (a protocol declares its attacks), and
the packages — every one of the tree — import each other without a cycle."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from protocols import BUILTIN

ROOT = Path(__file__).resolve().parent.parent
# every package of the tree: a top-level folder with an __init__.py (tests and examples aside)
PACKAGES = tuple(
    sorted(
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").is_file() and p.name not in ("tests", "examples")
    )
)


def _engine_tokens():
    for path in sorted((ROOT / "engine").glob("*.py")):
        source = path.read_text()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT):
                yield path.name, tok.start[0], tok.string


def test_engine_names_no_builtin_protocol():
    # "central" is also an English word ("the central baseline"): only a label or a name of it
    # counts ("central:…", "central" as a whole string, CENTRAL)
    names = sorted(n for n in BUILTIN if n != "central")
    word = re.compile(r"\b(" + "|".join(names) + r")\b", re.IGNORECASE)
    central = re.compile(r"\bcentral:|^['\"]central['\"]$|^CENTRAL$")
    found = [
        f"engine/{f}:{line}: {text.strip()[:60]}"
        for f, line, text in _engine_tokens()
        if word.search(text) or central.search(text)
    ]
    assert not found, "engine/ names built-in protocols:\n" + "\n".join(found)


def _imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def _files():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_every_package_is_covered():
    # the packages pyproject installs are the ones checked here, and none is forgotten
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    installed = {p.rstrip("*") for p in include["packages"]["find"]["include"]}
    assert installed <= set(PACKAGES), sorted(installed - set(PACKAGES))
    assert {"adversaries", "benchmarks", "engine", "protocols"} <= set(PACKAGES)


def test_adversaries_import_no_protocol():
    """A protocol declares its attacks (``ATTACKS``) and imports adversaries' behaviours and
    defences; adversaries/ never imports a protocol, so the dependency runs one way."""
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted((ROOT / "adversaries").rglob("*.py"))
        for name in _imports(path, top_level_only=False)
        if name.split(".")[0] == "protocols"
    ]
    assert not found, "adversaries/ imports protocols:\n" + "\n".join(found)


def test_packages_import_each_other_without_a_cycle():
    """Package level, every import (also those inside functions)."""
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for path in _files():
        pkg = path.relative_to(ROOT).parts[0]
        for name in _imports(path, top_level_only=False):
            top = name.split(".")[0]
            if top in PACKAGES and top != pkg:
                graph[pkg].add(top)
    assert _cycle(graph) is None, f"package import cycle: {' -> '.join(_cycle(graph))}"


def test_modules_import_each_other_without_a_cycle():
    """Module level: what a module imports when it is imported (its top-level imports)."""
    modules = {_module(p): p for p in _files()}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for target in _imports(path, top_level_only=True):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # a submodule's import of its own package is the package being initialised
            if target and target != name and not name.startswith(target + "."):
                deps.add(target)
        graph[name] = deps
    cycle = _cycle(graph)
    assert cycle is None, f"module import cycle: {' -> '.join(cycle)}"
