"""Handlers never raise on what a participant sent: past the host's screen
(``ACCEPTS``, tests/integration/test_untrusted_messages.py) a message is structurally valid, and what only the
receiver can judge — is the sender its neighbour, a node of this round's tree, a user it sampled
or registered; is this the step's message; is it the sender's first of its kind — is checked
before use and a failure is dropped with ``Node.reject`` and counted under ``rejected``.

* the receivers' own checks, one by one, on a node driven by hand (no Ray): each hostile message
  is rejected with its reason, the honest one beside it is used, nothing raises — including the
  checks that the host's envelope makes unreachable in a run (another round's stamp, a user the
  server did not sample, one the curator does not register), which a handler makes anyway;
* every protocol, through a real small run: one participant plays its role honestly and, beside
  its honest messages, sends every role it may address structurally valid but semantically
  hostile messages of every kind that role accepts from it — to users that are not its
  neighbours, duplicated, answering invitations nobody sent, with ids and lengths at the bounds of
  the checks, zero-length — and keeps a tally of the reason each must be rejected with. The run
  completes, no participant fails, and the run's ``rejected`` is exactly that tally (an honest
  run rejects nothing: tests/integration/test_golden.py);
* DGREC: a user that writes to a user who is not its neighbour (the receiver
  raised, so one attacker knocked honest users out of every round).
"""

from __future__ import annotations

import dataclasses
import struct
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import ray.cloudpickle

from cluster import wire
from cluster.ledger import is_eval_phase
from cluster.message import Message, index_of, node_id
from cluster.validate import Invalid, screen
from data.synthetic import synthetic
from engine.runner import RunSettings, deploy, prepare, shared_of
from nodes.conditions import Conditions
from nodes.node import NodeContext
from privacy.key_server import residue_bytes
from privacy.oprf import TOKEN_BYTES
from protocols.dgrec import messages as dg_msg
from protocols.dgrec.roles import DGRECUser
from protocols.dipsgnn import messages as ds_msg
from protocols.dipsgnn.roles import DIPSGNNServer, DIPSGNNUser
from protocols.dmf import messages as dmf_msg
from protocols.dmf.roles import DMFUser
from protocols.fedmf import messages as fm_msg
from protocols.fedmf.roles import FedMFUser
from protocols.fedpergnn.roles import User as FedPerGNNUser
from protocols.verfedgnn.roles import VerFedGNNParty

REPO = Path(__file__).resolve().parents[2]
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


def _dataset():
    return synthetic(n_users=24, n_items=40, avg_interactions=10, seed=0)


def _plan(protocol: str, params: dict, rounds: int = 2):
    settings = RunSettings(protocol=protocol, rounds=rounds, seed=0, params=dict(params))
    return prepare(settings, _dataset())


def _msg(
    kind: str, src: str, dst: str, payload: bytes, round_: int = 0, phase: str = ""
) -> Message:
    return Message(kind, src, dst, round_, phase, payload)


def _node(plan, nid: str):
    """Node ``nid`` of ``plan`` built by hand (on this process, no Ray), as its host would."""
    (spec,) = [s for s in plan.specs if s.nid == nid]
    return spec.cls(spec.nid, NodeContext(0, "cpu", shared_of(plan.protocol)), **spec.kwargs)


def _public(node, **changes) -> None:
    """Change ``node``'s public record (e.g. DGREC's seed probability) for a test."""
    shared = node.ctx.shared
    node.ctx.shared = dataclasses.replace(
        shared, public=dataclasses.replace(shared.public, **changes)
    )


def _run(node, phase: str, inbox: list, round_: int = 0):
    """Run ``node``'s handler for ``phase`` on ``inbox`` as a host would (sorted by sender);
    returns (what it sent, what it rejected as Counter of (kind, reason)). Every message passes
    the host's screen: only what the receiver alone can judge is left to the handler."""
    for m in inbox:
        assert screen(type(node).ACCEPTS, m, phase, node.ctx.shared, {}) is None, m.kind
    node.round, node.phase = round_, phase
    type(node).handle_batch([node], phase, [sorted(inbox, key=lambda m: m.src)])
    rejected = Counter(node._rejected)
    out, _ = node._drain()
    return out, rejected


# --------------------------------------------------------------------------- receivers' own checks


