"""``main(argv)``: which command runs — the main job (no arguments: ``compare --quick``),
``compare ...``, one run (``[run] --protocol ...``) or ``--resume`` — and a Ctrl-C anywhere in it
as one line on stderr."""

from __future__ import annotations

import functools
import sys

from cli.compare import compare, parse_compare
from cli.parser import argv_or_sys, prog
from cli.resume import resume
from cli.run import parse, run
from cli.shared import dashboard


def one_line_on_ctrl_c(main):
    """Ctrl-C anywhere in ``main``: one line on stderr saying where it stopped and what was saved
    (engine.runner.RunInterrupted's message; a bare Ctrl-C, e.g. while the data load, says that
    nothing was written) and exit status 130, for ``python launch.py`` and ``privrec`` alike."""

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except KeyboardInterrupt as e:
            text = str(e) or "interrupted before the run started; nothing was written"
            print(f"{prog()}: {' '.join(text.split())}", file=sys.stderr)
            return 130

    return wrapper


@one_line_on_ctrl_c
def main(argv: list[str] | None = None) -> int:
    """``launch.py`` (no arguments: the main job, ``compare --quick``), ``launch.py compare
    ...``, or one run: ``launch.py [run] --protocol ...``; returns the exit status."""
    argv = argv_or_sys(argv)
    if not argv:
        return compare_main(["--quick"])
    if argv[0] == "compare":
        return compare_main(argv[1:])
    parser, args, params, dataset_opts, condition_values = parse(argv)
    dashboard(args)
    if args.resume is not None:
        return resume(parser, args, params)
    return run(parser, args, params, dataset_opts, condition_values)


def compare_main(argv: list[str]) -> int:
    """``launch.py compare ...`` (without the word ``compare``)."""
    parser, args, entries, dataset_opts, condition_values = parse_compare(argv)
    dashboard(args)
    return compare(parser, args, entries, dataset_opts, condition_values)
