"""verfedgnn with the de-anonymization attack switched on (``deanonymization = true``), on a real local
Ray instance: adversarial users reach only the victim, the attacker infers from exactly the
victim's projected aggregate it received, and the ordering FedPerGNN-style ≫ VerFedGNN."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cluster import wire
from data.synthetic import synthetic
from engine import deploy, run_rounds
from privacy.leakage.deanonymization import match_aggregates
from privacy.projection import GaussianProjection, reconstruct
from protocols.base import ConfigError, build_config
from protocols.verfedgnn.messages import decode_public
from protocols.verfedgnn.protocol import VerFedGNN

pytestmark = pytest.mark.ray

N_USERS, N_ITEMS = 30, 60


def test_attack_config_errors():
    for name, bad in (
        ("attack_victim", {"attack_victim": 0}),  # the attacker itself
        ("attack_victim", {"attack_victim": 9}),
        ("attack_party", {"attack_party": -1}),
        ("attack_p_ad", {"attack_p_ad": 0.0}),
        ("gnn", {"gnn": "mf"}),
    ):
        with pytest.raises(ConfigError, match=name):
            build_config(VerFedGNN.Config, {"deanonymization": True, **bad})
    build_config(
        VerFedGNN.Config, {"deanonymization": False, "attack_victim": 0}
    )  # off: not checked


@pytest.mark.slow  # a full attack run: CI runs `-m slow`
def test_attack_run_reports_ordering_from_the_received_aggregate(ray_local):
    ds = synthetic(n_users=N_USERS, n_items=N_ITEMS, avg_interactions=12, seed=0)
    params = {
        "parties": 3,
        "psi": True,
        "psi_key_bits": 1024,
        "deanonymization": True,
        "attack_p_ad": 0.8,
    }
    proto = VerFedGNN(ds, build_config(VerFedGNN.Config, params), seed=3)
    dep = deploy(proto, "packed", 1, tap=True)
    try:
        # PSI (adversarial users included) and one iteration, evaluated
        (done,) = run_rounds(proto, dep, 1, eval_every=0)
        metrics = done.metrics
        inference = dep.call("party/0", "get_deanonymization")
        aligned = dep.call("party/0", "get_aligned_users")  # raw user id at each aligned index
        private = {p: dep.call(f"party/{p}", "get_private") for p in range(3)}
    finally:
        dep.close()
    adv = proto.adversaries
    victim_items = np.flatnonzero(proto.owner == 1)
    assert len(adv.users) == round(0.8 * len(victim_items)) == metrics["attack_adversarial_users"]
    assert np.isin(adv.items, victim_items).all() and len(np.unique(adv.items)) == len(adv.items)
    # adversarial users rate only the victim's items, once each; the other parties never see them
    for p in range(3):
        users = aligned[private[p]["train"][0]]  # raw ids of the party's training ratings
        assert np.isin(adv.users, users).all() == (p == 1)
        assert np.isin(users, adv.users).any() == (p == 1)

    # the attacker's inference is eq. (I.1) on Φᵀ Y_victim of the last evaluation exchange
    msg = [m for m in dep.tapped if m.kind == "eval_public_params" and m.dst == "party/0"][-1]
    seed, _, _ = decode_public(msg.payload)
    y = [m for m in dep.tapped if m.kind == "aggregates" and m.src == "party/1"]
    y = wire.decode_dense([m for m in y if m.dst == "party/0"][-1].payload)
    n = proto.n_users
    x_hat = reconstruct(GaussianProjection(n // 5, n, seed), torch.from_numpy(y[0])).double()
    order = {int(u): j for j, u in enumerate(aligned)}
    rows = np.array([order[int(u)] for u in inference["users"]])
    adv_rows = np.array([order[int(u)] for u in adv.users])
    mine = match_aggregates(x_hat[rows], x_hat[adv_rows], adv.items, beam=32)
    assert all(np.array_equal(a, b) for a, b in zip(mine, inference["items"]))

    fed, ver = metrics["attack_fedpergnn_style_f1"], metrics["attack_verfedgnn_f1"]
    assert metrics["attack_fedpergnn_style_precision"] == 1.0
    assert fed > 0.5 and fed > 2 * ver
    assert np.isfinite(metrics["test_rmse"])
