"""Adversaries in the decentralized protocols (dmf, DGREC, DLGNN): fake peers' links in the user
graph, each honest peer's defended combination of the shares it receives, the attacks on a small
synthetic run (an attack by 5% adversaries raises the targets' exposure target_er@10 above the
honest run, a defence lowers it, 1 host and 2 hosts give the same figures), and a protocol
without the chosen attack refusing in one line."""

from __future__ import annotations

import numpy as np
import pytest

from adversaries import Adversaries, AdversaryError
from adversaries.condition import Threat
from adversaries.defences import combine, combine_shares
from adversaries.graph import with_fake_peers

# --- pure parts --------------------------------------------------------------------------------


def test_fake_peers_befriend_real_users_both_ways_from_seed_and_ids():
    graph = [np.array([1, 2]), np.array([0]), np.array([0, 3]), np.array([2])]
    out = with_fake_peers(graph, [0, 1, 2, 3], (4, 5), seed=7)
    assert len(out) == 6
    k = round(np.mean([2, 1, 2, 1]))  # the real users' mean degree
    for f in (4, 5):
        assert len(out[f]) == k and all(f in out[u] for u in out[f])
        assert set(out[f]) <= {0, 1, 2, 3}
    for u in range(4):  # real links untouched, fake ones added
        assert set(graph[u]) <= set(out[u]) and set(out[u]) - set(graph[u]) <= {4, 5}
    again = with_fake_peers(graph, [3, 2, 1, 0], (4, 5), seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(out, again))
    same = with_fake_peers(graph, [0, 1, 2, 3], (), seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(same, graph))


def test_combine_dense_updates():
    x = np.array([[1.0, 0.0], [2.0, 0.0], [30.0, 3.0]])
    assert np.allclose(combine(x), x.mean(0))
    assert np.allclose(combine(x, "median"), [2.0, 0.0])
    # every update scaled to norm <= 1: [1, 0], [1, 0], [30, 3] / sqrt(909); then the mean
    bounded = [(2 + 30 / np.sqrt(909)) / 3, 1 / np.sqrt(909)]
    assert np.allclose(combine(x, "norm-bound", {"bound": 1.0}), bounded)
    assert np.allclose(combine(x[:1], "krum", {"f": 0.2}), x[0])


def test_combine_shares_counts_a_missing_row_as_zero():
    shares = [
        (np.array([0, 0]), np.array([[1.0], [1.0]], np.float32)),  # row 0: 2
        (np.array([0]), np.array([[4.0]], np.float32)),
        (np.array([1]), np.array([[9.0]], np.float32)),  # only this share has row 1
    ]
    ids, plain = combine_shares(shares, "")
    assert ids.tolist() == [0, 1] and np.allclose(plain[:, 0], [6.0, 9.0])  # the sum
    ids, med = combine_shares(shares, "median")
    # row 0: median of {2, 4, 0} = 2, times 3 shares; row 1: median of {0, 0, 9} = 0
    assert np.allclose(med[:, 0], [6.0, 0.0])


def test_dgrec_onebit_defence_is_a_vote_within_the_code():
    from cluster import wire
    from privacy.onebit import onebit_scale
    from protocols.dgrec.config import DGRECConfig
    from protocols.dgrec.messages import decode_held

    c = DGRECConfig()
    codes = [[1, 1, -1], [1, -1, -1], [-1, -1, -1]]
    held = {o: wire.encode_signs(np.array(b, np.int8)) for o, b in enumerate(codes)}
    plain = decode_held(held, c)
    assert np.allclose(plain, np.mean(codes, 0) * onebit_scale(c.clip, c.beta))
    voted = decode_held(held, c, Threat(defence="median"))
    assert np.allclose(voted, np.array([1, -1, -1]) * onebit_scale(c.clip, c.beta))
    # every one-bit code has the norm sqrt(n_s): bounding norms changes nothing
    bounded = decode_held(held, c, Threat(defence="norm-bound", defence_params=(("bound", 0),)))
    assert np.allclose(bounded, plain)


def test_a_protocol_without_the_attack_refuses_in_one_line(capsys):
    import launch
    from data.synthetic import synthetic
    from protocols.base import build_config
    from protocols.dgrec.protocol import DGREC

    ds = synthetic(n_users=12, n_items=30, avg_interactions=6, seed=0)
    p = DGREC(ds, build_config(DGREC.Config, {}), seed=0)
    with pytest.raises(
        AdversaryError, match="fedrecattack has no adversary role in protocol dgrec"
    ):
        p.set_adversaries(Adversaries(fraction=0.1, attack="fedrecattack"))
    with pytest.raises(SystemExit) as e:
        launch.main(
            ["--protocol", "dlgnn", "--adversaries", "0.05", "--attack", "fedrecattack"]
            + ["--dataset", "synthetic", "--dry-run"]
        )
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no adversary role in protocol dlgnn" in err


