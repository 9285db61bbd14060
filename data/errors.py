"""Errors raised by the dataset loaders.

Every error says which dataset, which file and (for text files) which 1-based line or (for
MATLAB files) which variable and row was at fault, so that a broken download is fixed by
reading one message rather than a traceback.
"""

from __future__ import annotations

import difflib
from pathlib import Path


class DataFormatError(ValueError):
    """A dataset file exists but its content does not have the expected format.

    The message starts with the file name and the place, e.g.
    ``"u.data line 17: expected 4 tab-separated fields, got 3 (file /data/ml-100k/u.data)"``.
    ``path`` and ``line`` (1-based, or ``None`` where lines do not apply) are kept as attributes.
    """

    def __init__(self, path: str | Path, where: str | None, problem: str, line: int | None = None):
        self.path = Path(path)
        self.line = line
        place = f"{self.path.name} {where}" if where else self.path.name
        super().__init__(f"{place}: {problem} (file {self.path})")


class DatasetNotFoundError(FileNotFoundError):
    """A dataset directory or one of its required files is missing."""

    def __init__(self, dataset: str, path: str | Path, detail: str = ""):
        self.dataset = dataset
        self.path = Path(path)
        message = f"dataset '{dataset}': missing {self.path}"
        super().__init__(f"{message}. {detail}" if detail else message)

    def __str__(self) -> str:  # FileNotFoundError would otherwise print "[Errno None]"
        return str(self.args[0])


class UnknownDatasetError(ValueError):
    """The dataset name is not one of the registered datasets."""

    def __init__(self, name: str, known: tuple[str, ...]):
        self.name = name
        super().__init__(
            f"unknown dataset '{name}' (neither a known name nor an existing folder or file); known "
            f"datasets: {', '.join(known)}; or give the path of a folder of dataset files "
            "(RecBole atomic files, LightGCN train.txt/test.txt, or CSV/TSV) or of one "
            ".csv/.tsv/.inter interaction file"
        )


class UnknownLayoutError(ValueError):
    """A dataset folder holds none of the file layouts the loaders know (one line: the folder,
    what was looked for and what was found)."""

    def __init__(self, root: str | Path, looked_for: str, detail: str):
        self.path = Path(root)
        super().__init__(
            f"{self.path}: no dataset layout recognised; looked for {looked_for}; {detail}"
        )


class EmptyDatasetError(DataFormatError):
    """A dataset that was read without a format error but leaves nothing to train on: no
    users, no items or no training rows (e.g. every row removed by a filter). The message names
    the dataset and, where one emptied it, the filter or split; ``path`` is the file or folder
    read (``None`` for the synthetic dataset) and ``line`` is ``None``."""

    def __init__(self, dataset: str, problem: str, path: str | Path | None = None):
        self.dataset = dataset
        self.path = None if path is None else Path(path)
        self.line = None
        ValueError.__init__(self, f"dataset '{dataset}': {problem}")


class UnknownOptionError(ValueError, TypeError):
    """Dataset options (keywords of ``load_dataset``, e.g. from a config's ``[dataset]`` table)
    that the dataset does not take; the message names each, with the closest known option where
    one is close, and lists the known ones. A ``TypeError`` too, as Python's own error for an
    unexpected keyword argument is."""

    def __init__(self, dataset: str, options: list[str], known: tuple[str, ...]):
        self.dataset = dataset
        self.options = list(options)
        named = []
        for option in self.options:
            close = difflib.get_close_matches(option, known, n=1)
            named.append(f"'{option}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        label = "option" if len(named) == 1 else "options"
        super().__init__(
            f"dataset '{dataset}': unknown {label} {', '.join(named)}; known options: "
            f"{', '.join(known)}"
        )