def test_fedmf_server_takes_one_upload_of_this_round_from_each_user_it_sampled():
    plan = _plan("fedmf", {"dim": 4, "users_per_round": 3})
    server = _node(plan, "server/0")
    sent, _ = _run(server, "download", [])
    sampled = sorted({m.dst for m in sent})
    assert len(sampled) == 3
    stranger = next(s.nid for s in plan.specs if s.nid.startswith("user/") and s.nid not in sampled)
    n_items, pairs = plan.protocol.dataset.n_items, plan.config.pairs
    rng = np.random.default_rng(0)

    def upload(src, round_=0, rows=2 * pairs):
        ids = rng.integers(0, n_items, rows)
        payload = fm_msg.encode_item_grads(ids, rng.normal(size=(rows, 4)).astype("f4"))
        return _msg(fm_msg.ITEM_GRADS, src, "server/0", payload, round_, "train")

    before = server.get_item_factors()
    inbox = [
        upload(sampled[0]),
        upload(sampled[0]),  # a second upload of one user: budget
        upload(sampled[1], round_=1),  # another round's: order
        upload(stranger),  # not sampled this round: peer
        upload(sampled[2], rows=0),  # zero rows: a valid (if useless) upload
    ]
    _, rejected = _run(server, "aggregate", inbox)
    assert rejected == Counter({("item_grads", "budget"): 1, ("item_grads", "order"): 1,
                                ("item_grads", "peer"): 1})  # fmt: skip
    assert not np.allclose(server.get_item_factors(), before)  # the two valid uploads count
    assert np.isfinite(server.get_item_factors()).all()


def test_fedmf_user_trains_once_on_its_first_q_of_the_round():
    plan = _plan("fedmf", {"dim": 4, "users_per_round": 0})
    nid = next(s.nid for s in plan.specs if s.nid.startswith("user/"))
    user = _node(plan, nid)
    q = fm_msg.encode_item_factors(np.zeros((plan.protocol.dataset.n_items, 4), "f4"))
    first = _msg(fm_msg.ITEM_FACTORS, "server/0", nid, q, 0, "download")
    sent, rejected = _run(user, "train", [first, first, dataclasses.replace(first, round=3)])
    assert [m.kind for m in sent] == [fm_msg.ITEM_GRADS]  # one upload, from the first Q
    assert rejected == Counter({("item_factors", "budget"): 1, ("item_factors", "order"): 1})
    sent, rejected = _run(user, "train", [dataclasses.replace(first, round=3)])
    assert sent == [] and rejected == Counter({("item_factors", "order"): 1})  # sits it out


def test_dmf_user_applies_neighbours_gradients_once_and_caps_what_one_sender_forwards():
    plan = _plan("dmf", {"dim": 4, "hops": 2})
    spec = next(s for s in plan.specs if len(s.kwargs["neighbours"]) >= 1)
    user = _node(plan, spec.nid)
    neighbour = node_id("user", int(spec.kwargs["neighbours"][0]))
    others = {s.nid for s in plan.specs} - {spec.nid} - set(user.neighbours)
    stranger = sorted(others)[0]
    n_items, n_users = plan.protocol.dataset.n_items, plan.protocol.dataset.n_users

    def grads(src, nonce, round_=0, ids=(0, n_items - 1)):
        rows = np.ones((len(ids), 5), "f4")
        payload = dmf_msg.encode_item_grads(nonce, np.array(ids, np.int64), rows)
        return _msg(dmf_msg.ITEM_GRADS, src, spec.nid, payload, round_, "train")

    before = user.item_factors.clone().numpy()
    flood = [grads(neighbour, i.to_bytes(8, "little")) for i in range(n_users + 3)]
    inbox = [
        grads(neighbour, b"A" * 8),
        grads(neighbour, b"A" * 8),  # the same gradient again from the same sender: budget
        grads(neighbour, b"B" * 8, ids=()),  # zero rows: valid, changes nothing
        grads(neighbour, b"C" * 8, round_=1),  # stamped another round: order
        grads(stranger, b"D" * 8),  # not a neighbour: peer
        *flood,  # more gradients than there are users to originate them: budget past n_users
    ]
    sent, rejected = _run(user, "relay1", inbox)
    assert rejected == Counter({("item_grads", "budget"): 1 + 5, ("item_grads", "order"): 1,
                                ("item_grads", "peer"): 1})  # fmt: skip
    # applied: A and n_users - 2 of the flood (B has no rows); forwarded to other neighbours
    assert not np.allclose(user.item_factors.numpy(), before)
    forwarded = {m.payload for m in sent}
    assert len(forwarded) == (n_users if len(user.neighbours) > 1 else 0)


def _dgrec_pair(model: str = "dgrec"):
    """A DGREC plan and two neighbours u, v that are built by hand, with a user w that is v's
    neighbour but not u's (or None) and a user s that is not v's neighbour."""
    params = {"pairs": 4, "hops": 2} if model == "dgrec" else {"hops": 2}
    plan = _plan(model, params)
    graph = {index_of(s.nid): set(s.kwargs["neighbours"].tolist()) for s in plan.specs}
    u = next(x for x in sorted(graph) if graph[x])
    v = min(graph[u])
    stranger = next(x for x in sorted(graph) if x not in graph[v] and x != v)
    return plan, graph, u, v, stranger


