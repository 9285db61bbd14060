"""benchmarks.tune: the validation slice comes from the training rows alone, and the grid is the
product of the given values; on Ray Tune, every trial is evaluated on that slice (never on the
test split), its host actors live in the trial's placement group, ASHA stops the weak ones, the
winner runs on the real split, and an interrupted experiment resumes without rerunning its
finished trials; ``--dashboard`` prints the address of Ray's dashboard."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import common, tune
from benchmarks.tune import data_digest, grid, validation_dataset
from data.synthetic import synthetic

REPO = Path(__file__).resolve().parents[2]


def _pairs(inter) -> set[tuple[int, int]]:
    return set(zip(inter.user.tolist(), inter.item.tolist()))


def test_validation_slice_is_drawn_from_training_rows_only():
    ds = synthetic(n_users=40, n_items=80, avg_interactions=12, seed=2)
    val = validation_dataset(ds, 0.25, seed=0)
    fit, held = _pairs(val.train), _pairs(val.test)
    assert fit | held == _pairs(ds.train) and not fit & held
    assert not held & _pairs(ds.test)  # the test split is nowhere in it
    assert len(val.train) + len(val.test) == len(ds.train)
    n_train = np.bincount(ds.train.user, minlength=ds.n_users)
    n_held = np.bincount(val.test.user, minlength=ds.n_users)
    assert np.all(n_held[n_train >= 2] >= 1) and np.all(n_held < np.maximum(n_train, 1))
    again = validation_dataset(ds, 0.25, seed=0)
    assert _pairs(again.test) == held  # deterministic for a seed


def test_grid_is_the_product_of_the_values():
    points = grid(["lr=0.1,0.2", "steps=1,10", "mode=paper"])
    assert points == [
        {"lr": 0.1, "steps": 1, "mode": "paper"},
        {"lr": 0.1, "steps": 10, "mode": "paper"},
        {"lr": 0.2, "steps": 1, "mode": "paper"},
        {"lr": 0.2, "steps": 10, "mode": "paper"},
    ]


def test_random_search_draws_from_the_grid_values_and_the_ranges():
    from ray import tune as ray_tune

    args = tune.parse_args(
        [
            *("--protocol", "fedmf", "--dataset", "synthetic", "--rounds", "4", "--name", "t"),
            *("--search", "random", "--samples", "3", "--grid", "dim=4,8"),
            *("--range", "lr_item=0.001:0.1:log", "--range", "user_steps=1:5"),
        ]
    )
    space = tune._param_space(args)
    assert isinstance(space["dim"], ray_tune.search.sample.Categorical)
    assert space["dim"].categories == [4, 8]
    assert isinstance(space["lr_item"].sampler, ray_tune.search.sample.LogUniform)
    assert (space["lr_item"].lower, space["lr_item"].upper) == (0.001, 0.1)
    assert isinstance(space["user_steps"], ray_tune.search.sample.Integer)
    assert (space["user_steps"].lower, space["user_steps"].upper) == (1, 6)  # HIGH included
    # checked before anything runs: every grid value, then the ranges' lows and highs
    assert tune._corners(args) == [
        {"dim": 4},
        {"dim": 8},
        {"dim": 4, "lr_item": 0.001, "user_steps": 1},
        {"dim": 4, "lr_item": 0.1, "user_steps": 5},
    ]


BASE = ["--protocol", "fedmf", "--dataset", "synthetic", "--name", "t", "--out", "runs"]


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--rounds", "2", "--range", "lr_item=0.1:0.2"], "--range: needs --search random"),
        (
            ["--rounds", "2", "--grid", "dim=4", "--search", "random", "--range", "lr_item=1:x"],
            "--range 'lr_item=1:x': LOW and HIGH must be numbers",
        ),
        (
            ["--rounds", "2", "--search", "random", "--range", "lr_item=0.2:0.1"],
            "needs LOW < HIGH",
        ),
        (
            ["--rounds", "2", "--search", "random", "--range", "lr_item=-1:2:log"],
            "and LOW > 0 with log",
        ),
        (
            ["--rounds", "2", "--search", "random", "--range", "user_steps=-3:2"],
            "--range user_steps=-3: user_steps: must be >= 1",
        ),
        (["--rounds", "2", "--grid", "dim=4", "--samples", "3"], "--samples: needs --search"),
        (
            ["--rounds", "2", "--grid", "dim=4", "--engine", "loop", "--resume"],
            "--resume: needs --engine tune",
        ),
    ],
)
def test_a_search_mistake_is_one_line_before_anything_runs(
    tmp_path, monkeypatch, capsys, argv, says
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    assert tune.main([*BASE, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and says in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("optuna") is not None, reason="optuna is installed")
def test_optuna_search_without_optuna_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = [*BASE, "--rounds", "2", "--grid", "dim=4,8", "--search", "optuna"]
    assert tune.main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        "benchmarks.tune: --search optuna: optuna is not installed (pip install optuna)"
    )


# --- on Ray Tune --------------------------------------------------------------------------------
SMALL = dict(n_users=40, n_items=60, avg_interactions=10, seed=3)
# a 2x2 grid of tiny fedmf runs: 1 host actor of users beside the server's, 1 CPU each and 1 for
# the trial's driver: two trials at once on the tests' 8 logical CPUs
GRID = [
    *("--protocol", "fedmf", "--dataset", "synthetic", "--rounds", "4"),
    *("--grid", "lr_item=0.005,0.1", "--grid", "dim=4,8", "--set", "users_per_round=16"),
    *("--hosts", "1", "--cpus-per-host", "1", "--out", "runs"),
]


@pytest.fixture
def tiny(tmp_path, monkeypatch, ray_local):
    """A sandbox (runs/, out/ for benchmarks/out) and a small synthetic dataset for --dataset."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    ds = synthetic(**SMALL)
    monkeypatch.setattr(tune, "load_dataset", lambda name, data_dir=None: ds)
    return ds


