"""Adversaries as a run condition (adversaries/): the defences against hand-computed cases, who
the adversaries and targets are, the command line, and fedmf on a small synthetic run — an
attack by 5% fake users raises the targets' exposure (target_er@10) above the honest run, a
defence lowers it, and the figures do not depend on the placement."""

from __future__ import annotations

import numpy as np
import pytest

from adversaries import Adversaries, AdversaryError
from adversaries.condition import compromised_users, least_popular
from adversaries.defences import (
    aggregate_rows,
    coordinate_median,
    krum,
    norm_bound,
    trimmed_mean,
)

# --- defences ----------------------------------------------------------------------------------


def test_norm_bound_scales_only_long_updates():
    x = np.array([[3.0, 4.0], [0.3, 0.4]])
    out = norm_bound(x, 1.0)
    assert np.allclose(out, [[0.6, 0.8], [0.3, 0.4]])


def test_median_and_trimmed_mean_by_hand():
    x = np.array([[1.0, -5.0], [2.0, 0.0], [100.0, 1.0], [3.0, 2.0], [4.0, 50.0]])
    assert np.allclose(coordinate_median(x), [3.0, 1.0])
    # beta = 0.2 drops one value at each end of each coordinate: mean of {2, 3, 4} and {0, 1, 2}
    assert np.allclose(trimmed_mean(x, 0.2), [3.0, 1.0])
    assert np.allclose(trimmed_mean(x, 0.0), x.mean(0))


def test_krum_picks_the_clustered_update_and_multi_krum_averages():
    x = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.1], [10.0, 10.0]])
    # f = 1: each score sums the squared distances to m - f - 2 = 1 nearest other
    assert np.allclose(krum(x, 1), [0.0, 0.0])
    assert np.allclose(krum(x, 1, select=3), [0.1 / 3, 0.1 / 3])


def test_aggregate_rows_mean_and_per_row_median():
    uploads = [
        (np.array([0, 2]), np.array([[1.0], [10.0]])),
        (np.array([0, 0]), np.array([[1.0], [2.0]])),  # a repeated id is summed first: 3
        (np.array([0, 1]), np.array([[5.0], [7.0]])),
    ]
    mean = aggregate_rows(uploads, (3, 1))
    assert np.allclose(mean[:, 0], [(1 + 3 + 5) / 3, 7 / 3, 10 / 3])
    med = aggregate_rows(uploads, (3, 1), "median")
    # row 0: median of {1, 3, 5} = 3, times 3 contributors over 3 uploads; rows 1, 2: one each
    assert np.allclose(med[:, 0], [3.0, 7 / 3, 10 / 3])
    nb = aggregate_rows(uploads, (3, 1), "norm-bound", {"bound": 1.0})
    # every upload scaled to norm 1: row 2 is upload 0's 10 / sqrt(101), over 3 uploads
    assert np.isclose(nb[2, 0], 10 / np.sqrt(101) / 3)
    assert np.isclose(nb[1, 0], 7 / np.sqrt(74) / 3)


# --- the condition -----------------------------------------------------------------------------


def test_condition_refuses_mistakes_in_one_line():
    with pytest.raises(AdversaryError, match="unknown attack 'nosuch'"):
        Adversaries(fraction=0.05, attack="nosuch")
    with pytest.raises(AdversaryError, match="needs --adversaries"):
        Adversaries(attack="random")
    with pytest.raises(AdversaryError, match="has no 'bogus'"):
        Adversaries(fraction=0.1, attack="byzantine-scaled", params={"bogus": 1})
    with pytest.raises(AdversaryError, match="unknown defence"):
        Adversaries(defence="mean-ish")
    a = Adversaries.from_dict({"fraction": "0.1", "attack": "byzantine-scaled", "targets": "3,1"})
    assert a.targets == (3, 1) and a.param("scale") == 10.0


def test_selection_depends_on_seed_and_ids_only():
    users = list(range(100))
    a = compromised_users(7, users, 5)
    assert a == compromised_users(7, list(reversed(users)), 5) and len(a) == 5
    assert a != compromised_users(8, users, 5)
    counts = np.array([5, 0, 3, 0, 9])
    assert least_popular(counts, 2, 0) == (1, 3)