def test_dgrec_user_drops_what_a_non_neighbour_or_a_non_member_of_its_tree_sends():
    plan, graph, u, v, stranger = _dgrec_pair()
    uid, vid, sid = (node_id("user", x) for x in (u, v, stranger))
    user = _node(plan, vid)
    n_items = plan.protocol.dataset.n_items
    pub = wire.encode_ids(np.array([0, n_items - 1]))
    _, rejected = _run(
        user,
        "setup",
        [_msg("public_items", uid, vid, pub), _msg("public_items", uid, vid, pub),
         _msg("public_items", sid, vid, pub), _msg("public_items", uid, vid, pub, 1)],
    )  # fmt: skip
    assert rejected == Counter({("public_items", "budget"): 1, ("public_items", "peer"): 1,
                                ("public_items", "order"): 1})  # fmt: skip
    assert set(user.neighbour_public) == {u}
    status = dg_msg.encode_status(0.5, 1)
    _run(user, "status", [])
    _public(user, seed_probability=0.0)  # not a seed this round
    _, rejected = _run(
        user, "seed", [_msg("status", uid, vid, status), _msg("status", sid, vid, status)]
    )
    assert rejected == Counter({("status", "peer"): 1}) and not user.in_tree
    # hop/1: an invitation of hop 2 (another step's), a join from a user it never invited, an
    # invitation from a stranger; the neighbour's valid invitation is taken
    invite = wire.encode_ids([1], width=1)
    sent, rejected = _run(
        user,
        "hop/1",
        [_msg("invite", uid, vid, wire.encode_ids([2], width=1)),
         _msg("join", sid, vid, wire.encode_blob(b"")),
         _msg("invite", sid, vid, invite)],
    )  # fmt: skip
    assert rejected == Counter({("invite", "order"): 1, ("join", "peer"): 1,
                                ("invite", "peer"): 1})  # fmt: skip
    assert not user.in_tree  # the only invitation from a neighbour was another step's
    sent, rejected = _run(user, "hop/1", [_msg("invite", uid, vid, invite)])
    assert rejected == Counter() and user.in_tree and user.parent == u
    assert [m.dst for m in sent if m.kind == "join"] == [uid]
    invited = sorted(user.invited)
    assert invited and all(user.invited[x] == 2 for x in invited)  # invited at hop 2
    # hop/2: a join from an invitee comes a step early (its invitation arrives now: order), the
    # same join again (budget), a join from a neighbour it did not invite (peer)
    join = wire.encode_blob(b"")
    others = [x for x in sorted(graph[v]) if x not in invited and x != u]
    early = _msg("join", node_id("user", invited[0]), vid, join)
    inbox = [early, early] + [_msg("join", node_id("user", x), vid, join) for x in others[:1]]
    _, rejected = _run(user, "hop/2", inbox)
    expected = Counter({("join", "order"): 1, ("join", "budget"): 1})
    if others:
        expected[("join", "peer")] = 1
    assert rejected == expected and user.children == []
    # train: the invitee's join, in time; the user trains and shares with its tree
    sent, rejected = _run(user, "train", [early])
    assert rejected == Counter() and user.children == invited[:1]
    assert sorted(m.dst for m in sent if m.kind == "share") == sorted(
        node_id("user", x) for x in [u, invited[0]]
    )
    # gossip: a share from a neighbour outside its tree, from a stranger, twice from its parent
    n_s = dg_msg.shared_size(user.ctx.shared)
    share = dg_msg.encode_share([u], [wire.encode_signs(np.ones(n_s, np.int8))])
    outside = [x for x in sorted(graph[v]) if x not in user.tree_neighbours]
    inbox = [_msg("share", uid, vid, share), _msg("share", uid, vid, share),
             _msg("share", sid, vid, share)]  # fmt: skip
    inbox += [_msg("share", node_id("user", x), vid, share) for x in outside[:1]]
    _, rejected = _run(user, "gossip/2", inbox)
    assert rejected == Counter({("share", "budget"): 1, ("share", "peer"): 1 + len(outside[:1])})
    assert user.held.origins == {u, v}
    # a user outside every tree this round drops every share, and never raises
    user._reset_round()
    _, rejected = _run(user, "update", [_msg("share", uid, vid, share)])
    assert rejected == Counter({("share", "peer"): 1})


def test_dgrec_join_must_answer_an_invitation_of_its_step():
    plan, _, u, _, _ = _dgrec_pair()
    uid = node_id("user", u)
    user = _node(plan, uid)
    _public(user, seed_probability=1.0)  # a seed: invites
    _run(user, "status", [])
    sent, _ = _run(user, "seed", [])
    assert user.in_tree and user.hop == 0
    invited = sorted(user.invited)
    assert invited and all(user.invited[x] == 1 for x in invited)
    join = wire.encode_blob(b"")
    first = node_id("user", invited[0])
    # the invitee answers at hop/1; its join arrives at hop/2. At hop/1 it is another step's
    _, rejected = _run(user, "hop/1", [_msg("join", first, uid, join)])
    assert rejected == Counter({("join", "order"): 1}) and user.children == []
    _, rejected = _run(user, "hop/2", [_msg("join", first, uid, join)])
    assert rejected == Counter() and user.children == [invited[0]]


