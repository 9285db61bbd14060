"""privrec's command line: ``python launch.py``, ``privrec`` (the console command).

Read top to bottom: :mod:`cli.commands` (which command: the main job, compare, one run, a resume),
:mod:`cli.run` and :mod:`cli.compare` (each command's parser, checks and run),
:mod:`cli.resume` (``--resume``), then what they share: :mod:`cli.parser` (one-line errors),
:mod:`cli.arguments` (the flags of both commands), :mod:`cli.adversary_args`,
:mod:`cli.protocol_flags`, :mod:`cli.config_file` (``--config``) and :mod:`cli.shared`.
Ray and torch are imported inside the functions that need them, so that ``--help`` and a
mistake on the command line stay quick.
"""

from cli.commands import main

__all__ = ["main"]