def _figures(tmp_path: Path, name: str) -> dict:
    return json.loads((tmp_path / "out" / f"{name}.json").read_text())["figures"]


def test_a_trial_larger_than_the_cluster_is_refused(tiny, capsys):
    argv = [*GRID, "--name", "big", "--hosts", "9"]  # 1 + 10 CPUs, the cluster has 8
    assert tune.main(argv) == 2
    err = capsys.readouterr().err
    assert "a trial needs 11 CPUs (1 for its driver, 10 host actors of 1)" in err
    assert "the Ray cluster has 8 CPUs" in err


def test_a_grid_on_ray_tune_never_hands_the_test_split_to_a_trial(tiny, tmp_path, capsys):
    """2x2 grid, ASHA from round 1 (eval every round), then the winner on the real split."""
    assert tune.main([*GRID, "--name", "g", "--final-rounds", "2"]) == 0
    out, err = capsys.readouterr()
    fig = _figures(tmp_path, "g")
    val = validation_dataset(tiny, 0.1, 0)
    assert fig["engine"] == "tune" and fig["scheduler"] == "asha" and fig["eval_every"] == 1
    assert fig["trial_resources"] == [{"CPU": 1.0}] * 3  # the driver, the server, the users
    cands = fig["candidates"]
    assert len(cands) == 4 and all(c["status"] == "ok" for c in cands)
    assert sorted((c["params"]["lr_item"], c["params"]["dim"]) for c in cands) == [
        (0.005, 4),
        (0.005, 8),
        (0.1, 4),
        (0.1, 8),
    ]
    # what every trial was evaluated on: the held-out slice of the training rows
    for c in cands:
        assert c["data"] == {
            "eval_digest": data_digest(val.test),
            "eval_rows": len(val.test),
            "train_rows": len(val.train),
        }
        assert c["data"]["eval_digest"] != data_digest(tiny.test)
        assert 1 <= c["rounds"] <= 4 and "recall@20" in c["metrics"]
        assert c["curve"] and Path(c["run_dir"]).is_dir()
        # the trial's run report: the validation data, its test part the held-out slice
        config = json.loads((Path(c["run_dir"]) / "config.json").read_text())
        assert (config["dataset"]["train"], config["dataset"]["test"]) == (
            len(val.train),
            len(val.test),
        )
    assert fig["validation"]["held_out_digest"] == data_digest(val.test)
    chosen = [c for c in cands if c["params"] == fig["chosen"]]
    assert len(chosen) == 1 and chosen[0]["rounds"] == 4  # a full-length trial wins
    # the winner's final run, on the real split
    final = fig["final"]
    summary = json.loads((Path(final["run_dir"]) / "summary.json").read_text())
    assert summary["rounds"] == 2 and final["params"] == fig["chosen"]
    assert Path(final["run_dir"]).parent == tmp_path / "runs" / "g" / "final"
    assert "4 candidates in" in out and "(tune engine)" in out and "wrote out/g.json" in out
    assert err.count(" of 4 finished): ") == 4