# --- small synthetic runs ----------------------------------------------------------------------

DMF_PARAMS = {"dim": 16, "pairs": 16, "neighbours": 5}
DGREC_PARAMS = {
    "dim": 8,
    "n_interests": 2,
    "hidden": 8,
    "hops": 2,
    "n_u": 2,
    "neighbourhoods": 6,
    "lr": 0.5,
}


def _run(cls, params, adv, hosts, rounds, n_users, n_items=120, interactions=15, seed=1):
    from data.synthetic import synthetic
    from engine import deploy, run_rounds
    from protocols.base import build_config

    ds = synthetic(n_users=n_users, n_items=n_items, avg_interactions=interactions, seed=0)
    p = cls(ds, build_config(cls.Config, params), seed=seed)
    p.set_adversaries(adv)
    dep = deploy(p, "packed", hosts)
    try:
        return run_rounds(p, dep, rounds, eval_every=0)[-1].metrics
    finally:
        dep.close()


def _dmf(adv, hosts=1, rounds=20, n_users=60):
    from protocols.dmf.protocol import DMF

    return _run(DMF, DMF_PARAMS, adv, hosts, rounds, n_users)


def _dgrec(adv, hosts=1, rounds=15, n_users=40, cls=None):
    from protocols.dgrec.protocol import DGREC

    return _run(cls or DGREC, DGREC_PARAMS, adv, hosts, rounds, n_users, 60, 10, seed=3)


@pytest.mark.ray
def test_dmf_adversaries_are_placement_invariant(ray_local):
    adv = Adversaries(fraction=0.05, attack="fedrecattack", defence="trimmed-mean")
    one = _dmf(adv, hosts=1, rounds=2, n_users=30)
    assert "target_er@10" in one and one == _dmf(adv, hosts=2, rounds=2, n_users=30)


@pytest.mark.ray
@pytest.mark.slow  # four runs of 20 rounds (about 40 s on a loaded 2-core machine)
def test_dmf_attack_raises_target_exposure_and_a_defence_lowers_it(ray_local):
    honest = _dmf(Adversaries())
    attacked = _dmf(Adversaries(fraction=0.05, attack="fedrecattack"), hosts=2)
    defended = _dmf(Adversaries(fraction=0.05, attack="fedrecattack", defence="multi-krum"))
    er = "target_er@10"
    # measured: 0.000 honest, 0.317 attacked, 0.017 with Multi-Krum (deterministic); recall@20
    # 0.610 honest, 0.618 attacked with Multi-Krum
    assert attacked[er] > honest[er] + 0.2, (honest, attacked)
    assert defended[er] < attacked[er] - 0.2, (attacked, defended)
    assert defended["recall@20"] > honest["recall@20"] - 0.05
    again = _dmf(Adversaries(fraction=0.05, attack="fedrecattack"), hosts=1)
    assert again == attacked  # the placement changes nothing


@pytest.mark.ray
@pytest.mark.slow  # four runs of 15 rounds (about a minute on a loaded 2-core machine)
def test_dgrec_attack_raises_target_exposure_and_a_defence_lowers_it(ray_local):
    honest = _dgrec(Adversaries())
    attacked = _dgrec(Adversaries(fraction=0.05, attack="pipattack"), hosts=2)
    defended = _dgrec(Adversaries(fraction=0.05, attack="pipattack", defence="multi-krum"))
    er = "target_er@10"
    # measured: 0.054 honest, 0.135 attacked, 0.054 with Multi-Krum (37 users evaluated)
    assert attacked[er] > honest[er] + 0.05, (honest, attacked)
    assert defended[er] < attacked[er] - 0.05, (attacked, defended)
    again = _dgrec(Adversaries(fraction=0.05, attack="pipattack"), hosts=1)
    assert again == attacked  # the placement changes nothing


@pytest.mark.ray
@pytest.mark.slow  # a model per peer for each case
@pytest.mark.parametrize(
    "protocol,attack,defence",
    [
        ("dgrec", "bandwagon", "trimmed-mean"),
        ("dgrec", "byzantine-signflip", "krum"),
        ("dlgnn", "pipattack", "median"),
        ("dlgnn", "byzantine-random", "norm-bound"),
        ("dmf", "byzantine-scaled", "median"),
        ("dmf", "random", "krum"),
    ],
)
def test_decentralized_attacks_run(ray_local, protocol, attack, defence):
    from protocols.dlgnn.protocol import DLGNN

    adv = Adversaries(fraction=0.1, attack=attack, defence=defence)
    if protocol == "dmf":
        m = _dmf(adv, hosts=2, rounds=2, n_users=24)
    else:
        m = _dgrec(adv, hosts=2, rounds=2, n_users=24, cls=DLGNN if protocol == "dlgnn" else None)
    assert "target_er@10" in m and np.isfinite(m["recall@20"])
