"""Checkpoints: a run interrupted after a checkpoint and resumed makes exactly the rounds, bytes
and metrics of the uninterrupted run; bad checkpoints and mismatched placements are refused."""

from __future__ import annotations

import json
import pickle

import pytest

import cli
from benchmarks.run_report import summarize
from data.synthetic import synthetic
from engine import RunSettings, resume, run
from engine.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from engine.report import read_rows

pytestmark = pytest.mark.ray


# fedmf runs on 4 host actors here (3 user hosts and the server's), the shape of FedLightGCN's on
# 1 user host (its server, key server and matcher apart), so that the tests reuse the host actors
# the one before left idle (cluster/runtime.py) instead of starting new processes; DGREC (users
# only, on 1 host) comes last.
def _settings(tmp_path, name, **kw):
    base = dict(
        protocol="fedmf",
        rounds=4,
        seed=3,
        hosts=3,
        out=str(tmp_path / name),
        params={"users_per_round": 12, "dim": 8, "eval_every": 1},
        progress=False,
    )
    base.update(kw)
    return RunSettings(**base)


def _rows(run_dir):
    rows = read_rows(run_dir)
    # read_rows keeps the last row of a repeated round: the file itself must hold each once
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == len(rows)
    for r in rows:  # measured times (the simulated clock charges measured handler time)
        for key in ("seconds", "sim_seconds", "sim_elapsed"):
            r.pop(key)
    return rows


def test_resumed_run_equals_the_uninterrupted_run(ray_local, tmp_path):
    data = synthetic(n_users=40, n_items=60, seed=1)
    full_dir, full = run(_settings(tmp_path, "full"), data)
    part_dir, _ = run(_settings(tmp_path, "part", rounds=2, checkpoint_every=2), data)
    assert load_checkpoint(part_dir).next_round == 2
    # a row written after the checkpoint (the run went on, then died) is replaced on resume
    with open(part_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"round": 2, "junk": 1}) + "\n")
    resumed_dir, resumed = resume(part_dir, 4, progress=False)
    assert resumed_dir == part_dir
    for key in ("metrics", "bytes_total", "bytes_by_kind", "bytes_eval", "messages", "rounds"):
        assert resumed[key] == full[key], key
    assert _rows(resumed_dir) == _rows(full_dir)
    # the resumed run checkpointed again after its last round: it can be extended further
    assert load_checkpoint(part_dir).next_round == 4
    with pytest.raises(CheckpointError, match="must exceed"):
        resume(part_dir, 4, progress=False)


def test_fedlightgcn_with_its_key_server_resumes_exactly(ray_local, tmp_path):
    """The key server's RSA key and the users' copies of its public numbers survive a checkpoint
    (cryptography's objects do not pickle by themselves): the resumed run equals the
    uninterrupted one."""
    data = synthetic(n_users=30, n_items=50, seed=2)
    params = {
        "users_per_round": 10,
        "negatives": 8,
        "pseudo_items": 4,
        "dim": 8,
        "key_bits": 1024,
        "eval_every": 1,
    }
    kw = dict(protocol="fedlightgcn", hosts=1, params=params)
    full_dir, full = run(_settings(tmp_path, "full", **kw), data)
    part_dir, _ = run(_settings(tmp_path, "part", rounds=2, checkpoint_every=1, **kw), data)
    _, resumed = resume(part_dir, 4, progress=False)
    for key in ("metrics", "bytes_total", "bytes_by_kind", "messages"):
        assert resumed[key] == full[key], key
    assert _rows(part_dir) == _rows(full_dir)


def test_bad_checkpoints_are_named(tmp_path, capsys):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path)
    (tmp_path / CHECKPOINT_NAME).write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="not a privrec checkpoint"):
        load_checkpoint(tmp_path)
    # a plain pickle (format 2 and older) is refused unread: tests/engine/test_checkpoint_trust.py
    (tmp_path / CHECKPOINT_NAME).write_bytes(pickle.dumps({"format": 1}))
    with pytest.raises(CheckpointError, match="unsigned checkpoint"):
        load_checkpoint(tmp_path)
    with pytest.raises(SystemExit):
        cli.main(["--resume", str(tmp_path), "--rounds", "5"])
    assert "--resume" in capsys.readouterr().err.strip().splitlines()[-1]
    with pytest.raises(SystemExit):
        cli.main(["--resume", str(tmp_path), "--dim", "4"])
    assert "config.json" in capsys.readouterr().err.strip().splitlines()[-1]
    cfg = tmp_path / "run.toml"
    cfg.write_text("dim = 4\n")
    with pytest.raises(SystemExit):
        cli.main(["--resume", str(tmp_path), "--config", str(cfg)])
    assert "from the checkpoint" in capsys.readouterr().err