def test_help_lists_attacks_and_a_bad_name_is_one_line(capsys):
    import launch

    text = launch.build_parser().format_help()
    for name in ("random", "bandwagon", "fedrecattack", "pipattack", "byzantine-scaled"):
        assert name in text
    assert "trimmed-mean" in text and "multi-krum" in text
    with pytest.raises(SystemExit) as e:
        launch.main(["--adversaries", "0.05", "--attack", "nosuch", "--dry-run"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown attack 'nosuch'" in err
    from protocols.base import Protocol

    class NoRoles(Protocol):
        name = "noroles"

    with pytest.raises(AdversaryError, match="no adversary roles"):
        NoRoles(None, None, 0).set_adversaries(Adversaries(fraction=0.1, attack="random"))


# --- fedmf on a small synthetic run ---------------------------------------------------------------

PARAMS = {"dim": 16, "users_per_round": 0, "pairs": 16, "lr_item": 0.05}


def _run(adv, placement="packed", hosts=1, rounds=25, n_users=60):
    from data.synthetic import synthetic
    from engine import deploy, run_rounds
    from protocols.base import build_config
    from protocols.fedmf.protocol import FedMF

    ds = synthetic(n_users=n_users, n_items=120, avg_interactions=15, seed=0)
    p = FedMF(ds, build_config(FedMF.Config, PARAMS), seed=1)
    p.set_adversaries(adv)
    dep = deploy(p, placement, hosts)
    try:
        return run_rounds(p, dep, rounds, eval_every=0)[-1].metrics
    finally:
        dep.close()


@pytest.mark.ray
def test_fedmf_adversaries_are_placement_invariant(ray_local):
    adv = Adversaries(fraction=0.05, attack="fedrecattack", defence="median")
    one = _run(adv, hosts=1, rounds=2, n_users=40)
    assert "target_er@10" in one and one == _run(adv, hosts=2, rounds=2, n_users=40)


@pytest.mark.ray
@pytest.mark.slow  # four runs of 25 rounds (about a minute on a loaded 2-core machine)
def test_fedmf_attack_raises_target_exposure_and_a_defence_lowers_it(ray_local):
    honest = _run(Adversaries())
    attacked = _run(Adversaries(fraction=0.05, attack="fedrecattack"), hosts=2)
    defended = _run(Adversaries(fraction=0.05, attack="fedrecattack", defence="median"))
    er = "target_er@10"
    # measured: 0.000 honest, 0.167 attacked, 0.033 with the median (deterministic)
    assert attacked[er] > honest[er] + 0.1, (honest, attacked)
    assert defended[er] < attacked[er] - 0.1, (attacked, defended)
    assert attacked["recall@20"] > 0.5
    again = _run(Adversaries(fraction=0.05, attack="fedrecattack"), hosts=3)
    assert again == attacked  # the placement changes nothing


@pytest.mark.ray
@pytest.mark.slow  # 40 actors, one per participant
def test_fedmf_attack_same_figures_packed_and_dedicated(ray_local):
    adv = Adversaries(fraction=0.05, attack="fedrecattack", defence="median")
    packed = _run(adv, "packed", 2, rounds=6, n_users=36)
    dedicated = _run(adv, "dedicated", 1, rounds=6, n_users=36)
    assert packed == dedicated


@pytest.mark.ray
@pytest.mark.slow  # RSA keys and the matcher for every attack
@pytest.mark.parametrize("attack", ["random", "fedrecattack", "byzantine-signflip"])
def test_fedlightgcn_runs_with_adversaries(ray_local, attack):
    from data.synthetic import synthetic
    from engine import deploy, run_rounds
    from protocols.base import build_config
    from protocols.fedpergnn.protocol import FedLightGCN

    ds = synthetic(n_users=30, n_items=60, avg_interactions=8, seed=0)
    cfg = {"dim": 8, "users_per_round": 0, "negatives": 8, "key_bits": 1024}
    p = FedLightGCN(ds, build_config(FedLightGCN.Config, cfg), seed=2)
    p.set_adversaries(Adversaries(fraction=0.1, attack=attack, defence="trimmed-mean"))
    dep = deploy(p, "packed", 2)
    try:
        m = run_rounds(p, dep, 2, eval_every=0)[-1].metrics
    finally:
        dep.close()
    assert "target_er@10" in m and np.isfinite(m["recall@20"])
