"""What every benchmark records beside its figures (the machine, the date, the command), and what
the benchmark commands share: the one-line form of a user's mistake (:class:`UsageError`), the
checks of a dataset argument, a plain-text table.

Recorded results are kept: a file of ``benchmarks/out/`` that git tracks (``git ls-files
benchmarks/out``; RESULTS.md cites them) is overwritten only when the command is told to
(``--write``). A command checks its output name with :func:`claim_result` before it computes
anything, and refuses in one line (``--name NAME`` writes another file, ``--write`` overwrites
the recorded one); :func:`write_result` never overwrites a tracked file it was not allowed to,
whoever calls it: it writes ``<name>-local.json`` beside it and says so, so a long computation
is not lost either. Default names hold the dataset (and ``quick``): :func:`result_name`.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
# the split DGREC's benchmarks and every recorded ciao figure use: an iterated k-core of >= 10
# interactions per user and item, then a per-user random 80/20 split
K10_SPLIT = {"split": "random", "min_user_interactions": 10, "min_item_interactions": 10}


def machine() -> dict:
    import torch

    info = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def command() -> str:
    """The command line as typed (``python -m benchmarks.X ...``)."""
    return " ".join(["python", *sys.orig_argv[1:]])


def commit() -> str | None:
    """The commit the code was measured on (``git rev-parse --short HEAD``), ``+dirty`` when
    tracked files differ from it; None outside a git checkout or without git."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("diff", "--quiet", "HEAD", "--").returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


# --- where results go: recorded results are kept ------------------------------------------------
WRITE_HELP = (
    "overwrite the result file even where git tracks it (a recorded result that RESULTS.md "
    "cites); without it a tracked file is refused before anything runs"
)


def is_tracked(path: str | Path) -> bool:
    """Whether git tracks ``path`` (False outside a git checkout, or without git)."""
    path = Path(path).resolve()
    if not path.parent.is_dir():
        return False
    try:
        done = subprocess.run(
            ["git", "ls-files", "--error-unmatch", "--", path.name],
            cwd=path.parent,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def result_name(stem: str, *parts, quick: bool = False) -> str:
    """A default result name: ``stem-part-...[-quick]`` (the parts that are not empty: the
    dataset, a mode), so that runs on different data or budgets never share a file."""
    return "-".join([stem, *(str(p) for p in parts if p), *(["quick"] if quick else [])])


def dataset_tag(dataset: str) -> str:
    """A dataset argument as part of a file name: its last path component, safe characters
    (``ml-100k``; ``/data/x/ratings.csv`` is ``ratings.csv``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", Path(str(dataset)).name) or "data"


def check_name(name: str, flag: str = "--name") -> str:
    """A result name is a file name (no folder, not empty); else :class:`UsageError`."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise UsageError(f"{flag} {name!r}: a file name")
    return name


def claim_result(
    name: str, *, write: bool = False, suffixes: Sequence[str] = (".json",), flag: str = "--name"
) -> Path:
    """Before a benchmark computes anything: ``benchmarks/out/<name>.json`` (returned), refused in
    one line (:class:`UsageError`) when it, or its sibling of another of ``suffixes`` (the
    ``.md`` table, the ``.png`` plot), is a recorded result git tracks and ``write`` is False."""
    check_name(name, flag)
    paths = [OUT / f"{name}{suffix}" for suffix in suffixes]
    kept = [p for p in paths if is_tracked(p)]
    if kept and not write:
        raise UsageError(
            f"{shown_path(kept[0])} is a recorded result (git tracks it): {flag} NAME writes "
            "another file, --write overwrites it"
        )
    return paths[0]


def writable(path: Path, write: bool = False) -> Path:
    """``path``, or, when git tracks it and ``write`` is False, an untracked ``<stem>-local``
    file beside it (said on stderr): a tracked result is never overwritten unasked."""
    path = Path(path)
    if write or not is_tracked(path):
        return path
    other = path.with_name(f"{path.stem}-local{path.suffix}")
    n = 2
    while is_tracked(other):
        other, n = path.with_name(f"{path.stem}-local{n}{path.suffix}"), n + 1
    print(
        f"{shown_path(path)} is a recorded result (git tracks it) and --write was not given: "
        f"writing {shown_path(other)}",
        file=sys.stderr,
    )
    return other


def write_result(name: str, figures: dict, *, echo: bool = True, write: bool = False) -> Path:
    """Write ``benchmarks/out/<name>.json`` (the figures, the date, the command, the commit, the
    machine) and return its path; ``echo``: also print the whole document on stdout. A file git
    tracks is overwritten only with ``write`` (the command's ``--write``); else the document goes
    to ``<name>-local.json`` (:func:`writable`), whose path is returned."""
    check_name(name)
    OUT.mkdir(exist_ok=True)
    doc = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command(),  # as typed, `-m benchmarks.X` kept
        "commit": commit(),  # what RESULTS.md's commit column cites
        "machine": machine(),
        "figures": figures,
    }
    path = writable(OUT / f"{name}.json", write)
    path.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    if echo:
        print(json.dumps(doc, indent=2, default=float))
    return path


