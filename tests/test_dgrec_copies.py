"""benchmarks.dgrec_copies reads a DGREC checkpoint offline: ranking each user with its own copy
gives the Recall@K the run itself reported, and the users' copies differ."""

from __future__ import annotations

import pytest

from benchmarks.dgrec_copies import gradient_sizes, recall, users_of
from data.synthetic import synthetic
from engine import RunSettings, run

pytestmark = pytest.mark.ray


def test_own_copies_reproduce_the_runs_recall(ray_local, tmp_path):
    data = synthetic(n_users=30, n_items=40, seed=5)
    params = {"dim": 8, "hidden": 8, "n_interests": 2, "pairs": 8}
    settings = RunSettings(
        protocol="dgrec",
        rounds=3,
        seed=1,
        hosts=2,
        out=str(tmp_path),
        params=params,
        progress=False,
        checkpoint_every=3,
    )
    run_dir, summary = run(settings, data)
    state, users = users_of(run_dir)
    assert state["next_round"] == 3 and len(users) == data.n_users
    own = recall(users, lambda u: u.model, k=20)
    assert own == pytest.approx(summary["metrics"]["recall@20"], abs=1e-9)
    a, b = (dict(u.model.named_parameters())["item_emb.weight"] for u in users[:2])
    assert not bool((a == b).all())  # each user's copy took its own neighbourhoods' steps
    sizes = gradient_sizes(users[:5], clip=0.1)
    assert sizes["elements"] == sum(p.numel() for p in users[0].shared_params)
    assert 0 < sizes["share_zero"] < 1 and 0 <= sizes["share_clipped"] < 1
    assert 0 < sizes["median_nonzero"] <= sizes["p90_nonzero"]
