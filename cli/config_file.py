"""``--config``: the TOML file's protocol parameters (top level or [protocol]), [dataset] options,
[conditions], [secure_aggregation], [adversaries] and [compare] tables; and the condition flags,
which override its [conditions]."""

from __future__ import annotations

import argparse
from pathlib import Path

import tomllib

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


def read_config(
    parser: argparse.ArgumentParser, args, *, compare: bool
) -> tuple[dict, dict, dict, dict]:
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
    args.adversaries_table = doc.pop("adversaries", {})  # read by cli.adversary_args.adversaries
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
        from data.registry import LOAD_OPTIONS  # imports pyarrow

        bad = sorted(set(dataset_opts) - set(LOAD_OPTIONS))
        if bad:
            parser.error(
                f"--config {args.config}: unknown [dataset] option(s) {bad} (known: {sorted(LOAD_OPTIONS)})"
            )
    return params, dataset_opts, conditions, compare_table


def condition_flags(parser: argparse.ArgumentParser, args, conditions: dict) -> None:
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
