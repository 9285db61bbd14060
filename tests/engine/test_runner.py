"""What a new user sees on the console, from following the README: a run's progress bar is closed
when it ends (not redrawn under the next protocol's), Ctrl-C says in one line where it stopped and
what was saved, --help lists the protocols that take attacks from the registry, the step sizes
the README calls resumable are, a parameter that cannot change on resume is refused first, a
misspelt flag or dataset gets a "did you mean", a lost host prints a status line, and a status
a protocol repeats every round is printed once."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

import cli.compare
import cli.run
from data.synthetic import synthetic
from engine import RunSettings, run
from engine.checkpoint import load_checkpoint
from engine.report import read_rows
from nodes.conditions import Conditions


def _data():
    return synthetic(n_users=12, n_items=30, avg_interactions=6, seed=1)


def _settings(tmp_path, **kw) -> RunSettings:
    base = dict(
        protocol="fedmf",
        rounds=2,
        hosts=1,
        out=str(tmp_path),
        params={"dim": 4, "users_per_round": 0},
        progress=False,
    )
    return RunSettings(**{**base, **kw})


def _err_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing on stderr"
    return err[-1]


def _tiny_config(tmp_path) -> str:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text("dim = 4\n[dataset]\nn_users = 12\nn_items = 30\n")
    return str(cfg)


def _main(argv: list[str]) -> int:
    """``cli.main(argv)``; a Ctrl-C that escapes it fails the test (instead of stopping the
    whole pytest session): cli.main prints its one line and returns 130."""
    try:
        return cli.main(argv)
    except KeyboardInterrupt as e:
        pytest.fail(f"Ctrl-C escaped cli.main: {type(e).__name__}({str(e)!r})")


def _ctrl_c_in_round(monkeypatch, round_: int) -> None:
    from protocols.fedmf.protocol import FedMF

    real = FedMF.run_round

    def run_round(self, dep, rnd):
        if rnd == round_:
            raise KeyboardInterrupt
        return real(self, dep, rnd)

    monkeypatch.setattr(FedMF, "run_round", run_round)


# --- the progress bar is closed when a run ends --------------------------------------------------
@pytest.mark.ray
@pytest.mark.parametrize("ending", ["finished", "failed", "ctrl-c"])
def test_a_runs_progress_bar_is_closed_when_it_ends(ray_local, tmp_path, monkeypatch, ending):
    """Closed by the run, not left to the garbage collector: a bar still open is redrawn (its
    timer rising) by every later tqdm.write, under the next protocol of a comparison."""
    import engine.runner
    from protocols.fedmf.protocol import FedMF

    bars = []  # held here, so only an explicit close() closes them

    class Bar(engine.runner.tqdm):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.closed_by_run = False
            bars.append(self)

        def close(self):
            self.closed_by_run = True
            super().close()

    monkeypatch.setattr(engine.runner, "tqdm", Bar)
    if ending == "failed":

        def fails(self, dep, rnd):
            raise RuntimeError("boom")

        monkeypatch.setattr(FedMF, "run_round", fails)
    elif ending == "ctrl-c":
        _ctrl_c_in_round(monkeypatch, 1)
    expected = {"finished": None, "failed": RuntimeError, "ctrl-c": KeyboardInterrupt}[ending]
    if expected is None:
        run(_settings(tmp_path, progress=True), _data())
    else:
        with pytest.raises(expected):
            run(_settings(tmp_path, progress=True), _data())
    assert len(bars) == 1 and bars[0].closed_by_run


# --- Ctrl-C: one line, where and what was saved --------------------------------------------------
@pytest.mark.ray
def test_ctrl_c_before_the_first_round_says_where_in_one_line(
    ray_local, tmp_path, monkeypatch, capsys
):
    import data.registry
    import engine.runner

    out = tmp_path / "runs"
    argv = ["--rounds", "2", "--out", str(out), "--config", _tiny_config(tmp_path)]

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # while the data load
        m.setattr(data.registry, "load_dataset", ctrl_c)
        assert _main(argv) == 130
        line = _err_line(capsys)
        assert "interrupted while loading --dataset synthetic" in line, line
        assert "nothing was written" in line
    with monkeypatch.context() as m:  # while Ray starts
        m.setattr(engine.runner, "start_or_join", ctrl_c)
        assert _main(argv) == 130
        line = _err_line(capsys)
        assert line.startswith("launch.py: fedmf: interrupted while starting Ray"), line
        assert "before its first round" in line and "nothing was written" in line
    with monkeypatch.context() as m:  # while the host actors start
        m.setattr(engine.runner, "_deploy", ctrl_c)
        assert _main(argv) == 130
        assert "interrupted while starting the host actors" in _err_line(capsys)
        # ... and in a comparison, which says which protocol
        cmp = ["compare", "--protocols", "fedmf", "--no-baselines", "--rounds", "1"]
        assert _main([*cmp, "--out", str(out)]) == 130
        line = _err_line(capsys)
        assert line.startswith("launch.py: comparison interrupted at [1/1] fedmf (fedmf: "), line
        assert "interrupted while starting the host actors" in line
        assert "comparison.md was not written" in line
    assert not [p for p in out.iterdir() if not p.name.endswith("-compare")]  # no run folder


@pytest.mark.ray
def test_ctrl_c_in_a_round_says_which_what_was_saved_and_how_to_resume(
    ray_local, tmp_path, monkeypatch, capsys
):
    argv = ["--rounds", "3", "--config", _tiny_config(tmp_path), "--no-progress"]
    argv += ["--checkpoint-every", "1"]
    # in the first round: nothing saved yet, and the message says why, not "no checkpoint"
    with monkeypatch.context() as m:
        _ctrl_c_in_round(m, 0)
        assert _main([*argv, "--out", str(tmp_path / "a")]) == 130
    line = _err_line(capsys)
    assert "interrupted in round 0 (the 1st of 3), before its first checkpoint" in line, line
    assert "--checkpoint-every 1 writes one when round 0 is done" in line
    assert "nothing to resume" in line and "0 finished rounds" in line
    run_a = next((tmp_path / "a").iterdir())
    with pytest.raises(SystemExit):  # and --resume then says the same, not "was it started
        cli.main(["--resume", str(run_a)])  # with --checkpoint-every?"
    line = _err_line(capsys)
    assert "the run stopped before its first checkpoint" in line, line
    assert "was the run started" not in line

    # in round 2 of a run whose checkpoint is of round 1's end: the resume command, and it works
    with monkeypatch.context() as m:
        _ctrl_c_in_round(m, 2)
        assert _main([*argv, "--out", str(tmp_path / "b")]) == 130
    run_b = next((tmp_path / "b").iterdir())
    line = _err_line(capsys)
    assert line == (
        f"launch.py: interrupted in round 2; resume with --resume {run_b}: it goes on from round "
        "2 (the 3rd of 3), where its checkpoint was written"
    )
    assert load_checkpoint(run_b).next_round == 2
    assert cli.main(["--resume", str(run_b), "--no-progress"]) == 0
    assert [r["round"] for r in read_rows(run_b)] == [0, 1, 2]


# --- --help: the protocols that take attacks -----------------------------------------------------
def test_help_lists_the_protocols_with_attacks_from_the_registry():
    from protocols import get_protocol, protocol_names

    with_attacks = [n for n in protocol_names() if getattr(get_protocol(n), "ATTACKS", None)]
    assert {"dgrec", "dmf", "verfedgnn", "fedmf", "fedpergnn", "fedlightgcn"} <= set(with_attacks)
    for parser in (cli.run.build_parser(), cli.compare.build_compare_parser()):
        text = " ".join(parser.format_help().split())
        assert f"(protocols: {', '.join(with_attacks)})" in text


# --- resume: step sizes may change, a shape may not ----------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A fedmf run of 2 rounds with a checkpoint after each (finished: all planned rounds done)."""
    from conftest import start_test_ray

    start_test_ray()
    tmp = tmp_path_factory.mktemp("finished")
    run_dir, _ = run(
        _settings(tmp, checkpoint_every=1, params={"dim": 4, "eval_every": 1}), _data()
    )
    return run_dir


