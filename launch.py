"""privrec's command line: compare protocols, or run one; start or join Ray; write the report.

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

from __future__ import annotations

import argparse
import difflib
import functools
import json
import re
import sys
from pathlib import Path

import tomllib


def _prog() -> str:
    """The command's name as the user typed it: ``privrec`` (the console command) or launch.py."""
    return "privrec" if Path(sys.argv[0]).name == "privrec" else "launch.py"


class _Parser(argparse.ArgumentParser):
    """argparse with a user's mistake in one line on stderr (exit status 2), no usage dump, and
    a "did you mean" for a misspelt flag."""

    def error(self, message: str):
        message = str(message)
        if message.startswith("unrecognized arguments:"):
            flags = [t for t in message.partition(":")[2].split() if t.startswith("--")]
            hint = _did_you_mean(flags[0].partition("=")[0], _options(self)) if flags else ""
            message += hint
        self.exit(2, f"{self.prog}: {' '.join(message.split())}\n")

    def format_help(self) -> str:
        # the protocols that take attacks, looked up (imports every protocol) only when shown
        for group in self._action_groups:
            if group.description and ATTACK_PROTOCOLS in group.description:
                group.description = group.description.replace(
                    ATTACK_PROTOCOLS, ", ".join(attack_protocols())
                )
        return super().format_help()


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """Every ``--flag`` of ``parser``."""
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def _did_you_mean(given: str, known, *, prefix: str = "did you mean ") -> str:
    """``"; did you mean X?"`` for the closest of ``known`` to ``given`` (difflib), or ``""``."""
    match = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    if not match and given.lower() != given:
        match = difflib.get_close_matches(given.lower(), list(known), n=1, cutoff=0.6)
    return f"; {prefix}{match[0]}?" if match else ""


ATTACK_PROTOCOLS = "<protocols with attacks>"  # filled in by _Parser.format_help


def attack_protocols() -> list[str]:
    """The registered protocols that take ``--attack`` (their class declares ``ATTACK_FAMILY``)."""
    from protocols import get_protocol, protocol_names

    names = []
    for name in protocol_names():
        try:
            if getattr(get_protocol(name), "ATTACK_FAMILY", None):
                names.append(name)
        except Exception:  # noqa: BLE001 — an installed plugin that does not import: not listed
            continue
    return names


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


def _add_shared_arguments(p: argparse.ArgumentParser) -> None:
    """Data, cluster, placement, seed, config and output flags: the same for run and compare."""
    p.add_argument(
        "--dataset",
        default="synthetic",
        metavar="NAME|FOLDER",
        help="dataset name (synthetic, ml-100k, gowalla, ciao, epinions, filmtrust, diffnet-yelp, "
        "diffnet-flickr), or a folder of dataset files (RecBole atomic, LightGCN train.txt/test.txt, "
        "CSV/TSV; see data/loaders/files.py) (default: the embedded synthetic generator)",
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
        choices=["dedicated", "packed"],  # nodes.deployment.PLACEMENTS
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
        default=None,
        help="GPU share each host actor asks Ray for, fractions allowed; hosts with a share are "
        "spread round-robin over every GPU of every node, and their nodes compute there; 0: the "
        "CPU (default: on a cluster with GPUs, 1 when there is a GPU per host actor, else "
        "1/ceil(host actors / GPUs), e.g. 0.5 for 3 hosts on 2 GPUs; without GPUs, 0). A host's "
        "memory budget is its share of its GPU's memory less 10%% for CUDA (a 0.5 share of an "
        "80 GiB GPU: 36 GiB; Ray does not enforce it), so a host on a GPU may carry more users "
        "than a CPU host: fewer --hosts",
    )
    p.add_argument(
        "--cpus-per-host",
        type=float,
        default=None,
        help="CPU share each host asks Ray for (default: the cluster's CPUs divided among the hosts, at most 1)",
    )
    p.add_argument(
        "--dashboard",
        action="store_true",
        help="start the local Ray instance with Ray's dashboard (on 127.0.0.1) and print its address",
    )


