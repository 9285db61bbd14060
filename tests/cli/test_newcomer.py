"""The command line as a newcomer meets it: every protocol parameter in --help, mistakes refused in
one line (exit status 2) before Ray starts and without a run folder, and what is printed named as
the files name it. No Ray: every case stops before Ray would start."""

from __future__ import annotations

import dataclasses
import json

import pytest

import cli.shared
from protocols import PROTOCOLS, get_protocol
from protocols.base import field_docs


def refusal(capsys, argv) -> str:
    """The one line ``cli.main(argv)`` refuses ``argv`` with (exit status 2)."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    return err[0]


# --- parameters are discoverable ------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_every_protocol_parameter_has_a_line_of_meaning(name):
    cls = get_protocol(name).Config
    docs = field_docs(cls)
    undocumented = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
    assert not undocumented, f"{name}: no comment on {undocumented}"


@pytest.mark.parametrize(
    "argv",
    [["--protocol", "dgrec", "--help"], ["dgrec", "--help"], ["run", "--protocol=dgrec", "-h"]],
)
def test_help_lists_the_protocols_parameters_with_type_and_default(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "protocol parameters of dgrec" in out
    assert "--public-ratio FLOAT ρ (default: 1.0)" in out
    assert "--lr-cooldown-at INT first round of the linear cooldown (default: 0)" in out
    assert "--use-public, --no-use-public" in out
    assert "run conditions" in out and "run options" in out
    for f in dataclasses.fields(get_protocol("dgrec").Config):
        assert "--" + f.name.replace("_", "-") in out


def test_plain_help_lists_the_default_protocols_parameters(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "protocol parameters of fedmf (the default --protocol" in out
    assert "--users-per-round INT" in out


def test_the_command_is_named_as_the_user_typed_it(capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["/somewhere/bin/privrec", "compare", "--help"])
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    assert capsys.readouterr().out.startswith("usage: privrec compare")
    assert refusal(capsys, ["--hosts", "0"]).startswith("privrec: --hosts")


# --- mistakes are refused before Ray starts ---------------------------------------------------------
def test_a_gpu_request_on_a_machine_without_one_is_refused_at_once(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    line = refusal(
        capsys,
        ["--hosts", "2", "--gpus-per-host", "0.25", "--rounds", "2", "--out", str(tmp_path)],
    )
    assert line.startswith("launch.py: --gpus-per-host 0.25: this machine has no CUDA GPU")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--hosts", "2", "--kill-host", "1:5"], "kill_hosts: no host 5 (this run has hosts 0..2)"),
        (["--kill-host", "10:0", "--rounds", "3"], "kill_hosts: round 10 is outside"),
        (["--placement", "dedicated"], "would start 301 actors"),
    ],
)
def test_impossible_run_plans_are_refused(capsys, tmp_path, flags, needle):
    line = refusal(capsys, [*flags, "--out", str(tmp_path)])
    assert needle in line
    assert not any(tmp_path.iterdir())  # no run folder left behind


@pytest.mark.parametrize(
    "trace, needle",
    [
        ({"user/999": [[0, 5]]}, "no node user/999 in this run"),
        ({"user/3": [[2, 0]]}, "window [2, 0] is empty or reversed"),
        ({"user/3": [-1]}, "round -1 is negative"),
    ],
)
def test_availability_traces_are_checked_against_the_data(capsys, tmp_path, trace, needle):
    path = tmp_path / "online.json"
    path.write_text(json.dumps(trace))
    out = tmp_path / "runs"
    line = refusal(capsys, ["--availability-trace", str(path), "--out", str(out)])
    assert needle in line and line.startswith("launch.py: run condition trace")
    assert not out.exists()


def test_a_dry_run_checks_everything_and_starts_nothing(capsys, tmp_path):
    assert cli.main(["--hosts", "2", "--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "fedmf on synthetic: 20 rounds, 301 nodes (1 server, 300 user) on 3 host actors" in out
    assert not any(tmp_path.iterdir())


# --- what is printed says what the files say -------------------------------------------------------
def _summary(metrics):
    return {
        "protocol": "x",
        "dataset": "d",
        "rounds": 1,
        "metrics": metrics,
        "bytes_total": 1,
        "wall_seconds": 1.0,
        "sim_seconds": 1.0,
        "baselines": {"popularity": {"recall@20": 0.1}, "mean_rating": {"rmse": 1.1}},
    }


def test_the_printed_summary_names_the_baseline_as_summary_json_does(capsys):
    cli.shared.show(_summary({"recall@20": 0.2}), "runs/x")
    shown = json.loads(capsys.readouterr().out.rsplit("run report", 1)[0])
    assert shown["baselines"] == {"popularity": {"recall@20": 0.1}}
    for rating in ({"rmse": 0.9}, {"test_rmse": 0.9}):  # a rating run (a central rating model's
        cli.shared.show(_summary(rating), "runs/x")  # figure is test_rmse): the rating baseline
        shown = json.loads(capsys.readouterr().out.rsplit("run report", 1)[0])
        assert shown["baselines"] == {"mean_rating": {"rmse": 1.1}}


def test_the_mean_rating_baseline_is_the_rmse_of_the_training_mean():
    from data.registry import load_dataset
    from models.baselines import trivial_baselines

    ds = load_dataset("synthetic", None, seed=0, n_users=30, n_items=40)
    if not ds.has_ratings:
        pytest.skip("the synthetic data has no ratings")
    base = trivial_baselines(ds)
    mean = float(ds.train.rating.mean())
    rmse = float((((ds.test.rating - mean) ** 2).mean()) ** 0.5)
    assert base["mean_rating"]["rmse"] == pytest.approx(rmse, rel=1e-5)
    assert "recall@20" in base["popularity"]
