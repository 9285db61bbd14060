"""VerFedGNN's adversaries are compromised parties: the attacks it declares, the parties chosen by
party id, a fake party refused. That an attacked run reports the targets' exposure, does not depend
on the placement and that the median limits a sign-flipping party are checked in
tests/integration/test_adversaries.py."""

from __future__ import annotations

import pytest

from adversaries import Adversaries, AdversaryError
from adversaries.condition import compromised_users
from data.synthetic import synthetic
from protocols.base import build_config
from protocols.verfedgnn.protocol import VerFedGNN


def test_verfedgnn_declares_the_byzantine_attacks_and_malformed():
    assert set(VerFedGNN.ATTACKS) == {
        "byzantine-scaled",
        "byzantine-signflip",
        "byzantine-random",
        "malformed",
    }


def test_verfedgnn_compromises_parties_by_party_id_and_refuses_fake_ones():
    ds = synthetic(n_users=12, n_items=30, avg_interactions=8, seed=0)
    p = VerFedGNN(ds, build_config(VerFedGNN.Config, {"parties": 4, "psi": False}), seed=3)
    p.set_adversaries(Adversaries(fraction=0.25, attack="byzantine-signflip"))
    assert p.adversary_plan.compromised == compromised_users(3, [0, 1, 2, 3], 1, "party")
    assert not p.adversary_plan.fake
    with pytest.raises(AdversaryError, match="no adversary role"):
        p.set_adversaries(Adversaries(fraction=0.25, attack="fedrecattack"))
    with pytest.raises(AdversaryError, match="compromised parties"):
        p.set_adversaries(Adversaries(fraction=0.25, attack="byzantine-signflip", mode="fake"))