def test_dipsgnn_curator_and_user_drop_what_does_not_fit_their_state():
    plan = _plan("dipsgnn", {"epochs": 2, "hidden_dim": 8, "user_dim": 4}, rounds=1)
    server = _node(plan, "server/0")
    c = plan.config
    users = [s.nid for s in plan.specs if s.nid.startswith("user/")]
    unknown = node_id("user", 10_000)  # a user the curator does not register
    seq = ds_msg.encode_items(np.arange(5))
    feats = ds_msg.encode_features(np.zeros(max(plan.protocol.public.n_feature_slots, 1), "f4"))
    inbox = [
        _msg("sequence", users[0], "server/0", seq),
        _msg("sequence", users[0], "server/0", ds_msg.encode_items(np.arange(1))),  # budget
        _msg("sequence", users[1], "server/0", seq, round_=1),  # order
        _msg("sequence", unknown, "server/0", seq),  # peer
        _msg("sequence", users[2], "server/0", ds_msg.encode_items(np.array([3]))),
    ]
    if plan.protocol.public.n_feature_slots:
        inbox += [_msg("features", users[0], "server/0", feats)] * 2
    _, rejected = _run(server, "train", inbox)
    expected = Counter({("sequence", "budget"): 1, ("sequence", "order"): 1,
                        ("sequence", "peer"): 1})  # fmt: skip
    if plan.protocol.public.n_feature_slots:
        expected[("features", "budget")] = 1
    assert rejected == expected
    held = server.get_accounting().held
    assert held[server.row_of[index_of(users[0])]] and held[server.row_of[index_of(users[2])]]
    # evaluation: a context that makes the sequence longer than max_len (size), twice (budget)
    long = ds_msg.encode_items(np.zeros(c.max_len - 5, np.int64))
    ok = ds_msg.encode_items(np.array([7]))
    sent, rejected = _run(
        server,
        "eval_rank",
        [_msg("eval_context", users[0], "server/0", long),
         _msg("eval_context", users[0], "server/0", ok),
         _msg("eval_context", users[2], "server/0", ok),
         _msg("eval_context", unknown, "server/0", ok)],
    )  # fmt: skip
    assert rejected == Counter({("eval_context", "size"): 1, ("eval_context", "budget"): 1,
                                ("eval_context", "peer"): 1})  # fmt: skip
    assert [m.dst for m in sent] == [users[2]]
    # the user: lists that do not fit its held-out targets, or repeat an item
    spec = next(
        s for s in plan.specs if s.nid.startswith("user/") and len(s.kwargs["sequence"]) > 4
    )
    user = _node(plan, spec.nid)
    n_targets = len(user.sequence) - user.n_train
    k = 5
    good = np.arange(n_targets * k).reshape(n_targets, k) % plan.protocol.public.n_items
    cases = {
        "shape": ds_msg.encode_topk(np.zeros(0, np.int64)),
        "malformed": ds_msg.encode_topk(np.zeros((n_targets, k), np.int64)),
    }
    for reason, payload in cases.items():
        _, rejected = _run(user, "eval", [_msg("topk", "server/0", spec.nid, payload)])
        assert rejected == Counter({("topk", reason): 1})
    _, rejected = _run(
        user, "eval", [_msg("topk", "server/0", spec.nid, ds_msg.encode_topk(good))] * 2
    )
    assert rejected == Counter({("topk", "budget"): 1})


def test_dipsgnn_screen_bounds_an_upload_by_the_public_max_len():
    plan = _plan("dipsgnn", {"max_len": 10}, rounds=1)
    shared = shared_of(plan.protocol)
    most = ds_msg.longest_upload(plan.config)
    assert most == 8
    DIPSGNNServer.ACCEPTS["sequence"].check(ds_msg.encode_items(np.zeros(most, np.int64)), shared)
    for kind, n in (("sequence", most + 1), ("eval_context", 11)):
        with pytest.raises(Invalid) as e:
            DIPSGNNServer.ACCEPTS[kind].check(ds_msg.encode_items(np.zeros(n, np.int64)), shared)
        assert e.value.reason == "size"
    with pytest.raises(Invalid) as e:
        DIPSGNNUser.ACCEPTS["topk"].check(ds_msg.encode_items(np.zeros(10**4, np.int64)), shared)
    assert e.value.reason == "size"


# --------------------------------------------------------------------------- through real runs


