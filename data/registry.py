"""The dataset names the project knows and the one entry point that loads any of them."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from data.errors import (
    DatasetNotFoundError,
    EmptyDatasetError,
    UnknownDatasetError,
    UnknownOptionError,
)
from data.loaders import (
    RawData,
    build_dataset,
    load_diffnet,
    load_filmtrust,
    load_gowalla,
    load_ml100k,
    load_tang,
)
from data.loaders.files import detect_layout, file_layout, read_folder
from data.loaders.movielens import PUBLISHED_SPLITS as ML100K_SPLITS
from data.loaders.plain import DIFFNET_SPLITS
from data.synthetic import synthetic_raw
from data.types import RecDataset

DATASETS: tuple[str, ...] = (
    "synthetic",
    "ml-100k",
    "gowalla",
    "ciao",
    "epinions",
    "filmtrust",
    "diffnet-yelp",
    "diffnet-flickr",
)


@dataclass(frozen=True)
class DatasetSpec:
    """How to read one real dataset: its reader, a file that marks its folder, its published
    splits (the first is the default of ``split="auto"``) and whether it has timestamps."""

    name: str
    read: Callable[..., RawData]  # read(root, split=<published name or None>)
    marker: str
    published_splits: tuple[str, ...] = ()
    has_timestamps: bool = False


SPECS: dict[str, DatasetSpec] = {
    "ml-100k": DatasetSpec("ml-100k", load_ml100k, "u.data", ML100K_SPLITS, True),
    "gowalla": DatasetSpec("gowalla", load_gowalla, "train.txt", ("lightgcn",)),
    "ciao": DatasetSpec("ciao", partial(load_tang, dataset="ciao"), "rating.mat", (), True),
    "epinions": DatasetSpec("epinions", partial(load_tang, dataset="epinions"), "rating.mat"),
    "filmtrust": DatasetSpec("filmtrust", load_filmtrust, "ratings.txt"),
    "diffnet-yelp": DatasetSpec(
        "diffnet-yelp", partial(load_diffnet, dataset="diffnet-yelp"), "yelp.links", DIFFNET_SPLITS
    ),
    "diffnet-flickr": DatasetSpec(
        "diffnet-flickr",
        partial(load_diffnet, dataset="diffnet-flickr"),
        "flickr.links",
        DIFFNET_SPLITS,
    ),
}


def default_data_dir() -> Path | None:
    """``<repo root>/../shared/data`` (the repo root is the parent of the ``data`` package
    directory) if that directory exists, else ``None``."""
    candidate = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def dataset_root(name: str, data_dir: str | Path | None) -> Path:
    """The folder holding dataset ``name``: ``<data_dir>/<name>``, or ``data_dir`` itself when it
    directly contains the dataset's files; ``data_dir=None`` means :func:`default_data_dir`."""
    spec = SPECS[name]
    base = Path(data_dir) if data_dir is not None else default_data_dir()
    if base is None:
        raise DatasetNotFoundError(
            name,
            Path(__file__).resolve().parent.parent.parent / "shared" / "data",
            "No data_dir was given and the default data directory does not exist; "
            "pass data_dir=<folder containing the dataset folders>.",
        )
    if (base / name).is_dir():
        return base / name
    if (base / spec.marker).is_file():
        return base
    raise DatasetNotFoundError(
        name, base / name, f"Neither it nor {base} holds the dataset (looked for {spec.marker})."
    )


def _resolve_split(
    name: str, split: str, published: tuple[str, ...], has_timestamps: bool
) -> tuple[str, str | None]:
    """``(mode, published split name)`` for the ``split`` argument of :func:`load_dataset`."""
    if not isinstance(split, str):
        raise ValueError(f"split must be a string, got {split!r}")
    if split == "auto":
        return ("published", published[0]) if published else ("random", None)
    if split == "random":
        return "random", None
    if split == "temporal":
        if not has_timestamps:
            raise ValueError(
                f"dataset '{name}' has no timestamps, so split='temporal' is impossible"
            )
        return "temporal", None
    if split == "published" and published:
        return "published", published[0]
    if split in published:
        return "published", split
    choices = ["auto", "random"] + (["temporal"] if has_timestamps else [])
    choices += ["published", *published] if published else []
    raise ValueError(f"dataset '{name}' has no split {split!r}; choose from {', '.join(choices)}")