def _add_run_arguments(p: argparse.ArgumentParser, *, rounds_default: int | None) -> None:
    if rounds_default is None:
        p.add_argument(
            "--rounds",
            type=int,
            default=None,
            help="training rounds of every protocol (default: 20, or the [compare] table's, "
            "or --quick's small ones)",
        )
    else:  # None until parsed: with --resume, no --rounds means the resumed run's own plan
        p.add_argument(
            "--rounds",
            type=int,
            default=None,
            help=f"training rounds (default: {rounds_default}; with --resume: the run's own)",
        )
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
        "--tensorboard",
        nargs="?",
        const="",
        default=None,
        metavar="DIR",
        help="write every round's loss and training figures, the metrics of each evaluation, "
        "bytes by kind, ε spent and simulated seconds as TensorBoard event files while the run "
        "goes: in RUN_DIR/tensorboard, or in DIR/<run folder name> (compare: one folder, a run "
        "per protocol); then `tensorboard --logdir ...` (needs `pip install tensorboard`)",
    )
    p.add_argument(
        "--audit",
        action="store_true",
        help="after the run, audit the protocol's privacy mechanism(s) with the run's parameters "
        "(seconds): an empirical 95%% lower bound on ε beside the rigorous and the paper's "
        "figures, in summary.json's privacy.audit and the comparison's 'ε audit' column "
        "(python -m benchmarks.audit: every mechanism at full size)",
    )
    p.add_argument(
        "--transport",
        choices=("auto", "calls", "channels"),  # nodes.transport.CHOICES (no Ray import here)
        default=None,
        help="how supersteps travel between the driver and the host actors: 'calls' (an actor "
        "call per host, batches through Ray's object store) or 'channels' (a Ray compiled graph "
        "of the hosts, built once: orders, batches and outcomes through its channels); results "
        "are the same; 'auto' (the default) takes channels where the cluster has a CPU for each "
        "host actor and two to spare (a graph's hosts poll between supersteps), else calls "
        "(with --resume: the run's own)",
    )
    p.add_argument(
        "--check-device",
        action="store_true",
        help="run the nodes' code with torch's default device 'meta', so that a tensor a role "
        "makes without its node's device (self.device, self.tensor, self.build) fails the run "
        "here, on the CPU, as it would on a GPU host (slower; for protocol authors)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="load the data, build and check everything (parameters, placement, conditions), "
        "print the plan and stop before Ray starts",
    )