class Hostile:
    """Mixed in before a protocol's participant role: it does all its honest work and, in each
    superstep, puts the hostile messages of :meth:`hostile` before and after its honest ones
    (every one within the envelope: its own id, this round and phase, a role that accepts its
    kind from it), tallying the reason each must be rejected with (None: a valid message)."""

    def __init__(self, nid, ctx, *args, others=(), **kwargs):
        super().__init__(nid, ctx, *args, **kwargs)
        self.others = [o for o in others if o != nid]  # the other nodes of its role
        self.tally: Counter = Counter()

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        for n, inbox in zip(nodes, inboxes):
            n.observe(phase, inbox)
        super().handle_batch(nodes, phase, inboxes)
        for n in nodes:
            honest = list(n._outbox)
            before, after = n.hostile(phase, honest)
            n._outbox[:] = [m for m, _ in before] + honest + [m for m, _ in after]
            for m, reason in before + after:
                if reason is not None:
                    n.tally[(m.kind, reason)] += 1

    def observe(self, phase: str, inbox) -> None:
        """What it learns of the inbox before its honest handler runs."""

    def hostile(self, phase: str, honest: list) -> tuple[list, list]:
        return [], []

    def m(self, kind: str, dst: str, payload: bytes) -> Message:
        return Message(kind, self.id, dst, self.round, self.phase, bytes(payload))

    def get_tally(self) -> dict:
        return dict(self.tally)


def _first(honest: list, kind: str, dst: str | None = None):
    return next((m for m in honest if m.kind == kind and dst in (None, m.dst)), None)