@pytest.mark.ray
def test_resume_refuses_a_fixed_parameter_first_and_takes_a_step_size(
    finished_run, tmp_path, capsys
):
    # --dim on a finished run: refused for --dim, not answered "all 2 planned rounds are done"
    with pytest.raises(SystemExit) as e:
        cli.main(["--resume", str(finished_run), "--dim", "32"])
    assert e.value.code == 2
    line = _err_line(capsys)
    assert "--dim: cannot change when a run resumes" in line and "planned" not in line, line
    assert "--lr-user" in line  # what may change
    # ... by the engine too, before the rounds are looked at
    from engine import resume
    from protocols.base import ConfigError

    with pytest.raises(ConfigError, match="dim: cannot change"):
        resume(finished_run, progress=False, params={"dim": 32})
    # an optimizer's step size (the server's Adam keeps lr_item in its state) is refused
    with pytest.raises(SystemExit):
        cli.main(["--resume", str(finished_run), "--rounds", "3", "--lr-item", "0.1"])
    assert "--lr-item: cannot change when a run resumes" in _err_line(capsys)

    # --lr-user (read afresh at every local step) changes the rounds after the resume
    def resumed(lr_user: str) -> list[float]:
        copy = tmp_path / f"lr{lr_user}"
        shutil.copytree(finished_run, copy)
        argv = ["--resume", str(copy), "--rounds", "4", "--no-progress", "--lr-user", lr_user]
        assert cli.main(argv) == 0
        record = json.loads((copy / "config.json").read_text())
        assert record["resumed_with"][-1]["params"] == {"lr_user": float(lr_user)}
        return [r["train"]["loss"] for r in read_rows(copy)]

    same, moved = resumed("0.5"), resumed("50")  # 0.5: fedmf's default
    assert same[:3] == moved[:3]  # rounds 0, 1 before the resume; round 2's loss is taken
    assert same[3] != moved[3]  # before its update: round 2's step shows in round 3


