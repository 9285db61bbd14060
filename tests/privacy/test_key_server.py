"""Secrets that stay secret and key servers that cannot be broken by what a participant sends
(for FedPerGNN's OPRF and VerFedGNN's PSI):

* the RSA key comes from the operating system, never from the seed: two runs with one seed have
  different key fingerprints (summary.json's ``privacy.key_fingerprint``) and identical metrics
  and bytes (the results do not depend on the key or the blinding factors);
* the key server drops, and counts under ``rejected``, a blinded value of 0 or ≥ N (``range``)
  and what goes past a user's signature budget (``budget``), and the run completes;
* a user does not blind under a public key that fails its check (``range``);
* VerFedGNN: a ternary gradient declaring 2³²−1 elements is dropped before anything of that length
  is allocated, unsorted PSI tokens are dropped (``order``), aggregates and gradients from a
  party outside this iteration's A_t are dropped (``peer``).

Each would have failed on the tree before (a seeded key; ValueError in ``oprf.blind_sign``; no
budget; no key check; ``np.zeros(2**32 - 1)``; ValueError on unsorted tokens; no A_t check).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np
import pytest
import ray.cloudpickle
import torch

from cluster import validate as v
from cluster import wire
from cluster.message import Message
from data.synthetic import synthetic
from engine import RunSettings, deploy, run, run_rounds
from nodes.node import NodeContext
from privacy import key_server as ks
from privacy import oprf
from protocols.base import ConfigError, build_config
from protocols.fedpergnn import messages as fp_msg
from protocols.fedpergnn.protocol import FedLightGCN
from protocols.fedpergnn.roles import KeyServer, User
from protocols.verfedgnn import messages as vf_msg
from protocols.verfedgnn.protocol import VerFedGNN
from protocols.verfedgnn.roles import VerFedGNNParty, VerFedGNNServer

BITS = 1024  # the quick settings' key size (FedLightGCN.QUICK, VerFedGNN.QUICK)
FP = {"dim": 8, "negatives": 8, "users_per_round": 0, "key_bits": BITS, "eval_every": 1}
VF = {"parties": 3, "psi": True, "psi_key_bits": BITS, "eval_every": 1}


def fp_dataset():
    return synthetic(n_users=12, n_items=40, avg_interactions=6, seed=0)


def vf_dataset():
    return synthetic(n_users=12, n_items=30, avg_interactions=10, seed=0)


def _ctx(protocol) -> NodeContext:
    return NodeContext(protocol.seed, torch.device("cpu"), protocol.shared())


def _msg(kind, src, dst, payload, phase="", round_=0) -> Message:
    return Message(kind, src, dst, round_, phase, payload)


def _at(node, phase: str, round_: int = 0):
    node.phase, node.round = phase, round_
    return node


# --------------------------------------------------------------------------- the key (Ray-free)


def test_keys_come_from_the_operating_system_not_the_seed():
    """Two key servers made from one seed and node id hold different keys; the fingerprint is
    SHA-256 of the public key's DER form."""
    proto = FedLightGCN(fp_dataset(), build_config(FedLightGCN.Config, FP), seed=0)
    specs = [s for s in proto.node_specs() if s.cls is KeyServer]
    again = [s for s in proto.node_specs() if s.cls is KeyServer]
    a = KeyServer(specs[0].nid, _ctx(proto), **specs[0].kwargs)
    b = KeyServer(again[0].nid, _ctx(proto), **again[0].kwargs)
    assert a.public_numbers() != b.public_numbers()
    n, e = a.public_numbers()
    assert n.bit_length() == BITS and e == 65537
    fp = ks.key_fingerprint(n, e)
    assert len(fp) == 64 and fp != ks.key_fingerprint(*b.public_numbers())
    assert fp == a.signer.fingerprint()
    # replicas share the one key the driver drew: the same DER bytes for every replica
    two = FedLightGCN(
        fp_dataset(), build_config(FedLightGCN.Config, {**FP, "key_servers": 2}), seed=0
    )
    reps = [s for s in two.node_specs() if s.cls is KeyServer]
    assert len(reps) == 2 and reps[0].kwargs["key"] == reps[1].kwargs["key"]
    # users' blinding factors: the operating system's, different at every exchange
    user = User("user/0", _ctx(proto), np.array([1, 2, 3]), np.zeros(0, np.int64))
    assert isinstance(user.oprf.blinding, oprf.OsRandom)