def _check_arguments(test_fraction: float, min_user: int, min_item: int) -> None:
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float, np.floating)):
        raise ValueError(f"test_fraction must be a number in [0, 1], got {test_fraction!r}")
    if not 0.0 <= float(test_fraction) <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction!r}")
    for label, value in (("min_user_interactions", min_user), ("min_item_interactions", min_item)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{label} must be a non-negative integer, got {value!r}")


def dataset_folder(name: str | Path, data_dir: str | Path | None = None) -> Path | None:
    """The folder a dataset argument that is not a registered name points to: ``name`` itself
    when it is a directory, else ``<data_dir>/<name>`` when that is one; ``None`` otherwise."""
    return _dataset_path(name, data_dir, Path.is_dir)


def dataset_file(name: str | Path, data_dir: str | Path | None = None) -> Path | None:
    """The file a dataset argument that is not a registered name points to, found as
    :func:`dataset_folder` finds a folder."""
    return _dataset_path(name, data_dir, Path.is_file)


def _dataset_path(name: str | Path, data_dir: str | Path | None, kind) -> Path | None:
    path = Path(name).expanduser()
    if kind(path):
        return path.resolve()
    if data_dir is not None and not path.is_absolute() and kind(Path(data_dir) / path):
        return (Path(data_dir) / path).resolve()
    return None


# the keywords of synthetic_raw that a caller may give (``seed`` is load_dataset's own)
SYNTHETIC_OPTIONS: tuple[str, ...] = tuple(
    p for p in inspect.signature(synthetic_raw).parameters if p != "seed"
)
# load_dataset's own keywords, listed beside SYNTHETIC_OPTIONS when an option is unknown
LOAD_OPTIONS = (
    "split",
    "test_fraction",
    "min_user_interactions",
    "min_item_interactions",
    "implicit",
)


def _check_not_empty(dataset: RecDataset, path: Path | None) -> None:
    """Refuse a dataset with no users, no items or no training rows, naming what emptied it:
    nothing read, the k-core filter (with its thresholds) or the split."""
    meta = dataset.meta
    if dataset.n_users and dataset.n_items and len(dataset.train):
        return
    if not meta.get("interactions_read"):
        problem = "no interactions were read"
        if meta.get("files"):
            problem += f" (files: {', '.join(meta['files'])})"
        raise EmptyDatasetError(dataset.name, problem, path)
    kcore = meta.get("kcore")
    if kcore is not None and (dataset.n_users == 0 or dataset.n_items == 0):
        thresholds = [
            f"{key}={kcore[key]}"
            for key in ("min_user_interactions", "min_item_interactions")
            if kcore[key] > 0
        ]
        raise EmptyDatasetError(
            dataset.name,
            f"the k-core filter {' and '.join(thresholds)} removes every user and item "
            f"(of {meta['raw_user_ids']} users, {meta['raw_item_ids']} items and "
            f"{meta['interactions_read']} interactions read); lower it",
            path,
        )
    raise EmptyDatasetError(
        dataset.name,
        f"the {meta['split_name']} split leaves no training interactions ({dataset.n_users} "
        f"users, {len(dataset.test)} test rows"
        + (f", test_fraction {meta['test_fraction']})" if meta.get("test_fraction") else ")"),
        path,
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _provenance(
    dataset: RecDataset, fmt: str, root: Path | None, source: Path | None = None
) -> dict:
    """What a run report records about the data: format, path (``source``, else ``root``),
    files (sha256, bytes), sizes."""
    meta = dataset.meta
    if "file_sha256" not in meta and root is not None:  # a named dataset: hash what was read
        present = [f for f in meta.get("files", []) if (root / f).is_file()]
        meta["file_sha256"] = {f: _sha256(root / f) for f in present}
        meta["file_bytes"] = {f: (root / f).stat().st_size for f in present}
    hashes, sizes = meta.get("file_sha256", {}), meta.get("file_bytes", {})
    links = dataset.user_links
    return {
        "name": dataset.name,
        "format": fmt,
        "path": None if (source or root) is None else str(source or root),
        "files": {f: {"sha256": hashes[f], "bytes": sizes.get(f)} for f in hashes},
        "split": meta.get("split_name"),
        "implicit": meta.get("implicit"),
        "n_users": dataset.n_users,
        "n_items": dataset.n_items,
        "n_train": len(dataset.train),
        "n_val": 0 if dataset.val is None else len(dataset.val),
        "n_test": len(dataset.test),
        "n_links": 0 if links is None else len(links),
        "n_tags": 0 if dataset.item_tags is None else int(dataset.item_tags.shape[1]),
        "n_user_features": len(dataset.user_features),
        "raw_user_ids": meta.get("raw_user_ids"),
        "raw_item_ids": meta.get("raw_item_ids"),
        "has_ratings": dataset.has_ratings,
        "has_timestamps": dataset.train.timestamp is not None,
    }


def load_dataset(
    name: str | Path,
    data_dir: str | Path | None = None,
    *,
    split: str = "auto",
    seed: int = 0,
    min_user_interactions: int = 0,
    min_item_interactions: int = 0,
    implicit: bool = False,
    test_fraction: float = 0.2,
    **synthetic_kwargs,
) -> RecDataset:
    """Load dataset ``name`` (one of :data:`DATASETS`, or the path of a folder of dataset files
    or of one interaction file) as a :class:`RecDataset`.

    A folder (``name`` itself, or ``<data_dir>/<name>``) holds a dataset in a standard file
    format — RecBole atomic files, LightGCN-style ``train.txt``/``test.txt`` or CSV/TSV — which
    is detected (see :mod:`data.loaders.files`); its own train/test files, when it has them,
    are the published split ``"files"``. A file (found the same way) is read on its own as a
    CSV/TSV or RecBole ``.inter`` interaction file (:func:`data.loaders.files.file_layout`).

    ``split``: ``"auto"`` — the published split where there is one (ml-100k ``u1``, gowalla's
    LightGCN train/test, DiffNet train/val/test), else ``"random"``; ``"random"`` — per-user
    random split of all interactions (published parts pooled), see :mod:`data.splits`;
    ``"temporal"`` — per-user latest ``test_fraction`` into test (ml-100k, ciao, synthetic);
    ``"published"`` or a published split's name (ml-100k: ``u1``..``u5``, ``ua``, ``ub``).
    ``min_user_interactions`` / ``min_item_interactions``: iterated k-core applied before a
    random/temporal split, or to the train part of a published split. ``implicit=True`` drops
    ratings and duplicate pairs. ``synthetic_kwargs`` go to :func:`data.synthetic.synthetic_raw`
    (only for ``"synthetic"``; one it does not take raises :class:`~data.errors.UnknownOptionError`).
    A dataset left without users, items or training rows (e.g. by the k-core filter) raises
    :class:`~data.errors.EmptyDatasetError`. The full pipeline is described in :mod:`data.loaders.build`;
    ``meta`` records what was done, and ``meta["provenance"]`` the format, the files read (with
    their sha256) and the sizes (users, items, links, ...).
    """
    folder = file = None
    if not isinstance(name, (str, Path)) or str(name) not in DATASETS:
        if isinstance(name, (str, Path)):
            folder = dataset_folder(name, data_dir)
            file = None if folder is not None else dataset_file(name, data_dir)
        if folder is None and file is None:
            raise UnknownDatasetError(str(name), DATASETS)
    _check_arguments(test_fraction, min_user_interactions, min_item_interactions)
    if synthetic_kwargs and (folder is not None or file is not None or name != "synthetic"):
        raise ValueError(
            f"unexpected arguments for dataset '{name}': {', '.join(sorted(synthetic_kwargs))} "
            "(only 'synthetic' takes generator parameters)"
        )
    unknown = sorted(set(synthetic_kwargs) - set(SYNTHETIC_OPTIONS))
    if unknown:
        raise UnknownOptionError("synthetic", unknown, SYNTHETIC_OPTIONS + LOAD_OPTIONS)
    source = None
    if folder is not None or file is not None:
        layout = detect_layout(folder) if file is None else file_layout(file)
        mode, published = _resolve_split(
            layout.name, split, layout.published_splits, layout.has_timestamps
        )
        root, fmt, source = layout.root, layout.format, file
        raw = read_folder(layout, published)
    elif name == "synthetic":
        mode, _ = _resolve_split(name, split, (), True)
        raw = synthetic_raw(seed=seed, **synthetic_kwargs)
        root, fmt = None, "synthetic"
    else:
        spec = SPECS[name]
        mode, published = _resolve_split(name, split, spec.published_splits, spec.has_timestamps)
        root, fmt = dataset_root(name, data_dir), f"named:{name}"
        raw = spec.read(root, split=published)
    dataset = build_dataset(
        raw,
        split=mode,
        seed=seed,
        test_fraction=float(test_fraction),
        min_user_interactions=int(min_user_interactions),
        min_item_interactions=int(min_item_interactions),
        implicit=implicit,
        data_dir=root,
    )
    _check_not_empty(dataset, source or root)
    dataset.meta["provenance"] = _provenance(dataset, fmt, root, source)
    return dataset
