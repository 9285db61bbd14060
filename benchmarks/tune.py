"""Tune a protocol's parameters on a validation slice of the training data, never on the test
split, with Ray Tune; then (optionally) run the chosen parameters once on the real split.

    python -m benchmarks.tune --protocol fedmf --dataset gowalla --rounds 500 \\
        --grid lr_item=0.02,0.05 --grid user_steps=1,10 [--set users_per_round=512] \\
        [--val-fraction 0.1] [--final-rounds 1500] --name fedmf-gowalla-tune
    python -m benchmarks.tune ... --search random --samples 16 --range lr_item=0.005:0.1:log
    python -m benchmarks.tune ... --resume          # the same command: finish an interrupted one

Every user's training interactions are split at random (``data.splits.random_split``,
``--val-fraction`` of each user's rows, seed ``--seed``): each candidate trains on the rest and
is judged by its main metric (the protocol's own: Recall@K for ranking, RMSE for ratings) on the
held-out slice. The test split is not handed to the candidates at all. The winner alone then
trains on the full training data and is measured on the test split (``--final-rounds``; 0 skips
it). Writes benchmarks/out/<name>.json.

With ``--engine tune`` (the default) every candidate is a Ray Tune trial: a privrec run whose
driver and host actors live in the trial's placement group (1 CPU for the driver,
``--cpus-per-host`` for each host actor), so that trials run side by side as far as the cluster
has room and never beyond it. ``--search grid`` runs the product of the ``--grid`` values;
``random`` and ``optuna`` (where optuna is installed) draw ``--samples`` points from the
``--grid`` values and the ``--range`` intervals. ASHA (``--scheduler asha``) stops the weaker
candidates at its rungs (``--grace`` rounds, then ``--reduction-factor`` times as many) on the
metric each run reports at its evaluations (``eval_every``; a quarter of ``--rounds`` when the
protocol evaluates only at the end). The experiment is kept in <out>/<name>/ (Ray Tune's state,
the trials' runs, the final run): ``--resume`` continues an interrupted one without rerunning
its finished trials, and ``--stop-after N`` ends a session after N trials (resumable).
``--engine loop`` is the sequential loop: one candidate after another, each run in full.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    check_dataset,
    claim_result,
    parse_key_values,
    run_main,
    shown_path,
    text_table,
    usage_errors,
    write_result,
)
from data.registry import load_dataset
from data.splits import random_split
from data.types import RecDataset
from engine import RunSettings, run
from engine.compare import fmt, main_metric
from engine.report import read_rows

PROG = "benchmarks.tune"
# the flags an experiment is made of: --resume refuses a command that changes one of them
EXPERIMENT_FLAGS = (
    "protocol",
    "dataset",
    "data_dir",
    "rounds",
    "grid",
    "set",
    "range",
    "search",
    "samples",
    "val_fraction",
    "seed",
    "hosts",
    "cpus_per_host",
    "gpus_per_host",
    "trial_cpus",
    "scheduler",
    "grace",
    "reduction_factor",
)


def validation_dataset(ds: RecDataset, fraction: float, seed: int) -> RecDataset:
    """``ds`` with each user's training rows split: ``fraction`` of them become the evaluated
    part, the rest the training part; ``ds.test`` is dropped."""
    fit, held_out = random_split(ds.train, ds.n_users, fraction, seed)
    meta = {**ds.meta, "validation": f"{fraction} of each user's training rows (seed {seed})"}
    return dataclasses.replace(ds, train=fit, test=held_out, val=None, meta=meta)


def data_digest(inter) -> str:
    """A fingerprint of interactions (their users and items, in order): what a trial reports
    of the rows it was evaluated on, checked against the validation slice's."""
    import numpy as np

    h = hashlib.sha256()
    h.update(np.ascontiguousarray(inter.user, dtype=np.int64).tobytes())
    h.update(np.ascontiguousarray(inter.item, dtype=np.int64).tobytes())
    return h.hexdigest()[:16]


def grid(pairs: list[str]) -> list[dict]:
    """``["a=1,2", "b=x"]`` → ``[{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]``."""
    return [
        dict(kv for d in combo for kv in d.items()) for combo in itertools.product(*_axes(pairs))
    ]


def _axes(pairs: list[str]) -> list[list[dict]]:
    """Each ``--grid key=v1,v2,...`` as its list of ``{key: value}``."""
    axes = []
    for pair in pairs:
        key, sep, values = pair.partition("=")
        if not sep or not key or not values:
            raise UsageError(f"--grid {pair!r}: expected key=v1,v2,...")
        axes.append([parse_key_values([f"{key}={v}"], "--grid") for v in values.split(",")])
    return axes


def choices(pairs: list[str]) -> dict[str, list]:
    """``["a=1,2"]`` → ``{"a": [1, 2]}``: the ``--grid`` values a random search draws from."""
    return {key: [d[key] for d in axis] for axis in _axes(pairs) for key in axis[0]}


