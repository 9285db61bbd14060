"""dipsgnn on a real local Ray instance: no clean feature leaves a user, σ is the calibrated one,
placement invariance, and a tiny run beats the trivial baselines."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from cluster import wire
from data.sequences import train_length
from data.synthetic import synthetic
from engine import deploy, run_rounds
from privacy.accountant import epsilon_of, gaussian_event, sampled_gaussian_event
from privacy.calibration import (
    DPSGD_RDP_ORDERS,
    calibrate_sigma,
    calibrated_releases,
    edge_sensitivity,
)
from privacy.feature_perturbation import (
    encode_user_features,
    feature_vector_layout,
    sampled_feature_count,
)
from protocols import get_protocol
from protocols.base import ConfigError, build_config
from protocols.dipsgnn.protocol import DIPSGNNProtocol

pytestmark = pytest.mark.ray

N_USERS, N_ITEMS = 10, 30
SMALL = {"hidden_dim": 8, "user_dim": 4, "max_len": 12, "batch_size": 16, "epochs": 3}


def small_dataset(seed=0, n_users=N_USERS, n_items=N_ITEMS, avg=10):
    return synthetic(n_users=n_users, n_items=n_items, avg_interactions=avg, seed=seed)


def run(params, placement="packed", hosts=1, rounds=2, dataset=None, tap=False, seed=3):
    ds = dataset or small_dataset()
    protocol = DIPSGNNProtocol(ds, build_config(DIPSGNNProtocol.Config, params), seed=seed)
    dep = deploy(protocol, placement, hosts, tap=tap)
    try:
        done = run_rounds(protocol, dep, rounds, eval_every=0)  # evaluated after the last
        trains = [r.train for r in done]
        metrics = done[-1].metrics
        state = dep.call("server/0", "get_state")
        return {
            "protocol": protocol,
            "train": trains,
            "metrics": metrics,
            "ledger": dep.ledger.rows(),
            "tapped": dep.tapped,
            "state": state,
            "privacy": protocol.privacy(),
        }
    finally:
        dep.close()


def test_registered_and_bad_config():
    assert get_protocol("dipsgnn") is DIPSGNNProtocol
    for key, value in [("eps2", 0.0), ("privacy_delta", 1.0), ("max_len", 2), ("accountant", "x")]:
        with pytest.raises(ConfigError, match=key):
            build_config(DIPSGNNProtocol.Config, {key: value})
    cfg = build_config(DIPSGNNProtocol.Config, {"features": "age,shoe_size"})
    with pytest.raises(ConfigError, match="features"):
        DIPSGNNProtocol(small_dataset(), cfg, seed=0)


@pytest.mark.parametrize("eps1", [2.5, 20.0])
def test_no_clean_feature_leaves_a_user(ray_local, eps1):
    ds = small_dataset()
    out = run({**SMALL, "eps1": eps1}, rounds=1, dataset=ds, tap=True)
    proto = out["protocol"]
    layout = feature_vector_layout(proto.feature_kinds, proto.public.feature_cardinality)
    k = sampled_feature_count(len(layout), eps1)
    kinds = {}
    for m in out["tapped"]:
        kinds.setdefault(m.kind, []).append(m)
        assert m.src.startswith("user/") or m.kind == "topk"
    assert set(kinds) == {"features", "sequence", "eval_context", "topk"}
    assert len(kinds["features"]) == len(proto.users)
    clean_vectors = {}
    for u in proto.users:
        clean_vectors[int(u)] = encode_user_features(
            proto.user_features(int(u)),
            proto.feature_kinds,
            proto.public.feature_cardinality,
            proto.public.public_ranges,
        )
    for m in kinds["features"]:
        u = int(m.src.split("/")[1])
        x = wire.decode_dense(m.payload)
        clean = clean_vectors[u]
        assert x.shape == clean.shape and not np.allclose(x, clean)
        nonzero = [s.name for s in layout if np.any(x[s.start : s.stop] != 0)]
        assert len(nonzero) == k  # exactly k sampled features, the others travel as zeros
    # scan every payload of every message for any user's clean feature encoding
    for m in out["tapped"]:
        for clean in clean_vectors.values():
            assert clean.tobytes() not in m.payload
    # what the server holds is what was uploaded (perturbed), not the clean encodings
    server_feats = out["state"]["features"]
    assert not np.allclose(server_feats, np.stack([clean_vectors[int(u)] for u in proto.users]))


def test_held_out_items_and_sequences(ray_local):
    ds = small_dataset()
    out = run(SMALL, rounds=1, dataset=ds, tap=True)
    proto = out["protocol"]
    by_src = {(m.kind, m.src): m for m in out["tapped"]}
    for u, seq in zip(proto.users, out["state"]["train_seqs"]):
        full = proto.sequences[u]
        n_tr = max(train_length(len(full)), 1)
        np.testing.assert_array_equal(seq, full[:n_tr])  # only the training part is uploaded
        ctx = wire.decode_ids(by_src[("eval_context", f"user/{u}")].payload)
        np.testing.assert_array_equal(ctx, full[n_tr:-1])  # the last item never leaves
    # bytes against the wire formulas: dense = 3 + 4·ndim + 4·slots; ids = 6 + width·count
    slots = proto.public.n_feature_slots
    upload = [r for r in out["ledger"] if r["phase"] == "upload"]
    by_kind = {}
    for r in upload:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["bytes"]
    assert by_kind["features"] == len(proto.users) * (3 + 4 + 4 * slots)
    n_train = [max(train_length(len(proto.sequences[u])), 1) for u in proto.users]
    assert by_kind["sequence"] == sum(6 + 4 * n for n in n_train)  # default width: 4 bytes
    # the ledger is the sum of the payloads; evaluation traffic is apart
    assert sum(r["bytes"] for r in out["ledger"]) == sum(len(m.payload) for m in out["tapped"])


def test_sigma_is_calibrated_for_the_counted_releases(ray_local):
    params = {**SMALL, "eps2": 4.0, "privacy_delta": 1e-5, "steps": 2, "max_edge_weight": 2.0}
    out = run(params, rounds=3)
    cfg = build_config(DIPSGNNProtocol.Config, params)
    n = (train_length(cfg.max_len) - 2) * cfg.steps * cfg.epochs
    assert calibrated_releases(cfg) == n
    sens = math.sqrt(2) * 2.0 * cfg.clip_norm
    assert edge_sensitivity(cfg.clip_norm, 2.0) == pytest.approx(sens)
    sigma = calibrate_sigma(4.0, 1e-5, n, sens)
    assert out["state"]["sigma"] == out["state"]["model_sigma"] == pytest.approx(sigma, rel=1e-12)
    priv = out["privacy"]
    assert priv["sigma"] == pytest.approx(sigma)
    assert priv["releases_per_edge_calibrated"] == n
    # 3 epochs ran (= the calibrated number): the spent ε is at most the budget
    longest = max(len(out["protocol"].sequences[u]) for u in out["protocol"].users)
    assert priv["releases_per_edge_spent"] == (train_length(longest) - 2) * 2 * 3
    assert priv["epsilon"] <= 4.0 + 1e-6
    # the accountant's figure: the exact (analytic) ε of the Gaussian releases spent
    assert priv["epsilon"] == epsilon_of(
        gaussian_event(out["state"]["sigma"], sens), priv["releases_per_edge_spent"], 1e-5
    )
    assert priv["epsilon2_theorem_4_2_all_releases"] >= priv["epsilon"]
    assert priv["epsilon1_features"] == cfg.eps1


def test_more_epochs_than_calibrated_is_refused(ray_local):
    with pytest.raises(Exception, match="epochs"):
        run({**SMALL, "epochs": 1}, rounds=2)


def test_more_rounds_than_epochs_is_refused_before_ray_starts():
    from engine import RunSettings
    from engine.runner import prepare

    settings = RunSettings(protocol="dipsgnn", rounds=4, params={**SMALL, "epochs": 3})
    with pytest.raises(ConfigError, match=r"epochs 3: .* 4 rounds .* --epochs 4"):
        prepare(settings, small_dataset())
    prepare(dataclasses.replace(settings, rounds=3), small_dataset())  # as many: accepted


@pytest.mark.slow  # an actor per participant (dedicated): CI runs `-m slow`
def test_placement_invariance(ray_local):
    ds = small_dataset(n_users=6)  # dedicated: one actor per user
    a = run(SMALL, "dedicated", 1, dataset=ds)
    b = run(SMALL, "packed", 1, dataset=ds)
    c = run(SMALL, "packed", 3, dataset=ds)
    assert a["metrics"]["recall@20"] > 0
    for other in (b, c):
        assert other["train"] == a["train"]
        assert other["metrics"] == a["metrics"]
        assert other["ledger"] == a["ledger"]


def test_tiny_run_beats_random_and_popularity(ray_local):
    ds = small_dataset(seed=1, n_users=40, n_items=40, avg=20)
    params = {
        "hidden_dim": 16,
        "user_dim": 8,
        "max_len": 30,
        "batch_size": 32,
        "epochs": 8,
        "lr": 0.01,
        "private_graph": False,
    }
    out = run(params, rounds=8, dataset=ds)
    proto = out["protocol"]
    # popularity over all training parts (what the server could compute), full-catalogue ranks
    train_items = np.concatenate(
        [proto.sequences[u][: max(train_length(len(proto.sequences[u])), 1)] for u in proto.users]
    )
    pop_rank = np.argsort(-np.bincount(train_items, minlength=ds.n_items), kind="stable")[:10]
    hits = []
    for u in proto.users:
        seq = proto.sequences[u]
        for t in seq[max(train_length(len(seq)), 1) :]:
            hits.append(float(t in pop_rank))
    popularity = float(np.mean(hits))
    random = 10 / ds.n_items
    assert out["metrics"]["recall@10"] > max(popularity, random) + 0.05, (
        out["metrics"],
        popularity,
    )


def test_edgerand_noise_is_fixed_per_example_and_symmetric():
    from data.sequences import pad_behaviour_graphs
    from models.session_training import edgerand_noise

    prefixes = [np.array([3, 1, 3, 2]), np.array([5, 6])]
    a = pad_behaviour_graphs(prefixes)
    b = pad_behaviour_graphs(prefixes[::-1])
    edgerand_noise(a, np.array([7, 9]), 0.5, seed=11)
    edgerand_noise(b, np.array([9, 7]), 0.5, seed=11)
    np.testing.assert_array_equal(a.a_out[0], b.a_out[1])  # noise depends on the example only
    np.testing.assert_array_equal(a.a_out[1, :2, :2], b.a_out[0, :2, :2])
    for g in (a, b):
        np.testing.assert_array_equal(g.a_in, np.transpose(g.a_out, (0, 2, 1)))
    assert np.all(a.a_out[1, 2:, :] == 0) and np.all(a.a_out[1, :, 2:] == 0)  # padding clean
    assert np.all(a.a_out[0] != pad_behaviour_graphs(prefixes).a_out[0])  # every entry noised


def test_edgerand_sigma_and_budget(ray_local):
    params = {**SMALL, "mechanism": "edgerand", "eps2": 5.0}
    out = run(params, rounds=2)
    cfg = build_config(DIPSGNNProtocol.Config, params)
    n = train_length(cfg.max_len) - 2  # each prefix graph is released once, whatever the epochs
    sigma = calibrate_sigma(5.0, cfg.privacy_delta, n, cfg.max_edge_weight)
    assert out["state"]["sigma"] == pytest.approx(sigma, rel=1e-12)
    assert out["state"]["model_sigma"] == 0.0  # no noise in the aggregation
    priv = out["privacy"]
    assert priv["releases_per_edge_calibrated"] == n
    assert priv["epsilon"] <= 5.0 + 1e-6


def test_dpsgd_noise_multiplier_and_budget(ray_local):
    from privacy.calibration import dpsgd_epsilon, dpsgd_noise_multiplier

    params = {**SMALL, "mechanism": "dpsgd", "eps2": 5.0, "dpsgd_batch_users": 4}
    out = run(params, rounds=3)
    proto = out["protocol"]
    n = len(proto.users)
    steps = 3 * math.ceil(n / 4)
    z = dpsgd_noise_multiplier(5.0, 1e-5, n, 4, steps)
    assert proto.dpsgd_noise_multiplier == pytest.approx(z, rel=1e-12)
    assert out["state"]["model_sigma"] == 0.0  # no noise in the aggregation
    priv = out["privacy"]
    assert priv["steps_spent"] == priv["steps_calibrated"] == steps
    assert priv["epsilon"] == pytest.approx(dpsgd_epsilon(z, n, 4, steps, 1e-5))
    # the accountant's figure for the steps spent: the calibration's RDP evaluation, exactly
    z_run = proto.dpsgd_noise_multiplier
    assert priv["epsilon"] == dpsgd_epsilon(z_run, n, 4, steps, 1e-5)
    assert priv["epsilon"] == epsilon_of(
        sampled_gaussian_event(z_run, n, 4),
        steps,
        1e-5,
        bounds=("rdp",),
        rdp_orders=DPSGD_RDP_ORDERS,
    )
    assert priv["epsilon"] == pytest.approx(5.0, abs=1e-3)
    assert all(np.isfinite(t["loss"]) for t in out["train"])
    assert 0 <= out["metrics"]["recall@20"] <= 1
    with pytest.raises(ConfigError, match="dpsgd_batch_users"):
        DIPSGNNProtocol(
            small_dataset(),
            build_config(DIPSGNNProtocol.Config, {**params, "dpsgd_batch_users": 99}),
            seed=0,
        )


@pytest.mark.parametrize("calibration", ["paper", "authors_code"])
def test_paper_calibrations_report_the_claim_beside_the_rigorous_epsilon(ray_local, calibration):
    """In the paper's calibrations σ follows the paper (eps2 per epoch) and the summary keeps the
    claimed figure beside the accountant's ε of the noise really applied, over every release."""
    from privacy.calibration import authors_code_noise_std, paper_sigma

    params = {**SMALL, "eps2": 5.0, "calibration": calibration}
    out = run(params, rounds=3)
    cfg = build_config(DIPSGNNProtocol.Config, params)
    want = (
        paper_sigma(5.0, cfg.privacy_delta, cfg.clip_norm)
        if calibration == "paper"
        else authors_code_noise_std(5.0, cfg.steps, cfg.clip_norm)
    )
    assert out["state"]["sigma"] == out["state"]["model_sigma"] == pytest.approx(want, rel=1e-12)
    priv = out["privacy"]
    assert priv["calibration"] == calibration and "epsilon2_budget" not in priv
    assert priv["epsilon2_claimed_per_epoch"] == 5.0
    sens = edge_sensitivity(cfg.clip_norm, cfg.max_edge_weight)
    assert priv["epsilon"] == epsilon_of(
        gaussian_event(want, sens), priv["releases_per_edge_spent"], cfg.privacy_delta
    )
    assert priv["epsilon"] > 3 * 5.0  # far more than 3 epochs × the claimed 5 per epoch


def test_paper_calibrations_need_the_noisy_aggregation():
    with pytest.raises(ConfigError, match="calibration"):
        build_config(DIPSGNNProtocol.Config, {"calibration": "paper", "mechanism": "edgerand"})
    with pytest.raises(ConfigError, match="calibration"):
        build_config(DIPSGNNProtocol.Config, {"calibration": "tight"})