def _runs_of(root: Path) -> dict[str, list[str]]:
    return {t.name: sorted(p.name for p in t.iterdir()) for t in (root / "trials").iterdir()}


def test_an_interrupted_experiment_resumes_without_rerunning_finished_trials(
    tiny, tmp_path, capsys
):
    # one trial at a time: the stop comes after the first, and ASHA sees them in a fixed order
    argv = [*GRID, "--name", "r", "--max-concurrent", "1"]
    assert tune.main([*argv, "--stop-after", "1"]) == 0
    err = capsys.readouterr().err
    assert "(1 of 4 finished)" in err and "stopping here (--stop-after)" in err
    assert "1 of 4 trials finished; the same command with --resume runs the rest" in err
    assert not (tmp_path / "out" / "r.json").exists()
    root = tmp_path / "runs" / "r"
    first = _runs_of(root)
    # the same experiment only: a changed flag is refused, before Ray does anything
    assert tune.main([*argv, "--resume", "--rounds", "5"]) == 2
    assert "--rounds 5 differs from the interrupted experiment's 4" in capsys.readouterr().err
    assert tune.main(argv) == 2  # without --resume: the name is taken
    assert "--resume continues it" in capsys.readouterr().err
    assert tune.main([*argv, "--resume"]) == 0
    err = capsys.readouterr().err
    assert "(4 of 4 finished)" in err and "(1 of 4 finished)" not in err
    fig = _figures(tmp_path, "r")
    assert len(fig["candidates"]) == 4 and all(c["status"] == "ok" for c in fig["candidates"])
    rounds = sorted(c["rounds"] for c in fig["candidates"])
    assert rounds[0] < 4 and rounds[-1] == 4  # ASHA stopped the weakest at a rung
    assert "stopped early by ASHA" in err
    after = _runs_of(root)
    assert len(first) == 1 and len(after) == 4  # one trial at a time: one ran before the stop
    assert all(len(runs) == 1 for runs in after.values())
    ((trial, runs),) = first.items()
    assert after[trial] == runs  # the trial of the first session was not run again
    assert (root / "trials" / trial / runs[0] / "summary.json").is_file()


# --- host actors inside a placement group ---------------------------------------------------------
class Probe:
    """A host-actor stand-in: where Ray put it."""

    def __init__(self, i):
        self.i = i

    def where(self):
        import ray

        ctx = ray.get_runtime_context()
        return ctx.get_placement_group_id(), ctx.get_assigned_resources()


def _spawn_in_own_group(count: int, cpus: float):
    from cluster.runtime import host_cpu_share, spawn_spread

    placed = spawn_spread(Probe, count, num_cpus=cpus, num_gpus=0, args_for=lambda i: ((i,), {}))
    import ray

    try:
        return [ray.get(h.where.remote()) for h in placed.handles], host_cpu_share(count)
    finally:
        placed.release()


