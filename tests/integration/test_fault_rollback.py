"""A participant that raises in a later superstep of a round is put back as the round found it,
and the nodes of its batch keep what they computed (nodes/host.py Host._handle): one host, in
process, no Ray."""

from __future__ import annotations

import numpy as np

from nodes.conditions import Conditions
from nodes.host import Host
from nodes.node import Node, Shared
from nodes.step import StepOrder

PHASES = ("first", "second")


class Tally(Node):
    """Every superstep each node draws from its own RNG and adds it to its total, all nodes of the
    batch first; then ``user/1`` raises in the second superstep of round 1."""

    role = "user"
    fail = False

    def __init__(self, nid, ctx):
        super().__init__(nid, ctx)
        self.total = 0.0

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes):
        for n in nodes:
            n.total += float(n.rng.random())
        for n in nodes:
            if cls.fail and n.id == "user/1" and n.round == 1 and phase == "second":
                raise RuntimeError("boom")


def _run(fail: bool) -> tuple[Host, list]:
    Tally.fail = fail
    host = Host(0, seed=3, shared=Shared(), num_cpus=1, conditions=Conditions())
    host.add_nodes([(Tally, f"user/{i}", {}) for i in range(3)])
    host.set_route({f"user/{i}": 0 for i in range(3)})
    out, seq = [], 0
    for r in range(3):
        failed: list[str] = []
        for phase in PHASES:
            seq += 1
            res = host.step(StepOrder(seq, r, phase, ("user",), failed=tuple(failed)))
            failed += [f.node for f in res.faults]
            out.append(res)
    return host, out


def test_a_node_raising_late_in_a_round_is_put_back_as_the_round_found_it():
    clean, _ = _run(False)
    host, steps = _run(True)
    faults = [f for s in steps for f in s.faults]
    assert [(f.node, f.round, f.phase) for f in faults] == [("user/1", 1, "second")]
    assert faults[0].error == "RuntimeError: boom"
    for nid in ("user/0", "user/2"):  # the rest of the batch: as if nothing had failed
        assert host.nodes[nid].total == clean.nodes[nid].total
        assert host.nodes[nid].rng.random() == clean.nodes[nid].rng.random()
    # user/1 lost round 1 as an offline node would: round 0's two draws, then round 2's two
    ref = np.random.default_rng(host.nodes["user/1"].rng.bit_generator.seed_seq)
    draws = ref.random(4)
    assert host.nodes["user/1"].total == float(draws[0]) + float(draws[1]) + float(
        draws[2]
    ) + float(draws[3])


class Gossip(Node):
    """One batched phase (``train``: all nodes draw first, then ``user/1`` may raise) among
    node-by-node phases that send each other 1 MB messages, as DGREC's gossip does after its
    batched ``train``; ``Gossip.fail`` names the (round, phase) where ``user/1`` raises."""

    role = "user"
    BATCHED_PHASES = frozenset({"train"})
    fail: tuple = ()

    def __init__(self, nid, ctx):
        super().__init__(nid, ctx)
        self.total = 0.0

    def handle(self, phase, inbox):
        self.total += float(self.rng.random()) + sum(len(m.payload) for m in inbox) * 1e-9
        if (self.round, phase) == Gossip.fail and self.id == "user/1":
            raise RuntimeError("boom")
        peer = f"user/{(int(self.id.split('/')[1]) + 1) % 3}"
        self.send("share", peer, bytes(1 << 20))

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes):
        if phase.split("/")[0] != "train":
            return super().handle_batch(nodes, phase, inboxes)
        for n in nodes:
            n.total += float(n.rng.random())
        for n in nodes:
            if (n.round, phase) == cls.fail and n.id == "user/1":
                raise RuntimeError("boom")


def _gossip(fail: tuple, phases: tuple, cls=None) -> tuple[Host, list, list[int]]:
    Gossip.fail = fail
    host = Host(0, seed=5, shared=Shared(), num_cpus=1, conditions=Conditions())
    host.add_nodes([(cls or Gossip, f"user/{i}", {}) for i in range(3)])
    host.set_route({f"user/{i}": 0 for i in range(3)})
    out, logged, seq = [], [], 0
    for r in range(2):
        failed: list[str] = []
        for phase in phases:
            seq += 1
            res = host.step(StepOrder(seq, r, phase, ("user",), failed=tuple(failed)))
            failed += [f.node for f in res.faults]
            out.append(res)
            logged.append(len(host._round_log["steps"]))
    return host, out, logged


def _check_rollback(fail, phases, cls=None):
    clean, _, _ = _gossip((), phases, cls)
    host, steps, logged = _gossip(fail, phases, cls)
    faults = [(f.node, f.round, f.phase) for s in steps for f in s.faults]
    assert faults == [("user/1", *fail)]
    for nid in ("user/0", "user/2"):  # nodes that did not raise: untouched by the fault
        assert host.nodes[nid].rng.random() == clean.nodes[nid].rng.random()
    # user/1 lost round 1: as the round found it, then round 1's draws were never made
    assert host.nodes["user/1"].total < clean.nodes["user/1"].total
    return logged


def test_phases_handled_node_by_node_keep_no_inboxes_once_the_batched_phase_ran():
    phases = ("status", "train", "gossip/1", "gossip/2", "update")
    logged = _check_rollback((1, "gossip/2"), phases)
    # per round: status and train logged (train may need status replayed), then nothing more
    assert logged == [1, 2, 0, 0, 0] * 2


def test_a_batched_phase_after_unlogged_steps_replays_from_a_fresh_copy():
    phases = ("train/1", "gossip/1", "gossip/2", "train/2", "update")
    logged = _check_rollback((1, "train/2"), phases)
    assert logged == [1, 0, 0, 1, 0, 1, 0, 0, 1, 0]


class Plain(Node):
    """Gossip's node-by-node handler and nothing batched (the default handle_batch), as dmf's
    users: no phase ever needs a replay."""

    role = "user"

    def __init__(self, nid, ctx):
        super().__init__(nid, ctx)
        self.total = 0.0

    def handle(self, phase, inbox):
        Gossip.handle(self, phase, inbox)


def test_a_class_that_batches_nothing_keeps_no_inboxes_and_still_rolls_back():
    logged = _check_rollback((1, "gossip/2"), ("gossip/1", "gossip/2", "update"), Plain)
    assert logged == [0] * 6