def _add_condition_arguments(p: argparse.ArgumentParser) -> None:
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
        help="rounds between host snapshots for recovering a dead host (default: 5; 0 = none)",
    )
    c.add_argument(
        "--max-failed-fraction",
        type=float,
        default=None,
        help="a user or party whose handler raises fails for the round, like a dropout; the run "
        "stops when more than this share of a round's participants failed (default: 0.5; 1 = "
        "never). A server, key server or matcher that raises always stops it",
    )
    c.add_argument(
        "--kill-host",
        dest="kill_hosts",
        action="append",
        default=None,
        metavar="ROUND:HOST",
        help="fault injection: SIGKILL host HOST at the start of round ROUND (repeatable)",
    )
    c.add_argument(
        "--secure-aggregation",
        dest="secure_aggregation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="SecAgg+ where a server sums user uploads (fedmf, fedpergnn, fedlightgcn, plugins "
        "that declare it): each upload is densified over the whole item table, masked and "
        "summed, so the server learns only the sum of the round's survivors; parameters in a "
        "[secure_aggregation] TOML table (neighbours, threshold, bound, min_users, "
        "stage_dropout; see nodes/secure_sum.py)",
    )
    c.add_argument(
        "--secure-rng",
        dest="secure_rng",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw every noise sample of the privacy mechanisms from a cryptographically secure "
        "generator (ChaCha20 keyed from the operating system, as Opacus's secure mode) instead of "
        "each node's stream seeded from --seed: the noise cannot be rebuilt from the published "
        "seed, and runs are no longer reproducible (default: seeded; the report's "
        "privacy.noise_rng says which was used)",
    )


_BARE = object()  # `--attack` without a name: verfedgnn's old de-anonymization switch


def _add_adversary_arguments(p: argparse.ArgumentParser) -> None:
    from adversaries import attacks, defences

    g = p.add_argument_group(
        "adversaries (also an [adversaries] table in --config; adversaries/)",
        "fake users (ids after the real ones) or compromised users, chosen from (seed, node id); "
        "every metric is the honest users'; target_er@K / target_hr@K: exposure of the target "
        "items among honest users, reported whenever adversaries, targets or a defence are "
        f"given. Attacks [how adversaries join] (protocols: {ATTACK_PROTOCOLS}):\n"
        + attacks.describe()
        + "\ndefences (options of the aggregating role):\n"
        + defences.describe(),
    )
    g.add_argument(
        "--adversaries",
        dest="adv_fraction",
        type=float,
        default=None,
        metavar="FRACTION",
        help="adversaries per honest user (default: 0)",
    )
    g.add_argument(
        "--attack",
        dest="adv_attack",
        nargs="?",
        const=_BARE,
        default=None,
        metavar="NAME",
        help="the attack the adversaries play (listed above; verfedgnn's own de-anonymization "
        "attack is --deanonymization)",
    )
    g.add_argument(
        "--attack-param",
        dest="adv_params",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="an attack parameter (repeatable), e.g. scale=10, public_fraction=0.1",
    )
    g.add_argument(
        "--adversary-mode",
        dest="adv_mode",
        choices=["fake", "compromised"],
        default=None,
        help="override how the attack's adversaries join",
    )
    g.add_argument(
        "--targets",
        dest="adv_targets",
        default=None,
        metavar="ID,ID,...",
        help="the target items (default: the --n-targets least popular training items)",
    )
    g.add_argument(
        "--n-targets",
        dest="adv_n_targets",
        type=int,
        default=None,
        metavar="N",
        help="how many least popular items are targets (default: 1)",
    )
    g.add_argument(
        "--er-k",
        dest="adv_er_k",
        type=int,
        default=None,
        metavar="K",
        help="K of target_er@K and target_hr@K (default: 10)",
    )
    g.add_argument(
        "--defence",
        dest="adv_defence",
        default=None,
        metavar="NAME",
        help="robust aggregation at the aggregating role (listed above; default: the mean)",
    )
    g.add_argument(
        "--defence-param",
        dest="adv_defence_params",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="a defence parameter (repeatable), e.g. beta=0.1, f=0.2, bound=1",
    )


ADVERSARY_FLAGS = {
    "adv_fraction": "fraction",
    "adv_attack": "attack",
    "adv_mode": "mode",
    "adv_targets": "targets",
    "adv_n_targets": "n_targets",
    "adv_er_k": "er_k",
    "adv_defence": "defence",
}


def _adversaries(parser, args, table: dict):
    """The run's :class:`adversaries.Adversaries` from the [adversaries] table and the flags
    (None when neither gives anything); a mistake is one line."""
    from adversaries import Adversaries, AdversaryError

    values = dict(table)
    for flag, key in ADVERSARY_FLAGS.items():
        if getattr(args, flag, None) is not None:
            values[key] = getattr(args, flag)
    for flag, key, option in (
        ("adv_params", "params", "--attack-param"),
        ("adv_defence_params", "defence_params", "--defence-param"),
    ):
        given = getattr(args, flag, None)
        if given:
            pairs = dict(values.get(key, {}))
            for item in given:
                name, eq, value = item.partition("=")
                if not eq or not name:
                    parser.error(f"{option}: expected KEY=VALUE, got {item!r}")
                pairs[name.strip()] = value.strip()
            values[key] = pairs
    if not values:
        return None
    try:
        return Adversaries.from_dict(values)
    except (AdversaryError, TypeError) as e:
        parser.error(f"adversaries: {e}")


def build_parser(protocol_help: str | None = None) -> argparse.ArgumentParser:
    """The parser of one run (``launch.py [run] --protocol ...``); with ``protocol_help``, its
    --help also lists that protocol's parameters (they are parsed by :func:`protocol_flags`)."""
    from protocols import DEFAULT_PROTOCOL, protocol_names

    p = _Parser(
        prog=_prog(),
        usage="%(prog)s [compare ... | run] [options]  (no arguments: the main job, compare --quick)",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # unknown flags are protocol parameters, never abbreviations
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--protocol",
        default=DEFAULT_PROTOCOL,
        type=_protocol_name,
        metavar="NAME",
        help=f"which protocol to run: {', '.join(protocol_names())}, one an installed package "
        "registers, or package.module:Class (default: %(default)s)",
    )
    p._optionals.title = "run options"
    _add_shared_arguments(p)
    _add_run_arguments(p, rounds_default=DEFAULT_ROUNDS)
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="write RUN_DIR/checkpoint.pkl every N rounds and after the last (default: never)",
    )
    _add_condition_arguments(p)
    _add_adversary_arguments(p)
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
        _add_protocol_help(p, protocol_help, default=protocol_help == DEFAULT_PROTOCOL)
    return p


def _protocol_name(name: str) -> str:
    """``--protocol``'s value: a protocol that resolves (registered, or package.module:Class)."""
    from protocols import get_protocol

    try:
        get_protocol(name)
    except ValueError as e:
        from protocols import protocol_names

        hint = "" if ":" in name else _did_you_mean(name, protocol_names())
        raise argparse.ArgumentTypeError(f"{e}{hint}") from None
    return name


