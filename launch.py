"""privrec's command line: parse the config, start or join Ray, run a protocol, write the run report.

    python launch.py                                  # fedmf on the embedded synthetic data, local Ray
    python launch.py --protocol dmf --dataset ml-100k --rounds 50
    python launch.py --address auto --placement packed --hosts 8 --gpus-per-host 0.25 --config exp.toml

A ``--config`` TOML file sets protocol parameters at its top level (or under ``[protocol]``),
dataset options under ``[dataset]`` (split, min_user_interactions, min_item_interactions, implicit,
test_fraction, and the synthetic generator's n_users, n_items, ...) and run conditions under
``[conditions]`` (dropout, trace, min_participants, deadline, user_speed, speed_spread, user_link,
snapshot_every, kill_hosts; see nodes/conditions.py). The condition flags override the table:
    python launch.py --protocol fedlightgcn --dropout 0.3 --deadline 20 --user-link mobile
    python launch.py --rounds 400 --hosts 2 --kill-host 5:0      # SIGKILL host 0 at round 5

Any protocol parameter can also be given as a flag, which overrides the file: ``--backbone gat``,
``--public-ratio 0.2``, ``--parties 4``; a boolean alone is true (``--use-bipartite``) and
``--no-NAME`` makes it false (``--no-projection``).
    python launch.py --protocol verfedgnn --dataset ml-100k --gnn gat --participation 0.5
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import tomllib

DATASET_OPTIONS = {
    "split",
    "min_user_interactions",
    "min_item_interactions",
    "implicit",
    "test_fraction",
}


def build_parser() -> argparse.ArgumentParser:
    from data.registry import DATASETS
    from protocols import DEFAULT_PROTOCOL, PROTOCOLS

    p = argparse.ArgumentParser(
        prog="launch.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # unknown flags are protocol parameters, never abbreviations
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        choices=sorted(PROTOCOLS),
        help="which protocol to run (default: %(default)s)",
    )
    p.add_argument(
        "--dataset",
        default="synthetic",
        choices=DATASETS,
        help="dataset name (default: the embedded synthetic generator)",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="folder holding the dataset folders (default: ../shared/data beside the checkout, if present)",
    )
    p.add_argument(
        "--address",
        default=None,
        help="'auto' or HOST:PORT of a cluster started with `ray start --head` (default: start a local Ray instance)",
    )
    p.add_argument(
        "--placement",
        default="packed",
        choices=["dedicated", "packed"],
        help="dedicated: one actor per participant; packed: users share --hosts actors (default: %(default)s)",
    )
    p.add_argument(
        "--hosts",
        type=int,
        default=1,
        help="number of host actors carrying the users when packed (default: %(default)s)",
    )
    p.add_argument(
        "--gpus-per-host",
        type=float,
        default=0.0,
        help="GPU share each host asks Ray for, fractions allowed (default: %(default)s)",
    )
    p.add_argument(
        "--cpus-per-host",
        type=float,
        default=None,
        help="CPU share each host asks Ray for (default: the cluster's CPUs divided among the hosts, at most 1)",
    )
    p.add_argument("--rounds", type=int, default=20, help="training rounds (default: %(default)s)")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of every participant's RNG (default: %(default)s)"
    )
    p.add_argument(
        "--config", default=None, help="TOML file with protocol parameters and a [dataset] table"
    )
    p.add_argument(
        "--out", default="runs", help="where run reports are written (default: %(default)s)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="write RUN_DIR/checkpoint.pkl every N rounds and after the last (default: never)",
    )
    c = p.add_argument_group("run conditions (also a [conditions] table in --config)")
    c.add_argument(
        "--dropout",
        type=float,
        default=None,
        help="probability that a user or party is offline in a round (default: 0)",
    )
    c.add_argument(
        "--availability-trace",
        dest="trace",
        default=None,
        metavar="FILE",
        help="JSON {node id: [rounds or [start, end) windows online]}; overrides --dropout for the nodes it names",
    )
    c.add_argument(
        "--min-participants",
        type=int,
        default=None,
        help="a server skips its update when fewer uploads arrived (default: 1)",
    )
    c.add_argument(
        "--deadline",
        type=float,
        default=None,
        help="simulated seconds per round after which messages are late and dropped (default: 0 = none)",
    )
    c.add_argument(
        "--user-speed",
        type=float,
        default=None,
        help="median compute-time multiplier of user devices vs this machine (default: 2)",
    )
    c.add_argument(
        "--speed-spread",
        type=float,
        default=None,
        help="sigma of the log-normal spread of device speeds (default: 0.5)",
    )
    c.add_argument(
        "--user-link",
        default=None,
        choices=["mobile", "datacenter"],
        help="link class of user devices (default: mobile)",
    )
    c.add_argument(
        "--snapshot-every",
        type=int,
        default=None,
        help="rounds between host snapshots for recovering a dead host (default: 1; 0 = none)",
    )
    c.add_argument(
        "--kill-host",
        dest="kill_hosts",
        action="append",
        default=None,
        metavar="ROUND:HOST",
        help="fault injection: SIGKILL host HOST at the start of round ROUND (repeatable)",
    )
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR from its checkpoint up to --rounds rounds in all, same "
        "protocol, data and placement (only --rounds, --address, --checkpoint-every, --no-progress apply)",
    )
    return p


def protocol_flags(extras: list[str], config_cls) -> dict:
    """``--some-field VALUE`` / ``--some-field=VALUE`` / ``--flag`` / ``--no-flag`` → {field: value},
    typed by the protocol's config dataclass; raises ValueError naming an unknown or malformed flag."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(config_cls)
    fields = {f.name for f in dataclasses.fields(config_cls)}
    known = ", ".join("--" + f.replace("_", "-") for f in sorted(fields))
    out: dict = {}
    i = 0
    while i < len(extras):
        token = extras[i]
        if not token.startswith("--") or token == "--":
            raise ValueError(f"unexpected argument {token!r}")
        name, eq, value = token[2:].partition("=")
        key = name.replace("-", "_")
        negated = key.startswith("no_") and key not in fields and key[3:] in fields
        if negated:
            key = key[3:]
        if key not in fields:
            raise ValueError(f"unknown flag --{name} for this protocol (known: {known})")
        hint = hints[key]
        if typing.get_origin(hint) is not None:  # Optional[X] / X | None
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        if hint is bool:
            if negated or not eq:
                if eq:
                    raise ValueError(f"--{name} takes no value")
                out[key] = not negated
                i += 1
                continue
        elif negated:
            raise ValueError(f"--{name}: {key} is not a true/false parameter")
        if not eq:
            if i + 1 >= len(extras) or extras[i + 1].startswith("--"):
                raise ValueError(f"--{name} needs a value")
            value = extras[i + 1]
            i += 1
        i += 1
        out[key] = _typed(name, value, hint)
    return out


