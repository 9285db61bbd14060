"""The centralized baselines as a protocol: every model trains through the runner and improves,
a run moves no protocol bytes and reproduces the stand-alone training function exactly, the
trainer refactors give the old functions' results, and models that do not fit the dataset or
bad parameters are refused with a ConfigError naming the parameter."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import cli
from data.registry import load_dataset
from data.synthetic import synthetic
from data.types import RecDataset
from engine import RunSettings, run
from engine.report import read_rows
from models.bpr import sample_negatives
from models.central import build_trainer
from models.lightgcn import LightGCN, RankingTrainer, train_central
from models.metrics import full_ranking_metrics
from models.rating_gnn import build_rating_gnn
from models.rating_gnn import train_central as train_rating_central
from protocols.base import ConfigError, build_config
from protocols.central.config import CentralConfig
from protocols.central.protocol import Central

# per model: small-data hyper-parameters under which 2 epochs visibly train
FAST = {
    "lightgcn": {"dim": 16, "lr": 0.05, "batch_size": 64},
    "bprmf": {"dim": 16, "lr": 0.05, "batch_size": 64},
    "gcn": {"lr": 0.5, "batch_size": 32},
    "gat": {"lr": 0.5, "batch_size": 32},
    "ggnn": {"lr": 0.5, "batch_size": 32},
    "mf": {"lr": 0.5, "batch_size": 32},
    "dipsgnn": {"dim": 32, "user_dim": 8, "lr": 0.01, "batch_size": 16},
}
HEADLINE = {"lightgcn": "recall@10", "bprmf": "recall@10", "dipsgnn": "recall@10"}


@pytest.fixture(scope="module")
def small() -> RecDataset:
    return synthetic(n_users=40, n_items=60, avg_interactions=15, seed=0)


def run_central(dataset, params, tmp_path, rounds=2, **settings):
    s = RunSettings(
        protocol="central",
        rounds=rounds,
        seed=settings.pop("seed", 0),
        out=str(tmp_path / "runs"),
        params=params,
        progress=False,
        **settings,
    )
    run_dir, summary = run(s, dataset)
    rows = read_rows(run_dir)
    return run_dir, summary, rows


# --------------------------------------------------------------------------- the trainers


@pytest.mark.parametrize("model", list(FAST))
def test_every_model_improves_in_two_epochs(small, model):
    """Ray-free: the curator's trainer, epoch by epoch (the same object the runner drives)."""
    trainer = central_trainer(small, model, seed=0)
    losses, evals = [], []
    for _ in range(2):
        losses.append(trainer.train_epoch()["loss"])
        evals.append(trainer.evaluate())
    check_improvement(model, evals[0], evals[1])
    assert np.isfinite(losses).all()


def central_trainer(dataset, model: str, seed: int):
    """The trainer the curator builds for ``model`` with the FAST parameters."""
    c = build_config(CentralConfig, {"model": model, "eval_k": 10, **FAST[model]})
    return build_trainer(
        dataset,
        model,
        dim=c.dim,
        layers=c.layers,
        lr=c.lr,
        l2=c.l2,
        batch_size=c.batch_size,
        eval_k=c.eval_k,
        seed=seed,
        device=torch.device("cpu"),
        **c.trainer_options(),
    )


@pytest.mark.parametrize("model", ["lightgcn", "gat", "dipsgnn"])
def test_a_trainer_restored_from_its_state_continues_exactly(small, model):
    """One trainer family, one checkpoint state: model, optimizer, random streams, epochs."""
    trainer = central_trainer(small, model, seed=0)
    trainer.train_epoch()
    state = trainer.state_dict()
    expected = (trainer.train_epoch(), trainer.evaluate(), trainer.epochs_done)
    restored = central_trainer(small, model, seed=5)  # another start: the state decides
    restored.load_state_dict(state)
    assert (restored.train_epoch(), restored.evaluate(), restored.epochs_done) == expected


def check_improvement(model: str, first: dict, last: dict) -> None:
    if model in HEADLINE:  # ranking: better after the second epoch than after the first
        key = HEADLINE[model]
        assert last[key] > first[key], (first, last)
    else:  # rating: RMSE falls (GCN and GAT already beat predicting the training mean)
        assert last["rmse"] < first["rmse"], (first, last)
        if model in ("gcn", "gat"):
            assert last["rmse"] < last["global_mean_rmse"], last


# --------------------------------------------------------------------------- through the runner

SLOW_RUNNER = ("bprmf", "gat", "ggnn", "mf")  # same code path as lightgcn / gcn (launch test)


