"""A participant's exception is a fault: a user whose handler raises fails for the round
like a dropout, the run goes on and records it; a server that raises, or too many participants
that do, stop the run in one line with the traceback in the run folder and a checkpoint that
resumes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray.cloudpickle

from data.synthetic import synthetic
from engine import RunSettings, resume, run
from engine.checkpoint import load_checkpoint
from engine.report import read_rows
from nodes.conditions import Conditions
from nodes.deployment import NodeFailure
from protocols.fedmf.protocol import FedMF
from protocols.fedmf.roles import FedMFServer, FedMFUser

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
ME = "tests.integration.test_participant_faults"
PARAMS = {"dim": 8, "users_per_round": 0, "eval_every": 1}
ROUNDS = 5
FLAG = "PRIVREC_TEST_SERVER_FAILS"  # a file: while it exists, the server raises in round 2


def data():
    return synthetic(n_users=12, n_items=40, seed=4)


class FlakyUser(FedMFUser):
    """A fedmf user whose training raises in ``fail_round``, after the batched handler has
    changed every node of the batch (the host must put them back)."""

    def __init__(self, nid, ctx, train_items, test_items, fail_round=-1):
        super().__init__(nid, ctx, train_items, test_items)
        self.fail_round = fail_round

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        super().handle_batch(nodes, phase, inboxes)
        for n in nodes:
            if phase == "train" and n.round == n.fail_round:
                raise ValueError(f"{n.id}: corrupt local data")


class FlakyFedMF(FedMF):
    FAILING = (3,)  # users whose handler raises in round 2

    def node_specs(self):
        specs = super().node_specs()
        for i, s in enumerate(specs):
            if s.cls is FedMFUser:
                fail = 2 if int(s.nid.split("/")[1]) in self.FAILING else -1
                specs[i] = type(s)(FlakyUser, s.nid, {**s.kwargs, "fail_round": fail}, s.packable)
        return specs


class ManyFlakyFedMF(FlakyFedMF):
    FAILING = (0, 1, 2, 3, 4)


class FailingServer(FedMFServer):
    def __init__(self, nid, ctx, users, flag=""):
        super().__init__(nid, ctx, users)
        self.flag = flag

    def handle(self, phase, inbox) -> None:
        if phase == "aggregate" and self.round == 2 and self.flag and os.path.exists(self.flag):
            raise ZeroDivisionError("aggregation of nothing")
        super().handle(phase, inbox)


class ServerFailsFedMF(FedMF):
    def node_specs(self):
        specs = super().node_specs()
        s = specs[0]
        specs[0] = type(s)(FailingServer, s.nid, {**s.kwargs, "flag": os.environ.get(FLAG, "")})
        return specs


def _run(tmp_path, name, protocol="fedmf", hosts=1, **conditions):
    settings = RunSettings(
        protocol=protocol,
        rounds=ROUNDS,
        seed=1,
        hosts=hosts,
        out=str(tmp_path / name),
        params=dict(PARAMS),
        progress=False,
        conditions=Conditions(snapshot_every=0, **conditions),
    )
    return run(settings, data())


def test_a_raising_user_fails_for_the_round_as_if_offline(ray_local, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"user/3": [[0, 2], [3, ROUNDS]]}))
    off_dir, offline = _run(tmp_path, "offline", hosts=2, trace=str(trace))
    rows_off = read_rows(off_dir)
    # the same whatever the placement (2 user hosts, then 1: the first reuses the offline run's
    # host actors, the second leaves its own for the next test, cluster/runtime.py)
    for hosts in (2, 1):
        run_dir, summary = _run(tmp_path, f"raise{hosts}", f"{ME}:FlakyFedMF", hosts)
        rows = read_rows(run_dir)
        assert summary["status"] == "ok" and len(rows) == ROUNDS
        fault = {
            "kind": "exception",
            "node": "user/3",
            "round": 2,
            "phase": "train",
            "error": "ValueError: user/3: corrupt local data",
            "nodes": 1,
        }
        assert summary["faults"] == [fault]
        assert rows[2]["faults"] == [fault] and not any(
            r["faults"] for i, r in enumerate(rows) if i != 2
        )
        assert [r["metrics"] for r in rows] == [r["metrics"] for r in rows_off]
        assert [r["train"] for r in rows] == [r["train"] for r in rows_off]
        assert [r["dropped"] for r in rows] == [r["dropped"] for r in rows_off] == [0, 0, 1, 0, 0]
        assert summary["metrics"] == offline["metrics"]
        # the raising user uploaded nothing; only the download it received (and failed on)
        # counts beyond the offline run
        by_kind, by_kind_off = rows[2]["bytes_by_kind"], rows_off[2]["bytes_by_kind"]
        assert by_kind["item_grads"] == by_kind_off["item_grads"]
        per_user = rows[1]["bytes_by_kind"]["item_factors"] // rows[1]["train"]["participants"]
        assert by_kind["item_factors"] == by_kind_off["item_factors"] + per_user


def test_more_failed_participants_than_the_threshold_stop_the_run(ray_local, tmp_path):
    with pytest.raises(NodeFailure) as err:
        _run(tmp_path, "many", f"{ME}:ManyFlakyFedMF", max_failed_fraction=0.4)
    msg = str(err.value)
    assert "\n" not in msg and re.search(r"5 of the \d+ participants", msg) and "round 2" in msg
    assert "max_failed_fraction = 0.4" in msg and "corrupt local data" in msg
    (run_dir,) = (tmp_path / "many").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"]["round"] == 2
    assert len(summary["faults"]) == 5 and (run_dir / "traceback.txt").is_file()
    assert "no checkpoint" in msg  # --snapshot-every 0 and no --checkpoint-every


@pytest.mark.slow  # launch.py in a subprocess with its own Ray, then a resume: CI runs -m slow
def test_a_raising_server_stops_in_one_line_and_its_checkpoint_resumes(ray_local, tmp_path):
    flag = tmp_path / "server-fails"
    flag.write_text("")
    out = tmp_path / "runs"
    config = tmp_path / "run.toml"
    config.write_text(
        "dim = 8\nusers_per_round = 0\neval_every = 1\n[dataset]\nn_users = 12\nn_items = 40\n"
    )
    cmd = [sys.executable, "launch.py", "--protocol", f"{ME}:ServerFailsFedMF", "--config"]
    cmd += [str(config), "--rounds", str(ROUNDS), "--seed", "1", "--snapshot-every", "2"]
    cmd += ["--no-progress", "--out", str(out)]
    env = dict(os.environ, **{FLAG: str(flag)}, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    (run_dir,) = out.iterdir()
    line = lines[0]
    assert "server/0 failed in round 2, phase 'aggregate'" in line
    assert "ZeroDivisionError: aggregation of nothing" in line
    assert f"resume: python launch.py --resume {run_dir}" in line
    tb = (run_dir / "traceback.txt").read_text()
    assert "Traceback" in tb and "aggregation of nothing" in tb
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["resumes_at_round"] == 2
    assert summary["error"] == {
        "node": "server/0",
        "round": 2,
        "phase": "aggregate",
        "error": "ZeroDivisionError: aggregation of nothing",
    }
    flag.unlink()  # the server's bug fixed: the resumed run completes
    dataset = load_checkpoint(run_dir).protocol.dataset
    resumed_dir, resumed = resume(run_dir, progress=False)
    assert resumed["status"] == "ok" and [r["round"] for r in read_rows(resumed_dir)] == list(
        range(ROUNDS)
    )
    # and it is the run that never failed
    _, calm = run(
        RunSettings(rounds=ROUNDS, seed=1, out=str(tmp_path / "calm"), params=dict(PARAMS)),
        dataset,
    )
    assert resumed["metrics"] == calm["metrics"]
    assert resumed["bytes_total"] == calm["bytes_total"]