def test_rsa_values_travel_at_the_modulus_byte_length():
    key = ks.new_key(BITS)
    n = key.public_key().public_numbers().n
    small, big = 5, n - 1
    assert len(ks.encode_residues([small], BITS)) == len(ks.encode_residues([big], BITS))
    assert ks.residues_size(3, BITS) == len(ks.encode_residues([1, 2, 3], BITS)) == 5 + 3 * 128
    assert ks.decode_residues(ks.encode_residues([small, big], BITS), BITS) == [small, big]


def test_report_flags_a_key_below_2048_bits():
    assert "key_warning" in ks.key_report(1024, "ab")
    assert "key_warning" not in ks.key_report(2048, "ab")
    assert ks.key_report(2048, "ab")["key_fingerprint"] == "ab"


# --------------------------------------------------------------------------- key server checks


@pytest.fixture(scope="module")
def fp_nodes():
    params = {**FP, "oprf_budget": 20}  # the largest profile has 13 items
    proto = FedLightGCN(fp_dataset(), build_config(FedLightGCN.Config, params), seed=0)
    spec = next(s for s in proto.node_specs() if s.cls is KeyServer)
    return proto, spec


def test_key_server_drops_blinded_zero_and_values_from_n_up(fp_nodes):
    proto, spec = fp_nodes
    server = _at(KeyServer(spec.nid, _ctx(proto), **spec.kwargs), "oprf_sign")
    n, _ = server.public_numbers()
    client = ks.OprfClient()
    client.receive_key(*server.public_numbers(), min_bits=BITS)
    good = client.blind([3, 4])
    inbox = [
        _msg("oprf_blinded", "user/0", spec.nid, ks.encode_residues([0], BITS)),
        _msg("oprf_blinded", "user/1", spec.nid, ks.encode_residues([n], BITS)),
        _msg("oprf_blinded", "user/2", spec.nid, ks.encode_residues([good[0], n + 1], BITS)),
        _msg("oprf_blinded", "user/3", spec.nid, ks.encode_residues([good[0], 2**BITS - 1], BITS)),
        _msg("oprf_blinded", "user/4", spec.nid, ks.encode_residues(good, BITS)),
    ]
    server.handle("oprf_sign", inbox)  # no raise
    assert server._rejected == [("oprf_blinded", "range")] * 4
    assert [(m.kind, m.dst) for m in server._outbox] == [("oprf_signed", "user/4")]
    tokens = client.finalize([3, 4], ks.decode_residues(server._outbox[0].payload, BITS))
    assert tokens == oprf.shared_key_tokens([3, 4], server.signer.key)
    assert server.issued() == {"user/4": 2}  # refused requests are not charged


def test_key_server_refuses_what_goes_past_a_users_budget(fp_nodes):
    proto, spec = fp_nodes
    assert proto.config.oprf_budget == 20
    server = _at(KeyServer(spec.nid, _ctx(proto), **spec.kwargs), "oprf_sign")
    client = ks.OprfClient()
    client.receive_key(*server.public_numbers(), min_bits=BITS)
    ask = lambda k: ks.encode_residues(client.blind(list(range(k))), BITS)  # noqa: E731
    server.handle("oprf_sign", [_msg("oprf_blinded", "user/0", spec.nid, ask(13))])
    server.handle("oprf_sign", [_msg("oprf_blinded", "user/0", spec.nid, ask(8))])  # 21 > 20
    server.handle("oprf_sign", [_msg("oprf_blinded", "user/0", spec.nid, ask(7))])  # 20
    server.handle("oprf_sign", [_msg("oprf_blinded", "user/1", spec.nid, ask(21))])
    assert [m.dst for m in server._outbox] == ["user/0", "user/0"]
    assert server._rejected == [("oprf_blinded", "budget")] * 2
    assert server.issued() == {"user/0": 20}