def test_ctrl_c_names_the_round_and_the_resume(ray_local, tmp_path, monkeypatch):
    """Ctrl-C during a run ends it with RunInterrupted (a KeyboardInterrupt) naming the round and
    the run directory to resume, which then resumes from the last checkpoint."""
    from engine.runner import RunInterrupted
    from protocols.fedmf.protocol import FedMF

    data = synthetic(n_users=20, n_items=30, seed=1)
    real = FedMF.run_round

    def interrupted_in_round_2(self, dep, rnd):
        if rnd == 2:
            raise KeyboardInterrupt
        return real(self, dep, rnd)

    monkeypatch.setattr(FedMF, "run_round", interrupted_in_round_2)
    with pytest.raises(
        RunInterrupted, match=r"interrupted in round 2; resume with --resume .*part"
    ):
        run(_settings(tmp_path, "part", checkpoint_every=1), data)
    monkeypatch.setattr(FedMF, "run_round", real)
    run_dir = next((tmp_path / "part").iterdir())
    assert load_checkpoint(run_dir).next_round == 2
    # the hint works as printed: without --rounds the run goes on to its own planned 4 rounds
    assert cli.main(["--resume", str(run_dir), "--no-progress"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 4
    assert load_checkpoint(run_dir).next_round == 4
    with pytest.raises(CheckpointError, match="all 4 planned rounds are done"):
        resume(run_dir, progress=False)


def test_resumed_with_a_cooldown_equals_the_run_with_it_from_the_start(ray_local, tmp_path, capsys):
    """A step-size parameter changed on resume (DGREC's cooldown, from the round the run resumes
    at) gives the rounds a run configured so from the start makes; config.json records the
    change; a parameter that shapes the nodes' state is refused in one line."""
    data = synthetic(n_users=30, n_items=40, seed=4)
    params = {"dim": 8, "hidden": 8, "n_interests": 2, "pairs": 8, "eval_every": 1}
    cool = {"lr_cooldown_at": 2, "lr_cooldown_rounds": 3}
    kw = dict(protocol="dgrec", hosts=1)
    full_dir, full = run(_settings(tmp_path, "full", params={**params, **cool}, **kw), data)
    flat_dir, flat = run(_settings(tmp_path, "flat", params=params, **kw), data)
    part_dir, _ = run(
        _settings(tmp_path, "part", rounds=2, checkpoint_every=2, params=params, **kw), data
    )
    assert flat["metrics"] != full["metrics"]  # the cooldown changes rounds 2 and 3
    with pytest.raises(SystemExit):
        cli.main(["--resume", str(part_dir), "--rounds", "4", "--dim", "4", "--no-progress"])
    assert "dim: cannot change when a run resumes" in capsys.readouterr().err
    flags = ["--lr-cooldown-at", "2", "--lr-cooldown-rounds", "3", "--no-progress"]
    assert cli.main(["--resume", str(part_dir), "--rounds", "4", *flags]) == 0
    resumed = json.loads((part_dir / "summary.json").read_text())
    for key in ("metrics", "bytes_total", "bytes_by_kind", "messages"):
        assert resumed[key] == full[key], key
    assert _rows(part_dir) == _rows(full_dir)
    record = json.loads((part_dir / "config.json").read_text())
    assert record["resumed_with"] == [{"from_round": 2, "params": cool, "rounds": 4}]
    assert record["settings"]["rounds"] == 4  # config.json records the new plan
    assert record["protocol_config"]["lr_cooldown_rounds"] == 3
    assert summarize(part_dir)["resumed_with"] == record["resumed_with"]


@pytest.mark.parametrize(
    "flags",
    [
        ["--dataset", "ml-100k"],
        ["--dropout", "0.2"],
        ["--seed", "1"],
        ["--placement", "dedicated"],
        ["--hosts", "3"],
        ["--protocol", "dmf"],
    ],
)
def test_flags_that_cannot_change_on_resume_are_refused(tmp_path, capsys, flags):
    (tmp_path / "config.json").write_text(json.dumps({"settings": {"protocol": "fedmf"}}))
    with pytest.raises(SystemExit) as e:
        cli.main(["--resume", str(tmp_path), *flags])
    assert e.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()
    assert len(line) == 1 and flags[0] in line[0] and "cannot change" in line[0]
