"""benchmarks.attacks: the grid runs each protocol's honest run under every defence
before its attacks, records the targets' exposure beside the main metric, marks a cell an attack has
no role for, resumes from its JSON, and refuses a mistake in one line."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import attacks, common


def test_a_mistake_is_one_line(capsys):
    prog = "python -m benchmarks.attacks"
    assert attacks.main(["--attacks", "nope"]) == 2
    assert capsys.readouterr().err.startswith(f"{prog}: --attacks nope: no such attack (known: ")
    assert attacks.main(["--defences", "none,mean"]) == 2
    assert "--defences mean: no such defence" in capsys.readouterr().err
    assert attacks.main(["--fractions", "0.05,1.5"]) == 2
    assert "--fractions 1.5: must be in (0, 1)" in capsys.readouterr().err
    assert attacks.main(["--set", "dim=8"]) == 2
    assert "expected NAME.key=value" in capsys.readouterr().err


def test_published_figures_name_their_source(capsys):
    assert attacks.main(["--published"]) == 0
    out = capsys.readouterr().out
    assert "fedrecattack" in out and "rdz98/FedRecAttack" in out and "Table XII" in out


def test_the_grid_puts_each_defences_honest_run_first():
    args = attacks.parse(
        [
            "--protocols",
            "fedmf",
            "--attacks",
            "random",
            "--fractions",
            "0.01,0.1",
            "--defences",
            "none,median",
        ]
    )
    assert attacks.grid(args) == [
        ("fedmf", "", 0.0, ""),
        ("fedmf", "random", 0.01, ""),
        ("fedmf", "random", 0.1, ""),
        ("fedmf", "", 0.0, "median"),
        ("fedmf", "random", 0.01, "median"),
        ("fedmf", "random", 0.1, "median"),
    ]


def test_a_cell_without_an_adversary_role_is_marked_not_run():
    from data.synthetic import synthetic

    args = attacks.parse(["--quick"])
    ds = synthetic(n_users=20, n_items=30, avg_interactions=6, seed=0)
    cell = attacks.run_cell(args, ds, "verfedgnn", "fedrecattack", 0.05, "")  # before Ray starts
    assert "no adversary role in protocol verfedgnn" in cell["skipped"]


@pytest.mark.ray
def test_quick_grid_measures_exposure_and_resumes(tmp_path, monkeypatch, ray_local, capsys):
    monkeypatch.setattr(common, "OUT", tmp_path)
    argv = [
        "--quick",
        "--protocols",
        "fedmf",
        "--attacks",
        "fedrecattack",
        "--defences",
        "none",
        "--rounds",
        "2",
        "--out",
        str(tmp_path / "runs"),
    ]
    assert attacks.main(argv) == 0
    doc = json.loads((tmp_path / "attacks-synthetic-quick.json").read_text())
    assert {"date", "command", "machine", "figures"} <= set(doc)
    cells = doc["figures"]["cells"]
    honest, attacked = cells["fedmf|none|0|none"], cells["fedmf|fedrecattack|0.05|none"]
    assert honest["fake_users"] == 0 and attacked["fake_users"] >= 1
    assert honest["targets"] == attacked["targets"]  # the same items measured with and without
    for cell in (honest, attacked):
        assert 0 <= cell["target_er@10"] <= 1 and cell["metric"] == "recall@20"
        assert cell["rejected"] == 0
    assert honest["vs_honest"] == 1.0
    assert re.search(r"fedmf +fedrecattack +0.05 +none", capsys.readouterr().out)
    # --resume keeps what the JSON holds: nothing left to run
    assert attacks.main([*argv, "--resume"]) == 0
    assert "0 runs (2 kept)" in capsys.readouterr().out