def test_budget_below_the_largest_profile_is_refused_before_the_run():
    with pytest.raises(ConfigError, match="oprf_budget"):
        FedLightGCN(fp_dataset(), build_config(FedLightGCN.Config, {**FP, "oprf_budget": 2}), 0)


def test_a_user_does_not_blind_under_a_bad_public_key(fp_nodes):
    proto, spec = fp_nodes
    server = KeyServer(spec.nid, _ctx(proto), **spec.kwargs)
    n, e = server.public_numbers()
    bad = {
        "e = 3": (n, 3),
        "even N": (n - 1 if n % 2 else n, e),
        "N with a small factor": (n - n % 3, e),
        "N below key_bits": (n >> 8, e),
    }
    for what, (bn, be) in bad.items():
        user = _at(User("user/0", _ctx(proto), np.array([1, 2, 3]), np.zeros(0, np.int64)), "x")
        payload = wire.encode_bigints([bn, be])
        user.handle("oprf_blind", [_msg("oprf_public_key", spec.nid, "user/0", payload)])
        assert user._rejected == [("oprf_public_key", "range")], what
        assert user._outbox == [] and user.oprf.public is None, what
    user = _at(User("user/0", _ctx(proto), np.array([1, 2, 3]), np.zeros(0, np.int64)), "x")
    user.handle(
        "oprf_blind", [_msg("oprf_public_key", spec.nid, "user/0", wire.encode_bigints([n, e]))]
    )
    assert user._rejected == [] and [m.kind for m in user._outbox] == ["oprf_blinded"]
    # an answer that is not one valid signature per value is dropped, not raised on
    blinded = ks.decode_residues(user._outbox[0].payload, BITS)
    user._outbox.clear()
    wrong = [1] * len(blinded)  # in range, does not verify
    user.handle(
        "oprf_finalize", [_msg("oprf_signed", spec.nid, "user/0", ks.encode_residues(wrong, BITS))]
    )
    assert user._rejected == [("oprf_signed", "range")] and user.tokens == []


def test_matcher_and_server_take_one_message_per_user_and_step():
    from protocols.fedpergnn.roles import Matcher, Server

    params = {**FP, "users_per_round": 4}
    proto = FedLightGCN(fp_dataset(), build_config(FedLightGCN.Config, params), seed=0)
    users = np.array(proto.users, dtype=np.int64)
    matcher = _at(Matcher("matcher/0", _ctx(proto)), "expand_match")
    req = fp_msg.encode_expand_request([b"a" * 32, b"b" * 32], np.zeros(8, np.float32))
    matcher.handle("expand_match", [_msg("expand_request", "user/0", "matcher/0", req)] * 2)
    assert matcher._rejected == [("expand_request", "budget")]
    assert [m.dst for m in matcher._outbox] == ["user/0"]
    server = _at(Server("server/0", _ctx(proto), users), "download")
    server.handle("download", [])
    sampled = sorted({int(m.dst.split("/")[1]) for m in server._outbox})
    outsider = next(u for u in proto.users if u not in sampled)
    rows = fp_msg.encode_item_grads(np.array([1, 2]), np.zeros((2, 8), np.float32))
    inbox = [
        _msg("item_grads", f"user/{sampled[0]}", "server/0", rows),
        _msg("item_grads", f"user/{sampled[0]}", "server/0", rows),
        _msg("item_grads", f"user/{outsider}", "server/0", rows),
    ]
    _at(server, "aggregate").handle("aggregate", sorted(inbox, key=lambda m: m.src))
    assert sorted(server._rejected) == [("item_grads", "budget"), ("item_grads", "peer")]
    assert np.isfinite(server.get_item_embeddings()).all()


# --------------------------------------------------------------------------- VerFedGNN (Ray-free)


@pytest.fixture(scope="module")
def vf_proto():
    return VerFedGNN(vf_dataset(), build_config(VerFedGNN.Config, {**VF, "psi": False}), seed=0)


