"""The benchmark commands (benchmarks.tune, benchmarks.reproduce, benchmarks.run_report) as a user
meets them: a mistake is one line on stderr and exit status 2, found before any data is read or
Ray starts, and nothing is written; --help describes the command; a finished command prints a
short table and the path of its JSON; reproduce announces each run and shows the runs' progress
bars; the papers' percentages sit beside our fractions on one scale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common, reproduce, run_report, tune
from benchmarks.papers import PAPERS

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """An empty working directory whose ``out/`` stands for benchmarks/out; data loading and the
    engine fail the test if a command reaches them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "OUT", tmp_path / "out")

    def reached(*args, **kwargs):
        raise AssertionError("reached past the checks of the arguments")

    import data.registry
    import engine.compare

    monkeypatch.setattr(data.registry, "load_dataset", reached)
    monkeypatch.setattr(tune, "load_dataset", reached)
    monkeypatch.setattr(tune, "run", reached)
    monkeypatch.setattr(engine.compare, "compare", reached)
    return tmp_path


TUNE = ["--rounds", "2", "--name", "t", "--out", "runs"]
MISTAKES = [
    # (module, argv, what the one line says)
    (
        tune,
        ["--protocol", "fedmf", "--dataset", "synthetic", "--grid", "lr=0.1,0.2", *TUNE],
        "--grid lr=0.1: lr: unknown parameter for FedMFConfig",
    ),
    (
        tune,
        ["--protocol", "fedavg", "--dataset", "synthetic", "--grid", "lr=0.1", *TUNE],
        "--protocol fedavg: unknown protocol 'fedavg'",
    ),
    (
        tune,
        ["--protocol", "fedmf", "--dataset", "nope", "--grid", "lr_item=0.1", *TUNE],
        "--dataset nope: unknown dataset 'nope'",
    ),
    (
        tune,
        ["--protocol", "fedmf", "--dataset", "synthetic", "--grid", "lr_item=0.1,x", *TUNE],
        "--grid lr_item=x: lr_item: expected a number",
    ),
    (
        tune,
        [
            "--protocol",
            "fedmf",
            "--dataset",
            "synthetic",
            "--grid",
            "lr_item=0.1",
            "--set",
            "user_steps=-1",
            *TUNE,
        ],
        "--set user_steps=-1: user_steps",
    ),
    (
        tune,
        ["--protocol", "fedmf", "--dataset", "synthetic", "--grid", "lr_item", *TUNE],
        "--grid 'lr_item': expected key=v1,v2,...",
    ),
    (
        tune,
        [
            "--protocol",
            "fedmf",
            "--dataset",
            "gowalla",
            "--data-dir",
            ".",
            "--grid",
            "lr_item=0.1",
            *TUNE,
        ],
        "--dataset gowalla: dataset 'gowalla': missing",
    ),
    (
        tune,
        ["--protocol", "fedmf", "--grid", "lr_item=0.1"],
        "the following arguments are required: --dataset, --rounds, --name",
    ),
    (
        tune,
        [
            "--protocol",
            "fedmf",
            "--dataset",
            "synthetic",
            "--grid",
            "lr_item=0.1",
            "--rounds",
            "2",
            "--name",
            "../t",
        ],
        "--name '../t': a file name",
    ),
    (
        reproduce,
        ["fedpergnn", "--dataset", "nope", "--out", "runs"],
        "--dataset nope: unknown dataset 'nope'",
    ),
    (reproduce, ["fedgnn", "--out", "runs"], "unknown paper 'fedgnn'"),
    (
        reproduce,
        ["dgrec", "--data-dir", "missing", "--out", "runs"],
        "--data-dir missing: not a directory",
    ),
    (reproduce, ["dgrec", "--quik"], "unrecognized arguments: --quik"),
    (run_report, ["missing-run", "--name", "r"], "missing-run: no such run directory"),
    (run_report, [".", "--name", "r"], "no metrics.jsonl (not a launch.py run directory?)"),
]


