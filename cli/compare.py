"""``launch.py compare ...``: several protocols on the same data, split and Ray cluster, with
their central baselines; its parser, the plan of its entries, and the comparison."""

from __future__ import annotations

import argparse
import dataclasses

from cli.adversary_args import add_adversary_arguments, adversaries
from cli.arguments import add_condition_arguments, add_run_arguments, add_shared_arguments
from cli.config_file import condition_flags, read_config
from cli.parser import Parser, argv_or_sys, prog
from cli.shared import check_shared, check_tensorboard, load, run_conditions, settings
from protocols import DEFAULT_COMPARISON, get_protocol, protocol_names

COMPARE_DOC = """Run several protocols on the same dataset, split and Ray cluster and write
runs/<time>-compare/: comparison.md and comparison.json (per protocol: main metric and its ratio
to the matching central baseline, bytes per round by kind, total bytes, rigorous and paper ε,
attack leakage, wall and simulated seconds), comparison plots and one run report per protocol.

    python launch.py compare --dataset ml-100k --protocols fedmf,fedlightgcn,dgrec,verfedgnn,dipsgnn,central:lightgcn
    python launch.py compare --quick                      # what `python launch.py` runs
    python launch.py compare --config cmp.toml

central:MODEL is --protocol central --model MODEL. The matching central baselines are added to the
list (--no-baselines: not). Per-protocol rounds and parameters come from the [compare] table of
--config (its [dataset] and [conditions] tables apply to every protocol):

    [compare]
    protocols = ["fedmf", "dgrec", "central:lightgcn"]
    rounds = 20                     # every protocol (--rounds overrides everything)
    [compare.dgrec]
    rounds = 40
    public_ratio = 0.2
    [compare."central:lightgcn"]
    dim = 32

A protocol that cannot run on the data is listed with its reason; the others go on.
"""

COMPARE_KEYS = ("protocols", "rounds", "baselines", "quick")  # [compare]'s own keys


def build_compare_parser() -> argparse.ArgumentParser:
    """The parser of ``launch.py compare``."""
    p = Parser(
        prog=f"{prog()} compare",
        description=COMPARE_DOC.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
        epilog=COMPARE_DOC.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--protocols",
        default=None,
        metavar="P1,P2,...",
        help=f"comma-separated protocols ({', '.join(protocol_names())}, an installed package's, "
        "or package.module:Class), central:MODEL for a central baseline (default: the [compare] "
        f"table's, else {','.join(DEFAULT_COMPARISON)})",
    )
    p.add_argument(
        "--no-baselines",
        dest="baselines",
        action="store_false",
        default=None,
        help="do not add the matching central baselines to the list",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        default=None,
        help="small rounds and parameters per protocol (the main job's; see engine/compare.py QUICK)",
    )
    add_shared_arguments(p)
    add_run_arguments(p, rounds_default=None)
    add_condition_arguments(p)
    add_adversary_arguments(p)
    return p


def parse_compare(argv: list[str] | None = None):
    """``compare``'s command line (without the word ``compare``): ``(parser, args, entries,
    dataset options, run condition values)``, the entries planned by engine.compare.plan."""
    from engine.compare import CompareError, plan  # imports torch
    from protocols.base import ConfigError, build_config

    parser = build_compare_parser()
    args = parser.parse_args(argv_or_sys(argv))
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    check_shared(parser, args)
    check_tensorboard(parser, args)
    _, dataset_opts, conditions, table = read_config(parser, args, compare=True)
    per_label = {k: dict(v) for k, v in table.items() if isinstance(v, dict)}
    options = {k: v for k, v in table.items() if not isinstance(v, dict)}
    bad = sorted(set(options) - set(COMPARE_KEYS))
    if bad:
        parser.error(
            f"--config {args.config}: unknown [compare] key(s) {bad} (known: {list(COMPARE_KEYS)} "
            "and a [compare.<protocol>] table per protocol)"
        )
    labels = args.protocols if args.protocols is not None else options.get("protocols")
    if labels is None:
        labels = list(DEFAULT_COMPARISON)
    elif isinstance(labels, str):
        labels = [x for x in labels.split(",") if x.strip()]
    if not labels or not all(isinstance(x, str) for x in labels):
        parser.error(f"--protocols: expected a comma-separated list of protocols, got {labels!r}")
    baselines = args.baselines if args.baselines is not None else options.get("baselines", True)
    quick = args.quick if args.quick is not None else options.get("quick", False)
    args.baselines, args.quick = bool(baselines), bool(quick)  # resolved: flag, table, default
    default_rounds = options.get("rounds", 20)
    try:
        entries = plan(
            labels,
            rounds=args.rounds,
            per_label=per_label,
            baselines=bool(baselines),
            quick=bool(quick),
            default_rounds=default_rounds,
        )
    except CompareError as e:
        parser.error(f"--protocols: {e}")
    for e in entries:
        try:
            build_config(get_protocol(e.protocol).Config, e.params)  # fail fast, before Ray
        except ConfigError as err:
            parser.error(f"{e.label}: protocol parameter {err}")
    condition_flags(parser, args, conditions)
    args.adversaries = adversaries(parser, args, getattr(args, "adversaries_table", {}))
    return parser, args, entries, dataset_opts, conditions


def compare(
    parser: argparse.ArgumentParser, args, entries, dataset_opts: dict, values: dict
) -> int:
    """The comparison of a parsed command line (or, with --dry-run, each entry's plan): 0 when
    at least one protocol ran, 1 when none did."""
    from cluster.runtime import ClusterError  # imports Ray
    from engine.compare import compare as compare_protocols
    from engine.compare import render_text

    if args.quick and "snapshot_every" not in values:
        # the main job is a short demonstration: no per-round host snapshots (they exist to
        # recover a dead host's nodes and cost a pickling of every node each round)
        values["snapshot_every"] = 0
    conditions = run_conditions(parser, values)
    dataset = load(parser, args, dataset_opts)
    if args.dry_run:
        return dry_run(entries, dataset, settings(args, conditions))
    try:
        cmp_dir, comparison = compare_protocols(
            entries, dataset, settings(args, conditions), dataset_info=dataset.meta
        )
    except KeyboardInterrupt as e:  # outside a protocol's run: starting Ray, writing the report
        if str(e):
            raise
        raise KeyboardInterrupt(
            "comparison interrupted while starting Ray or writing comparison.md (no protocol "
            f"was running); the finished runs' reports are under {args.out}"
        ) from None
    except ClusterError as e:  # --address: nobody answers there, or the cluster wants a token
        parser.error(f"--address: {e}")
    print(render_text(comparison))
    print(f"comparison report: {cmp_dir / 'comparison.md'}")
    return 0 if any(r["status"] == "ok" for r in comparison["protocols"]) else 1


def dry_run(entries, dataset, base) -> int:
    """``compare --dry-run``: each entry's plan, or the one line why it could not run."""
    from engine.compare import one_line
    from engine.runner import prepare  # imports Ray

    ok = 0
    for e in entries:
        run_settings = dataclasses.replace(
            base, protocol=e.protocol, rounds=e.rounds, params=dict(e.params)
        )
        try:
            print(f"{e.label}: {prepare(run_settings, dataset).describe(run_settings)}")
            ok += 1
        except Exception as exc:  # noqa: BLE001 — listed, as the comparison would list it
            print(f"{e.label}: would not run: {one_line(exc)}")
    print(f"(dry run: {ok} of {len(entries)} would run; nothing started)")
    return 0 if ok else 1
