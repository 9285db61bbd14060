"""The host enforces the envelope (nodes/envelope.py): a message under a forged sender,
to a node that does not exist or whose role accepts nothing from the sender's, or with a payload
that is not bytes is never delivered. A participant that sends one has failed for the round (a
fault, as if its handler had raised, the run goes on); a server that sends one stops the run in
one line."""

from __future__ import annotations

import json
import sys

import pytest
import ray.cloudpickle

from cluster.message import Message
from data.synthetic import synthetic
from engine import RunSettings, run
from engine.report import read_rows
from nodes.conditions import Conditions
from nodes.deployment import NodeFailure
from nodes.envelope import EnvelopeError, check_envelope, senders_by_role
from protocols.fedmf.protocol import FedMF
from protocols.fedmf.roles import FedMFServer, FedMFUser

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

ME = "tests.nodes.test_envelope"
PARAMS = {"dim": 8, "users_per_round": 0, "eval_every": 1}
ROUNDS = 4
BAD_ROUND = 2
ROUTE = {"server/0": 0, "user/0": 0, "user/1": 1}
SENDERS = senders_by_role([FedMFServer, FedMFUser])


def _msg(**kw):
    m = {"kind": "item_grads", "src": "user/0", "dst": "server/0", "round": 3, "phase": "train"}
    m.update(kw)
    return Message(m["kind"], m["src"], m["dst"], m["round"], m["phase"], kw.get("payload", b"x"))


@pytest.mark.parametrize(
    "m, says",
    [
        (_msg(src="user/1"), "under another sender"),
        (_msg(dst="server/9"), "unknown node"),
        (_msg(payload=bytearray(b"x")), "bytearray payload"),
        (_msg(payload=[1, 2]), "list payload"),
        (_msg(dst="user/1"), "accepts nothing from role 'user'"),
        (_msg(round=2), "stamped round 2"),
        (_msg(phase="aggregate"), "phase 'aggregate'"),
        (("item_grads", "user/0", "server/0"), "a tuple, not a message"),
    ],
)
def test_what_leaves_the_envelope(m, says):
    check_envelope("user/0", [_msg()], ROUTE, SENDERS, 3, "train")  # the honest message passes
    with pytest.raises(EnvelopeError, match=says):
        check_envelope("user/0", [_msg(), m], ROUTE, SENDERS, 3, "train")


def test_senders_by_role_reads_accepts():
    assert SENDERS == {"server": frozenset({"user"}), "user": frozenset({"server"})}

    class Anything(FedMFUser):
        ACCEPTS = None

    assert senders_by_role([FedMFUser, Anything]) == {"user": None}  # declares nothing: any


# --- in a run ------------------------------------------------------------------------------------
# users 3..6 each break the envelope in one way in round BAD_ROUND, after their honest upload
FORGE = {3: "forge", 4: "unknown", 5: "not-bytes", 6: "user-to-user"}


class BadUser(FedMFUser):
    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        super().handle_batch(nodes, phase, inboxes)
        for n in nodes:
            how = FORGE.get(int(n.id.split("/")[1]))
            if phase != "train" or n.round != BAD_ROUND or how is None:
                continue
            honest = n._outbox[0]
            if how == "forge":  # its upload once more, as if user/7 had sent it
                n._outbox.append(Message(honest.kind, "user/7", *_tail(honest)))
            elif how == "unknown":
                n.send(honest.kind, "server/9", honest.payload)
            elif how == "not-bytes":
                n._outbox[0] = Message(
                    honest.kind, n.id, honest.dst, n.round, n.phase, list(honest.payload)
                )
            else:
                n.send(honest.kind, "user/0", honest.payload)


def _tail(m):
    return m.dst, m.round, m.phase, m.payload


class BadUsersFedMF(FedMF):
    def node_specs(self):
        return [
            type(s)(BadUser, s.nid, s.kwargs, s.packable) if s.cls is FedMFUser else s
            for s in super().node_specs()
        ]


class ServerForgesFedMF(FedMF):
    def node_specs(self):
        specs = super().node_specs()
        specs[0] = type(specs[0])(ServerSendsToNobody, specs[0].nid, specs[0].kwargs)
        return specs


class ServerSendsToNobody(FedMFServer):
    def handle(self, phase, inbox) -> None:
        super().handle(phase, inbox)
        if phase == "download" and self.round == BAD_ROUND:
            self.send("item_factors", "user/999", b"")


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
    return run(settings, synthetic(n_users=12, n_items=40, seed=4))


@pytest.mark.ray
def test_a_participant_outside_the_envelope_fails_for_the_round(ray_local, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(
        json.dumps({f"user/{u}": [[0, BAD_ROUND], [BAD_ROUND + 1, ROUNDS]] for u in FORGE})
    )
    off_dir, offline = _run(tmp_path, "offline", hosts=2, trace=str(trace))
    run_dir, summary = _run(tmp_path, "bad", f"{ME}:BadUsersFedMF", hosts=2)
    assert summary["status"] == "ok"
    faults = {f["node"]: f["error"] for f in summary["faults"]}
    assert sorted(faults) == [f"user/{u}" for u in FORGE]
    assert all(e.startswith("EnvelopeError: ") for e in faults.values())
    assert "under another sender ('user/7')" in faults["user/3"]
    assert "unknown node 'server/9'" in faults["user/4"]
    assert "list payload, not bytes" in faults["user/5"]
    assert "accepts nothing from role 'user'" in faults["user/6"]
    assert {f["round"] for f in summary["faults"]} == {BAD_ROUND}
    # nothing they sent that round was delivered: the run is the one where they were offline
    rows, rows_off = read_rows(run_dir), read_rows(off_dir)
    assert [r["metrics"] for r in rows] == [r["metrics"] for r in rows_off]
    bad, off = rows[BAD_ROUND]["bytes_by_kind"], rows_off[BAD_ROUND]["bytes_by_kind"]
    assert bad["item_grads"] == off["item_grads"]


@pytest.mark.ray
def test_a_server_outside_the_envelope_stops_the_run_in_one_line(ray_local, tmp_path):
    with pytest.raises(NodeFailure) as err:
        _run(tmp_path, "server", f"{ME}:ServerForgesFedMF")
    msg = str(err.value)
    assert "\n" not in msg and "server/0 failed in round 2" in msg
    assert "EnvelopeError: server/0 sent 'item_factors' to unknown node 'user/999'" in msg