@pytest.mark.parametrize(
    "module, argv, says", MISTAKES, ids=[f"{m.__name__}:{s[:30]}" for m, _, s in MISTAKES]
)
def test_a_mistake_is_one_line_exit_2_and_writes_nothing(sandbox, capsys, module, argv, says):
    assert module.main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{module.__name__}: ") and says in lines[0], lines[0]
    assert "Traceback" not in err and out == ""
    assert list(sandbox.iterdir()) == []  # no runs/, no out/


@pytest.mark.parametrize(
    "argv, says",
    [
        (
            [
                "benchmarks.tune",
                "--protocol",
                "fedmf",
                "--dataset",
                "synthetic",
                "--grid",
                "lr=0.1,0.2",
                "--rounds",
                "1",
                "--name",
                "cli-test-never-written",
            ],
            "benchmarks.tune: --grid lr=0.1: lr: unknown parameter",
        ),
        (
            ["benchmarks.reproduce", "fedpergnn", "--dataset", "nope"],
            "benchmarks.reproduce: --dataset nope: unknown dataset",
        ),
        (
            ["benchmarks.run_report", "missing-run", "--name", "cli-test-never-written"],
            "benchmarks.run_report: missing-run: no such run directory",
        ),
    ],
)
def test_the_commands_exit_2_without_a_traceback(tmp_path, argv, says):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(says) and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
    assert not (common.OUT / "cli-test-never-written.json").exists()


