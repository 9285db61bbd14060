"""The user graph decentralised protocols talk over (data/graphs.py)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import needs_shared_data
from scipy.sparse.csgraph import connected_components

from data.graphs import user_graph
from data.synthetic import synthetic


def components(graph):
    deg = np.array([len(x) for x in graph])
    rows = np.repeat(np.arange(len(graph)), deg)
    a = sp.csr_matrix((np.ones(len(rows)), (rows, np.concatenate(graph))), shape=(len(graph),) * 2)
    return connected_components(a)[0]


def check_symmetric_simple(graph):
    for u, nbrs in enumerate(graph):
        assert u not in nbrs and len(set(nbrs)) == len(nbrs)
        for v in nbrs:
            assert u in graph[v]


def test_dataset_links_are_used_symmetric_and_capped():
    ds = synthetic(n_users=200, n_items=100, seed=2)
    g = user_graph(ds, k=3, seed=0)
    check_symmetric_simple(g)
    links = {tuple(x) for x in ds.undirected_links().tolist()}
    assert all((u, v) in links for u, nbrs in enumerate(g) for v in nbrs)
    assert user_graph(ds, k=3, seed=0)[5].tolist() == g[5].tolist()  # deterministic


def test_no_links_no_features_is_a_clear_error():
    ds = synthetic(n_users=20, n_items=30, seed=0)
    ds.user_links, ds.user_features = None, {}
    with pytest.raises(ValueError, match="no user links"):
        user_graph(ds)


@needs_shared_data
def test_ml100k_region_or_occupation_graph_is_connected():
    from data.registry import load_dataset

    ds = load_dataset("ml-100k")
    g = user_graph(ds, k=10, seed=0)
    check_symmetric_simple(g)
    assert components(g) == 1
    zp, occ = ds.user_features["zip_prefix"], ds.user_features["occupation"]
    assert all(zp[u] == zp[v] or occ[u] == occ[v] for u, nbrs in enumerate(g) for v in nbrs)