@pytest.mark.ray
@pytest.mark.parametrize(
    "model",
    [
        pytest.param(m, marks=pytest.mark.slow) if m in SLOW_RUNNER else m
        for m in FAST
        if m != "gcn"
    ],
)
def test_models_train_through_the_runner(ray_local, tmp_path, small, model):
    params = {"model": model, "eval_every": 1, "eval_k": 10, **FAST[model]}
    _, summary, rows = run_central(small, params, tmp_path, seed=0)
    first, last = rows[0]["metrics"], rows[1]["metrics"]
    assert all(np.isfinite(r["train"]["loss"]) for r in rows)
    check_improvement(model, first, last)
    assert summary["metrics"] == last
    # nothing travels: the ledger records every message, and there are none
    assert summary["bytes_total"] == 0 and summary["messages"] == 0
    assert summary["bytes_eval"] == 0 and summary["bytes_crossed"] == 0
    assert summary["privacy"]["mechanism"] == "none"
    if model == "lightgcn":
        # the curator is seeded with the run's seed: the stand-alone function, bit for bit
        assert last["recall@10"] > summary["baselines"]["popularity"]["recall@10"]
        kw = {k: v for k, v in FAST[model].items()}
        _, expected = train_central(small, epochs=2, seed=0, eval_k=10, **kw)
        assert last == expected
        trainer = RankingTrainer(small, seed=0, eval_k=10, **kw)
        losses = [trainer.train_epoch()["loss"] for _ in range(2)]
        assert [r["train"]["loss"] for r in rows] == losses