def parse_key_values(pairs: list[str], flag: str) -> dict:
    """``key=value`` pairs from a benchmark's command line (e.g. ``--set lr=0.01``); values are
    Python literals (numbers, True/False, quoted strings) or else bare strings."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"{flag} {pair!r}: expected key=value")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def scoped_key_values(pairs: list[str], flag: str, expect: str, owners=None) -> dict[str, dict]:
    """``OWNER.key=value`` pairs (``--set dgrec.lr=0.01``, ``--attack-param fedrecattack.x=1``) as
    ``{owner: {key: value}}``; a key without an owner, or with one not in ``owners`` (None: any), is
    the UsageError ``"{flag} {key}: {expect}"``."""
    out: dict[str, dict] = {}
    for key, value in parse_key_values(pairs, flag).items():
        owner, dot, name = key.partition(".")
        if not dot or (owners is not None and owner not in owners):
            raise UsageError(f"{flag} {key}: {expect}")
        out.setdefault(owner, {})[name] = value
    return out


# --- the command line: a user's mistake is one line and exit status 2 ---------------------------
class UsageError(SystemExit):
    """A mistake in a benchmark's command line or in the files it names. :func:`run_main` prints
    it as one line, ``benchmarks.X: message``, and returns 2; a command that does not go through
    :func:`run_main` exits with the message and status 1, without a traceback (a SystemExit)."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))  # one line, whatever the message held

    @property
    def message(self) -> str:
        return str(self.code)


@contextlib.contextmanager
def usage_errors(what: str | None, kinds: tuple[type[BaseException], ...] = (ValueError, OSError)):
    """Within: an exception of ``kinds`` is the user's mistake, raised as :class:`UsageError`
    ``"what: message"`` (``what=None``: the message alone, for errors that name their file). The default kinds cover the checks of the arguments and the loading of
    the data (ConfigError, UnknownDatasetError, DataFormatError, CheckpointError and RunDirError
    are ValueErrors, a missing dataset folder or file an OSError); wrap only those steps, so that
    a bug inside a run keeps its traceback."""
    try:
        yield
    except kinds as err:
        raise UsageError(str(err) if what is None else f"{what}: {err}") from err


def run_main(prog: str, body: Callable[[list[str] | None], int | None], argv) -> int:
    """``body(argv)``'s exit status (None: 0); a :class:`UsageError` is printed on stderr as
    ``prog: message`` and gives 2."""
    try:
        return body(argv) or 0
    except UsageError as err:
        print(f"{prog}: {err.message}", file=sys.stderr)
        return 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors (a missing or malformed flag) are :class:`UsageError`: one line
    and exit status 2 through :func:`run_main`, like the benchmarks' own checks."""

    def __init__(self, module: str, description: str, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(prog=f"python -m {module}", description=description, **kwargs)

    def error(self, message: str):
        raise UsageError(f"{message} (see --help)")


def check_data_dir(data_dir: str | None) -> None:
    if data_dir is not None and not Path(data_dir).is_dir():
        raise UsageError(f"--data-dir {data_dir}: not a directory")


def check_dataset(name: str, data_dir: str | None, flag: str = "--dataset") -> None:
    """A dataset argument that names a known dataset whose folder is there, or an existing path
    (a folder of dataset files, an interaction file; the loader judges its content), checked
    without reading the data; else :class:`UsageError` naming ``flag``."""
    from data.errors import UnknownDatasetError
    from data.registry import DATASETS, SPECS, dataset_file, dataset_folder, dataset_root

    check_data_dir(data_dir)
    with usage_errors(f"{flag} {name}"):
        if name in SPECS:
            dataset_root(name, data_dir)  # DatasetNotFoundError when the folder is missing
        elif name not in DATASETS and not (
            dataset_folder(name, data_dir) or dataset_file(name, data_dir)
        ):
            raise UnknownDatasetError(name, DATASETS)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned with spaces, a rule under the header: for the terminal."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([line(header), line("-" * w for w in widths), *(line(r) for r in rows)])


def shown_path(path: Path) -> str:
    """``path`` relative to the working directory where it lies below it, else absolute."""
    path = Path(path).resolve()
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)
