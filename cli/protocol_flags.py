"""A protocol's parameters as flags, from its Config dataclass: ``--some-field VALUE``,
``--some-field=VALUE``, ``--flag`` / ``--no-flag`` for a boolean; their --help group."""

from __future__ import annotations

import argparse
import dataclasses
import typing

from cli.parser import did_you_mean
from protocols import get_protocol


def protocol_flags(extras: list[str], config_cls, options: list[str] = ()) -> dict:
    """The flags in ``extras`` as {field: value}, typed by ``config_cls``; raises ValueError naming
    an unknown or malformed flag (with the closest of the protocol's flags and ``options``, the
    command's own, as a "did you mean")."""
    from protocols.base import ConfigError, coerce  # imports Ray

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
            flags = ["--" + f.replace("_", "-") for f in fields] + list(options)
            hint = did_you_mean("--" + name, flags)
            raise ValueError(f"unknown flag --{name}{hint} (this protocol's: {known})")
        hint = value_type(hints[key])
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


def value_type(hint):
    """A Config field's type without its ``None``: ``int`` for ``int | None``."""
    if typing.get_origin(hint) is not None:  # Optional[X] / X | None
        return next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def add_protocol_help(p: argparse.ArgumentParser, name: str, *, default: bool) -> None:
    """A --help group listing every parameter of protocol ``name``: flag, type, one line of
    meaning (the Config field's comment) and default."""
    from protocols.base import field_docs  # imports Ray

    cls = get_protocol(name).Config
    docs, hints = field_docs(cls), typing.get_type_hints(cls)
    title = f"protocol parameters of {name}" + (
        " (the default --protocol; `--protocol NAME --help` lists another's)" if default else ""
    )
    g = p.add_argument_group(title, "also the top level of a --config TOML file")
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        hint = value_type(hints[f.name])
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
