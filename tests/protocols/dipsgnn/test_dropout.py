"""DIPSGNN with absent users (run conditions, nodes/conditions.py): a user offline in round 0
uploads in the first round it is online, one never online uploads nothing, and only the releases
that happened are accounted. That a dropout run completes and does not depend on the placement
(packed, dedicated) is checked for every protocol in tests/integration/test_dropout.py."""

from __future__ import annotations

import functools
import json
import math
import tempfile
from pathlib import Path

import conditioned_runs
import pytest

from cluster.ledger import is_eval_phase
from data.synthetic import synthetic
from nodes.conditions import Conditions
from privacy.accountant import epsilon_of, gaussian_event
from protocols.base import build_config
from protocols.dipsgnn.protocol import DIPSGNNProtocol

pytestmark = pytest.mark.ray

ROUNDS = 3
SEED = 0
DIPS = {"hidden_dim": 8, "user_dim": 4, "max_len": 12, "batch_size": 16, "epochs": ROUNDS}


def _drive(proto, conditions, placement="packed", hosts=1, tap=False):
    return conditioned_runs.drive(proto, conditions, ROUNDS, placement, hosts, tap)


_same = conditioned_runs.same


# --------------------------------------------------------------------------- dipsgnn


def _dipsgnn():
    ds = synthetic(n_users=8, n_items=30, avg_interactions=10, seed=0)
    return DIPSGNNProtocol(ds, build_config(DIPSGNNProtocol.Config, DIPS), seed=SEED)


def _dips_conditions():
    """dropout 0.3 (at SEED: users 2, 3, 6 offline in round 0; 2, 3, 5 in round 1; 7 in round
    2) and user/0 never online (a trace)."""
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "trace.json"
        trace.write_text(json.dumps({"user/0": []}))
        return Conditions(dropout=0.3, trace=str(trace))  # the trace is read here


@functools.cache
def _dipsgnn_run():
    return _drive(_dipsgnn(), _dips_conditions(), "packed", 1, tap=True)


def _first_online(cond, u):
    return next((r for r in range(ROUNDS) if not cond.offline(SEED, r, f"user/{u}")), -1)


def test_dipsgnn_user_dropout_completes_and_late_users_upload(ray_local):
    cond = _dips_conditions()
    a = _dipsgnn_run()
    users = a["protocol"].users
    first = {int(u): _first_online(cond, u) for u in users}
    assert first == {0: -1, 1: 0, 2: 2, 3: 2, 4: 0, 5: 0, 6: 1, 7: 0}
    for r, row in enumerate(a["rows"]):
        # asked to act: everyone in round 0, later the users the curator does not hold yet
        asked = [u for u in users if first[int(u)] < 0 or first[int(u)] >= r]
        offline = [f"user/{u}" for u in asked if cond.offline(SEED, r, f"user/{u}")]
        assert row["dropped"] == sorted(offline)
        # late uploads: whoever is online and not yet held uploads this round
        assert row["train"]["uploads"] == sum(1 for u in users if first[int(u)] == r)
        assert row["train"]["skipped"] == 0 and math.isfinite(row["train"]["loss"])
    assert [row["train"]["examples"] for row in a["rows"]] == sorted(
        row["train"]["examples"] for row in a["rows"]
    )  # the training set grows as late users upload
    assert 0 <= a["metrics"]["recall@20"] <= 1


def test_dipsgnn_accountant_counts_only_releases_that_happened(ray_local):
    cond = _dips_conditions()
    a = _dipsgnn_run()
    proto, tapped = a["protocol"], a["tapped"]
    c = proto.config
    full = {}
    for row, u in enumerate(proto.users):
        u = int(u)
        first = _first_online(cond, u)
        mine = [m for m in tapped if m.src == f"user/{u}" and not is_eval_phase(m.phase)]
        # one upload (features + sequence) in the first round the user is online, none else
        assert sorted((m.round, m.kind) for m in mine) == (
            [] if first < 0 else [(first, "features"), (first, "sequence")]
        )
        acc = proto.user_privacy(u)
        epochs = 0 if first < 0 else ROUNDS - first  # epochs trained while holding its data
        assert acc["uploaded_round"] == first and acc["epochs"] == epochs
        assert acc["epsilon1_features"] == (c.eps1 if first >= 0 else 0.0)
        releases = int(proto.edge_prefixes[row]) * c.steps * epochs
        assert acc["releases_per_edge"] == releases
        release = gaussian_event(proto.sigma, proto.sensitivity)  # one Gaussian release (eq. 7)
        assert acc["epsilon2"] == epsilon_of(release, releases, c.privacy_delta)
        # the same user had it uploaded in round 0 (its data held for every epoch)
        full[u] = epsilon_of(
            release, int(proto.edge_prefixes[row]) * c.steps * ROUNDS, c.privacy_delta
        )
        if first == 0:
            assert acc["epsilon2"] == full[u]  # offline later (users 5, 7): nothing saved
        else:
            assert acc["epsilon2"] < full[u]  # offline in round 0: fewer releases
    assert proto.user_privacy(0)["epsilon2"] == 0.0  # never online: nothing released
    assert 0 < proto.user_privacy(6)["epsilon2"] < full[6]  # uploaded in round 1
    # users 2 (offline in rounds 0 and 1) and 4 (online throughout) have sequences whose edges
    # are in as many prefixes; 2's data was trained on in one epoch, 4's in three
    assert proto.edge_prefixes[2] == proto.edge_prefixes[4] > 0
    assert proto.user_privacy(2)["epsilon2"] < proto.user_privacy(4)["epsilon2"]
    priv = proto.privacy()
    assert priv["epsilon"] == max(proto.user_privacy(int(u))["epsilon2"] for u in proto.users)
    assert priv["users_uploaded"] == priv["users_held"] == len(proto.users) - 1
    # no ranking for the user the curator holds nothing of
    assert "user/0" not in {m.dst for m in tapped if m.kind == "topk"}
