"""What a run tells its user: status lines for the long silent phases (stderr, only with progress
on), round counters that say what happened (a round without a server update is ``skipped``), the
summary's ``hosts`` as asked, the progress bar's main metric and loss, and node data that torch
can take without a "not writable" warning."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import ray.cloudpickle
import torch

from cluster.message import node_id
from data.synthetic import synthetic
from engine import RunSettings, run
from engine.callbacks import progress_postfix
from engine.report import read_rows
from nodes.conditions import Conditions
from nodes.deployment import Deployment, NodeSpec
from nodes.node import Node

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


def _tiny_fedlightgcn(tmp_path, progress: bool):
    settings = RunSettings(
        protocol="fedlightgcn",
        rounds=1,
        out=str(tmp_path),
        params={"dim": 8, "key_bits": 1024, "negatives": 8, "users_per_round": 0},
        progress=progress,
    )
    return run(settings, synthetic(n_users=12, n_items=30, avg_interactions=6, seed=1))


# --- A: status lines ---------------------------------------------------------------------------
@pytest.mark.ray
def test_long_phases_say_what_they_do_on_stderr_only_with_progress_on(ray_local, tmp_path, capfd):
    _tiny_fedlightgcn(tmp_path / "on", progress=True)
    out, err = capfd.readouterr()
    assert "host actors" in err
    assert "item tokens: blind-RSA OPRF with the key server (12 users)" in err
    assert "graph expansion at the matcher" in err
    assert "item tokens" not in out

    _tiny_fedlightgcn(tmp_path / "off", progress=False)
    out, err = capfd.readouterr()
    assert "host actors" not in err and "item tokens" not in err and "expansion" not in err
    assert "item tokens" not in out


# --- B: skipped rounds, C: hosts as asked --------------------------------------------------------
@pytest.mark.ray
def test_a_round_whose_uploads_are_all_late_is_skipped_and_hosts_is_as_asked(ray_local, tmp_path):
    rounds = 3
    settings = RunSettings(
        protocol="fedmf",
        rounds=rounds,
        hosts=1,
        out=str(tmp_path),
        params={"dim": 8, "eval_every": 0},
        progress=False,
        # a deadline no user device meets: every upload is late, the server never updates
        conditions=Conditions(deadline=1e-6),
    )
    run_dir, summary = run(settings, synthetic(n_users=20, n_items=40, seed=2))
    rows = read_rows(run_dir)
    assert all(r["late"] > 0 for r in rows)
    assert [r["train"]["skipped"] for r in rows] == [1] * rounds
    assert summary["hosts"] == 1  # what was asked; the server's own actor is counted apart
    assert summary["host_actors"] == 2


# --- D: the progress bar's figures ---------------------------------------------------------------
def test_progress_postfix_shows_the_main_metric_and_the_loss():
    train = {"participants": 256, "loss": 0.69314, "skipped": 0}
    metrics = {"hit@20": 0.5, "mrr@20": 0.2, "recall@20": 0.1234567, "recall@10": 0.05}
    assert progress_postfix(train, metrics) == {"loss": "0.6931", "recall@20": "0.1235"}
    # rating models: RMSE, not the first figure by name (global_mean_rmse, val_rmse)
    rating = {"global_mean_rmse": 1.1, "test_rmse": 0.95, "val_rmse": 0.97}
    assert progress_postfix({"loss": 2.0}, rating) == {"loss": "2", "test_rmse": "0.95"}
    # before the first evaluation: the loss alone; no loss and no main metric: nothing
    assert progress_postfix({"loss": 1.5}, {}) == {"loss": "1.5"}
    assert progress_postfix({"uploads": 3}, {"global_mean": 0.1}) == {}
    # a loss by another name (central models report e.g. bpr_loss)
    assert progress_postfix({"bpr_loss": 0.3, "participants": 4}, {}) == {"bpr_loss": "0.3"}


# --- E: node data is writable ---------------------------------------------------------------------
class HoldsData(Node):
    role = "user"

    def __init__(self, nid, ctx, data: np.ndarray):
        super().__init__(nid, ctx)
        self.data = data

    def as_tensor_quietly(self) -> bool:
        """torch.from_numpy on the data this node was given, warnings turned into errors."""
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.from_numpy(self.data)
        return bool(self.data.flags.writeable)


@pytest.mark.ray
def test_a_nodes_own_data_reaches_it_writable(ray_local):
    # large enough for Ray to put it in the object store (read-only, zero-copy when deserialized)
    data = np.arange(200_000, dtype=np.float32)
    spec = NodeSpec(HoldsData, node_id("user", 0), {"data": data}, packable=True)
    dep = Deployment([spec], seed=0)
    try:
        assert dep.call(node_id("user", 0), "as_tensor_quietly") is True
    finally:
        dep.close()