def _zeros_rows(n: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(n, np.int64), np.zeros((n, dim), np.float32)


class HostileFedMFUser(Hostile, FedMFUser):
    def hostile(self, phase, honest):
        up = _first(honest, fm_msg.ITEM_GRADS)
        if phase != "train" or up is None:
            return [], []
        c, n = self.config, self.public.n_items
        rows = np.ones((2, c.dim), np.float32)
        nan = rows.copy()
        nan[0, 0] = np.nan
        grads = fm_msg.encode_item_grads
        return [
            (self.m(up.kind, up.dst, grads(np.array([0, n]), rows)), "range"),  # screen
            (self.m(up.kind, up.dst, grads(*_zeros_rows(2 * c.pairs + 1, c.dim))), "size"),
            (self.m(up.kind, up.dst, grads(np.array([0, 1]), nan)), "nonfinite"),
        ], [
            (self.m(up.kind, up.dst, up.payload), "budget"),  # a second upload
            (self.m(up.kind, up.dst, grads(*_zeros_rows(0, c.dim))), "budget"),  # zero rows
            (self.m(up.kind, up.dst, grads(np.array([0, n - 1]), rows)), "budget"),  # bounds
        ]


class HostileDMFUser(Hostile, DMFUser):
    def hostile(self, phase, honest):
        if phase != "train" or not self.neighbours:
            return [], []
        c, n = self.config, self.public.n_items
        v = self.neighbours[0]
        stranger = next(o for o in self.others if o not in self.neighbours)
        kind, enc = dmf_msg.ITEM_GRADS, dmf_msg.encode_item_grads
        rows = np.ones((2, c.dim + 1), np.float32)
        after = [
            (self.m(kind, stranger, enc(self.rng.bytes(8), np.array([0, 1]), rows)), "peer"),
            (self.m(kind, v, enc(self.rng.bytes(8), np.array([0, n]), rows)), "range"),
            # valid, at the bounds: zero rows, the first and last item
            (self.m(kind, v, enc(self.rng.bytes(8), *_zeros_rows(0, c.dim + 1))), None),
            (self.m(kind, v, enc(self.rng.bytes(8), np.array([0, n - 1]), rows)), None),
        ]
        mine = _first(honest, kind, v)
        if mine is not None:  # the same gradient twice from it in one step
            after.append((self.m(kind, v, mine.payload), "budget"))
        return [], after


class HostileDGRECUser(Hostile, DGRECUser):
    """Writes to a user that is not its neighbour in every step, repeats its messages, invites
    with another step's hop, joins trees nobody invited it to, shares with users outside its
    tree, and gossips in the wrong phase."""

    invites_from: set = set()

    def observe(self, phase, inbox):
        if phase == "seed":
            self.invites_from = set()
        self.invites_from = self.invites_from | {m.src for m in inbox if m.kind == "invite"}

    def hostile(self, phase, honest):
        if is_eval_phase(phase) or phase == "validate" or not len(self.neighbours):
            return [], []
        nbrs = [node_id("user", int(x)) for x in self.neighbours]
        v = nbrs[0]
        stranger = next(o for o in self.others if o not in nbrs)
        step = phase.split("/", 1)[0]
        c = self.config
        before, after = [], []

        def again(kind, dst=None):  # its honest message once more: budget
            m = _first(honest, kind, dst)
            if m is not None:
                after.append((self.m(kind, m.dst, m.payload), "budget"))

        if step == "publicize":
            ids = wire.encode_ids(np.array([0, self.public.n_items - 1]))
            after.append((self.m("public_items", stranger, ids), "peer"))
            before.append(
                (self.m("public_items", v, wire.encode_ids([self.public.n_items])), "range")
            )
            if _first(honest, "public_items", v) is None:  # DLGNN publicizes nothing
                after.append((self.m("public_items", v, ids), None))
                after.append((self.m("public_items", v, ids), "budget"))
            else:
                again("public_items", v)
        elif step == "status":
            status = dg_msg.encode_status(1.0, 0)
            after.append((self.m("status", stranger, status), "peer"))
            before.append(
                (self.m("status", v, wire.encode_dense(np.array([-1.0, 0], "f4"))), "range")
            )
            if _first(honest, "status", v) is None:
                after.append((self.m("status", v, status), None))
                after.append((self.m("status", v, status), "budget"))
            else:
                again("status", v)
        elif step in ("seed", "hop"):
            h = 0 if step == "seed" else int(phase.split("/")[1])
            invited = {m.dst for m in honest if m.kind == "invite"}
            if h < c.hops:  # an invitation is read at hop/(h+1), where a hop of h+1 is due
                after.append(
                    (self.m("invite", stranger, wire.encode_ids([h + 1], width=1)), "peer")
                )
                wrong = 1 if h + 1 != 1 else 2
                w = next((x for x in nbrs if x not in invited), None)
                if w is not None and wrong <= c.hops:
                    after.append((self.m("invite", w, wire.encode_ids([wrong], width=1)), "order"))
                before.append(
                    (self.m("invite", v, wire.encode_ids([c.hops + 1], width=1)), "range")
                )
                again("invite")
            join = wire.encode_blob(b"")
            if step == "hop":
                after.append((self.m("join", stranger, join), "peer"))
                again("join")
                if h == c.hops:  # every invitation to it has arrived: a join nobody asked for
                    uninvited = next((x for x in nbrs if x not in self.invites_from), None)
                    if uninvited is not None:
                        after.append((self.m("join", uninvited, join), "peer"))
        elif step in ("train", "gossip", "update"):
            share = _first(honest, "share")
            if share is None:
                n_s = dg_msg.shared_size(self.ctx.shared)
                grad = (
                    wire.encode_signs(np.ones(n_s, np.int8))
                    if c.mechanism == "onebit"
                    else wire.encode_dense(np.zeros(n_s, np.float32))
                )
                payload = dg_msg.encode_share([self.index], [grad])
            else:
                payload = share.payload
            if step == "update":  # a share read in the next superstep, which takes none
                return [], [(self.m("share", v, payload), "phase")]
            tree = {node_id("user", x) for x in self.tree_neighbours} if self.in_tree else set()
            outside = next((x for x in nbrs if x not in tree), None)
            after.append((self.m("share", stranger, payload), "peer"))
            if outside is not None:
                after.append((self.m("share", outside, payload), "peer"))
            again("share")
        return before, after


class HostileDIPSGNNUser(Hostile, DIPSGNNUser):
    def hostile(self, phase, honest):
        c, n = self.config, self.public.n_items
        if phase == "upload":
            seq = _first(honest, "sequence")
            longest = ds_msg.longest_upload(c)
            before = [
                (
                    self.m(
                        "sequence", seq.dst, ds_msg.encode_items(np.zeros(longest + 1, np.int64))
                    ),
                    "size",
                ),
                (self.m("sequence", seq.dst, ds_msg.encode_items(np.zeros(0, np.int64))), "size"),
                (self.m("sequence", seq.dst, ds_msg.encode_items(np.array([n]))), "range"),
            ]
            after = [(self.m("sequence", seq.dst, seq.payload), "budget")]
            feats = _first(honest, "features")
            if feats is not None:
                after.append((self.m("features", feats.dst, feats.payload), "budget"))
            return before, after
        if phase == "eval_context":  # its honest context replaced: one too long for max_len
            ctx = _first(honest, "eval_context")
            honest.clear()
            too_long = ds_msg.encode_items(np.zeros(c.max_len + 1, np.int64))  # screen
            # within max_len ids, but with its n_tr uploaded items longer than any sequence
            long = ds_msg.encode_items(np.full(c.max_len - self.n_train, n - 1))
            return [
                (self.m("eval_context", ctx.dst, too_long), "size"),
                (self.m("eval_context", ctx.dst, long), "size"),
            ], [(self.m("eval_context", ctx.dst, ctx.payload), "budget")]
        return [], []


def _with_first_value(payload: bytes, value: int, width: int) -> bytes:
    """RSA values (fixed-width chunks of a blob) with the first one replaced by ``value``."""
    raw = wire.decode_blob(payload)
    return wire.encode_blob(value.to_bytes(width, "big") + raw[width:])


def _reversed_tokens(payload: bytes) -> bytes | None:
    tokens = wire.decode_chunks(payload, TOKEN_BYTES)
    return wire.encode_chunks(tokens[::-1], TOKEN_BYTES) if len(tokens) > 1 else None


class HostileFedPerGNNUser(Hostile, FedPerGNNUser):
    """Asks the key server to sign 0 and N and to sign twice, sends the matcher its request twice
    and with its tokens out of order, and uploads to the server twice."""

    def hostile(self, phase, honest):
        before, after = [], []
        width = residue_bytes(self.config.key_bits)
        if phase == "oprf_blind" and (m := _first(honest, "oprf_blinded")) is not None:
            n = self.oprf.public.n
            before += [
                (self.m(m.kind, m.dst, _with_first_value(m.payload, 0, width)), "range"),
                (self.m(m.kind, m.dst, _with_first_value(m.payload, n, width)), "range"),
            ]
            after.append((self.m(m.kind, m.dst, m.payload), "budget"))
        elif phase == "expand_send" and (m := _first(honest, "expand_request")) is not None:
            tokens_b, emb_b = wire.decode_record(m.payload, 2)
            swapped = _reversed_tokens(tokens_b)
            if swapped is not None:
                before.append(
                    (self.m(m.kind, m.dst, wire.encode_record([swapped, emb_b])), "order")
                )
            after.append((self.m(m.kind, m.dst, m.payload), "budget"))
        elif phase == "train":
            for kind in ("item_grads", "gat_grads"):
                if (m := _first(honest, kind)) is not None:
                    after.append((self.m(kind, m.dst, m.payload), "budget"))
        return before, after


class HostileVerFedGNNParty(Hostile, VerFedGNNParty):
    """Asks the key server to sign 0 and N and to sign twice, sends the server unordered and
    repeated PSI tokens, repeats its aggregates, and sends gradients of a declared length of
    2³² − 1, of the wrong length and twice (or, outside A_t, at all)."""

    def hostile(self, phase, honest):
        before, after = [], []
        width = residue_bytes(self.config.psi_key_bits)
        if phase == "psi_blind" and (m := _first(honest, "psi_blinded")) is not None:
            n = self.psi_client.public.n
            before += [
                (self.m(m.kind, m.dst, _with_first_value(m.payload, 0, width)), "range"),
                (self.m(m.kind, m.dst, _with_first_value(m.payload, n, width)), "range"),
            ]
            after.append((self.m(m.kind, m.dst, m.payload), "budget"))
        elif phase == "psi_tokens" and (m := _first(honest, "psi_tokens")) is not None:
            swapped = _reversed_tokens(m.payload)
            if swapped is not None:
                before.append((self.m(m.kind, m.dst, swapped), "order"))
            after.append((self.m(m.kind, m.dst, m.payload), "order"))
        elif phase.startswith("exchange") and (m := _first(honest, "aggregates")) is not None:
            after.append((self.m(m.kind, m.dst, m.payload), "order"))
        elif phase == "train":
            huge = struct.pack("<BIIf", 3, 2**32 - 1, 0, 1.0)  # 13 bytes declaring 16 GiB
            short = wire.encode_ternary(np.zeros(3, np.float32), 1.0)
            server = node_id("server", 0)
            if (m := _first(honest, "gradient")) is not None:
                before += [(self.m("gradient", server, huge), "size"),
                           (self.m("gradient", server, short), "shape")]  # fmt: skip
                after.append((self.m("gradient", server, m.payload), "order"))
            else:  # not in this iteration's A_t
                before += [(self.m("gradient", server, huge), "size"),
                           (self.m("gradient", server, short), "peer")]  # fmt: skip
        return before, after


def _hostile_pfedrec_user():
    """examples/pfedrec's client played hostile (the package is imported from the checkout and
    travels to Ray by value, as a plugin not installed would)."""
    plugin = str(REPO / "examples" / "pfedrec")
    if plugin not in sys.path:
        sys.path.insert(0, plugin)
    import privrec_pfedrec
    from privrec_pfedrec import messages as pf_msg
    from privrec_pfedrec.roles import PFedRecUser

    def hostile(self, phase, honest):
        m = _first(honest, pf_msg.ITEM_UPLOAD)
        if phase != "train" or m is None:
            return [], []
        wrong = pf_msg.encode_table(np.zeros((self.public.n_items, self.config.dim + 1), "f4"))
        return [(self.m(m.kind, m.dst, wrong), "shape")], [
            (self.m(m.kind, m.dst, m.payload), "budget")
        ]

    ray.cloudpickle.register_pickle_by_value(privrec_pfedrec)
    cls = type("HostilePFedRecUser", (Hostile, PFedRecUser), {"hostile": hostile})
    cls.__module__ = __name__
    return cls


# label -> (protocol, rounds, parameters, the hostile participant's class: None, made at run time)
HOSTILE = {
    "fedmf": ("fedmf", 2, {"dim": 4, "users_per_round": 0}, HostileFedMFUser),
    "dmf": ("dmf", 2, {"dim": 4, "hops": 2}, HostileDMFUser),
    "dgrec": ("dgrec", 2, {"pairs": 4, "hops": 2, "neighbourhoods": 6}, HostileDGRECUser),
    "dlgnn": ("dlgnn", 2, {"hops": 2, "neighbourhoods": 6}, HostileDGRECUser),
    "dipsgnn": ("dipsgnn", 1, {"epochs": 1, "hidden_dim": 8, "user_dim": 4}, HostileDIPSGNNUser),
    "fedpergnn-gat": (
        "fedpergnn",
        2,
        {"backbone": "gat", "key_bits": 1024, "dim": 8, "layers": 1},
        HostileFedPerGNNUser,
    ),
    "fedlightgcn": (
        "fedlightgcn",
        2,
        {"dim": 8, "negatives": 8, "key_bits": 1024, "users_per_round": 0},
        HostileFedPerGNNUser,
    ),
    "verfedgnn": (
        "verfedgnn",
        2,
        {"parties": 3, "psi_key_bits": 1024, "dim": 8},
        HostileVerFedGNNParty,
    ),
    "pfedrec": ("privrec_pfedrec.protocol:PFedRec", 2, {"dim": 4, "users_per_round": 0}, None),
}


def _hostile_specs(plan, cls) -> tuple[list, str]:
    """The plan's node specs with one participant played by ``cls`` (a user with data and, in
    gossip, neighbours; party 0 in VerFedGNN), told the ids of the others of its role."""
    specs = list(plan.specs)
    role = "party" if any(s.nid.startswith("party/") for s in specs) else "user"
    others = [s.nid for s in specs if s.nid.startswith(role + "/")]

    def fit(s) -> bool:
        kw = s.kwargs
        if "neighbours" in kw and len(kw["neighbours"]) < 2:
            return False
        data = kw.get("train_items", kw.get("sequence", kw.get("user_ids")))
        return data is None or len(data) >= 4

    i = next(i for i, s in enumerate(specs) if s.nid.startswith(role + "/") and fit(s))
    specs[i] = dataclasses.replace(specs[i], cls=cls, kwargs={**specs[i].kwargs, "others": others})
    return specs, specs[i].nid


def hostile_run(label: str):
    """A small real run of protocol ``label`` with one hostile participant: (what the run
    rejected, the hostile's tally, the faults), each rejection as {(kind, reason): count}."""
    from engine import run_rounds

    protocol, rounds, params, cls = HOSTILE[label]
    if cls is None:  # pfedrec
        cls = _hostile_pfedrec_user()
    plan = _plan(protocol, params, rounds)
    specs, hostile = _hostile_specs(plan, cls)
    dep = deploy(plan.protocol, "packed", 1, specs=specs, conditions=Conditions(snapshot_every=0))
    try:
        results = run_rounds(plan.protocol, dep, rounds, eval_every=0)
        tally = Counter(dep.call(hostile, "get_tally"))
    finally:
        dep.close()
    rejected, faults = Counter(), []
    for r in results:
        for kind, by_reason in r.stats.rejected.items():
            for reason, n in by_reason.items():
                rejected[(kind, reason)] += n
        faults += r.stats.faults
    return rejected, tally, faults


# FedPerGNN's and VerFedGNN's receivers (key servers, matcher, servers, parties) are checked by
# the key servers' checks in their own roles: range and budget of RSA values, token order, one
# message of a kind per sender and step, gradient lengths; the cases here follow their reasons.
@pytest.mark.ray
@pytest.mark.parametrize("label", list(HOSTILE))
def test_hostile_messages_are_dropped_and_counted_and_the_run_goes_on(ray_local, label):
    rejected, tally, faults = hostile_run(label)
    assert faults == [], f"{label}: a participant failed: {faults}"
    assert sum(tally.values()) > 0, f"{label}: the hostile participant sent nothing hostile"
    assert rejected == tally, (
        f"{label}: rejected {dict(rejected)} but the hostile messages call for {dict(tally)}"
    )


@pytest.mark.ray
def test_dgrec_user_written_to_by_a_non_neighbour_drops_it_and_stays_in_the_round(ray_local):
    """Issue 42: a DGREC user raised when a user that is not its neighbour wrote to it, so one
    attacker knocked honest users out of each round (until max_failed_fraction stopped the run).
    Every message to a non-neighbour — publicized items, status, invitations, joins, shares —
    is now dropped as ``peer`` and the honest users go on."""
    rejected, tally, faults = hostile_run("dgrec")
    assert faults == []
    peer = {k: n for k, n in rejected.items() if k[1] == "peer"}
    assert {kind for kind, _ in peer} >= {"public_items", "status", "invite", "join", "share"}
    assert peer == {k: n for k, n in tally.items() if k[1] == "peer"}
