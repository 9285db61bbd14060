"""DIPSGNN's adversaries are fake users whose uploads stay in the LDP mechanism's range and lead
to the targets: the attacks it declares, out-of-range features told apart, and on a small
synthetic run the fake uploads are valid mechanism outputs that raise the targets' exposure. That
an attacked run does not depend on the placement is checked in
tests/integration/test_adversaries.py."""

from __future__ import annotations

import numpy as np
import pytest

from adversaries import Adversaries
from data.synthetic import synthetic
from engine import deploy, run_rounds
from protocols.base import build_config
from protocols.dipsgnn.protocol import DIPSGNNProtocol


def test_dipsgnn_declares_the_fake_user_attacks_and_malformed():
    assert set(DIPSGNNProtocol.ATTACKS) == {"random", "bandwagon", "malformed"}


def test_out_of_range_features_are_told_apart():
    from privacy.feature_perturbation import (
        feature_vector_layout,
        feature_vector_length,
        in_output_range,
        perturb_user_features,
    )

    kinds = {"age": "numeric", "job": "categorical"}
    card = {"job": 4}
    ranges = {"age": (0.0, 100.0)}
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = perturb_user_features({"age": 30.0, "job": 2}, kinds, card, ranges, 5.0, rng)
        assert in_output_range(x, kinds, card, 5.0)
    n = feature_vector_length(feature_vector_layout(kinds, card))
    assert not in_output_range(np.full(n, 50.0, np.float32), kinds, card, 5.0)
    assert not in_output_range(np.zeros(n + 1, np.float32), kinds, card, 5.0)


DIPS = {
    "hidden_dim": 16,
    "user_dim": 8,
    "max_len": 30,
    "batch_size": 32,
    "epochs": 8,
    "lr": 0.01,
    "private_graph": False,
}


def _dipsgnn(adv, hosts=1, rounds=4, tap=False):
    ds = synthetic(n_users=40, n_items=40, avg_interactions=20, seed=1)
    p = DIPSGNNProtocol(ds, build_config(DIPSGNNProtocol.Config, DIPS), seed=3)
    p.set_adversaries(adv)
    dep = deploy(p, "packed", hosts, tap=tap)
    try:
        return p, run_rounds(p, dep, rounds, eval_every=0)[-1].metrics, dep.tapped
    finally:
        dep.close()


@pytest.mark.ray
def test_dipsgnn_fake_uploads_in_range_raise_exposure(ray_local):
    from cluster import wire
    from cluster.message import index_of
    from data.sequences import train_length
    from privacy.feature_perturbation import in_output_range

    _, honest, _ = _dipsgnn(Adversaries())
    adv = Adversaries(fraction=0.1, attack="random")
    p, attacked, tapped = _dipsgnn(adv, tap=True)
    er = "target_er@10"
    # measured: 0.031 honest, 0.417 with 4 fake users (random), 0.135 (bandwagon)
    assert attacked[er] > honest[er] + 0.2, (honest, attacked)
    assert attacked["recall@20"] > 0.3

    fake = set(p.adversary_plan.fake)
    targets = np.array(p.adversary_plan.targets)
    pub, c = p.public, p.config
    longest = train_length(c.max_len, c.train_fraction)
    seen = {"features": 0, "sequence": 0}
    for m in tapped:
        if m.kind not in seen or index_of(m.src) not in fake:
            continue
        seen[m.kind] += 1
        if m.kind == "features":  # an output of Algorithm 3, as the validator would see it
            x = wire.decode_dense(m.payload)
            assert in_output_range(x, pub.feature_kinds, pub.feature_cardinality, c.eps1)
        else:  # catalogue ids, no longer than an honest upload, every other item a target
            seq = wire.decode_ids(m.payload)
            assert 2 <= len(seq) <= longest and seq.max() < pub.n_items
            assert np.isin(seq[1::2], targets).all() and not np.isin(seq[0::2], targets).any()
    assert seen == {"features": len(fake), "sequence": len(fake)}
    honest_feats = [
        wire.decode_dense(m.payload)
        for m in tapped
        if m.kind == "features" and index_of(m.src) not in fake
    ]
    assert all(
        in_output_range(x, pub.feature_kinds, pub.feature_cardinality, c.eps1) for x in honest_feats
    )
