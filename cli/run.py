"""One run: ``launch.py [run] --protocol NAME ...``: its parser (with the protocol's parameters in
``--protocol NAME --help``), the checks of its command line, and the run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adversaries import AdversaryError
from cli.adversary_args import add_adversary_arguments, adversaries
from cli.arguments import add_condition_arguments, add_run_arguments, add_shared_arguments
from cli.config_file import condition_flags, read_config
from cli.parser import Parser, argv_or_sys, did_you_mean, options, prog
from cli.protocol_flags import add_protocol_help, protocol_flags
from cli.resume import refuse_fixed_flags, resume_flags
from cli.shared import (
    check_shared,
    check_tensorboard,
    load,
    placement_message,
    run_conditions,
    settings,
    show,
)
from nodes.conditions import ConditionsError
from protocols import DEFAULT_PROTOCOL, get_protocol, protocol_names

USAGE = """privrec's command line: compare protocols, or run one; start or join Ray; write the report.

    python launch.py                                  # the main job: compare --quick (below)
    python launch.py compare --dataset ml-100k --protocols fedmf,dgrec,verfedgnn,central:lightgcn
    python launch.py --protocol dmf --dataset ml-100k --rounds 50      # one protocol (or: run ...)
    python launch.py --address auto --placement packed --hosts 8 --gpus-per-host 0.25 --config exp.toml

With no arguments it compares fedmf, fedlightgcn, dgrec, verfedgnn and dipsgnn with their central
baselines on the embedded synthetic data, with small rounds (about two minutes on two cores), and
writes runs/<time>-compare/ (comparison.md, comparison.json, plots, one run report per protocol).
``compare --help`` lists the comparison's flags; ``run`` (or no subcommand) runs one protocol.

