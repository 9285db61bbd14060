"""Every receiver treats what arrives as untrusted: each role declares what it
accepts (``ACCEPTS``, cluster/validate.py), the host drops and counts what fails, and nothing
invalid reaches a handler or a model.

* a fuzz test feeds random and mutated bytes of every message kind to every role of every
  protocol: the check accepts (and then the protocol's own decoding succeeds with finite values
  in range) or raises Invalid, never anything else;
* every built-in role declares ACCEPTS, and every kind it declares has a fuzz case;
* end to end: a user that sends NaN gradients or an out-of-range item id is rejected and counted
  in metrics.jsonl and summary.json, the run completes and the server's model stays finite.

Past the screen, what only the receiver can judge (a sender that is not its neighbour, a second
message, another step's) is its handler's: tests/integration/test_hostile_handlers.py sends every role such
messages through real runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import struct
import sys

import numpy as np
import pytest
import ray.cloudpickle
import scipy.sparse as sp
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster import validate as v
from cluster import wire
from cluster.message import Message
from data.synthetic import synthetic
from nodes.node import Node, Shared
from privacy.oprf import TOKEN_BYTES
from protocols import central, dgrec, dipsgnn, dmf, echo, fedmf, fedpergnn, ping, verfedgnn
from protocols.central import roles as central_roles
from protocols.dgrec import messages as dg_msg
from protocols.dgrec import roles as dg_roles
from protocols.dgrec.config import DGRECConfig, DGRECPublic
from protocols.dipsgnn import messages as ds_msg
from protocols.dipsgnn import roles as ds_roles
from protocols.dipsgnn.config import DIPSGNNConfig, DIPSGNNPublic
from protocols.dmf import messages as dmf_msg
from protocols.dmf import roles as dmf_roles
from protocols.dmf.config import DMFConfig, DMFPublic
from protocols.fedmf import messages as fm_msg
from protocols.fedmf import roles as fm_roles
from protocols.fedmf.config import FedMFConfig, FedMFPublic
from protocols.fedmf.protocol import FedMF
from protocols.fedpergnn import messages as fp_msg
from protocols.fedpergnn import roles as fp_roles
from protocols.fedpergnn.config import FedPerGNNConfig, FedPerGNNPublic
from protocols.verfedgnn import messages as vf_msg
from protocols.verfedgnn import roles as vf_roles
from protocols.verfedgnn.config import VerFedGNNConfig, VerFedGNNPublic

N_USERS, N_ITEMS, DIM = 6, 9, 4
BITS = 1024


def _big(rng, k: int) -> list[int]:
    return [int.from_bytes(rng.bytes(BITS // 8 - 1), "big") | 1 for _ in range(k)]


def _rows(rng, n_rows: int, dim: int, sort: bool = False) -> bytes:
    ids = rng.choice(N_ITEMS, size=n_rows, replace=not sort)
    ids = np.sort(ids) if sort else ids
    return wire.encode_record(
        [wire.encode_ids(ids), wire.encode_dense(rng.normal(size=(n_rows, dim)).astype("f4"))]
    )


def _vec(rng, *shape) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


def _sane(x) -> None:
    """Every float of a decoded value is finite."""
    if isinstance(x, (list, tuple)):
        for y in x:
            _sane(y)
    elif isinstance(x, torch.Tensor):
        assert torch.isfinite(x).all()
    elif isinstance(x, np.ndarray) and x.dtype.kind == "f":
        assert np.isfinite(x).all()


# --- the protocols' public records, small --------------------------------------------------------
FEDMF = Shared(FedMFConfig(dim=DIM, pairs=3), FedMFPublic(N_USERS, N_ITEMS))
DMF = Shared(DMFConfig(dim=DIM, pairs=3), DMFPublic(N_USERS, N_ITEMS))
DGREC = Shared(
    DGRECConfig(dim=DIM, n_interests=2, hidden=4, hops=2),
    DGRECPublic(N_USERS, N_ITEMS, 3, sp.random(N_ITEMS, 3, 0.5, "csr", random_state=0), 0.5, 0.2),
)
DLGNN = Shared(DGRECConfig(model="lightgcn", dim=DIM, mechanism="laplace", hops=2), DGREC.public)
FPG = Shared(
    FedPerGNNConfig(dim=DIM, key_bits=BITS, backbone="gat", layers=1, max_neighbors=3),
    FedPerGNNPublic(N_USERS, N_ITEMS, 1),
)
VFG = Shared(
    VerFedGNNConfig(parties=3, dim=3, psi_key_bits=BITS),
    VerFedGNNPublic(N_USERS, N_ITEMS, (3, 3, 3), 1.0, 5.0),
)
DIPS = Shared(DIPSGNNConfig(), DIPSGNNPublic(N_ITEMS, 5, {}, {}, {}, 0.0, 0.0))
ECHO = Shared(echo.EchoConfig(dim=5), echo.EchoPublic(3))
PING = Shared(ping.PingConfig(), ping.PingPublic(3))


def _share(shared, rng) -> bytes:
    n_s = dg_msg.shared_size(shared)
    if shared.config.mechanism == "onebit":
        grads = [wire.encode_signs(np.where(rng.random(n_s) < 0.5, -1, 1)) for _ in range(2)]
    else:
        grads = [wire.encode_dense(_vec(rng, n_s)) for _ in range(2)]
    return dg_msg.encode_share([1, 4], grads)


def _expand_reply(rng) -> bytes:
    tok = [rng.bytes(TOKEN_BYTES) for _ in range(3)]
    return fp_msg.encode_expand_reply(_vec(rng, 2, DIM), [tok[:1], tok[1:]])


# (role class, kind) -> (shared, a valid payload from the protocol's own encoder, the handler's
# decoding of it)
CASES = {
    (fm_roles.FedMFUser, "item_factors"): (
        FEDMF,
        lambda r: fm_msg.encode_item_factors(_vec(r, N_ITEMS, DIM)),
        lambda p, s: fm_msg.decode_item_factors(p),
    ),
    (fm_roles.FedMFUser, "eval_item_factors"): (
        FEDMF,
        lambda r: fm_msg.encode_item_factors(_vec(r, N_ITEMS, DIM)),
        lambda p, s: fm_msg.decode_item_factors(p),
    ),
    (fm_roles.FedMFServer, "item_grads"): (
        FEDMF,
        lambda r: _rows(r, 6, DIM),
        lambda p, s: fm_msg.decode_item_grads(p, N_ITEMS),
    ),
    (dmf_roles.DMFUser, "item_grads"): (
        DMF,
        lambda r: dmf_msg.encode_item_grads(
            r.bytes(8), r.integers(0, N_ITEMS, 6), _vec(r, 6, DIM + 1)
        ),
        lambda p, s: dmf_msg.decode_grads(dmf_msg.decode_nonce(p)[1], N_ITEMS),
    ),
    (dg_roles.DGRECUser, "public_items"): (
        DGREC,
        lambda r: wire.encode_ids(np.arange(3)),
        lambda p, s: wire.decode_ids(p),
    ),
    (dg_roles.DGRECUser, "status"): (
        DGREC,
        lambda r: dg_msg.encode_status(0.7, 3),
        lambda p, s: dg_msg.decode_status(p),
    ),
    (dg_roles.DGRECUser, "invite"): (
        DGREC,
        lambda r: wire.encode_ids([2], width=1),
        lambda p, s: wire.decode_ids(p),
    ),
    (dg_roles.DGRECUser, "join"): (DGREC, lambda r: wire.encode_blob(b""), lambda p, s: None),
    (dg_roles.DGRECUser, "share"): (
        DGREC,
        lambda r: _share(DGREC, r),
        lambda p, s: dg_msg.decode_held(dict(dg_msg.decode_share(p)), s.config),
    ),
    (fp_roles.KeyServer, "oprf_blinded"): (
        FPG,
        lambda r: fp_msg.encode_blinded(_big(r, 3), BITS),
        lambda p, s: fp_msg.decode_blinded(p, BITS),
    ),
    (fp_roles.KeyServer, "oprf_key_request"): (
        FPG,
        lambda r: fp_msg.encode_key_request(),
        lambda p, s: fp_msg.decode_key_request(p),
    ),
    (fp_roles.Matcher, "expand_request"): (
        FPG,
        lambda r: fp_msg.encode_expand_request(
            sorted(r.bytes(TOKEN_BYTES) for _ in range(2)), _vec(r, DIM)
        ),
        lambda p, s: fp_msg.decode_expand_request(p),
    ),
    (fp_roles.Server, "item_grads"): (
        FPG,
        lambda r: _rows(r, 5, DIM, sort=True),
        lambda p, s: fp_msg.decode_item_grads(p, N_ITEMS),
    ),
    (fp_roles.Server, "gat_grads"): (
        FPG,
        lambda r: wire.encode_dense(np.clip(_vec(r, fp_msg.gat_size(FPG)), -0.1, 0.1)),
        lambda p, s: wire.decode_dense(p),
    ),
    (fp_roles.User, "oprf_public_key"): (
        FPG,
        lambda r: wire.encode_bigints([_big(r, 1)[0], 65537]),
        lambda p, s: wire.decode_bigints(p),
    ),
    (fp_roles.User, "oprf_signed"): (
        FPG,
        lambda r: fp_msg.encode_signed(_big(r, 2), BITS),
        lambda p, s: fp_msg.decode_signed(p, BITS),
    ),
    (fp_roles.User, "expand_reply"): (
        FPG,
        _expand_reply,
        lambda p, s: fp_msg.decode_expand_reply(p),
    ),
    **{
        (fp_roles.User, kind): (
            FPG,
            lambda r: wire.encode_dense(_vec(r, N_ITEMS, DIM)),
            lambda p, s: wire.decode_dense(p),
        )
        for kind in ("item_embeddings", "eval_item_embeddings")
    },
    **{
        (fp_roles.User, kind): (
            FPG,
            lambda r: wire.encode_dense(_vec(r, fp_msg.gat_size(FPG))),
            lambda p, s: wire.decode_dense(p),
        )
        for kind in ("gat_weights", "eval_gat_weights")
    },
    (vf_roles.VerFedGNNKeyServer, "psi_rejoin"): (VFG, lambda r: b"", lambda p, s: None),
    (vf_roles.VerFedGNNKeyServer, "psi_blinded"): (
        VFG,
        lambda r: vf_msg.encode_blinded(_big(r, 3), BITS),
        lambda p, s: vf_msg.decode_blinded(p, BITS),
    ),
    (vf_roles.VerFedGNNServer, "psi_tokens"): (
        VFG,
        lambda r: wire.encode_chunks(sorted(r.bytes(TOKEN_BYTES) for _ in range(3)), TOKEN_BYTES),
        lambda p, s: wire.decode_chunks(p, TOKEN_BYTES),
    ),
    (vf_roles.VerFedGNNServer, "gradient"): (
        VFG,
        lambda r: wire.encode_ternary(np.array([0, 0.5, -0.5, 0, 0.5], dtype="f4"), 0.5),
        # θ's length follows from the PSI's outcome: the server's handler compares it with its θ
        lambda p, s: vf_msg.decode_gradient(p, len(wire.decode_ternary(p))),
    ),
    (vf_roles.VerFedGNNParty, "psi_public_key"): (
        VFG,
        lambda r: wire.encode_bigints([_big(r, 1)[0], 65537]),
        lambda p, s: wire.decode_bigints(p),
    ),
    (vf_roles.VerFedGNNParty, "psi_signed"): (
        VFG,
        lambda r: vf_msg.encode_signed(_big(r, 3), BITS),
        lambda p, s: vf_msg.decode_signed(p, BITS),
    ),
    (vf_roles.VerFedGNNParty, "psi_intersection"): (
        VFG,
        lambda r: wire.encode_ids([0, 2, 3]),
        lambda p, s: wire.decode_ids(p),
    ),
    **{
        (vf_roles.VerFedGNNParty, kind): (
            VFG,
            lambda r: vf_msg.encode_public(7, np.array([0, 2]), torch.from_numpy(_vec(r, 11))),
            lambda p, s: vf_msg.decode_public(p),
        )
        for kind in ("public_params", "eval_public_params")
    },
    (vf_roles.VerFedGNNParty, "aggregates"): (
        VFG,
        lambda r: wire.encode_dense(_vec(r, 2, 3, 3)),
        lambda p, s: wire.decode_dense(p),
    ),
    (ds_roles.DIPSGNNServer, "features"): (
        DIPS,
        lambda r: ds_msg.encode_features(_vec(r, 5)),
        lambda p, s: ds_msg.decode_features(p, 5, "user/0"),
    ),
    **{
        (ds_roles.DIPSGNNServer, kind): (
            DIPS,
            lambda r: ds_msg.encode_items(np.array([1, 4, 8])),
            lambda p, s: ds_msg.decode_sequence(p, N_ITEMS, "user/0"),
        )
        for kind in ("sequence", "eval_context")
    },
    (ds_roles.DIPSGNNUser, "topk"): (
        DIPS,
        lambda r: ds_msg.encode_topk(np.array([[1, 2, 3]])),
        lambda p, s: ds_msg.decode_sequence(p, N_ITEMS, "server/0"),
    ),
    (echo.EchoServer, "echo"): (
        ECHO,
        lambda r: wire.encode_dense(_vec(r, 5)),
        lambda p, s: wire.decode_dense(p),
    ),
    (echo.EchoUser, "vector"): (
        ECHO,
        lambda r: wire.encode_dense(_vec(r, 5)),
        lambda p, s: wire.decode_dense(p),
    ),
    (ping.PingServer, "pong"): (PING, lambda r: struct.pack("<q", 3), lambda p, s: None),
    (ping.PingUser, "ping"): (PING, lambda r: struct.pack("<q", 3), lambda p, s: None),
}
# DLGNN's peers: the same role with float (Laplace) gradients of the LightGCN item table
DLGNN_SHARE = (DLGNN, lambda r: _share(DLGNN, r), CASES[(dg_roles.DGRECUser, "share")][2])

BUILTIN_ROLE_MODULES = [
    fm_roles,
    dmf_roles,
    dg_roles,
    fp_roles,
    vf_roles,
    ds_roles,
    central_roles,
    echo,
    ping,
]


def _role_classes():
    out = []
    for mod in BUILTIN_ROLE_MODULES:
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, Node) and cls is not Node and cls.__module__ == mod.__name__:
                out.append(cls)
    return out


# --- mutations -----------------------------------------------------------------------------------
_SPECIALS = [
    struct.pack("<f", math.nan),
    struct.pack("<f", math.inf),
    struct.pack("<f", -math.inf),
    struct.pack("<f", 1e30),
    struct.pack("<I", 2**31),
    struct.pack("<I", N_ITEMS),
    struct.pack("<I", 0xFFFFFFFF),
]


@st.composite
def mutated(draw, valid: bytes) -> bytes:
    op = draw(st.sampled_from(["random", "truncate", "extend", "flip", "special", "special"]))
    n = len(valid)
    if op == "random":
        return draw(st.binary(max_size=300))
    if op == "truncate":
        return valid[: draw(st.integers(0, max(0, n - 1)))]
    if op == "extend":
        return valid + draw(st.binary(min_size=1, max_size=40))
    if op == "flip":
        i = draw(st.integers(0, max(0, n - 1)))
        return valid[:i] + bytes([draw(st.integers(0, 255))]) + valid[i + 1 :]
    special = draw(st.sampled_from(_SPECIALS))  # NaN, inf, huge, ids out of range
    i = draw(st.integers(0, max(0, n - 4)))
    return valid[:i] + special + valid[i + 4 :]


def _fuzz_one(cls, kind, shared, payload, decode) -> None:
    rule = cls.ACCEPTS[kind]
    try:
        rule.check(payload, shared)
    except v.Invalid as e:
        assert e.reason in v.REASONS
        return
    decoded = decode(payload, shared)  # accepted: the handler's own decoding succeeds
    _sane(decoded)


FUZZ_IDS = [f"{c.__name__}.{k}" for c, k in CASES] + ["DLGNN.share"]
FUZZ = [(c, k, *CASES[(c, k)]) for c, k in CASES] + [(dg_roles.DGRECUser, "share", *DLGNN_SHARE)]


@pytest.mark.parametrize("cls,kind,shared,make,decode", FUZZ, ids=FUZZ_IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzz_every_kind_of_every_role(cls, kind, shared, make, decode, data):
    seed = data.draw(st.integers(0, 2**16))
    valid = make(np.random.default_rng(seed))
    cls.ACCEPTS[kind].check(valid, shared)  # the protocol's own encoding passes
    _fuzz_one(cls, kind, shared, data.draw(mutated(valid)), decode)


def test_nan_and_out_of_range_ids_are_rejected_with_their_reason():
    rng = np.random.default_rng(0)
    check = fm_roles.FedMFServer.ACCEPTS["item_grads"].check
    rows = _vec(rng, 2, DIM)
    rows[1, 2] = np.nan
    with pytest.raises(v.Invalid) as e:
        check(fm_msg.encode_item_grads(np.array([1, 2]), rows), FEDMF)
    assert e.value.reason == "nonfinite"
    with pytest.raises(v.Invalid) as e:
        check(fm_msg.encode_item_grads(np.array([1, N_ITEMS]), _vec(rng, 2, DIM)), FEDMF)
    assert e.value.reason == "range"
    with pytest.raises(v.Invalid) as e:
        check(fm_msg.encode_item_grads(np.arange(7), _vec(rng, 7, DIM)), FEDMF)  # > 2P rows
    assert e.value.reason == "size"
    with pytest.raises(v.Invalid) as e:
        check(b"\x06garbage", FEDMF)
    assert e.value.reason == "malformed"
    # a clipped upload without device noise (authors' calibration) has a bound
    authors = Shared(dataclasses.replace(FPG.config, calibration="authors_code"), FPG.public)
    big = wire.encode_dense(np.full(fp_msg.gat_size(FPG), 5.0, dtype="f4"))
    with pytest.raises(v.Invalid) as e:
        fp_roles.Server.ACCEPTS["gat_grads"].check(big, authors)
    assert e.value.reason == "range"


def test_screen_checks_kind_sender_phase_and_checks_a_broadcast_once():
    accepts = fm_roles.FedMFUser.ACCEPTS
    payload = fm_msg.encode_item_factors(np.zeros((N_ITEMS, DIM), dtype="f4"))
    ok = Message("item_factors", "server/0", "user/1", 0, "download", payload)
    assert v.screen(accepts, ok, "train", FEDMF, {}) is None
    assert v.screen(accepts, ok, "eval", FEDMF, {}).reason == "phase"
    forged = dataclasses.replace(ok, src="user/2")
    assert v.screen(accepts, forged, "train", FEDMF, {}).reason == "sender"
    assert v.screen(accepts, dataclasses.replace(ok, kind="x"), "train", FEDMF, {}).reason == "kind"
    assert v.screen(None, forged, "train", FEDMF, {}) is None  # no declaration: accept all
    calls = []
    counted = v.Accept(("server",), None, lambda p, s: calls.append(p))
    cache: dict = {}
    for dst in range(5):
        v.screen(
            {"k": counted}, dataclasses.replace(ok, kind="k", dst=f"user/{dst}"), "t", None, cache
        )
    assert len(calls) == 1
    assert v.phase_name("gossip/3") == "gossip" and v.phase_name("relay2") == "relay"


def test_every_builtin_role_declares_what_it_accepts_and_every_kind_is_fuzzed():
    classes = _role_classes()
    assert {c.__name__ for c in classes} >= {
        "FedMFServer", "FedMFUser", "DMFUser", "DGRECUser", "KeyServer", "Matcher", "Server",
        "User", "VerFedGNNKeyServer", "VerFedGNNServer", "VerFedGNNParty", "DIPSGNNUser",
        "DIPSGNNServer", "Curator", "EchoServer", "EchoUser", "PingServer", "PingUser",
    }  # fmt: skip
    declared = set()
    for cls in classes:
        assert isinstance(cls.ACCEPTS, dict), f"{cls.__name__} declares no ACCEPTS"
        for kind, rule in cls.ACCEPTS.items():
            assert isinstance(rule, v.Accept) and rule.senders and rule.check is not None
            declared.add((cls, kind))
    assert declared == set(CASES)
    # the protocols' modules are the ones whose roles are listed
    assert {central, dgrec, dipsgnn, dmf, fedmf, fedpergnn, verfedgnn}  # imported


# --- end to end: a corrupted participant on a real run -------------------------------------------
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


class NaNUser(fm_roles.FedMFUser):
    """A user whose uploads carry NaN (user 0) or an item id outside the catalogue (user 1)."""

    def send(self, kind, dst, payload):
        if kind == fm_msg.ITEM_GRADS and self.id in ("user/0", "user/1"):
            ids, rows = fm_msg.decode_item_grads(payload, self.public.n_items)
            if self.id == "user/0":
                rows[0, 0] = np.nan
            else:
                ids[0] = self.public.n_items + 5
            payload = fm_msg.encode_item_grads(ids, rows)
        super().send(kind, dst, payload)


class CorruptFedMF(FedMF):
    def node_specs(self):
        return [
            dataclasses.replace(s, cls=NaNUser) if s.cls is fm_roles.FedMFUser else s
            for s in super().node_specs()
        ]


@pytest.mark.ray
def test_a_corrupted_user_is_rejected_counted_and_never_reaches_the_model(ray_local, tmp_path):
    from engine import RunSettings, deploy, run
    from engine.report import read_rows

    rounds = 3
    settings_ = RunSettings(
        protocol="tests.integration.test_untrusted_messages:CorruptFedMF",
        rounds=rounds,
        seed=0,
        params={"dim": 4, "pairs": 4, "users_per_round": 0},
        out=str(tmp_path),
        progress=False,
    )
    ds = synthetic(n_users=12, n_items=30, avg_interactions=6, seed=0)
    run_dir, summary = run(settings_, ds)
    rows = read_rows(run_dir)
    assert len(rows) == rounds
    for r in rows:  # users 0 and 1 upload every round; both uploads are dropped
        assert r["rejected"] == {"item_grads": {"nonfinite": 1, "range": 1}}
    assert summary["rejected"] == {"item_grads": {"nonfinite": rounds, "range": rounds}}
    assert json.loads((run_dir / "summary.json").read_text())["rejected"] == summary["rejected"]
    assert all(math.isfinite(x) for x in summary["metrics"].values() if isinstance(x, float))
    # the server's model after the same rounds on a deployment of its own: finite
    proto = CorruptFedMF(ds, FedMF.Config(dim=4, pairs=4, users_per_round=0), 0)
    dep = deploy(proto, "packed", 1)
    try:
        from engine import run_rounds

        run_rounds(proto, dep, 2, eval_every=0)
        assert dep.round_stats().rejected == {"item_grads": {"nonfinite": 1, "range": 1}}
        q = dep.call("server/0", "get_item_factors")
        assert np.isfinite(q).all()
    finally:
        dep.close()
