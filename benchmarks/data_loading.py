"""Seconds to load each named dataset and to generate the synthetic world (the speed the tests
used to assert with wall-clock bounds; speed belongs here, the tests check content only); with
``--rows`` or ``--quick``, the interaction-file readers of ``data/loaders/files.py`` compared:
the Python reader (the ``csv`` module, line by line) against pyarrow's columnar reader.

    python -m benchmarks.data_loading [--repeats 3] [--datasets ml-100k,gowalla,...]
    python -m benchmarks.data_loading --rows 20000000 [--repeats 3] [--formats csv,inter]
        [--shared gowalla,epinions,ciao] [--tmp /tmp/privrec-bench] [--name NAME]
    python -m benchmarks.data_loading --quick      # 200,000 rows, no shared sets (for CI)

→ out/data_loading.json (named datasets): median and all timings per dataset, beside machine, date
and command. → out/data_loading-readers-<rows>.json (``--quick``: data_loading-readers-quick.json):
for each file, each reader's median and all seconds to read it
(``read_folder``: file to raw arrays) and to load it (``load_dataset``: read, map ids, split), the
peak RSS of the process that loaded it, and whether both readers gave the same arrays.

The files: a synthetic MovieLens-20M-like table of ``--rows`` rows (``user,item,rating,timestamp``;
138,493 users per 20 M rows, 26,744 items, ratings 0.5-5 in steps of 0.5, timestamps 1995-2015,
uniform at random, seed 0) written as CSV and/or RecBole ``.inter`` under ``--tmp`` (kept there
and reused: generating 20 M rows takes a few seconds, writing them about a minute); and the
largest shared sets in the formats the file loaders read: gowalla's folder as it is (LightGCN
``train.txt``/``test.txt``), epinions' ratings (922 k) as CSV and ciao's (with timestamps) as
``.inter``, written under ``--tmp`` from the named loaders' raw ids. Every repetition of every
reader runs in a child process of its own (forked; nothing cached between repetitions but the
page cache), so that its peak RSS (``ru_maxrss``) is its own; ``baseline_rss_mib`` is the peak of
a child that loads nothing (this process's size when forked). The parent has read a file once
before forking them; each reader's first read in a fresh process is measured apart
(``first_read_in_a_fresh_process_s``, a two-row file).

``--name NAME`` writes out/NAME.json instead; a recorded result (a file git tracks, such as
out/data_loading.json) is refused before anything runs unless ``--write`` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import resource
import statistics
import time
from pathlib import Path

import numpy as np

from benchmarks.common import WRITE_HELP, UsageError, claim_result, result_name, write_result
from data.registry import default_data_dir, load_dataset
from data.synthetic import synthetic

NAMED = ("ml-100k", "gowalla", "ciao", "epinions", "filmtrust")
SHARED = ("gowalla", "epinions", "ciao")
FORMATS = ("csv", "inter")
QUICK_ROWS = 200_000
READERS = {"python": False, "pyarrow": True}  # name -> data.loaders.files.COLUMNAR
INTER_HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float"


def timed(make, repeats: int) -> dict:
    seconds, size = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        d = make()
        seconds.append(time.perf_counter() - start)
        size = {"users": d.n_users, "items": d.n_items, "train": len(d.train)}
    return {"median_s": statistics.median(seconds), "seconds": seconds, **size}


def named(args) -> None:
    name = args.name or "data_loading"
    claim_result(name, write=args.write)
    data = default_data_dir()
    figures: dict = {
        "synthetic (300 x 500, default)": timed(synthetic, args.repeats),
        "synthetic 10,000 x 5,000": timed(
            lambda: synthetic(n_users=10_000, n_items=5_000), args.repeats
        ),
    }
    for name in filter(None, args.datasets.split(",")):
        if data is None:
            figures[name] = {"skipped": "../shared/data not found"}
            continue
        figures[name] = timed(lambda n=name: load_dataset(n, data), args.repeats)
        print(name, figures[name], flush=True)
    write_result(args.name or "data_loading", figures, write=args.write)


# --------------------------------------------------------------------------- the files


def _write_table(path: Path, header: str, columns: dict, delimiter: str) -> None:
    """``columns`` (name -> numpy array) as a text table under the header line ``header``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(header.encode() + b"\n")
        pcsv.write_csv(
            pa.table(columns),
            f,
            pcsv.WriteOptions(include_header=False, delimiter=delimiter, quoting_style="none"),
        )
    tmp.rename(path)