A ``--config`` TOML file sets protocol parameters at its top level (or under ``[protocol]``),
dataset options under ``[dataset]`` (split, min_user_interactions, min_item_interactions, implicit,
test_fraction, and the synthetic generator's n_users, n_items, ...) and run conditions under
``[conditions]`` (dropout, trace, min_participants, deadline, user_speed, speed_spread, user_link,
snapshot_every, kill_hosts, secure_rng; see nodes/conditions.py), SecAgg+ parameters under
``[secure_aggregation]`` (neighbours, threshold, bound, min_users, stage_dropout: the table turns
it on; see nodes/secure_sum.py); a ``[compare]`` table is read by ``compare`` only. The condition flags override the table:
    python launch.py --protocol fedlightgcn --dropout 0.3 --deadline 20 --user-link mobile
    python launch.py --rounds 400 --hosts 2 --kill-host 5:0      # SIGKILL host 0 at round 5

Any protocol parameter can also be given as a flag, which overrides the file: ``--backbone gat``,
``--public-ratio 0.2``, ``--parties 4``; a boolean alone is true (``--use-bipartite``) and
``--no-NAME`` makes it false (``--no-projection``).
    python launch.py --protocol verfedgnn --dataset ml-100k --gnn gat --participation 0.5
"""

DEFAULT_ROUNDS = 20


def build_parser(protocol_help: str | None = None) -> argparse.ArgumentParser:
    """The parser of one run; with ``protocol_help``, its --help also lists that protocol's
    parameters (they are parsed by :func:`cli.protocol_flags.protocol_flags`)."""
    p = Parser(
        prog=prog(),
        usage="%(prog)s [compare ... | run] [options]  (no arguments: the main job, compare --quick)",
        description=USAGE.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # unknown flags are protocol parameters, never abbreviations
        epilog=USAGE.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        type=protocol_name,
        metavar="NAME",
        help=f"which protocol to run: {', '.join(protocol_names())}, one an installed package "
        "registers, or package.module:Class (default: %(default)s)",
    )
    p._optionals.title = "run options"
    add_shared_arguments(p)
    add_run_arguments(p, rounds_default=DEFAULT_ROUNDS)
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="write RUN_DIR/checkpoint.pkl every N rounds and after the last (default: never)",
    )
    add_condition_arguments(p)
    add_adversary_arguments(p)
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its checkpoint to its planned rounds (or --rounds "
        "in all), same protocol, data and placement (only --rounds, --address, --checkpoint-every, "
        "--no-progress, --tensorboard apply, and the protocol flags marked [may change on "
        "--resume] in `--protocol NAME --help`: --eval-every and the step sizes read afresh every "
        "round, not an optimizer's such as --lr-item)",
    )
    if protocol_help is not None:
        add_protocol_help(p, protocol_help, default=protocol_help == DEFAULT_PROTOCOL)
    return p


def protocol_name(name: str) -> str:
    """``--protocol``'s value: a protocol that resolves (registered, or package.module:Class)."""
    try:
        get_protocol(name)
    except ValueError as e:
        hint = "" if ":" in name else did_you_mean(name, protocol_names())
        raise argparse.ArgumentTypeError(f"{e}{hint}") from None
    return name


def is_protocol(name: str | None) -> bool:
    try:
        return name is not None and bool(protocol_name(name))
    except argparse.ArgumentTypeError:
        return False


def protocol_named(argv: list[str]) -> str | None:
    """The value of ``--protocol`` in ``argv``, if given."""
    for i, token in enumerate(argv):
        if token == "--protocol" and i + 1 < len(argv):
            return argv[i + 1]
        if token.startswith("--protocol="):
            return token.partition("=")[2]
    return None


def parse(argv: list[str] | None = None):
    """One run's command line (a leading ``run`` is allowed): ``(parser, args, protocol
    parameters, dataset options, run condition values)``."""
    argv = argv_or_sys(argv)
    if argv[:1] == ["run"]:
        argv = argv[1:]
    if argv[:1] and argv[0] in protocol_names():  # `privrec dgrec ...`: `--protocol dgrec ...`
        argv = ["--protocol", argv[0], *argv[1:]]
    wants_help = any(t in ("-h", "--help") for t in argv)
    named = protocol_named(argv)
    parser = build_parser(
        (named if is_protocol(named) else DEFAULT_PROTOCOL) if wants_help else None
    )
    args, extras = parser.parse_known_args(argv)
    if args.resume is not None:
        refuse_fixed_flags(parser, argv)
    elif args.rounds is None:
        args.rounds = DEFAULT_ROUNDS
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.checkpoint_every < 0:
        parser.error(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    check_tensorboard(parser, args)
    if args.resume is not None:
        if args.config is not None:
            parser.error(
                "--resume takes the protocol, its parameters and the data from the checkpoint"
            )
        if not Path(args.resume).is_dir():
            parser.error(f"--resume {args.resume!r} is not a directory")
        return parser, args, resume_flags(parser, args.resume, extras), {}, {}
    check_shared(parser, args)
    params, dataset_opts, conditions, _ = read_config(parser, args, compare=False)
    if extras:
        try:
            config_cls = get_protocol(args.protocol).Config
            params.update(protocol_flags(extras, config_cls, options(parser)))
        except ValueError as e:
            parser.error(f"--protocol {args.protocol}: {e}")
    condition_flags(parser, args, conditions)
    args.adversaries = adversaries(parser, args, getattr(args, "adversaries_table", {}))
    return parser, args, params, dataset_opts, conditions


def run(parser: argparse.ArgumentParser, args, params: dict, dataset_opts: dict, values: dict):
    """The run of a parsed command line (or, with --dry-run, its plan); a mistake found on the
    way is one line naming its flag. Returns the exit status."""
    from cluster.runtime import ClusterError  # imports Ray
    from engine import run as run_protocol
    from engine.runner import prepare
    from nodes.deployment import HostLostError, NodeFailure, PlacementError
    from protocols.base import ConfigError, UnsuitableDataError, build_config

    try:
        config = build_config(get_protocol(args.protocol).Config, params)  # before Ray starts
    except ConfigError as e:
        parser.error(f"protocol parameter {e}")
    conditions = run_conditions(parser, values)
    dataset = load(parser, args, dataset_opts)
    run_settings = settings(
        args,
        conditions,
        protocol=args.protocol,
        rounds=args.rounds,
        params=config,
        checkpoint_every=args.checkpoint_every,
    )
    try:
        if args.dry_run:
            plan = prepare(run_settings, dataset).describe(run_settings)
            print(f"{plan} (dry run: nothing started)")
            return 0
        run_dir, summary = run_protocol(run_settings, dataset, dataset.meta)
    except PlacementError as e:
        parser.error(placement_message(e))
    except ConditionsError as e:  # conditions that do not fit the run's nodes, rounds or hosts
        parser.error(f"run condition {e}")
    except AdversaryError as e:  # an attack without a role in this protocol, targets out of range
        parser.error(f"--protocol {args.protocol}: {e}")
    except (HostLostError, NodeFailure) as e:  # one line; the traceback is in the run folder
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    except ClusterError as e:  # --address: nobody answers there, or the cluster wants a token
        parser.error(f"--address: {e}")
    except ConfigError as e:  # a parameter that does not fit the dataset, found by the protocol
        parser.error(f"protocol parameter {e}")
    except UnsuitableDataError as e:
        parser.error(
            f"--protocol {args.protocol} on --dataset {args.dataset}: {' '.join(str(e).split())}"
        )
    show(summary, run_dir)
    return 0
