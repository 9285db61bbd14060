"""privrec's command line: ``python launch.py`` (the main job: compare the protocols on the
embedded synthetic data), ``python launch.py compare ...``, ``python launch.py [run] --protocol
NAME ...``; ``--help`` explains every flag. The console command ``privrec`` is the same program.
The code is the ``cli`` package (cli/__init__.py says where to start reading)."""

import sys

from cli import main
from cli.parser import prog

if __name__ == "__main__":
    try:
        sys.exit(main())  # a Ctrl-C inside main: its one line and exit status 130
    except KeyboardInterrupt:  # ... after main returned
        print(f"{prog()}: interrupted", file=sys.stderr)
        sys.exit(130)