def synthetic_table(rows: int, seed: int = 0) -> dict:
    """A MovieLens-20M-like interaction table of ``rows`` rows (see the module docstring)."""
    rng = np.random.default_rng(seed)
    users = max(100, round(138_493 * rows / 20_000_000))
    return {
        "user": rng.integers(1, users + 1, rows),
        "item": rng.integers(1, 26_745, rows),
        "rating": rng.integers(1, 11, rows) / 2,
        "timestamp": rng.integers(789_652_009, 1_427_784_002, rows),
    }


def synthetic_files(rows: int, formats: list[str], tmp: Path) -> dict[str, Path]:
    """The synthetic table as ``synthetic-<rows>.csv`` / ``.inter`` under ``tmp`` (reused)."""
    tmp.mkdir(parents=True, exist_ok=True)
    paths = {fmt: tmp / f"synthetic-{rows}.{fmt}" for fmt in formats}
    missing = {fmt: p for fmt, p in paths.items() if not p.is_file()}
    if missing:
        start = time.perf_counter()
        table = synthetic_table(rows)
        for fmt, path in missing.items():
            if fmt == "csv":
                _write_table(path, ",".join(table), table, ",")
            else:
                _write_table(path, INTER_HEADER, table, "\t")
        print(
            f"wrote {', '.join(map(str, missing.values()))} in {time.perf_counter() - start:.1f} s",
            flush=True,
        )
    return paths


def shared_files(names: list[str], data: Path, tmp: Path) -> dict[str, Path]:
    """The shared sets in the file loaders' formats (gowalla's folder in place; the others
    written under ``tmp`` from their named loaders' raw ids, reused when there)."""
    from data.registry import SPECS

    out = {}
    for name in names:
        if name == "gowalla":
            out["gowalla (LightGCN folder)"] = data / "gowalla"
            continue
        fmt = "csv" if name == "epinions" else "inter"
        path = tmp / name / f"{name}.{fmt}"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            inter = SPECS[name].read(data / name, split=None).parts["all"]
            table = {"user": inter.user, "item": inter.item, "rating": inter.rating}
            if inter.timestamp is not None:
                table["timestamp"] = inter.timestamp
            if fmt == "csv":
                _write_table(path, ",".join(table), table, ",")
            else:
                header = "\t".join(
                    f"{c}_id:token" if c in ("user", "item") else f"{c}:float" for c in table
                )
                _write_table(path, header, table, "\t")
        out[f"{name} ({'CSV' if fmt == 'csv' else 'RecBole .inter'})"] = path
    return out


# --------------------------------------------------------------------------- the measurements


def _digest(d) -> str:
    """sha256 of a dataset's arrays (ids, ratings, timestamps of every part) and sizes."""
    h = hashlib.sha256(f"{d.n_users} {d.n_items}".encode())
    for part in (d.train, d.val, d.test):
        for col in ("user", "item", "rating", "timestamp") if part is not None else ():
            value = getattr(part, col)
            h.update(b"-" if value is None else np.ascontiguousarray(value).tobytes())
    return h.hexdigest()