def _is_protocol(name: str | None) -> bool:
    try:
        return name is not None and bool(_protocol_name(name))
    except argparse.ArgumentTypeError:
        return False


def _add_protocol_help(p: argparse.ArgumentParser, name: str, *, default: bool) -> None:
    """A --help group listing every parameter of protocol ``name``: flag, type, one line of
    meaning (the Config field's comment) and default."""
    import dataclasses
    import typing

    from protocols import get_protocol
    from protocols.base import field_docs

    cls = get_protocol(name).Config
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    title = f"protocol parameters of {name}" + (
        " (the default --protocol; `--protocol NAME --help` lists another's)" if default else ""
    )
    g = p.add_argument_group(title, "also the top level of a --config TOML file")
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        hint = _value_type(hints[f.name])
        default_value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        text = f"{docs.get(f.name, '')} (default: {default_value})"
        if f.name in cls.RESUMABLE:
            text += " [may change on --resume]"
        text = text.replace("%", "%%")  # argparse %-formats help texts
        if hint is bool:
            g.add_argument(flag, "--no-" + flag[2:], action="store_true", help=text)
        else:
            metavar = getattr(hint, "__name__", "value").upper()
            g.add_argument(flag, metavar=metavar, help=text)


def build_compare_parser() -> argparse.ArgumentParser:
    """The parser of ``launch.py compare``."""
    from protocols import DEFAULT_COMPARISON, protocol_names

    p = _Parser(
        prog=f"{_prog()} compare",
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
    _add_shared_arguments(p)
    _add_run_arguments(p, rounds_default=None)
    _add_condition_arguments(p)
    _add_adversary_arguments(p)
    return p


def protocol_flags(extras: list[str], config_cls, options: list[str] = ()) -> dict:
    """``--some-field VALUE`` / ``--some-field=VALUE`` / ``--flag`` / ``--no-flag`` → {field: value},
    typed by the protocol's config dataclass; raises ValueError naming an unknown or malformed flag
    (with the closest of the protocol's flags and ``options``, the run's own, as a "did you
    mean"). An old parameter name (``config_cls.ALIASES``) is kept as given, for build_config to
    warn."""
    import dataclasses
    import typing

    from protocols.base import ConfigError, coerce

    hints = typing.get_type_hints(config_cls)
    aliases = getattr(config_cls, "ALIASES", {})
    hints.update({old: hints[new] for old, new in aliases.items()})
    fields = {f.name for f in dataclasses.fields(config_cls)}
    known = ", ".join("--" + f.replace("_", "-") for f in sorted(fields))
    fields |= set(aliases)
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
            flags = ["--" + f.replace("_", "-") for f in fields] + list(options)
            hint = _did_you_mean("--" + name, flags)
            raise ValueError(f"unknown flag --{name}{hint} (this protocol's: {known})")
        hint = _value_type(hints[key])
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
        try:
            out[key] = coerce(key, value, hint)
        except ConfigError as e:
            raise ValueError(f"--{name}: {str(e).partition(': ')[2]}") from None
    return out


def _value_type(hint):
    """A Config field's type without its ``None``: ``int`` for ``int | None``."""
    import typing

    if typing.get_origin(hint) is not None:  # Optional[X] / X | None
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def _argv(argv: list[str] | None) -> list[str]:
    return list(sys.argv[1:] if argv is None else argv)


DEFAULT_ROUNDS = 20

# the flags a resumed run takes (the rest come from its checkpoint); protocol flags are checked
# against its Config's RESUMABLE by engine.resume
RESUME_FLAGS = (
    "--resume",
    "--rounds",
    "--transport",
    "--address",
    "--checkpoint-every",
    "--no-progress",
    "--tensorboard",
    "--dashboard",
    "--dry-run",
    "--gpus-per-host",
)


def _protocol_named(argv: list[str]) -> str | None:
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
    from protocols import DEFAULT_PROTOCOL, protocol_names

    argv = _argv(argv)
    if argv[:1] == ["run"]:
        argv = argv[1:]
    if argv[:1] and argv[0] in protocol_names():  # `privrec dgrec ...`: `--protocol dgrec ...`
        argv = ["--protocol", argv[0], *argv[1:]]
    wants_help = any(t in ("-h", "--help") for t in argv)
    named = _protocol_named(argv)
    parser = build_parser(
        (named if _is_protocol(named) else DEFAULT_PROTOCOL) if wants_help else None
    )
    args, extras = parser.parse_known_args(argv)
    if args.adv_attack is _BARE:  # `--attack` alone: verfedgnn's switch, now --deanonymization
        args.adv_attack = None
        extras.append("--deanonymization")
    if args.resume is not None:
        _refuse_on_resume(parser, argv)
    elif args.rounds is None:
        args.rounds = DEFAULT_ROUNDS
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.checkpoint_every < 0:
        parser.error(f"--checkpoint-every must be >= 0, got {args.checkpoint_every}")
    _check_tensorboard(parser, args)
    if args.resume is not None:
        if args.config is not None:
            parser.error(
                "--resume takes the protocol, its parameters and the data from the checkpoint"
            )
        if not Path(args.resume).is_dir():
            parser.error(f"--resume {args.resume!r} is not a directory")
        return parser, args, _resume_flags(parser, args.resume, extras), {}, {}
    _check_shared(parser, args)
    params, dataset_opts, conditions, _ = _read_config(parser, args, compare=False)
    if extras:
        from protocols import get_protocol

        try:
            options = _options(parser)
            params.update(protocol_flags(extras, get_protocol(args.protocol).Config, options))
        except ValueError as e:
            parser.error(f"--protocol {args.protocol}: {e}")
    _condition_flags(parser, args, conditions)
    args.adversaries = _adversaries(parser, args, getattr(args, "adversaries_table", {}))
    return parser, args, params, dataset_opts, conditions


def _refuse_on_resume(parser, argv: list[str]) -> None:
    """A flag given with ``--resume`` that the checkpoint fixes (data, seed, placement, conditions,
    --config, ...) is refused in one line rather than dropped."""
    fixed = {
        opt
        for action in parser._actions
        for opt in action.option_strings
        if opt.startswith("--") and not set(action.option_strings) & set(RESUME_FLAGS)
    } - {"--help"}
    given = [t.partition("=")[0] for t in argv if t.partition("=")[0] in fixed]
    if given:
        parser.error(
            f"{', '.join(dict.fromkeys(given))}: cannot change when a run resumes (the run takes "
            f"it from the checkpoint; with --resume only {', '.join(RESUME_FLAGS[1:])} and the "
            "step-size parameters its protocol names apply)"
        )


def _resume_flags(parser, run_dir: str, extras: list[str]) -> dict:
    """Protocol flags given with ``--resume``, typed by the run's protocol (its config.json);
    engine.resume accepts only the Config's ``RESUMABLE`` ones."""
    if not extras:
        return {}
    from protocols import get_protocol

    try:
        name = json.loads((Path(run_dir) / "config.json").read_text())["settings"]["protocol"]
        cls = get_protocol(name).Config
        params = protocol_flags(extras, cls, _options(parser))
    except (OSError, KeyError, json.JSONDecodeError) as e:
        parser.error(f"--resume {run_dir}: cannot read its protocol from config.json ({e})")
    except ValueError as e:
        parser.error(f"--resume {run_dir}: {e}")
    # refused here, before the checkpoint is read: a parameter the nodes' state was built with
    aliases = getattr(cls, "ALIASES", {})
    frozen = [k for k in params if aliases.get(k, k) not in cls.RESUMABLE]
    if frozen:
        flags = ", ".join("--" + k.replace("_", "-") for k in frozen)
        may = ", ".join("--" + k.replace("_", "-") for k in cls.RESUMABLE)
        parser.error(
            f"--resume {run_dir}: {flags}: cannot change when a run resumes (the nodes' state "
            f"was built with {'it' if len(frozen) == 1 else 'them'}; {name} may change {may})"
        )
    return params


def _check_tensorboard(parser, args) -> None:
    """``--tensorboard`` without the tensorboard package: one line, before Ray starts."""
    if getattr(args, "tensorboard", None) is None:
        return
    from engine.tensorboard import TensorBoardMissing, require

    try:
        require()
    except TensorBoardMissing as e:
        parser.error(str(e))


def _check_shared(parser, args) -> None:
    from nodes.deployment import PlacementError, check_placement

    try:
        check_placement(args.placement, args.hosts)
    except PlacementError as e:
        parser.error(_placement_message(e))
    if args.gpus_per_host is not None and not args.gpus_per_host >= 0:
        parser.error(f"--gpus-per-host must be >= 0, got {args.gpus_per_host}")
    if args.cpus_per_host is not None and not args.cpus_per_host > 0:
        parser.error(f"--cpus-per-host must be > 0, got {args.cpus_per_host}")
    if (
        args.address is not None
        and args.address != "auto"
        and not re.fullmatch(r"[\w.\-]+:\d{1,5}", args.address)
    ):
        parser.error(f"--address must be 'auto' or HOST:PORT, got {args.address!r}")
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        parser.error(f"--data-dir {args.data_dir!r} is not a directory")


def _read_config(parser, args, *, compare: bool) -> tuple[dict, dict, dict, dict]:
    """``--config``'s (protocol parameters, [dataset], [conditions], [compare])."""
    if args.config is None:
        return {}, {}, {}, {}
    path = Path(args.config)
    if not path.is_file():
        parser.error(f"--config {args.config!r}: no such file")
    try:
        doc = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        parser.error(f"--config {args.config}: not valid TOML ({e})")
    dataset_opts = doc.pop("dataset", {})
    conditions = doc.pop("conditions", {})
    args.adversaries_table = doc.pop("adversaries", {})  # read by _adversaries
    compare_table = doc.pop("compare", {})
    secure = doc.pop("secure_aggregation", None)
    if secure is not None:  # [secure_aggregation]: SecAgg+ with these parameters
        conditions["secure_aggregation"] = secure
    params = doc.pop("protocol", {})
    params.update({k: v for k, v in doc.items() if not isinstance(v, dict)})
    unknown_tables = [k for k, v in doc.items() if isinstance(v, dict)]
    if unknown_tables:
        parser.error(
            f"--config {args.config}: unknown table(s) {unknown_tables} "
            "(known: [protocol], [dataset], [conditions], [secure_aggregation], [adversaries], "
            "[compare])"
        )
    if compare and params:
        parser.error(
            f"--config {args.config}: in a comparison, protocol parameters go under "
            f"[compare.<protocol>], not at the top level or in [protocol] ({sorted(params)})"
        )
    if args.dataset != "synthetic":
        from data.registry import LOAD_OPTIONS

        bad = sorted(set(dataset_opts) - set(LOAD_OPTIONS))
        if bad:
            parser.error(
                f"--config {args.config}: unknown [dataset] option(s) {bad} (known: {sorted(LOAD_OPTIONS)})"
            )
    return params, dataset_opts, conditions, compare_table


def _condition_flags(parser, args, conditions: dict) -> None:
    """The condition flags, over the [conditions] table."""
    for name in CONDITION_FLAGS:
        value = getattr(args, name)
        if value is not None:
            conditions[name] = value
    secure = getattr(args, "secure_aggregation", None)
    if secure is False:
        conditions.pop("secure_aggregation", None)
    elif secure and not isinstance(conditions.get("secure_aggregation"), dict):
        conditions["secure_aggregation"] = {}
    if args.kill_hosts is not None:
        try:
            conditions["kill_hosts"] = [
                tuple(int(x) for x in k.split(":")) for k in args.kill_hosts
            ]
            if any(len(k) != 2 for k in conditions["kill_hosts"]):
                raise ValueError
        except ValueError:
            parser.error(f"--kill-host expects ROUND:HOST, got {args.kill_hosts}")


CONDITION_FLAGS = (
    "dropout",
    "trace",
    "min_participants",
    "deadline",
    "user_speed",
    "speed_spread",
    "user_link",
    "snapshot_every",
    "max_failed_fraction",
    "secure_rng",
)

COMPARE_KEYS = ("protocols", "rounds", "baselines", "quick")


def parse_compare(argv: list[str] | None = None):
    """``compare``'s command line (without the word ``compare``): ``(parser, args, entries,
    dataset options, run condition values)``, the entries planned by engine.compare.plan."""
    from engine.compare import CompareError, plan
    from protocols import DEFAULT_COMPARISON, get_protocol
    from protocols.base import ConfigError, build_config

    parser = build_compare_parser()
    args = parser.parse_args(_argv(argv))
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    _check_shared(parser, args)
    _check_tensorboard(parser, args)
    _, dataset_opts, conditions, table = _read_config(parser, args, compare=True)
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
    _condition_flags(parser, args, conditions)
    if args.adv_attack is _BARE:
        parser.error("--attack: give the attack's name (listed by --help)")
    args.adversaries = _adversaries(parser, args, getattr(args, "adversaries_table", {}))
    return parser, args, entries, dataset_opts, conditions


def _one_line_on_ctrl_c(main):
    """Ctrl-C anywhere in ``main``: one line on stderr saying where it stopped and what was saved
    (engine.runner.RunInterrupted's message; a bare Ctrl-C, e.g. while the data load, says that
    nothing was written) and exit status 130, for ``python launch.py`` and ``privrec`` alike."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt as e:
            text = str(e) or "interrupted before the run started; nothing was written"
            print(f"{_prog()}: {' '.join(text.split())}", file=sys.stderr)
            return 130

    return wrapper


@_one_line_on_ctrl_c
def main(argv: list[str] | None = None) -> int:
    """``launch.py`` (no arguments: the main job, ``compare --quick``), ``launch.py compare
    ...``, or one run: ``launch.py [run] --protocol ...``; returns the exit status."""
    argv = _argv(argv)
    if not argv:
        return compare_main(["--quick"])
    if argv[0] == "compare":
        return compare_main(argv[1:])
    parser, args, params, dataset_opts, condition_values = parse(argv)
    _dashboard(args)
    if args.resume is not None:
        return _resume(parser, args, params)
    from adversaries import AdversaryError
    from cluster.runtime import ClusterError
    from engine import run
    from nodes.conditions import ConditionsError
    from nodes.deployment import HostLostError, NodeFailure, PlacementError
    from protocols import get_protocol
    from protocols.base import ConfigError, UnsuitableDataError, build_config

    try:
        config = build_config(get_protocol(args.protocol).Config, params)  # before Ray starts
    except ConfigError as e:
        parser.error(f"protocol parameter {e}")
    conditions = _conditions(parser, condition_values)
    dataset = _load(parser, args, dataset_opts)
    settings = _settings(
        args,
        conditions,
        protocol=args.protocol,
        rounds=args.rounds,
        params=config,
        checkpoint_every=args.checkpoint_every,
    )
    try:
        if args.dry_run:
            from engine.runner import prepare

            print(f"{prepare(settings, dataset).describe(settings)} (dry run: nothing started)")
            return 0
        run_dir, summary = run(settings, dataset, dataset.meta)
    except PlacementError as e:
        parser.error(_placement_message(e))
    except ConditionsError as e:  # conditions that do not fit the run's nodes, rounds or hosts
        parser.error(f"run condition {e}")
    except AdversaryError as e:  # an attack without a role in this protocol, targets out of range
        parser.error(f"--protocol {args.protocol}: {e}")
    except HostLostError as e:
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    except NodeFailure as e:  # one line; the traceback is in the run folder
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
    _show(summary, run_dir)
    return 0


def _dashboard(args) -> None:
    """--dashboard: the local Ray instance this command starts runs Ray's dashboard (and without
    it, none: a second command in one process does not inherit the first one's flag)."""
    from cluster.runtime import use_dashboard

    use_dashboard(bool(getattr(args, "dashboard", False)))


def _placement_message(e: Exception) -> str:
    """A placement error in one line naming its flag."""
    text = str(e)
    return text if text.startswith("--") else f"--hosts/--placement: {text}"


def _settings(args, conditions, **fields):
    """The RunSettings of the flags that run and compare share, plus ``fields``."""
    from engine import RunSettings

    return RunSettings(
        seed=args.seed,
        placement=args.placement,
        hosts=args.hosts,
        gpus_per_host=args.gpus_per_host,
        cpus_per_host=args.cpus_per_host,
        address=args.address,
        out=args.out,
        progress=not args.no_progress,
        conditions=conditions,
        adversaries=getattr(args, "adversaries", None),
        audit=args.audit,
        tensorboard=getattr(args, "tensorboard", None),
        check_device=getattr(args, "check_device", False),
        **({"transport": args.transport} if getattr(args, "transport", None) else {}),
        **fields,
    )


def _conditions(parser, values: dict):
    from nodes.conditions import Conditions, ConditionsError

    try:
        return Conditions.from_dict(values)
    except (ConditionsError, TypeError) as e:
        parser.error(f"run condition {e}")


def _load(parser, args, dataset_opts: dict):
    from data.errors import DataFormatError, UnknownDatasetError
    from data.registry import DATASETS, load_dataset

    try:
        return load_dataset(args.dataset, args.data_dir, seed=args.seed, **dataset_opts)
    except UnknownDatasetError as e:
        hint = _did_you_mean(str(args.dataset), DATASETS, prefix="did you mean --dataset ")
        if hint:
            parser.error(
                f"--dataset {args.dataset}: unknown dataset{hint} (known: {', '.join(DATASETS)}; "
                "or a folder of dataset files)"
            )
        parser.error(f"--dataset {args.dataset}: {' '.join(str(e).split())}")
    except (DataFormatError, FileNotFoundError, ValueError, TypeError) as e:
        parser.error(f"--dataset {args.dataset}: {' '.join(str(e).split())}")
    except KeyboardInterrupt as e:
        if str(e):
            raise
        raise KeyboardInterrupt(
            f"interrupted while loading --dataset {args.dataset}, before the run started; "
            "nothing was written"
        ) from None


def compare_main(argv: list[str]) -> int:
    """``launch.py compare ...``: 0 when at least one protocol ran, 1 when none did."""
    from cluster.runtime import ClusterError
    from engine.compare import compare, render_text

    parser, args, entries, dataset_opts, condition_values = parse_compare(argv)
    _dashboard(args)
    if args.quick and "snapshot_every" not in condition_values:
        # the main job is a short demonstration: no per-round host snapshots (they exist to
        # recover a dead host's nodes and cost a pickling of every node each round)
        condition_values["snapshot_every"] = 0
    conditions = _conditions(parser, condition_values)
    dataset = _load(parser, args, dataset_opts)
    if args.dry_run:
        return _compare_dry_run(entries, dataset, _settings(args, conditions))
    try:
        cmp_dir, comparison = compare(
            entries, dataset, _settings(args, conditions), dataset_info=dataset.meta
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


def _compare_dry_run(entries, dataset, base) -> int:
    """``compare --dry-run``: each entry's plan, or the one line why it could not run."""
    import dataclasses

    from engine.compare import one_line
    from engine.runner import prepare

    ok = 0
    for e in entries:
        settings = dataclasses.replace(
            base, protocol=e.protocol, rounds=e.rounds, params=dict(e.params)
        )
        try:
            print(f"{e.label}: {prepare(settings, dataset).describe(settings)}")
            ok += 1
        except Exception as exc:  # noqa: BLE001 — listed, as the comparison would list it
            print(f"{e.label}: would not run: {one_line(exc)}")
    print(f"(dry run: {ok} of {len(entries)} would run; nothing started)")
    return 0 if ok else 1


def _resume(parser, args, params: dict) -> int:
    from cluster.runtime import ClusterError
    from engine import resume
    from engine.checkpoint import CheckpointError
    from nodes.deployment import HostLostError, NodeFailure, PlacementError
    from protocols.base import ConfigError

    try:
        if args.dry_run:
            from engine.runner import resume_plan

            _, start, rounds = resume_plan(args.resume, args.rounds, params)
            print(f"{args.resume}: resumes at round {start}, runs to {rounds} rounds (dry run)")
            return 0
        run_dir, summary = resume(
            args.resume,
            args.rounds,  # None: the run's own plan
            address=args.address,
            progress=not args.no_progress,
            checkpoint_every=args.checkpoint_every or None,
            params=params,
            tensorboard=args.tensorboard,
            gpus_per_host=args.gpus_per_host,  # None: the run's own, or the CPU here
            transport=args.transport,  # None: the run's own
        )
    except (CheckpointError, ConfigError) as e:
        parser.error(f"--resume: {e}")
    except PlacementError as e:
        parser.error(_placement_message(e))
    except HostLostError as e:
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    except NodeFailure as e:  # one line; the traceback is in the run folder
        print(f"launch.py: run stopped: {e}", file=sys.stderr)
        return 1
    except ClusterError as e:
        parser.error(f"--address: {e}")
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
    privacy = summary.get("privacy") or {}
    if "epsilon" in privacy:  # the rigorous ε, at the δ beside it
        shown["epsilon"] = privacy["epsilon"]
        if "privacy_delta" in privacy:
            shown["privacy_delta"] = privacy["privacy_delta"]
    if privacy.get("noise_rng", "seeded") != "seeded":  # --secure-rng
        shown["noise_rng"] = privacy["noise_rng"]
    if "audit" in privacy:  # --audit: each mechanism's lower bound beside the rigorous figure
        shown["audit"] = [
            {k: a[k] for k in ("mechanism", "lower_bound_95", "rigorous_epsilon", "verdict")}
            for a in privacy["audit"]
        ]
    if summary.get("faults"):
        shown["faults"] = summary["faults"]
    # the trivial baseline of the run's kind of metric, under the name summary.json gives it
    from engine.figures import main_metric

    # RMSE: rating prediction
    rating = main_metric(summary["metrics"], summary.get("main_metric"))[1] == "lower"
    kind = "mean_rating" if rating else "popularity"
    if kind in summary["baselines"]:
        shown["baselines"] = {kind: summary["baselines"][kind]}
    print(json.dumps(shown, indent=2, default=float))
    print(f"run report: {run_dir}")


if __name__ == "__main__":
    try:
        sys.exit(main())  # Ctrl-C in main: one line and 130 (_one_line_on_ctrl_c)
    except KeyboardInterrupt:  # ... outside it (importing, exiting)
        print(f"{_prog()}: interrupted", file=sys.stderr)
        sys.exit(130)