@pytest.mark.parametrize("module", [tune, reproduce, run_report])
def test_help_says_what_the_command_does(capsys, module):
    with pytest.raises(SystemExit) as stop:
        module.main(["--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert f"usage: python -m {module.__name__}" in text
    assert "issue" not in text.lower()
    # the example command keeps its lines (the docstring's backslashes are not continuations)
    assert all(len(line) <= 100 for line in text.splitlines()), text


# --- what a finished command prints ---------------------------------------------------------
def _short_and_not_json(out: str, json_path: Path) -> None:
    lines = out.strip().splitlines()
    assert len(lines) <= 12, out
    assert not any(line.lstrip().startswith(("{", '"')) for line in lines), out
    assert lines[-1] == f"wrote {json_path}" or f"wrote {json_path}" in lines, out
    assert json.loads(json_path.read_text())["figures"]


def test_run_report_prints_a_short_table_and_the_json_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(
        json.dumps({"settings": {"protocol": "fedmf"}, "dataset": {"name": "synthetic"}})
    )
    rows = [
        {"round": 0, "metrics": {}, "bytes_by_kind": {"up": 10}, "seconds": 1.0},
        {"round": 1, "metrics": {"recall@20": 0.25}, "bytes_by_kind": {"up": 20}, "seconds": 2},
    ]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert run_report.main([str(run_dir), "--name", "rr"]) == 0
    out = capsys.readouterr().out
    _short_and_not_json(out, Path("out/rr.json"))
    assert "fedmf on synthetic, 2 rounds" in out and "recall@20" in out and "0.25" in out


def test_tune_prints_the_candidates_and_the_json_path(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    seen = []

    def fake_run(protocol, ds, params, rounds, args):
        seen.append(args.out)
        recall = {0.1: 0.2, 0.3: 0.31}[params["lr_item"]]
        return {
            "params": params,
            "rounds": rounds,
            "metrics": {"recall@20": recall},
            "curve": [],
            "run_dir": "runs/x",
            "wall_seconds": 1.0,
        }

    monkeypatch.setattr(tune, "_run", fake_run)
    monkeypatch.setattr(tune, "_start_ray", lambda args: None)  # fake runs need no Ray
    argv = [
        "--protocol",
        "fedmf",
        "--dataset",
        "synthetic",
        "--rounds",
        "2",
        "--grid",
        "lr_item=0.1,0.3",
        "--set",
        "user_steps=2",
        "--name",
        "t",
        "--out",
        "rr",
        "--engine",  # the sequential loop (the Ray Tune engine: tests/benchmarks/test_tune.py)
        "loop",
    ]
    assert tune.main(argv) == 0
    out, err = capsys.readouterr()
    _short_and_not_json(out, Path("out/t.json"))
    lines = out.splitlines()
    assert lines[1].split() == ["lr_item", "recall@20", "seconds"]
    assert lines[3].split() == ["0.1", "0.2", "1"]
    assert lines[4].split() == ["0.3", "0.31", "1", "chosen"]
    assert "candidate 2/2: lr_item=0.3, 2 rounds" in err and seen == ["rr", "rr"]


def _compare_row(label: str, value: float) -> dict:
    return {
        "label": label,
        "status": "ok",
        "metrics": {"recall@20": value, "ndcg@20": value / 2},
        "epsilon": 3.0,
        "delta": 1e-5,
        "private": True,
        "rounds": 40,
    }


def test_reproduce_announces_each_run_and_shows_progress(tmp_path, monkeypatch, capsys):
    """A stand-in for engine.compare that logs as compare does: reproduce names each run as it
    starts, lets the runs draw their progress bars, and prints a short table and its paths."""
    import engine.compare

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(common, "OUT", tmp_path / "out")
    seen = {}

    def fake_compare(entries, dataset, base, *, dataset_info=None, log=None):
        seen["progress"] = base.progress
        for i, e in enumerate(entries):
            log(f"[{i + 1}/{len(entries)}] {e.label}: {e.rounds} round(s)")
        rows = [_compare_row(e.label, 0.1 * (i + 1)) for i, e in enumerate(entries)]
        return tmp_path / "runs" / "cmp", {"protocols": rows}

    monkeypatch.setattr(engine.compare, "compare", fake_compare)
    argv = ["fedpergnn", "--quick", "--no-append", "--dataset", "synthetic", "--out", "runs"]
    assert reproduce.main(argv) == 0
    out, err = capsys.readouterr()
    assert seen["progress"] is True
    err_lines = err.splitlines()
    assert "run 1/3: fedlightgcn calibration=authors_code (paper mode) on synthetic, 40 rounds" in (
        err_lines
    )
    assert "run 2/3: fedlightgcn calibration=thesis (rigorous mode) on synthetic, 40 rounds" in (
        err_lines
    )
    assert "run 3/3: central:lightgcn (baseline) on synthetic, 60 rounds" in err_lines
    _short_and_not_json(out, Path("out/reproduce-fedpergnn-synthetic-quick.json"))
    assert "runs and comparison: runs/cmp" in out
    assert "recall@20 (fraction)" in out


def test_progress_log_passes_other_lines_on(capsys):
    log = reproduce.progress_log(["run 1/1: x (baseline) on d, 3 rounds"])
    log("[1/1] x: 3 round(s)")
    log("    x did not run: ValueError: no")
    assert capsys.readouterr().err.splitlines() == [
        "run 1/1: x (baseline) on d, 3 rounds",
        "    x did not run: ValueError: no",
    ]


# --- units ------------------------------------------------------------------------------------
def test_papers_printed_in_percent_are_set_beside_our_fractions():
    results = {
        "dgrec": _compare_row("dgrec", 0.1179),
        "central:lightgcn": {**_compare_row("central:lightgcn", 0.2961), "private": False},
    }
    rows = reproduce.build_rows("dgrec", PAPERS["dgrec"], results)
    r = rows[0]
    assert r["paper_value"] == pytest.approx(0.0968)
    assert r["paper_figure"] == ("0.0968 (Book-Crossing, printed 9.68 %; 0.9738 × LightGCN 0.0994)")
    cells = reproduce.table_cells(r)
    assert cells[1] == "recall@20 (fraction)" and cells[3] == "0.1179"
    dips = reproduce.build_rows("dipsgnn", PAPERS["dipsgnn"], {})
    assert dips[0]["paper_value"] == pytest.approx(0.2113)
    assert dips[0]["paper_figure"].startswith("0.2113 (ML-1M, printed 21.13 %; ")
    # a figure recorded as a fraction is shown as it is
    fed = reproduce.build_rows("fedpergnn", PAPERS["fedpergnn"], {})
    assert fed[0]["paper_value"] == 0.1661 and "printed" not in fed[0]["paper_figure"]
    assert reproduce.metric_label("rmse") == "rmse (rating scale)"