def _load_once(path: Path, columnar: bool) -> dict:
    """In a child process: load ``path`` with one reader; seconds, peak RSS and a digest."""
    import data.loaders.files as files
    import data.registry as registry

    files.COLUMNAR = columnar
    read = registry.read_folder
    took: dict = {}

    def timed_read(*args, **kwargs):
        start = time.perf_counter()
        raw = read(*args, **kwargs)
        took["read_s"] = time.perf_counter() - start
        took["readers"] = sorted(set(raw.meta.get("readers", {}).values()))
        return raw

    registry.read_folder = timed_read
    start = time.perf_counter()
    d = load_dataset(path)
    took["load_s"] = time.perf_counter() - start
    took["rows"] = sum(len(p) for p in (d.train, d.val, d.test) if p is not None)
    took["digest"] = _digest(d)
    return took


def _child(conn, fn, args) -> None:
    try:
        out = fn(*args) if fn is not None else {}
        out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        conn.send(out)
    except BaseException as err:  # noqa: BLE001 - reported by the parent
        conn.send({"error": f"{type(err).__name__}: {err}"})
    finally:
        conn.close()


def in_child(fn, *args) -> dict:
    """``fn(*args)`` (a dict) in a forked child process, with the child's peak RSS."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, fn, args))
    proc.start()
    child.close()
    try:
        out = parent.recv()
    except EOFError:
        out = {"error": "the child died (out of memory?)"}
    proc.join()
    if "error" in out:
        raise RuntimeError(out["error"])
    return out


def _read_once(path: Path, columnar: bool) -> dict:
    import data.loaders.files as files

    files.COLUMNAR = columnar
    start = time.perf_counter()
    files.read_folder(files.file_layout(path), None)
    return {"read_s": time.perf_counter() - start}


def warm_up(tmp: Path) -> dict:
    """Each reader's first read in a fresh process (a two-row file, in a child of its own: the
    one-off costs, e.g. pyarrow's kernels), measured apart; then a read here, so that the
    children forked for the measurements start as warm as a process that has read a file."""
    tiny = tmp / "two-rows.csv"
    tiny.write_text("user,item,rating,timestamp\n1,2,3,4\n2,3,4,5\n")
    first = {
        f"first_read_in_a_fresh_process_s ({name})": in_child(_read_once, tiny, columnar)["read_s"]
        for name, columnar in READERS.items()
    }
    _read_once(tiny, True)
    return first


def compare(path: Path, repeats: int) -> dict:
    """Each reader ``repeats`` times on ``path`` (interleaved, each in its own child)."""
    runs: dict[str, list[dict]] = {name: [] for name in READERS}
    for _ in range(repeats):
        for name, columnar in READERS.items():
            runs[name].append(in_child(_load_once, path, columnar))
    out: dict = {"bytes": _size(path)}
    for name, got in runs.items():
        out[name] = {
            "read_median_s": statistics.median(r["read_s"] for r in got),
            "load_median_s": statistics.median(r["load_s"] for r in got),
            "peak_rss_mib": max(r["peak_rss_mib"] for r in got),
            "read_s": [r["read_s"] for r in got],
            "load_s": [r["load_s"] for r in got],
            "readers_used": sorted({x for r in got for x in r["readers"]}),
        }
    out["rows"] = runs["python"][0]["rows"]
    out["read_speedup"] = out["python"]["read_median_s"] / out["pyarrow"]["read_median_s"]
    out["load_speedup"] = out["python"]["load_median_s"] / out["pyarrow"]["load_median_s"]
    out["same_result"] = len({r["digest"] for got in runs.values() for r in got}) == 1
    return out


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size


def _parse_only(path: Path, repeats: int) -> dict:
    """Seconds of the bare parsers on the synthetic CSV (no checks, no id mapping): pyarrow's
    typed ``read_csv``, and pandas' with the pyarrow engine and with its C engine when pandas
    is installed (ray[tune] brings it; it is not a direct dependency)."""
    import pyarrow.csv as pcsv

    parsers = {"pyarrow.csv.read_csv": lambda: pcsv.read_csv(path)}
    try:
        import pandas as pd

        parsers["pandas.read_csv(engine='pyarrow')"] = lambda: pd.read_csv(path, engine="pyarrow")
        parsers["pandas.read_csv(engine='c')"] = lambda: pd.read_csv(path, engine="c")
    except ImportError:
        pass
    out = {}
    for name, parse in parsers.items():
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            parse()
            seconds.append(time.perf_counter() - start)
        out[name] = {"median_s": statistics.median(seconds), "seconds": seconds}
    return out


def _listed(value: str, known: tuple[str, ...], flag: str) -> list[str]:
    got = [v for v in value.split(",") if v]
    unknown = sorted(set(got) - set(known))
    if unknown:
        raise UsageError(f"{flag}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    return got


def readers(args) -> None:
    if args.quick and args.rows is not None:
        raise UsageError("--quick is --rows 200000: give one of them")
    if args.rows is not None and args.rows < 1:
        raise UsageError(f"--rows {args.rows}: expected a positive number")
    if args.repeats < 1:
        raise UsageError(f"--repeats {args.repeats}: expected a positive number")
    rows = QUICK_ROWS if args.quick else args.rows
    formats = _listed(args.formats, FORMATS, "--formats")
    default_shared = "" if args.quick else ",".join(SHARED)
    shared = _listed(default_shared if args.shared is None else args.shared, SHARED, "--shared")
    name = args.name or result_name(
        "data_loading-readers", None if args.quick else rows, quick=args.quick
    )
    claim_result(name, write=args.write)
    tmp = Path(args.tmp)
    files = {
        f"synthetic {rows:,} rows ({'CSV' if fmt == 'csv' else 'RecBole .inter'})": path
        for fmt, path in synthetic_files(rows, formats, tmp).items()
    }
    data = default_data_dir()
    if shared and data is not None:
        files.update(shared_files(shared, data, tmp))
    figures: dict = {"rows": rows, "repeats": args.repeats, **warm_up(tmp)}
    figures["baseline_rss_mib"] = in_child(None)["peak_rss_mib"]
    figures["files"] = {}
    if shared and data is None:
        figures["shared"] = "skipped: ../shared/data not found"
    for label, path in files.items():
        figures["files"][label] = {"path": str(path), **compare(path, args.repeats)}
        f = figures["files"][label]
        print(
            f"{label}: read {f['python']['read_median_s']:.2f} s -> "
            f"{f['pyarrow']['read_median_s']:.2f} s (x{f['read_speedup']:.1f}), load "
            f"{f['python']['load_median_s']:.2f} s -> {f['pyarrow']['load_median_s']:.2f} s, "
            f"peak RSS {f['python']['peak_rss_mib']:.0f} -> {f['pyarrow']['peak_rss_mib']:.0f} "
            f"MiB, same result: {f['same_result']}",
            flush=True,
        )
    if "csv" in formats:
        figures["parsers_on_the_synthetic_csv"] = _parse_only(
            tmp / f"synthetic-{rows}.csv", args.repeats
        )
    path = write_result(name, figures, echo=False, write=args.write)
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--datasets", default=",".join(NAMED), help="named datasets to time")
    ap.add_argument(
        "--rows", type=int, default=None, help="compare the file readers on this many rows"
    )
    ap.add_argument("--quick", action="store_true", help=f"--rows {QUICK_ROWS:,}, no shared sets")
    ap.add_argument("--formats", default=",".join(FORMATS), help="synthetic file formats")
    ap.add_argument("--shared", default=None, help=f"shared sets ({','.join(SHARED)}; '' none)")
    ap.add_argument("--tmp", default="/tmp/privrec-bench", help="where the files are written")
    ap.add_argument(
        "--name",
        default=None,
        help="benchmarks/out/<name>.json (default data_loading, or with --rows N "
        "data_loading-readers-N, with --quick data_loading-readers-quick)",
    )
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    if args.rows is not None or args.quick:
        readers(args)
    else:
        named(args)


if __name__ == "__main__":
    main()
