"""The adversary flags (``--adversaries``, ``--attack``, ``--defence``, ...): their --help group,
which lists the attacks and the defences, and the typed run condition they make together with
the [adversaries] table of --config (:class:`adversaries.Adversaries`)."""

from __future__ import annotations

import argparse

from adversaries import Adversaries, AdversaryError, attacks, defences
from protocols import get_protocol, protocol_names

ATTACK_PROTOCOLS = "<protocols with attacks>"  # in the group's description until --help shows it

# flag -> (its key in the [adversaries] table and Adversaries.from_dict, argparse options); the
# parsed value is ``args.adv_<key>``, None when the flag is not given
FLAGS: dict[str, tuple[str, dict]] = {
    "--adversaries": (
        "fraction",
        dict(type=float, metavar="FRACTION", help="adversaries per honest user (default: 0)"),
    ),
    "--attack": (
        "attack",
        dict(
            metavar="NAME",
            help="the attack the adversaries play (listed above; verfedgnn's own "
            "de-anonymization attack is --deanonymization)",
        ),
    ),
    "--attack-param": (
        "params",
        dict(
            action="append",
            metavar="KEY=VALUE",
            help="an attack parameter (repeatable), e.g. scale=10, public_fraction=0.1",
        ),
    ),
    "--adversary-mode": (
        "mode",
        dict(choices=["fake", "compromised"], help="override how the attack's adversaries join"),
    ),
    "--targets": (
        "targets",
        dict(
            metavar="ID,ID,...",
            help="the target items (default: the --n-targets least popular training items)",
        ),
    ),
    "--n-targets": (
        "n_targets",
        dict(type=int, metavar="N", help="how many least popular items are targets (default: 1)"),
    ),
    "--er-k": (
        "er_k",
        dict(type=int, metavar="K", help="K of target_er@K and target_hr@K (default: 10)"),
    ),
    "--defence": (
        "defence",
        dict(
            metavar="NAME",
            help="robust aggregation at the aggregating role (listed above; default: the mean)",
        ),
    ),
    "--defence-param": (
        "defence_params",
        dict(
            action="append",
            metavar="KEY=VALUE",
            help="a defence parameter (repeatable), e.g. beta=0.1, f=0.2, bound=1",
        ),
    ),
}
KEY_VALUE_FLAGS = ("--attack-param", "--defence-param")  # each given value is KEY=VALUE

ATTACK_NEEDS_A_NAME = (
    "give the attack's name (listed by --help; verfedgnn's de-anonymization attack is "
    "--deanonymization)"
)


def add_adversary_arguments(p: argparse.ArgumentParser) -> None:
    """The adversary flags, in a group whose description lists the attacks and the defences."""
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
    for flag, (key, options) in FLAGS.items():
        g.add_argument(flag, dest="adv_" + key, default=None, **options)
    p.help_fills[ATTACK_PROTOCOLS] = lambda: ", ".join(attack_protocols())
    p.value_hints["--attack"] = ATTACK_NEEDS_A_NAME


def attack_protocols() -> list[str]:
    """The registered protocols that take ``--attack`` (their class declares ``ATTACKS``)."""
    names = []
    for name in protocol_names():
        try:
            if getattr(get_protocol(name), "ATTACKS", None):
                names.append(name)
        except Exception:  # noqa: BLE001 — an installed plugin that does not import: not listed
            continue
    return names


def adversaries(parser: argparse.ArgumentParser, args, table: dict) -> Adversaries | None:
    """The run's adversaries from the [adversaries] table and the flags over it (None when
    neither gives anything); a mistake is one line."""
    values = dict(table)
    for flag, (key, _) in FLAGS.items():
        given = getattr(args, "adv_" + key, None)
        if given is None:
            continue
        if flag not in KEY_VALUE_FLAGS:
            values[key] = given
            continue
        pairs = dict(values.get(key, {}))
        for item in given:
            name, eq, value = item.partition("=")
            if not eq or not name:
                parser.error(f"{flag}: expected KEY=VALUE, got {item!r}")
            pairs[name.strip()] = value.strip()
        values[key] = pairs
    if not values:
        return None
    try:
        return Adversaries.from_dict(values)
    except (AdversaryError, TypeError) as e:
        parser.error(f"adversaries: {e}")
