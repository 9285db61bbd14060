"""``--tensorboard``: a run's event files hold, round by round, the figures of its metrics.jsonl
(read back with TensorBoard's own event reader); a resumed run goes on in the same folder; a
comparison puts each protocol's run side by side in one log folder; without the tensorboard
package the flag is refused in one line before Ray starts."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

import cli
from engine.report import read_rows

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import (  # noqa: E402
    EventAccumulator,
)

TINY = "[dataset]\nn_users = 12\nn_items = 30\n"


def _events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``folder``: tag -> [(step, value)] by step."""
    assert list(folder.glob("events.out.tfevents.*")), f"no event file in {folder}"
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {
        tag: sorted((e.step, e.value) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]
    }


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)  # event files hold float32


def _check_against_rows(events: dict, rows: list[dict]) -> None:
    """The event files hold exactly the numbers of metrics.jsonl, at step = the row's round."""

    expected: dict[str, dict[int, float]] = {}

    def put(tag, step, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            expected.setdefault(tag, {})[step] = float(value)

    for row in rows:
        r = row["round"]
        for k, v in row["train"].items():
            put(f"train/{k}", r, v)
        for k, v in row["metrics"].items():  # only the evaluated rounds have metrics
            put(f"metrics/{k}", r, v)
        put("bytes/total", r, row["bytes"])
        for kind, v in row["bytes_by_kind"].items():
            put(f"bytes/{kind}", r, v)
        put("privacy/epsilon", r, row["privacy"].get("epsilon"))
        put("time/sim_seconds", r, row["sim_seconds"])
        put("time/sim_elapsed", r, row["sim_elapsed"])
    for tag, by_step in expected.items():
        got = dict(events.get(tag, []))
        assert sorted(got) == sorted(by_step), (tag, got, by_step)
        for step, value in by_step.items():
            assert _close(got[step], value), (tag, step, got[step], value)
    assert {"train/loss", "bytes/total", "time/sim_seconds"} <= set(expected)
    assert any(t.startswith("metrics/") for t in expected)


@pytest.mark.ray
def test_event_files_hold_the_rows_of_metrics_jsonl_and_go_on_when_resumed(
    ray_local, tmp_path, monkeypatch
):
    from protocols.fedmf.protocol import FedMF

    cfg = tmp_path / "tiny.toml"
    cfg.write_text("dim = 4\neval_every = 2\n" + TINY)
    out = tmp_path / "runs"
    argv = ["--rounds", "4", "--out", str(out), "--config", str(cfg), "--no-progress"]
    real = FedMF.run_round

    def ctrl_c_in_round_3(self, dep, rnd):
        if rnd == 3:
            raise KeyboardInterrupt
        return real(self, dep, rnd)

    # Ctrl-C in round 3 of 4, the checkpoint of round 1's end: round 2 is made again on resume
    with monkeypatch.context() as m:
        m.setattr(FedMF, "run_round", ctrl_c_in_round_3)
        assert cli.main([*argv, "--tensorboard", "--checkpoint-every", "2"]) == 130
    run_dir = next(out.iterdir())
    rows = read_rows(run_dir)
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert [bool(r["metrics"]) for r in rows] == [False, True, False]  # eval_every 2
    events = _events(run_dir / "tensorboard")  # written while the run went
    _check_against_rows(events, rows)

    # resumed: the same folder goes on, the events of round 2 made again replace the first ones
    assert cli.main(["--resume", str(run_dir), "--no-progress"]) == 0
    rows = read_rows(run_dir)
    assert [bool(r["metrics"]) for r in rows] == [False, True, False, True]
    events = _events(run_dir / "tensorboard")
    assert [s for s, _ in events["train/loss"]] == [0, 1, 2, 3]
    _check_against_rows(events, rows)

    # --tensorboard DIR: the run's events in DIR/<run folder's name>, beside other runs'
    logs = tmp_path / "logs"
    argv[1] = "2"  # --rounds
    assert cli.main([*argv, "--out", str(tmp_path / "b"), "--tensorboard", str(logs)]) == 0
    run_b = next((tmp_path / "b").iterdir())
    assert [p.name for p in logs.iterdir()] == [run_b.name]
    _check_against_rows(_events(logs / run_b.name), read_rows(run_b))
    assert not (run_b / "tensorboard").exists()


@pytest.mark.ray
def test_a_comparison_logs_each_protocol_side_by_side(ray_local, tmp_path):
    cfg = tmp_path / "cmp.toml"
    cfg.write_text(TINY + "[compare.fedmf]\ndim = 4\n[compare.dmf]\ndim = 4\n")
    argv = ["compare", "--protocols", "fedmf,dmf", "--no-baselines", "--rounds", "2"]
    argv += ["--config", str(cfg), "--out", str(tmp_path), "--no-progress", "--tensorboard"]
    assert cli.main(argv) == 0
    cmp_dir = next(p for p in tmp_path.iterdir() if p.name.endswith("-compare"))
    logs = cmp_dir / "tensorboard"
    assert sorted(p.name for p in logs.iterdir()) == ["dmf", "fedmf"]
    for label in ("fedmf", "dmf"):
        run_dir = next(p for p in cmp_dir.iterdir() if p.name.endswith(f"-{label}"))
        _check_against_rows(_events(logs / label), read_rows(run_dir))


def test_without_the_package_the_flag_is_refused_in_one_line_before_ray(
    monkeypatch, capsys, tmp_path
):
    import engine.runner
    from engine import RunSettings
    from engine.tensorboard import TensorBoardMissing

    def no_ray(*a, **k):
        raise AssertionError("Ray was started")

    monkeypatch.setattr(engine.runner, "start_or_join", no_ray)
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` fails
    for argv in (
        ["--tensorboard", "--rounds", "1", "--out", str(tmp_path)],
        ["--tensorboard", str(tmp_path / "tb"), "--dry-run"],
        ["compare", "--protocols", "fedmf", "--tensorboard", "--out", str(tmp_path)],
    ):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "pip install tensorboard" in err[0], err
        assert err[0].startswith("launch.py") and "--tensorboard" in err[0]
    assert not list(tmp_path.iterdir())  # no run folder either
    from data.synthetic import synthetic

    with pytest.raises(TensorBoardMissing, match="pip install tensorboard"):
        engine.runner.run(
            RunSettings("fedmf", rounds=1, out=str(tmp_path), tensorboard=""),
            synthetic(n_users=12, n_items=30, seed=1),
        )