def test_ternary_gradient_declaring_2_to_the_32_is_dropped_unallocated(vf_proto):
    shared = vf_proto.shared()
    server = VerFedGNNServer("server/0", _ctx(vf_proto))
    n = server.theta.shape[0]
    assert vf_msg.theta_size_bound(shared) == n  # no PSI: every user aligned
    huge = wire.encode_ternary(np.array([0.5, 0, -0.5], dtype=np.float32), 0.5)
    huge = huge[:1] + (2**32 - 1).to_bytes(4, "little") + huge[5:]  # 13 bytes of header say 2³²−1
    with pytest.raises(v.Invalid) as e:  # the host's screen
        VerFedGNNServer.ACCEPTS["gradient"].check(huge, shared)
    assert e.value.reason == "size"
    # past the screen (a declared length within the bound but not θ's): the handler drops it
    short = wire.encode_ternary(np.zeros(n - 1, dtype=np.float32), 0.5)
    honest = wire.encode_ternary(np.zeros(n, dtype=np.float32), 0.5)
    _at(server, "download")
    server.handle("download", [])
    chosen = sorted(server.a_t[1])
    assert chosen == [0, 1, 2]  # participation 1: A_t is every party
    _at(server, "aggregate")
    inbox = [
        _msg("gradient", f"party/{chosen[0]}", "server/0", huge),
        _msg("gradient", f"party/{chosen[0]}", "server/0", short),
        _msg("gradient", f"party/{chosen[0]}", "server/0", honest),
        _msg("gradient", f"party/{chosen[0]}", "server/0", honest),
    ]
    before = server.get_theta()
    server.handle("aggregate", inbox)  # no MemoryError, no raise
    assert server._rejected == [("gradient", "shape"), ("gradient", "shape"), ("gradient", "order")]
    assert np.isfinite(server.get_theta()).all() and server.get_theta().shape == before.shape


def test_gradient_from_a_party_outside_a_t_is_dropped():
    params = {**VF, "psi": False, "participation": 0.34}
    proto = VerFedGNN(vf_dataset(), build_config(VerFedGNN.Config, params), seed=0)
    server = _at(VerFedGNNServer("server/0", _ctx(proto)), "download")
    server.handle("download", [])
    (chosen,) = server.a_t[1]
    outsider = (chosen + 1) % 3
    g = wire.encode_ternary(np.zeros(server.theta.shape[0], dtype=np.float32), 0.5)
    _at(server, "aggregate").handle(
        "aggregate", [_msg("gradient", f"party/{outsider}", "server/0", g)]
    )
    assert server._rejected == [("gradient", "peer")]


def test_unsorted_psi_tokens_are_dropped():
    proto = VerFedGNN(vf_dataset(), build_config(VerFedGNN.Config, VF), seed=0)
    shared = proto.shared()
    rng = np.random.default_rng(0)
    toks = sorted(rng.bytes(32) for _ in range(4))
    unsorted = wire.encode_chunks(toks[::-1], 32)
    repeated = wire.encode_chunks([toks[0], toks[0], toks[1]], 32)
    for payload in (unsorted, repeated):
        with pytest.raises(v.Invalid) as e:  # the host's screen
            VerFedGNNServer.ACCEPTS["psi_tokens"].check(payload, shared)
        assert e.value.reason == "order"
    server = _at(VerFedGNNServer("server/0", _ctx(proto)), "psi_match")
    inbox = [
        _msg("psi_tokens", "party/0", "server/0", unsorted),
        _msg("psi_tokens", "party/1", "server/0", wire.encode_chunks(toks, 32)),
        _msg("psi_tokens", "party/1", "server/0", wire.encode_chunks(toks, 32)),
    ]
    server.handle("psi_match", inbox)  # the handler's own check: no raise
    assert server._rejected == [("psi_tokens", "order")] * 2
    assert [m.dst for m in server._outbox] == ["party/1"]