def test_host_actors_take_the_bundles_of_the_callers_placement_group(ray_local):
    """What a Tune trial does: its trainable runs in bundle 0 of the trial's placement group,
    with ``placement_group_capture_child_tasks``; the host actors it starts take the other
    bundles (never resources beside the group), and more than the group holds is refused."""
    import ray
    import ray.cloudpickle
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers: no tests folder
    group = placement_group([{"CPU": 0.5}, {"CPU": 0.25}, {"CPU": 0.25}], strategy="PACK")
    ray.get(group.ready(), timeout=60)
    try:
        trial = ray.remote(_spawn_in_own_group).options(
            num_cpus=0.5,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True
            ),
        )
        where, share = ray.get(trial.remote(2, 0.25), timeout=120)
        assert [w[0] for w in where] == [group.id.hex()] * 2
        assert all(w[1].get("CPU") == 0.25 for w in where) and share == 0.25
        with pytest.raises(ray.exceptions.RayTaskError, match="needs 4"):
            ray.get(trial.remote(3, 0.25), timeout=120)
        with pytest.raises(ray.exceptions.RayTaskError, match="ask the group for the hosts"):
            ray.get(trial.remote(2, 0.5), timeout=120)
    finally:
        remove_placement_group(group)


# --- the dashboard ------------------------------------------------------------------------------
def test_the_dashboard_address_as_printed():
    from cluster.runtime import dashboard_address

    assert dashboard_address("127.0.0.1:8265") == "http://127.0.0.1:8265"
    assert dashboard_address("http://127.0.0.1:8266") == "http://127.0.0.1:8266"
    assert dashboard_address("") is None and dashboard_address(None) is None


def test_dashboard_is_asked_of_a_local_start_only_on_the_loopback_interface(monkeypatch):
    from cluster import runtime

    seen = []

    class Stop(Exception):
        pass

    def fake_init(**kwargs):
        seen.append(kwargs)
        raise Stop

    monkeypatch.setattr(runtime.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime.ray, "init", fake_init)
    monkeypatch.setattr(runtime, "_probe", lambda address: None)
    monkeypatch.setitem(runtime._DASHBOARD, "wanted", False)
    for call in (
        lambda: runtime.start_or_join(None),  # no flag: as before
        lambda: runtime.start_or_join(None, dashboard=True),
        lambda: (runtime.use_dashboard(), runtime.start_or_join(None)),  # launch.py --dashboard
        lambda: runtime.start_or_join("10.0.0.1:6379"),  # a joined cluster has its own
    ):
        with pytest.raises(Stop):
            call()
    assert [kw["include_dashboard"] for kw in seen] == [False, True, True, False]
    assert all(kw["dashboard_host"] == "127.0.0.1" for kw in seen[:3])


def test_launch_dashboard_flag_asks_the_runtime_for_it(monkeypatch):
    import cli.run
    import cli.shared
    import cluster.runtime

    asked = []
    monkeypatch.setattr(cluster.runtime, "use_dashboard", lambda on=True: asked.append(on))
    _, args, *_ = cli.run.parse(["--protocol", "fedmf", "--dashboard"])
    cli.shared.dashboard(args)
    _, args, *_ = cli.run.parse(["--protocol", "fedmf"])
    cli.shared.dashboard(args)
    assert asked == [True, False]  # a command without the flag turns it off again


@pytest.mark.skipif(
    importlib.util.find_spec("aiohttp") is None,
    reason="Ray's dashboard needs ray[default] (aiohttp): not installed",
)
def test_dashboard_starts_with_the_local_instance_and_prints_its_address_once(tmp_path):
    """A fresh interpreter (the tests' own Ray runs without a dashboard): launch.py --dashboard's
    use_dashboard(), then the run's start of Ray (and a second start_or_join, which joins)."""
    code = (
        "import urllib.request\n"
        "from cluster.runtime import start_or_join, use_dashboard\n"
        "use_dashboard()\n"
        "start_or_join(num_cpus=1)\n"
        "start_or_join()\n"
        "import ray\n"
        "url = 'http://' + ray._private.worker._global_node.webui_url\n"
        "print(url, urllib.request.urlopen(url, timeout=30).status)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Ray dashboard:")]
    assert len(lines) == 1, done.stderr
    address = lines[0].split()[-1]
    assert address.startswith("http://127.0.0.1:")  # this machine only, like the instance
    assert done.stdout.split() == [address, "200"]