# --- did you mean ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "argv, hint",
    [
        (["--usr-steps", "2", "--dry-run"], "did you mean --user-steps?"),
        (["--dataset", "ml100k", "--dry-run"], "did you mean --dataset ml-100k?"),
        (["compare", "--dataset", "ml100k", "--dry-run"], "did you mean --dataset ml-100k?"),
        (["compare", "--protocls", "fedmf", "--dry-run"], "did you mean --protocols?"),
        (["--protocol", "dgrc", "--dry-run"], "did you mean dgrec?"),
    ],
)
def test_a_misspelt_flag_or_dataset_gets_a_did_you_mean(capsys, tmp_path, argv, hint):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and hint in err[0], err


# --- status lines: a lost host, a repeated step, "1 host actor" ---------------------------------
@pytest.mark.ray
def test_a_host_lost_and_replaced_prints_one_status_line(ray_local, tmp_path, capfd):
    conditions = Conditions(kill_hosts=((1, 0),), snapshot_every=1)
    _, summary = run(_settings(tmp_path, progress=True, conditions=conditions), _data())
    assert [f["kind"] for f in summary["faults"]] == ["host"]
    lines = [x for x in capfd.readouterr().err.replace("\r", "\n").splitlines() if "died" in x]
    assert len(lines) == 1, lines
    assert lines[0].startswith("fedmf round 1: host 0 (") and "replaced; nodes restored" in lines[0]


def test_a_status_text_repeated_every_round_is_printed_once(capsys):
    from engine.runner import _Status

    status = _Status(_settings("unused", progress=True))
    for rnd in range(3):
        status.round = rnd
        status("graph expansion at the matcher (12 users)…")
        status(f"something new in round {rnd}")
    err = capsys.readouterr().err
    assert err.count("graph expansion at the matcher") == 1
    assert "fedmf round 0: graph expansion" in err
    assert err.count("something new in round") == 3


def test_the_plan_counts_one_host_actor_and_one_round(capsys):
    assert cli.main(["--protocol", "dgrec", "--rounds", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ": 1 round, " in out and " on 1 host actor (packed)" in out, out


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-n", "0"]))
