"""Datasets: loaders for the real formats, filters, splits, partitioners and the synthetic
generator. ``load_dataset(name, data_dir, ...)`` is the entry point; ``DATASETS`` lists names;
a folder path instead of a name loads a dataset in a standard file format
(:mod:`data.loaders.files`)."""

from data.registry import DATASETS, load_dataset

__all__ = ["DATASETS", "load_dataset"]