def test_psi_key_server_drops_out_of_range_values_and_parties_check_its_key():
    from protocols.verfedgnn.roles import VerFedGNNKeyServer

    proto = VerFedGNN(vf_dataset(), build_config(VerFedGNN.Config, VF), seed=0)
    server = _at(VerFedGNNKeyServer("key_server/0", _ctx(proto)), "psi_sign")
    n, e = server.public_numbers()
    inbox = [
        _msg("psi_blinded", "party/0", "key_server/0", ks.encode_residues([0, 5], BITS)),
        _msg("psi_blinded", "party/1", "key_server/0", ks.encode_residues([n], BITS)),
        _msg("psi_blinded", "party/2", "key_server/0", ks.encode_residues([5], BITS)),
        _msg("psi_blinded", "party/2", "key_server/0", ks.encode_residues([6], BITS)),
    ]
    server.handle("psi_sign", inbox)
    assert server._rejected == [("psi_blinded", "range")] * 2 + [("psi_blinded", "budget")]
    assert [m.dst for m in server._outbox] == ["party/2"]
    spec = next(s for s in proto.node_specs() if s.cls is VerFedGNNParty)
    party = _at(VerFedGNNParty(spec.nid, _ctx(proto), **spec.kwargs), "psi_blind")
    bad = wire.encode_bigints([n, 3])
    party.handle("psi_blind", [_msg("psi_public_key", "key_server/0", spec.nid, bad)])
    assert party._rejected == [("psi_public_key", "range")] and party._outbox == []


def test_aggregates_from_outside_this_iteration_are_dropped(vf_proto):
    specs = {s.nid: s for s in vf_proto.node_specs() if s.cls is VerFedGNNParty}
    server = _at(VerFedGNNServer("server/0", _ctx(vf_proto)), "download")
    server.handle("download", [])
    public = server._outbox[0].payload
    party = VerFedGNNParty("party/0", _ctx(vf_proto), **specs["party/0"].kwargs)
    _at(party, "exchange1").handle(
        "exchange1", [_msg("public_params", "server/0", "party/0", public, "download")]
    )
    y = party._outbox[0].payload  # the honest shape [L, q, D]
    party._outbox.clear()
    inbox = [
        _msg("aggregates", "party/0", "party/0", y, "exchange1"),  # itself
        _msg("aggregates", "party/7", "party/0", y, "exchange1"),  # not in A_t
        _msg("aggregates", "party/1", "party/0", y, "exchange7"),  # not this step
        _msg(
            "aggregates", "party/1", "party/0", wire.encode_dense(np.zeros((1, 2, 6))), "exchange1"
        ),
        _msg("aggregates", "party/1", "party/0", y, "exchange1"),
        _msg("aggregates", "party/1", "party/0", y, "exchange1"),  # twice
    ]
    _at(party, "train").handle("train", inbox)  # no raise; trains with party/1's aggregate
    assert party._rejected == [
        ("aggregates", "peer"),
        ("aggregates", "peer"),
        ("aggregates", "phase"),
        ("aggregates", "shape"),
        ("aggregates", "order"),
    ]
    assert [m.kind for m in party._outbox] == ["gradient"]


# --------------------------------------------------------------------------- runs (Ray)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


def _run(tmp_path, name, protocol, params, ds, rounds=2, seed=0):
    settings = RunSettings(
        protocol=protocol,
        rounds=rounds,
        seed=seed,
        params=dict(params),
        out=str(tmp_path / name),
        progress=False,
    )
    run_dir, summary = run(settings, ds)
    return json.loads((run_dir / "summary.json").read_text())


def _same_results(a: dict, b: dict) -> None:
    for key in ("metrics", "bytes_total", "bytes_by_kind", "bytes_eval", "messages", "rejected"):
        assert a[key] == b[key], key


@pytest.mark.ray
def test_two_runs_with_one_seed_differ_only_in_the_key(ray_local, tmp_path):
    """FedLightGCN at its quick key size: the key and blinding factors from the OS change, the
    results do not (tokens are compared, never ordered; RSA values at the modulus' length)."""
    ds = fp_dataset()
    a = _run(tmp_path, "a", "fedlightgcn", FP, ds)
    b = _run(tmp_path, "b", "fedlightgcn", FP, ds)
    _same_results(a, b)
    assert all(math.isfinite(x) for x in a["metrics"].values() if isinstance(x, float))
    fa, fb = a["privacy"]["key_fingerprint"], b["privacy"]["key_fingerprint"]
    assert len(fa) == 64 and fa != fb
    assert "1024-bit" in a["privacy"]["key_warning"]
    assert a["rejected"] == {} and a["seed"] == b["seed"] == 0


