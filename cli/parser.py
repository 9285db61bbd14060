"""argparse with a user's mistake in one line on stderr (exit status 2), no usage dump, and a
"did you mean" for a misspelt flag; the command's name as the user typed it."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


def prog() -> str:
    """The command's name as the user typed it: ``privrec`` (the console command) or launch.py."""
    return "privrec" if Path(sys.argv[0]).name == "privrec" else "launch.py"


def argv_or_sys(argv: list[str] | None) -> list[str]:
    """``argv``, or the process's own arguments when it is None."""
    return list(sys.argv[1:] if argv is None else argv)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line. ``help_fills`` maps a placeholder in a group's
    description to the function that writes it, called only when --help is shown (e.g. a list
    that imports every protocol); ``value_hints`` maps a flag to the line shown when it is given
    without its value."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_fills: dict[str, Callable[[], str]] = {}
        self.value_hints: dict[str, str] = {}

    def error(self, message: str):
        message = str(message)
        if message.startswith("unrecognized arguments:"):
            flags = [t for t in message.partition(":")[2].split() if t.startswith("--")]
            if flags:
                message += did_you_mean(flags[0].partition("=")[0], options(self))
        for flag, hint in self.value_hints.items():
            if message == f"argument {flag}: expected one argument":
                message = f"{flag}: {hint}"
        self.exit(2, f"{self.prog}: {' '.join(message.split())}\n")

    def format_help(self) -> str:
        for group in self._action_groups:
            for placeholder, fill in self.help_fills.items():
                if group.description and placeholder in group.description:
                    group.description = group.description.replace(placeholder, fill())
        return super().format_help()


def options(parser: argparse.ArgumentParser) -> list[str]:
    """Every ``--flag`` of ``parser``."""
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]


def did_you_mean(given: str, known: Iterable[str], *, prefix: str = "did you mean ") -> str:
    """``"; did you mean X?"`` for the closest of ``known`` to ``given`` (difflib), or ``""``."""
    match = difflib.get_close_matches(given, list(known), n=1, cutoff=0.6)
    if not match and given.lower() != given:
        match = difflib.get_close_matches(given.lower(), list(known), n=1, cutoff=0.6)
    return f"; {prefix}{match[0]}?" if match else ""