@pytest.mark.ray
def test_launch_writes_a_summary_with_the_metrics(ray_local, tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("lr = 0.5\nbatch_size = 32\n[dataset]\nn_users = 30\nn_items = 40\n")
    argv = ["--protocol", "central", "--model", "gcn", "--rounds", "2", "--config", str(cfg)]
    argv += ["--out", str(tmp_path / "runs"), "--no-progress"]
    assert cli.main(argv) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["protocol"] == "central" and summary["bytes_total"] == 0
    assert 0 < summary["metrics"]["rmse"] < 5 and "global_mean_rmse" in summary["metrics"]
    config = json.loads((run_dir / "config.json").read_text())["protocol_config"]
    # unset hyper-parameters resolved to the VerFedGNN paper's: D = 6, K = 2, λ = 1e-3
    assert (config["model"], config["dim"], config["layers"], config["l2"]) == ("gcn", 6, 2, 1e-3)
    assert (config["lr"], config["batch_size"]) == (0.5, 32)


# --------------------------------------------------------------------------- configuration


def test_defaults_are_each_papers_settings():
    c = build_config(CentralConfig, {})
    assert (c.model, c.dim, c.layers, c.lr, c.l2, c.batch_size) == (
        "lightgcn",
        64,
        2,
        1e-3,
        1e-4,
        2048,
    )
    c = build_config(CentralConfig, {"model": "gat"})
    assert (c.dim, c.layers, c.lr, c.l2) == (6, 2, 0.05, 1e-3)
    c = build_config(CentralConfig, {"model": "dipsgnn"})
    assert (c.dim, c.user_dim, c.layers, c.lr, c.batch_size) == (100, 50, 1, 1e-3, 100)
    assert build_config(CentralConfig, {"model": "bprmf"}).layers == 0
    assert build_config(CentralConfig, {"model": "gcn", "dim": 12}).dim == 12


@pytest.mark.parametrize(
    "params,name",
    [
        ({"model": "lightgcm"}, "model"),
        ({"model": "bprmf", "layers": 2}, "layers"),
        ({"model": "gcn", "lr": 0.0}, "lr"),
        ({"model": "gcn", "val_fraction": 1.0}, "val_fraction"),
        ({"dim": 0}, "dim"),
        ({"model": "dipsgnn", "layers": 0}, "layers"),
    ],
)
def test_bad_parameters_name_themselves(params, name):
    with pytest.raises(ConfigError, match=f"^{name}:"):
        build_config(CentralConfig, params)


def test_models_that_do_not_fit_the_dataset_are_refused(small):
    implicit = load_dataset("synthetic", n_users=20, n_items=30, implicit=True)
    assert not implicit.has_ratings
    with pytest.raises(ConfigError, match="^model: 'gcn' predicts ratings"):
        Central(implicit, build_config(CentralConfig, {"model": "gcn"}), seed=0)
    Central(implicit, build_config(CentralConfig, {"model": "bprmf"}), seed=0)  # fits
    no_time = RecDataset(
        "plain",
        small.n_users,
        small.n_items,
        small.train.subset(np.arange(len(small.train))),
        small.test.subset(np.arange(len(small.test))),
    )
    no_time.train.timestamp = no_time.test.timestamp = None
    with pytest.raises(ConfigError, match="^model: 'dipsgnn'.*timestamps"):
        Central(no_time, build_config(CentralConfig, {"model": "dipsgnn"}), seed=0)
    no_features = RecDataset("nofeat", small.n_users, small.n_items, small.train, small.test)
    with pytest.raises(ConfigError, match="^use_features"):
        Central(no_features, build_config(CentralConfig, {"model": "dipsgnn"}), seed=0)
    Central(
        no_features,
        build_config(CentralConfig, {"model": "dipsgnn", "use_features": False}),
        seed=0,
    )


# --------------------------------------------------------------------------- refactors == old code


def old_lightgcn_train_central(dataset, *, epochs, dim, lr, l2, batch_size, seed, eval_k):
    """models/lightgcn.py's train_central before the trainer refactor (commit 9695a95)."""
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = LightGCN(dataset.n_users, dataset.n_items, dim, 2, "propagated", gen)
    model.set_graph(dataset.train.user, dataset.train.item)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    train_items = dataset.train.items_by_user(dataset.n_users)
    test_items = dataset.test.items_by_user(dataset.n_users)
    eval_users = [u for u in range(dataset.n_users) if len(test_items[u])]
    users_all, pos_all = dataset.train.user, dataset.train.item
    for _ in range(epochs):
        order = rng.permutation(len(users_all))
        neg_all = np.empty(len(order), dtype=np.int64)
        for u in np.unique(users_all):
            rows = np.flatnonzero(users_all == u)
            neg_all[rows] = sample_negatives(rng, dataset.n_items, train_items[u], len(rows))
        for start in range(0, len(order), batch_size):
            b = order[start : start + batch_size]
            u, i, j = (torch.from_numpy(a[b]) for a in (users_all, pos_all, neg_all))
            loss = model.loss(u, i, j, l2)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        h_u, h_i = model()
        m = full_ranking_metrics(
            h_u[eval_users],
            h_i,
            [train_items[u] for u in eval_users],
            [test_items[u] for u in eval_users],
            ks=(eval_k,),
        )
    return {k: float(np.mean(v)) for k, v in m.items()}


def test_lightgcn_wrapper_equals_the_old_function(small):
    kw = {"epochs": 3, "dim": 8, "lr": 0.02, "l2": 1e-4, "batch_size": 100, "seed": 7}
    _, new = train_central(small, eval_k=10, **kw)
    assert new == old_lightgcn_train_central(small, eval_k=10, **kw)
    logged = []
    train_central(small, eval_k=10, eval_every=1, log=lambda e, m: logged.append((e, m)), **kw)
    assert [e for e, _ in logged] == [1, 2, 3] and logged[-1][1] == new


def old_rating_train_central(model, train, val, *, epochs, lr, batch_size, l2, seed):
    """models/rating_gnn/training.py's train_central before the trainer refactor (9695a95)."""
    from models.rating_gnn import evaluate_rmse

    user, item, rating = train.user, train.item, train.rating
    rating_range = (float(rating.min()), float(rating.max()))
    u_all, i_all, r_all = (torch.as_tensor(a) for a in (user, item, rating))
    opt = torch.optim.Adagrad(model.parameters(), lr=lr, initial_accumulator_value=1e-8)
    gen = torch.Generator().manual_seed(seed)
    history = []
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(user), generator=gen)
        total, count = 0.0, 0
        for start in range(0, len(user), batch_size):
            idx = order[start : start + batch_size]
            opt.zero_grad()
            loss = model.loss(model.propagate(), u_all[idx], i_all[idx], r_all[idx], l2)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        history.append(
            {
                "epoch": float(epoch + 1),
                "train_loss": total / count,
                "train_rmse": evaluate_rmse(model, (user, item, rating), rating_range),
                "val_rmse": evaluate_rmse(model, val, rating_range),
            }
        )
    return history


@pytest.mark.parametrize("kind", ["gcn", "gat"])
def test_rating_wrapper_equals_the_old_function(small, kind):
    from models.rating_gnn.training import RatingTrainer

    def model():
        return build_rating_gnn(small.n_users, small.n_items, small.train, kind=kind, seed=1)

    kw = {"epochs": 3, "lr": 0.05, "batch_size": 64, "l2": 1e-3, "seed": 2}
    history = train_rating_central(model(), small.train, small.test, **kw)
    assert history == old_rating_train_central(model(), small.train, small.test, **kw)
    trainer = RatingTrainer(model(), small.train, small.test, batch_size=64, seed=2)
    figures = [trainer.train_epoch() for _ in range(3)]
    assert [h["train_loss"] for h in history] == [f["loss"] for f in figures]
    assert [(h["train_rmse"], h["val_rmse"]) for h in history] == [
        (f["train_rmse"], f["val_rmse"]) for f in figures
    ]
    assert history[-1]["val_rmse"] == trainer.rmse(small.test)