@pytest.mark.ray
def test_two_verfedgnn_runs_with_one_seed_differ_only_in_the_psi_key(ray_local):
    ds = vf_dataset()
    out = []
    for _ in range(2):
        proto = VerFedGNN(ds, build_config(VerFedGNN.Config, VF), seed=0)
        dep = deploy(proto, "packed", 1)
        try:
            done = run_rounds(proto, dep, 2, eval_every=0)
            out.append(
                (
                    [r.train for r in done],
                    done[-1].metrics,
                    dep.ledger.rows(),
                    dep.call("server/0", "get_theta"),
                    proto.privacy()["key_fingerprint"],
                )
            )
        finally:
            dep.close()
    (ta, ma, la, tha, fa), (tb, mb, lb, thb, fb) = out
    assert ta == tb and ma == mb and la == lb and np.array_equal(tha, thb)
    assert fa != fb


class HostileUser(User):
    """user/0 also sends the blinded values 0 and N; user/1 asks for a token of every item of the
    catalogue, past its budget."""

    def _send_blinded(self) -> None:
        bits = self.config.key_bits
        if self.id == "user/0":
            for value in (0, self.oprf.public.n):
                self.send("oprf_blinded", self.key_server, ks.encode_residues([value], bits))
        if self.id == "user/1":
            every = self.oprf.blind(list(range(self.public.n_items)))
            self.send("oprf_blinded", self.key_server, ks.encode_residues(every, bits))
            return
        super()._send_blinded()


class HostileFedLightGCN(FedLightGCN):
    def node_specs(self):
        return [
            dataclasses.replace(s, cls=HostileUser) if s.cls is User else s
            for s in super().node_specs()
        ]


@pytest.mark.ray
def test_out_of_range_and_over_budget_requests_are_counted_and_the_run_completes(
    ray_local, tmp_path
):
    ds = fp_dataset()
    largest = max(len(x) for x in ds.train.items_by_user(ds.n_users))
    assert largest < ds.n_items  # user/1's request goes past a budget of the largest profile
    params = {**FP, "oprf_budget": largest}
    s = _run(tmp_path, "hostile", "tests.privacy.test_key_server:HostileFedLightGCN", params, ds)
    assert s["status"] == "ok" and s["rejected"] == {"oprf_blinded": {"budget": 1, "range": 2}}
    assert all(math.isfinite(x) for x in s["metrics"].values() if isinstance(x, float))


class HostileParty(VerFedGNNParty):
    """party/1 also sends its PSI tokens in reverse order and a ternary gradient declaring
    2³²−1 elements."""

    def send(self, kind, dst, payload):
        super().send(kind, dst, payload)
        if self.id != "party/1":
            return
        if kind == "psi_tokens":
            tokens = wire.decode_chunks(payload, oprf.TOKEN_BYTES)
            super().send(kind, dst, wire.encode_chunks(tokens[::-1], oprf.TOKEN_BYTES))
        elif kind == "gradient":
            huge = payload[:1] + (2**32 - 1).to_bytes(4, "little") + payload[5:]
            super().send(kind, dst, huge)


class HostileVerFedGNN(VerFedGNN):
    def node_specs(self):
        return [
            dataclasses.replace(s, cls=HostileParty) if s.cls is VerFedGNNParty else s
            for s in super().node_specs()
        ]


@pytest.mark.ray
def test_inflated_gradient_and_unsorted_tokens_are_dropped_in_a_run(ray_local, tmp_path):
    rounds = 2
    s = _run(
        tmp_path, "vf", "tests.privacy.test_key_server:HostileVerFedGNN", VF, vf_dataset(), rounds
    )
    assert s["status"] == "ok"
    assert s["rejected"] == {"gradient": {"size": rounds}, "psi_tokens": {"order": 1}}
    assert math.isfinite(s["metrics"]["rmse"])