def ranges(pairs: list[str]) -> dict[str, tuple]:
    """``["lr=0.001:0.1:log", "steps=1:10"]`` → ``{"lr": (0.001, 0.1, True), "steps": (1, 10,
    False)}``: intervals a random search draws from (integers when both ends are)."""
    out = {}
    for pair in pairs:
        key, sep, spec = pair.partition("=")
        parts = spec.split(":")
        if not sep or not key or len(parts) not in (2, 3) or parts[2:] not in ([], ["log"]):
            raise UsageError(f"--range {pair!r}: expected key=LOW:HIGH or key=LOW:HIGH:log")
        lo, hi = (parse_key_values([f"{key}={p}"], "--range")[key] for p in parts[:2])
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (lo, hi)):
            raise UsageError(f"--range {pair!r}: LOW and HIGH must be numbers")
        log = parts[2:] == ["log"]
        if not lo < hi or (log and lo <= 0):
            raise UsageError(
                f"--range {pair!r}: needs LOW < HIGH" + (" and LOW > 0 with log" if log else "")
            )
        out[key] = (lo, hi, log)
    return out


def point_text(point: dict) -> str:
    return " ".join(f"{k}={_short(v)}" for k, v in point.items())


def _short(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def check_params(protocol: str, fixed: dict, points: list[dict], flag: str = "--grid") -> None:
    """Every run's parameters built into the protocol's Config (names, types, ranges) before
    any data is read: a mistake is a UsageError naming its flag."""
    from protocols import get_protocol
    from protocols.base import build_config

    with usage_errors(f"--protocol {protocol}"):
        config = get_protocol(protocol).Config
    with usage_errors(f"--set {point_text(fixed)}"):
        build_config(config, fixed)
    for point in points:
        with usage_errors(f"{flag} {point_text(point)}"):
            build_config(config, {**fixed, **point})


def _curve(run_dir) -> list[dict]:
    return [{"round": r["round"], **r["metrics"]} for r in read_rows(run_dir) if r.get("metrics")]


def _settings(protocol: str, params: dict, rounds: int, args, out, **fields) -> RunSettings:
    return RunSettings(
        protocol=protocol,
        rounds=rounds,
        seed=args.seed,
        hosts=args.hosts,
        params=params,
        out=str(out),
        cpus_per_host=args.cpus_per_host,
        gpus_per_host=args.gpus_per_host,
        address=args.address,
        **fields,
    )


def _run(protocol: str, ds: RecDataset, params: dict, rounds: int, args, out=None) -> dict:
    from protocols.base import ConfigError, UnsuitableDataError

    start = time.perf_counter()
    settings = _settings(protocol, params, rounds, args, out or args.out)
    # a parameter that does not fit the data, or data without the signal the protocol needs,
    # is found only by the protocol once it sees the dataset: still the user's choice
    with usage_errors(
        f"--protocol {protocol} on --dataset {args.dataset}", (ConfigError, UnsuitableDataError)
    ):
        run_dir, summary = run(settings, ds)
    return {
        "params": params,
        "rounds": rounds,
        "metrics": summary["metrics"],
        "curve": _curve(run_dir),
        "run_dir": str(run_dir),
        "wall_seconds": round(time.perf_counter() - start, 1),
    }


def parse_args(argv: list[str] | None):
    ap = ArgumentParser(PROG, __doc__)
    ap.add_argument(
        "--protocol", required=True, help="the protocol to tune (as launch.py names it)"
    )
    ap.add_argument("--dataset", required=True, help="a dataset name or a folder of its files")
    ap.add_argument("--data-dir", default=None, help="default: ../shared/data beside the checkout")
    ap.add_argument("--rounds", type=int, required=True, help="rounds of each candidate")
    ap.add_argument("--grid", action="append", default=[], help="key=v1,v2,... (repeatable)")
    ap.add_argument("--set", action="append", default=[], help="key=value fixed for every run")
    ap.add_argument(
        "--range",
        action="append",
        default=[],
        help="key=LOW:HIGH[:log], drawn by --search random|optuna (repeatable)",
    )
    ap.add_argument("--val-fraction", type=float, default=0.1, help="held out of each user's rows")
    ap.add_argument("--seed", type=int, default=0, help="of the slice, the search and every run")
    ap.add_argument("--hosts", type=int, default=2, help="Ray hosts the participants share")
    ap.add_argument("--final-rounds", type=int, default=0, help="the winner on the real split")
    ap.add_argument("--name", required=True, help="writes benchmarks/out/NAME.json")
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    ap.add_argument("--out", default="runs", help="where the runs go")
    ap.add_argument(
        "--dry-run", action="store_true", help="check, load the data, list the candidates, stop"
    )
    ap.add_argument(
        "--engine",
        choices=["tune", "loop"],
        default="tune",
        help="tune: Ray Tune trials side by side; loop: one candidate after another (default: "
        "%(default)s)",
    )
    ap.add_argument(
        "--search",
        choices=["grid", "random", "optuna"],
        default="grid",
        help="grid: every --grid point; random, optuna: --samples draws (default: %(default)s)",
    )
    ap.add_argument("--samples", type=int, default=None, help="random/optuna draws (default 10)")
    ap.add_argument(
        "--scheduler",
        choices=["asha", "fifo"],
        default="asha",
        help="asha: stop weak candidates early; fifo: run all in full (default: %(default)s)",
    )
    ap.add_argument("--grace", type=int, default=None, help="ASHA's first rung, in rounds")
    ap.add_argument(
        "--reduction-factor", type=float, default=2.0, help="ASHA keeps 1/F at each rung"
    )
    ap.add_argument(
        "--cpus-per-host",
        type=float,
        default=None,
        help="CPUs each host actor asks for (tune: default 1; loop: the cluster's share)",
    )
    ap.add_argument("--gpus-per-host", type=float, default=0.0, help="GPU share of each host")
    ap.add_argument("--trial-cpus", type=float, default=1.0, help="CPUs of each trial's driver")
    ap.add_argument(
        "--max-concurrent", type=int, default=None, help="trials at once (default: what fits)"
    )
    ap.add_argument("--address", default=None, help="'auto' or HOST:PORT of a Ray cluster")
    ap.add_argument(
        "--dashboard", action="store_true", help="start Ray with its dashboard (local instance)"
    )
    ap.add_argument(
        "--resume", action="store_true", help="continue the interrupted experiment --name"
    )
    ap.add_argument(
        "--stop-after", type=int, default=None, help="end this session after N trials finish"
    )
    args = ap.parse_args(argv)
    if not args.grid and not args.range:
        ap.error("--grid: give at least one key=v1,v2,...")
    if args.search != "grid" and args.samples is None:
        args.samples = 10
    tune_only = [
        (args.search != "grid", f"--search {args.search}"),
        (args.resume, "--resume"),
        (args.stop_after is not None, "--stop-after"),
        (args.max_concurrent is not None, "--max-concurrent"),
    ]
    checks = [
        (0 < args.val_fraction < 1, f"--val-fraction {args.val_fraction}: must lie in (0, 1)"),
        (args.rounds >= 1, f"--rounds {args.rounds}: at least 1"),
        (args.final_rounds >= 0, f"--final-rounds {args.final_rounds}: 0 or more"),
        (args.hosts >= 1, f"--hosts {args.hosts}: at least 1"),
        (args.name and Path(args.name).name == args.name, f"--name {args.name!r}: a file name"),
        (not Path(args.out).is_file(), f"--out {args.out}: a file, not a folder"),
        (not args.range or args.search != "grid", "--range: needs --search random or optuna"),
        (args.samples is None or args.search != "grid", "--samples: needs --search random/optuna"),
        (args.samples is None or args.samples >= 1, f"--samples {args.samples}: at least 1"),
        (args.grace is None or args.grace >= 1, f"--grace {args.grace}: at least 1 round"),
        (args.reduction_factor > 1, f"--reduction-factor {args.reduction_factor}: above 1"),
        (args.cpus_per_host is None or args.cpus_per_host > 0, "--cpus-per-host: above 0"),
        (args.gpus_per_host >= 0, "--gpus-per-host: 0 or more"),
        (args.trial_cpus > 0, f"--trial-cpus {args.trial_cpus}: above 0"),
        (args.max_concurrent is None or args.max_concurrent >= 1, "--max-concurrent: at least 1"),
        (args.stop_after is None or args.stop_after >= 1, "--stop-after: at least 1"),
        *[
            (args.engine == "tune" or not on, f"{flag}: needs --engine tune")
            for on, flag in tune_only
        ],
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    if args.search == "optuna" and not _has_optuna():
        raise UsageError("--search optuna: optuna is not installed (pip install optuna)")
    if not args.dry_run:  # (a dry run writes nothing)
        claim_result(args.name, write=args.write)
    return args


def _has_optuna() -> bool:
    import importlib.util

    return importlib.util.find_spec("optuna") is not None


def summary_table(figures: dict) -> str:
    """The candidates (their grid values, the metric on the held-out slice, the wall time) with
    the chosen one marked, and the final run's metric on the test split. A candidate that ASHA
    stopped early shows the rounds it ran (a ``rounds`` column appears when one did)."""
    metric, candidates = figures["metric"], figures["candidates"]
    # the columns: the parameters that differ between candidates (all of them for one candidate)
    keys = list(candidates[0]["params"])
    keys = [k for k in keys if len({repr(c["params"].get(k)) for c in candidates}) > 1] or keys
    planned = figures.get("rounds")
    short = planned is not None and any(c["rounds"] != planned for c in candidates)
    rows = [
        [
            *(_short(c["params"].get(k)) for k in keys),
            fmt(c["metrics"].get(metric)) if c.get("status", "ok") != "error" else "error",
            *([str(c["rounds"])] if short else []),
            f"{c['wall_seconds']:.0f}",
            "chosen" if c["params"] == figures["chosen"] else "",
        ]
        for c in candidates
    ]
    lines = [
        f"{figures['protocol']} on {figures['dataset']}: {metric} on the validation slice "
        f"({figures['better']} is better)",
        text_table([*keys, metric, *(["rounds"] if short else []), "seconds", ""], rows),
    ]
    if "final" in figures:
        final = figures["final"]
        lines.append(
            f"chosen, {final['rounds']} rounds on the test split: "
            f"{metric} {fmt(final['metrics'].get(metric))}"
        )
    return "\n".join(lines)


def _main(argv: list[str] | None) -> None:
    args = parse_args(argv)
    fixed = parse_key_values(args.set, "--set")
    points = grid(args.grid) if args.search == "grid" else _corners(args)
    check_params(args.protocol, fixed, [p for p in points if p not in _range_ends(args)])
    check_params(args.protocol, fixed, _range_ends(args), "--range")
    check_dataset(args.dataset, args.data_dir)
    with usage_errors(f"--dataset {args.dataset}"):
        ds = load_dataset(args.dataset, args.data_dir)
    val_ds = validation_dataset(ds, args.val_fraction, args.seed)
    if args.engine == "tune":
        return _tune_engine(args, fixed, points, ds, val_ds)
    if args.dry_run:
        for i, point in enumerate(points, 1):
            print(f"candidate {i}/{len(points)}: {point_text(point)}, {args.rounds} rounds")
        final = f", then {args.final_rounds} rounds of the chosen one" if args.final_rounds else ""
        print(f"(dry run: {len(points)} candidates on {ds.name}{final}; nothing started)")
        return
    _start_ray(args)  # before the clock, as the Tune engine: both time their candidates alone
    started = time.perf_counter()
    candidates = []
    for i, point in enumerate(points, 1):
        print(
            f"candidate {i}/{len(points)}: {point_text(point)}, {args.rounds} rounds",
            file=sys.stderr,
            flush=True,
        )
        candidates.append(_run(args.protocol, val_ds, {**fixed, **point}, args.rounds, args))
    metric, better = main_metric(candidates[0]["metrics"])
    if metric is None:
        raise UsageError(f"--protocol {args.protocol}: no ranking or rating metric to tune on")
    sign = 1 if better == "higher" else -1
    best = max(candidates, key=lambda c: sign * c["metrics"][metric])
    figures = {
        "protocol": args.protocol,
        "dataset": args.dataset,
        "engine": "loop",
        "validation": _validation_record(args, val_ds),
        "metric": metric,
        "better": better,
        "candidates": candidates,
        "chosen": best["params"],
        "search_seconds": round(time.perf_counter() - started, 1),
    }
    _finish(args, ds, figures, best["params"], args.out)


def _validation_record(args, val_ds: RecDataset) -> dict:
    return {
        "fraction": args.val_fraction,
        "seed": args.seed,
        "train_rows": len(val_ds.train),
        "held_out_rows": len(val_ds.test),
        "held_out_digest": data_digest(val_ds.test),
    }


def _finish(args, ds: RecDataset, figures: dict, chosen: dict, out) -> None:
    """The chosen parameters' run on the real split (``--final-rounds``), the JSON, the table."""
    if args.final_rounds:
        print(
            f"chosen: {point_text(chosen)}, {args.final_rounds} rounds on the test split",
            file=sys.stderr,
            flush=True,
        )
        figures["final"] = _run(args.protocol, ds, chosen, args.final_rounds, args, out)
    path = write_result(args.name, figures, echo=False, write=args.write)
    print(summary_table(figures))
    n = len(figures["candidates"])
    print(f"{n} candidates in {figures['search_seconds']:.0f} s ({figures['engine']} engine)")
    print(f"wrote {shown_path(path)}")


# --- the Ray Tune engine ----------------------------------------------------------------------
def _corners(args) -> list[dict]:
    """The points a random search is checked with before it starts: each ``--grid`` value
    beside the others' first, then the ``--range`` lows and highs (:func:`_range_ends`)."""
    picks = choices(args.grid)
    first = {k: vs[0] for k, vs in picks.items()}
    points = [{**first, k: v} for k, vs in picks.items() for v in vs] or [first]
    return points + [p for p in _range_ends(args) if p not in points]


def _range_ends(args) -> list[dict]:
    """The ``--range`` lows together, then the highs (beside the first ``--grid`` values)."""
    spans = ranges(args.range)
    if not spans:
        return []
    first = {k: vs[0] for k, vs in choices(args.grid).items()}
    return [{**first, **{k: span[end] for k, span in spans.items()}} for end in (0, 1)]


def _param_space(args) -> dict:
    from ray import tune as ray_tune

    if args.search == "grid":
        return {k: ray_tune.grid_search(vs) for k, vs in choices(args.grid).items()}
    space = {k: ray_tune.choice(vs) for k, vs in choices(args.grid).items()}
    for key, (lo, hi, log) in ranges(args.range).items():
        if isinstance(lo, int) and isinstance(hi, int):
            space[key] = ray_tune.lograndint(lo, hi + 1) if log else ray_tune.randint(lo, hi + 1)
        else:
            space[key] = ray_tune.loguniform(lo, hi) if log else ray_tune.uniform(lo, hi)
    return space


def _search_alg(args, metric: str, mode: str):
    if args.search == "optuna":  # (parse_args checked that optuna is installed)
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch(metric=metric, mode=mode, seed=args.seed)
        return (
            ConcurrencyLimiter(searcher, args.max_concurrent) if args.max_concurrent else searcher
        )
    from ray.tune.search import BasicVariantGenerator

    # (Tune ignores TuneConfig's max_concurrent_trials beside a BasicVariantGenerator)
    return BasicVariantGenerator(random_state=args.seed, max_concurrent=args.max_concurrent or 0)


def _plan(args, fixed: dict, points: list[dict], val_ds: RecDataset) -> dict:
    """The runs as they will start, checked before Ray does: each point's protocol built on the
    validation data (a parameter that does not fit it is the user's mistake), the host actors a
    trial starts (the most any point needs), the main metric and the evaluation interval."""
    from engine.runner import prepare
    from protocols.base import ConfigError, UnsuitableDataError

    n_hosts, first = 0, None
    for point in points:
        params = {**fixed, **point}
        settings = _settings(args.protocol, params, args.rounds, args, args.out, progress=False)
        with usage_errors(
            f"--protocol {args.protocol} on --dataset {args.dataset}",
            (ConfigError, UnsuitableDataError, ValueError),
        ):
            plan = prepare(settings, val_ds)
        n_hosts = max(n_hosts, plan.n_hosts)
        first = first or plan
    main = first.protocol.main_metric()
    mode = "max" if main.better == "higher" else "min"
    eval_every = getattr(first.config, "eval_every", 0)
    grace = min(args.rounds, args.grace or max(1, math.ceil(args.rounds / 4)))
    return {
        "n_hosts": n_hosts,
        "metric": main.name,
        "better": main.better,
        "mode": mode,
        "eval_every": eval_every,
        "grace": grace,
    }


def host_cpus(args, n_hosts: int, cluster_cpus: float) -> float:
    """The CPUs of each host actor of a trial: ``--cpus-per-host``; by default 1, or the share
    of the cluster's CPUs beside the trial's driver when 1 each would not fit (as a run's
    hosts share a small machine), in Ray's 1/10000 of a CPU."""
    if args.cpus_per_host:
        return args.cpus_per_host
    share = (cluster_cpus - args.trial_cpus) / n_hosts
    return min(1.0, max(0.01, math.floor(share * 1e4) / 1e4))


def trial_resources(args, n_hosts: int, cpus: float):
    """The trial's placement group: its driver (``--trial-cpus``) in the first bundle, one
    bundle per host actor (``cpus`` each: :func:`host_cpus`; ``--gpus-per-host``)."""
    from ray.tune import PlacementGroupFactory

    host = {"CPU": cpus}
    if args.gpus_per_host > 0:
        host["GPU"] = args.gpus_per_host
    return PlacementGroupFactory([{"CPU": args.trial_cpus}] + [dict(host)] * n_hosts, "PACK")


def _trial(config: dict, *, dataset: RecDataset, job: dict) -> None:
    """One candidate as a Ray Tune trial: a privrec run on ``dataset`` (the validation data:
    the held-out slice of the training rows is its test part) that reports its metrics to Tune
    at each evaluation, with the fingerprint of the rows it was evaluated on. Its host actors
    take the trial's own bundles (cluster.runtime: a Tune trial's placement group)."""
    from ray import tune as ray_tune

    from engine.figures import is_number

    trial_id = ray_tune.get_context().get_trial_id()
    received = {
        "eval_digest": data_digest(dataset.test),
        "eval_rows": len(dataset.test),
        "train_rows": len(dataset.train),
    }

    def report(rounds: int, metrics: dict) -> None:
        numbers = {k: float(v) for k, v in metrics.items() if is_number(v)}
        ray_tune.report({"round": rounds, **numbers, **received})

    def on_round(row: dict) -> None:
        # the last round's metrics once the run has written its summary (below): at --rounds
        # ASHA stops the trial, whose run would end inside this call
        if row["metrics"] and row["round"] + 1 < job["rounds"]:
            report(row["round"] + 1, row["metrics"])

    settings = RunSettings(
        protocol=job["protocol"],
        rounds=job["rounds"],
        seed=job["seed"],
        hosts=job["hosts"],
        params={**job["fixed"], **config},
        out=str(Path(job["trials_dir"]) / trial_id),
        cpus_per_host=job["cpus_per_host"],
        gpus_per_host=job["gpus_per_host"],
        progress=False,
    )
    _, summary = run(settings, dataset, on_round=on_round)
    report(job["rounds"], summary["metrics"])


def trial_dirname(trial) -> str:
    """Tune's folder of a trial: its id (Tune's default name holds the parameters)."""
    return trial.trial_id


# what this session of the experiment may still do (--stop-after), read by _Progress: a module
# value, because Tune restores its callbacks from the interrupted session's pickle
_SESSION = {"stop_after": None, "finished": 0, "this_session": 0, "total": 0}


def _progress_callback():
    """A Tune callback: one line on stderr per finished trial; with --stop-after, the end of
    the session after that many (Tune's own interruption, as Ctrl+C: resumable). Its class is
    made when first used (Ray Tune imported only then) and found by name when Tune unpickles
    the callbacks of an interrupted session (the module's ``__getattr__``)."""
    cls = globals().get("_ProgressCallback")
    if cls is None:
        from ray.tune import Callback

        class _ProgressCallback(Callback):
            def on_trial_complete(self, iteration, trials, trial, **info):
                _trial_done(trial, "done")

            def on_trial_error(self, iteration, trials, trial, **info):
                _trial_done(trial, "failed")

        _ProgressCallback.__qualname__ = "_ProgressCallback"
        cls = globals()["_ProgressCallback"] = _ProgressCallback
    return cls()


def __getattr__(name: str):
    if name == "_ProgressCallback":
        return type(_progress_callback())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _trial_done(trial, how: str) -> None:
    _SESSION["finished"] += 1
    _SESSION["this_session"] += 1
    result = trial.last_result or {}
    metric, total = _SESSION.get("metric"), _SESSION["total"]
    where = f"round {result.get('round', 0)}"
    if how == "done" and result.get("round", 0) < _SESSION.get("rounds", 0):
        where += " (stopped early by ASHA)"
    figure = f"{metric} {fmt(result.get(metric))} at {where}" if how == "done" else "failed"
    params = {k: v for k, v in (trial.config or {}).items()}
    print(
        f"trial {trial.trial_id} ({_SESSION['finished']} of {total} finished): "
        f"{point_text(params)}: {figure}",
        file=sys.stderr,
        flush=True,
    )
    limit = _SESSION["stop_after"]
    if limit is not None and _SESSION["this_session"] == limit and _SESSION["finished"] < total:
        _interrupt()


def _interrupt() -> None:
    """End the Tune session as Ctrl+C does (Tune saves the experiment's state, then stops):
    Tune listens to SIGUSR1 as to SIGINT, where it installed its handler."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(
        signal.SIGUSR1
    ) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        print("stopping here (--stop-after): --resume continues", file=sys.stderr, flush=True)
        _SESSION["stopped"] = True
        signal.raise_signal(signal.SIGUSR1)


# Tune reuses a trial's process for the next trial once the previous trial's thread has ended
# (FunctionTrainable.reset_config); it waits TUNE_FUNCTION_THREAD_TIMEOUT_S (2 s by default) for
# that and fails the next trial if it waits in vain. A trial that ASHA stops still closes its
# deployment, which on a loaded 2-core machine can take longer. Set before Ray starts: the trial
# processes inherit it.
THREAD_TIMEOUT_S = "60"


def _start_ray(args):
    """Start or join Ray (``--address``, ``--dashboard``): its :class:`ClusterInfo`."""
    from cluster.runtime import ClusterError, start_or_join

    os.environ.setdefault("TUNE_FUNCTION_THREAD_TIMEOUT_S", THREAD_TIMEOUT_S)
    with usage_errors("--address", (ClusterError,)):
        return start_or_join(args.address, dashboard=args.dashboard or None)


def _cpus(n: float) -> str:
    return f"{n:g} CPU" + ("" if n == 1 else "s")


def _tune_engine(args, fixed: dict, points: list[dict], ds: RecDataset, val_ds) -> int | None:
    plan = _plan(args, fixed, points, val_ds)
    if args.scheduler == "asha" and not plan["eval_every"]:
        # ASHA judges a candidate at its evaluations: a protocol that evaluates only at the end
        # is evaluated every ASHA first rung instead
        fixed = {**fixed, "eval_every": plan["grace"]}
    root = Path(args.out).resolve() / args.name
    n_trials = len(points) if args.search == "grid" else args.samples
    if args.dry_run:
        for i, point in enumerate(points if args.search == "grid" else [], 1):
            print(f"candidate {i}/{len(points)}: {point_text(point)}, {args.rounds} rounds")
        sched = f"ASHA from round {plan['grace']}" if args.scheduler == "asha" else "no early stop"
        final = f", then {args.final_rounds} rounds of the chosen one" if args.final_rounds else ""
        each = _cpus(args.cpus_per_host or 1) + ("" if args.cpus_per_host else " (or what fits)")
        print(
            f"(dry run: {n_trials} {args.search} trials on {ds.name}, {sched}; a trial: its "
            f"driver ({_cpus(args.trial_cpus)}) and {plan['n_hosts']} host actors of {each}; "
            f"in {root}{final}; nothing started)"
        )
        return
    _check_experiment(args, root)
    from ray import tune as ray_tune

    from cluster.runtime import drain_idle

    cluster = _start_ray(args)
    cpus = host_cpus(args, plan["n_hosts"], cluster.cpus)
    per_trial = args.trial_cpus + plan["n_hosts"] * cpus
    gpus = plan["n_hosts"] * args.gpus_per_host
    if per_trial > cluster.cpus + 1e-9 or gpus > cluster.gpus + 1e-9:
        # Tune would wait for room that never comes
        raise UsageError(
            f"a trial needs {per_trial:g} CPUs{f' and {gpus:g} GPUs' if gpus else ''} "
            f"({args.trial_cpus:g} for its driver, {plan['n_hosts']} host actors of "
            f"{cpus:g}), the Ray cluster has {cluster.cpus:g} CPUs and "
            f"{cluster.gpus:g} GPUs: lower --cpus-per-host, --trial-cpus or --hosts"
        )
    drain_idle()  # idle host actors of earlier runs in this process: the trials need the room
    # Tune's own tables off (its classic output, verbose=0: nothing); ours are on stderr. Its
    # analysis warns of every trial that has not reported yet (those an interruption left)
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    # and says how to resume in Python: ours is the line on stderr (the same command, --resume)
    logging.getLogger("ray.tune.tune").setLevel(logging.ERROR)
    job = {
        "protocol": args.protocol,
        "rounds": args.rounds,
        "seed": args.seed,
        "hosts": args.hosts,
        "fixed": fixed,
        "trials_dir": str(root / "trials"),
        "cpus_per_host": cpus,
        "gpus_per_host": args.gpus_per_host,
    }
    trainable = ray_tune.with_resources(
        ray_tune.with_parameters(_trial, dataset=val_ds, job=job),
        trial_resources(args, plan["n_hosts"], cpus),
    )
    _SESSION.update(
        stop_after=args.stop_after,
        finished=_finished_before(root) if args.resume else 0,
        this_session=0,
        stopped=False,
        total=n_trials,
        metric=plan["metric"],
        rounds=args.rounds,
    )
    started = time.perf_counter()
    if args.resume:
        print(f"resuming {shown_path(root / 'tune')}", file=sys.stderr, flush=True)
        tuner = ray_tune.Tuner.restore(str(root / "tune"), trainable, resume_errored=True)
    else:
        tuner = _new_tuner(args, plan, trainable, root)
    results = _fit(tuner)
    seconds = round(time.perf_counter() - started, 1)
    candidates = _candidates(results, fixed, root)
    done = [c for c in candidates if c["status"] in ("ok", "error")]
    if len(done) < n_trials:  # --stop-after, or Ctrl+C: Tune saved where the experiment stands
        print(
            f"{len(done)} of {n_trials} trials finished; the same command with --resume runs "
            "the rest",
            file=sys.stderr,
        )
        return 0 if _SESSION["stopped"] else 130
    _check_validation(candidates, val_ds, ds)
    ok = [c for c in candidates if c["status"] == "ok" and plan["metric"] in c["metrics"]]
    if not ok:
        errors = [c.get("error") for c in candidates if c.get("error")]
        raise UsageError(f"--protocol {args.protocol}: no trial finished ({errors[:1]})")
    sign = 1 if plan["better"] == "higher" else -1
    full = [c for c in ok if c["rounds"] == args.rounds] or ok  # ASHA's early stops lose
    best = max(full, key=lambda c: sign * c["metrics"][plan["metric"]])
    figures = {
        "protocol": args.protocol,
        "dataset": args.dataset,
        "engine": "tune",
        "search": args.search,
        "scheduler": args.scheduler,
        "asha": {"grace": plan["grace"], "reduction_factor": args.reduction_factor}
        if args.scheduler == "asha"
        else None,
        "eval_every": fixed.get("eval_every", plan["eval_every"]),
        "trial_resources": trial_resources(args, plan["n_hosts"], cpus).bundles,
        "experiment": str(root),
        "rounds": args.rounds,
        "validation": _validation_record(args, val_ds),
        "metric": plan["metric"],
        "better": plan["better"],
        "candidates": candidates,
        "chosen": best["params"],
        "search_seconds": seconds,
    }
    _finish(args, ds, figures, best["params"], root / "final")


def _finished_before(root: Path) -> int:
    """The trials an interrupted experiment finished (ended or failed) before this session."""
    from ray.tune import ExperimentAnalysis
    from ray.tune.experiment import Trial

    trials = ExperimentAnalysis(str(root / "tune")).trials
    return sum(t.status in (Trial.TERMINATED, Trial.ERROR) for t in trials)


def _fit(tuner):
    """``tuner.fit()``, this process's SIGINT and SIGUSR1 handlers restored after it (Tune
    installs its own, which would swallow the first Ctrl+C of the final run)."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    try:
        return tuner.fit()
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in saved.items():
                if handler is not None:
                    signal.signal(sig, handler)


def _new_tuner(args, plan: dict, trainable, root: Path):
    from ray import tune as ray_tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    scheduler = (
        ASHAScheduler(
            time_attr="round",
            max_t=args.rounds,
            grace_period=plan["grace"],
            reduction_factor=args.reduction_factor,
        )
        if args.scheduler == "asha"
        else FIFOScheduler()
    )
    root.mkdir(parents=True, exist_ok=True)
    saved = {k: getattr(args, k) for k in EXPERIMENT_FLAGS}
    (root / "command.json").write_text(json.dumps(saved, indent=2) + "\n")
    return ray_tune.Tuner(
        trainable,
        param_space=_param_space(args),
        tune_config=ray_tune.TuneConfig(
            metric=plan["metric"],
            mode=plan["mode"],
            scheduler=scheduler,
            search_alg=_search_alg(args, plan["metric"], plan["mode"]),
            num_samples=1 if args.search == "grid" else args.samples,
            reuse_actors=True,  # a trial's process and its host actors serve the next trial
            trial_dirname_creator=trial_dirname,
        ),
        run_config=ray_tune.RunConfig(
            name="tune",
            storage_path=str(root),
            verbose=0,
            callbacks=[_progress_callback()],
        ),
    )


def _check_experiment(args, root: Path) -> None:
    """A new experiment's folder is free; a resumed one exists and was made by this command
    (the flags that make an experiment unchanged)."""
    state = root / "tune"
    if not args.resume:
        if state.exists():
            raise UsageError(
                f"--name {args.name}: {shown_path(root)} holds an experiment already: --resume "
                "continues it, another --name starts a new one"
            )
        return
    from ray.tune import Tuner

    saved_path = root / "command.json"
    if not Tuner.can_restore(str(state)) or not saved_path.is_file():
        raise UsageError(f"--resume: no experiment to resume in {shown_path(root)}")
    saved = json.loads(saved_path.read_text())
    for k in EXPERIMENT_FLAGS:
        if saved.get(k) != getattr(args, k):
            raise UsageError(
                f"--resume: --{k.replace('_', '-')} {getattr(args, k)} differs from the "
                f"interrupted experiment's {saved.get(k)} ({shown_path(saved_path)})"
            )


def _candidates(results, fixed: dict, root: Path) -> list[dict]:
    """Every trial of the experiment (those of earlier sessions too) as a candidate record:
    ``status`` ok (ran to its end, or to where ASHA stopped it), error, or unfinished (pending,
    or running when the session ended: --resume runs it); its metrics those of its run's last
    evaluation (its metrics.jsonl), the rounds it ran, what it reported of its data."""
    from ray.tune import ExperimentAnalysis
    from ray.tune.experiment import Trial

    trials = results._experiment_analysis.trials  # in the order of the results
    # the state as Tune saved it, which --resume starts from: a trial that was running when the
    # session ended is unfinished there (in memory Tune marks it terminated when it stops it)
    saved = {t.trial_id: t.status for t in ExperimentAnalysis(str(root / "tune")).trials}
    out = []
    for trial, r in zip(trials, results):
        last = trial.last_result or {}
        runs = sorted((root / "trials" / trial.trial_id).glob("*"))
        run_dir = runs[-1] if runs else None
        curve = _curve(run_dir) if run_dir and (run_dir / "metrics.jsonl").exists() else []
        if trial.status == Trial.ERROR:
            status = "error"
        elif saved.get(trial.trial_id) == Trial.TERMINATED and "round" in last:
            status = "ok"
        else:
            status = "unfinished"
        metrics = {k: v for k, v in curve[-1].items() if k != "round"} if curve else {}
        out.append(
            {
                "params": {**fixed, **(trial.config or {})},
                "trial": trial.trial_id,
                "status": status,
                "rounds": int(last.get("round", 0)),
                "metrics": metrics,
                "data": {k: last.get(k) for k in _DATA_KEYS},
                "curve": curve,
                "run_dir": str(run_dir) if run_dir else None,
                "wall_seconds": round(float(last.get("time_total_s", 0.0)), 1),
                **({"error": _one_line(r.error)} if r.error is not None else {}),
            }
        )
    out.sort(key=lambda c: c["trial"])
    return out


# what a trial reports of the rows it was given (_trial)
_DATA_KEYS = ("eval_digest", "eval_rows", "train_rows")


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _check_validation(candidates: list[dict], val_ds: RecDataset, ds: RecDataset) -> None:
    """Every trial was evaluated on the validation slice (what it reported of the rows it was
    evaluated on), never on the test split."""
    want, test = data_digest(val_ds.test), data_digest(ds.test)
    for c in candidates:
        got = c["data"].get("eval_digest")
        if got is not None and got != want:
            where = "the test split" if got == test else "rows other than the validation slice"
            raise RuntimeError(f"trial {c['trial']} was evaluated on {where}")


def main(argv: list[str] | None = None) -> int:
    return run_main(PROG, _main, argv)


if __name__ == "__main__":
    sys.exit(main())
