"""Figures as the engine reads and shows them: numbers, the main metric of a set of metrics, and
the formats of the tables and plots. Imports nothing of the engine, so the report and the
comparison both build on it."""

from __future__ import annotations

import dataclasses
import math


def is_number(x) -> bool:
    """A real number (numpy/torch scalars too), not a bool."""
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return True
    return hasattr(x, "item") and callable(x.item) and not hasattr(x, "__len__")


def main_metric(metrics: dict, declared=None) -> tuple[str | None, str | None]:
    """(name, "higher" | "lower") of the figure a run is judged by among ``metrics``' entries that
    are not None: ``declared`` (the protocol's :class:`protocols.base.MainMetric`, or its record
    in summary.json) when ``metrics`` has it; else a guess from the names — recall@20 (else the
    largest recall@k) for ranking, RMSE (``test_rmse``) for rating prediction; (None, None)
    without either."""
    names = {k for k, v in metrics.items() if v is not None}
    if declared is not None:
        name = declared["name"] if isinstance(declared, dict) else declared.name
        better = declared["better"] if isinstance(declared, dict) else declared.better
        if name in names:
            return name, better
    recalls = [k for k in names if k.startswith("recall@") and k[7:].isdigit()]
    if recalls:
        best = "recall@20" if "recall@20" in recalls else max(recalls, key=lambda k: int(k[7:]))
        return best, "higher"
    for name in ("rmse", "test_rmse"):
        if name in names:
            return name, "lower"
    return None, None


def one_line(exc: BaseException) -> str:
    """``ConfigError: model: 'gcn' predicts ratings ...``: the exception's first line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def is_inf(x) -> bool:
    return x == "inf" or (isinstance(x, float) and math.isinf(x))


def jsonable(x):
    """Valid JSON: ±inf as the strings "inf" / "-inf", NaN as null, numpy/torch scalars unwrapped,
    dataclasses and other mappings as dicts."""
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return jsonable(dataclasses.asdict(x))
    if hasattr(x, "item") and callable(x.item):
        return jsonable(x.item())
    return str(x)


def fmt(x) -> str:
    """A number as the tables show it (4 significant digits; "—" for none, "∞" for inf)."""
    if x is None:
        return "—"
    if is_inf(x):
        return "∞"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def fmt_bytes(n, spec: str = ".1f") -> str:
    """``n`` bytes in decimal units (kB = 1000 B): ``spec`` formats the number above 1000 B (".1f"
    in the tables, ".3g" on plot axes); a count under 1000 is whole bytes; None is "—"."""
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} B" if unit == "B" else f"{n:{spec}} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