def _typed(name: str, value: str, hint):
    try:
        if hint is bool:
            low = value.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if hint is int:
            return int(value)
        if hint is float:
            return float(value)
    except ValueError:
        raise ValueError(f"--{name}: expected {hint.__name__}, got {value!r}") from None
    return value


def parse(argv: list[str] | None = None):
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.checkpoint_every < 0:
        parser.error(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    if args.resume is not None:
        if extras or args.config is not None:
            parser.error(
                "--resume takes the protocol, its parameters and the data from the checkpoint"
            )
        if not Path(args.resume).is_dir():
            parser.error(f"--resume {args.resume!r} is not a directory")
        return parser, args, {}, {}, {}
    if args.hosts < 1:
        parser.error(f"--hosts must be >= 1, got {args.hosts}")
    if not args.gpus_per_host >= 0:
        parser.error(f"--gpus-per-host must be >= 0, got {args.gpus_per_host}")
    if args.cpus_per_host is not None and not args.cpus_per_host > 0:
        parser.error(f"--cpus-per-host must be > 0, got {args.cpus_per_host}")
    if args.placement == "dedicated" and args.hosts != 1:
        parser.error(
            "--hosts applies to --placement packed (dedicated gives every participant its own host)"
        )
    if (
        args.address is not None
        and args.address != "auto"
        and not re.fullmatch(r"[\w.\-]+:\d{1,5}", args.address)
    ):
        parser.error(f"--address must be 'auto' or HOST:PORT, got {args.address!r}")
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        parser.error(f"--data-dir {args.data_dir!r} is not a directory")
    params, dataset_opts, conditions = {}, {}, {}
    if args.config is not None:
        path = Path(args.config)
        if not path.is_file():
            parser.error(f"--config {args.config!r}: no such file")
        try:
            doc = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            parser.error(f"--config {args.config}: not valid TOML ({e})")
        dataset_opts = doc.pop("dataset", {})
        conditions = doc.pop("conditions", {})
        params = doc.pop("protocol", {})
        params.update({k: v for k, v in doc.items() if not isinstance(v, dict)})
        unknown_tables = [k for k, v in doc.items() if isinstance(v, dict)]
        if unknown_tables:
            parser.error(
                f"--config {args.config}: unknown table(s) {unknown_tables} "
                "(known: [protocol], [dataset], [conditions])"
            )
        if args.dataset != "synthetic":
            bad = sorted(set(dataset_opts) - DATASET_OPTIONS)
            if bad:
                parser.error(
                    f"--config {args.config}: unknown [dataset] option(s) {bad} (known: {sorted(DATASET_OPTIONS)})"
                )
    if extras:
        from protocols import get_protocol

        try:
            params.update(protocol_flags(extras, get_protocol(args.protocol).Config))
        except ValueError as e:
            parser.error(f"--protocol {args.protocol}: {e}")
    for name in CONDITION_FLAGS:
        value = getattr(args, name)
        if value is not None:
            conditions[name] = value
    if args.kill_hosts is not None:
        try:
            conditions["kill_hosts"] = [
                tuple(int(x) for x in k.split(":")) for k in args.kill_hosts
            ]
            if any(len(k) != 2 for k in conditions["kill_hosts"]):
                raise ValueError
        except ValueError:
            parser.error(f"--kill-host expects ROUND:HOST, got {args.kill_hosts}")
    return parser, args, params, dataset_opts, conditions


CONDITION_FLAGS = (
    "dropout",
    "trace",
    "min_participants",
    "deadline",
    "user_speed",
    "speed_spread",
    "user_link",
    "snapshot_every",
)


def main(argv: list[str] | None = None) -> int:
    parser, args, params, dataset_opts, condition_values = parse(argv)
    if args.resume is not None:
        return _resume(parser, args)
    from data.errors import DataFormatError
    from data.registry import load_dataset
    from nodes.conditions import Conditions, ConditionsError
    from nodes.deployment import HostLostError, PlacementError
    from protocols import get_protocol
    from protocols.base import ConfigError, build_config
    from protocols.runner import RunSettings, run

    try:
        build_config(get_protocol(args.protocol).Config, params)  # fail fast, before Ray starts
    except ConfigError as e:
        parser.error(f"protocol parameter {e}")
    try:
        conditions = Conditions.from_dict(condition_values)
    except (ConditionsError, TypeError) as e:
        parser.error(f"run condition {e}")
    try:
        dataset = load_dataset(args.dataset, args.data_dir, seed=args.seed, **dataset_opts)
    except (DataFormatError, FileNotFoundError, ValueError, TypeError) as e:
        parser.error(f"--dataset {args.dataset}: {e}")
    settings = RunSettings(
        protocol=args.protocol,
        rounds=args.rounds,
        seed=args.seed,
        placement=args.placement,
        hosts=args.hosts,
        gpus_per_host=args.gpus_per_host,
        cpus_per_host=args.cpus_per_host,
        address=args.address,
        out=args.out,
        params=params,
        progress=not args.no_progress,
        checkpoint_every=args.checkpoint_every,
        conditions=conditions,
    )
    try:
        run_dir, summary = run(settings, dataset, dataset.meta)
    except PlacementError as e:
        parser.error(f"--hosts/--placement: {e}")
    except HostLostError as e:
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    except ConfigError as e:  # a parameter that does not fit the dataset, found by the protocol
        parser.error(f"protocol parameter {e}")
    _show(summary, run_dir)
    return 0


def _resume(parser, args) -> int:
    from nodes.deployment import HostLostError, PlacementError
    from protocols.checkpoint import CheckpointError
    from protocols.runner import resume

    try:
        run_dir, summary = resume(
            args.resume,
            args.rounds,
            address=args.address,
            progress=not args.no_progress,
            checkpoint_every=args.checkpoint_every or None,
        )
    except (CheckpointError, PlacementError) as e:
        parser.error(f"--resume: {e}")
    except HostLostError as e:
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    _show(summary, run_dir)
    return 0


def _show(summary: dict, run_dir) -> None:
    shown = {
        k: summary[k]
        for k in (
            "protocol",
            "dataset",
            "rounds",
            "metrics",
            "bytes_total",
            "wall_seconds",
            "sim_seconds",
        )
    }
    if summary.get("faults"):
        shown["faults"] = summary["faults"]
    shown["baseline_popularity"] = summary["baselines"]["popularity"]
    print(json.dumps(shown, indent=2, default=float))
    print(f"run report: {run_dir}")


if __name__ == "__main__":
    sys.exit(main())
