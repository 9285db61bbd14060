"""Secure aggregation as messages: the SecAgg+ stages between the users and the server that sums
their uploads, so that the server learns the sum of at least ``min_users`` uploads and nothing
else of any one of them (privacy/secagg.py has the primitives and the equations).

A protocol declares what its server sums (:class:`SecureSum`: the upload kinds, each with its
length and its densification) on its server and user classes (``SECURE_SUM``); with the run
condition ``secure_aggregation`` (``--secure-aggregation``) a user's upload of a declared kind to
the server is not sent: :meth:`nodes.node.Node.send` hands it to :func:`hold`, which densifies it
over the whole item table (so that which rows a user touched is hidden too), and the round runs
these supersteps between the protocol's training step and its aggregation (:func:`run_stages`):

=====================  ========  ==========================================================
superstep              acts      sends
=====================  ========  ==========================================================
(training)             users     ``secagg_keys``: two X25519 public keys (c_u, s_u)        → server
``secagg_graph``       server    ``secagg_neighbours``: |U1| and the keys of u's k neighbours
                                 in a random Harary graph over the users U1 that sent keys  → u
``secagg_share``       users     ``secagg_shares``: per neighbour v, AES-GCM(c_uv) of v's
                                 Shamir shares of b_u and s_u^SK (t of k rebuild them)      → server
``secagg_route``       server    ``secagg_shares_for``: the ciphertexts for v from U2, the
                                 users that shared                                          → v
``secagg_mask``        users     ``secagg_masked``: y_u = x_u + PRG(b_u) ± PRG(s_uv), over Z_2^32,
                                 with each neighbour whose shares it was forwarded          → server
``secagg_survivors``   server    ``secagg_survivors``: which of v's sources sent y (U3)      → v
``secagg_unmask``      users     ``secagg_reveal``: per source, its share of b_u if u ∈ U3,
                                 of s_u^SK if not — never both                               → server
(aggregation)          server    rebuilds b_u (u ∈ U3) and s_u^SK (u ∈ U2 \\ U3), removes the
                                 masks (:func:`server_sum`): Σ_{u∈U3} x_u, exact in Z_2^32
=====================  ========  ==========================================================

Users who drop between two stages are recovered while at least t of a user's neighbours answer;
below that, or with fewer than ``min_users`` survivors, the server skips the round's update and
reports ``secagg_failed`` — never a wrong sum. ``stage_dropout`` drops each user before each of
its three stages with that probability (a function of the seed, round, stage and node id), the
mid-protocol losses SecAgg is built for.

Threat model: an honest-but-curious server and users (they follow the protocol and try to learn
from what they see), any of them colluding with fewer than t of a user's neighbours. The server
learns Σ x_u over U3 (|U3| ≥ min_users) and the sets U1 ⊇ U2 ⊇ U3 — not which items a user
touched, not a user's upload. Not covered: a malicious server (without a PKI to sign the keys it
could substitute them, and it could tell a user's neighbours different survivor sets: SecAgg's
active variant adds signatures and a consistency round), a malicious user's effect on the sum
(robust aggregation needs individual uploads; the run refuses a defence with secure
aggregation), and what the sum itself reveals (that is the DP mechanism's job).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from cluster import validate as v
from cluster import wire
from cluster.message import Message, index_of, node_id, role_of
from privacy import secagg

PREFIX = "secagg_"
GRAPH, SHARE, ROUTE, MASK, SURVIVORS, UNMASK = (
    "secagg_graph",
    "secagg_share",
    "secagg_route",
    "secagg_mask",
    "secagg_survivors",
    "secagg_unmask",
)
STAGES = (GRAPH, SHARE, ROUTE, MASK, SURVIVORS, UNMASK)
USER_STAGES = (SHARE, MASK, UNMASK)

KEYS = "secagg_keys"
NEIGHBOURS = "secagg_neighbours"
SHARES = "secagg_shares"
SHARES_FOR = "secagg_shares_for"
MASKED = "secagg_masked"
SURVIVOR_LIST = "secagg_survivors"
REVEAL = "secagg_reveal"

SEALED_BYTES = secagg.NONCE_BYTES + 8 + 2 * secagg.SHARE_BYTES + 16  # nonce, u, v, 2 shares, tag
MAX_DEGREE = 4096  # neighbours a message may list


@dataclasses.dataclass(frozen=True)
class Summand:
    """One upload kind the server sums: ``length(shared)`` coordinates, and ``densify(payload,
    shared)`` the upload as a float vector of that length (zero where the user has nothing)."""

    kind: str
    length: Callable[[Any], int]
    densify: Callable[[bytes, Any], np.ndarray]


@dataclasses.dataclass(frozen=True)
class SecureSum:
    """What a protocol's server sums: its node id, the summed upload kinds in vector order, and
    the bound on one coordinate of an honest upload (``bound(config)``; the fixed-point encoding
    clips there unless the run gives ``secure_aggregation.bound``)."""

    server: str
    parts: tuple[Summand, ...]
    bound: Callable[[Any], float]

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(p.kind for p in self.parts)

    def length(self, shared) -> int:
        return sum(p.length(shared) for p in self.parts)

    def slices(self, shared) -> dict[str, slice]:
        out, at = {}, 0
        for p in self.parts:
            n = p.length(shared)
            out[p.kind] = slice(at, at + n)
            at += n
        return out


@dataclasses.dataclass(frozen=True)
class SumResult:
    """What the server learns: the sum of the survivors' uploads per kind (float64, dense), how
    many they are, and the fixed-point resolution (each coordinate of the sum is exact up to
    n · resolution / 2)."""

    parts: dict[str, np.ndarray]
    n: int
    resolution: float
    views: dict = dataclasses.field(default_factory=dict)  # src -> y_u, where the server keeps them


# --- run parameters ---------------------------------------------------------------------------------
def settings(node) -> secagg.SecureAggregation | None:
    """The run's secure-aggregation record, or None without it."""
    return getattr(node.ctx.conditions, "secure_aggregation", None)


def degree_and_threshold(cfg: secagg.SecureAggregation, n: int) -> tuple[int, int]:
    """(k, t) for a round of n users: every user has min(k, n − 1) neighbours; t ≤ that."""
    k = min(cfg.neighbours or secagg.default_degree(n), max(n - 1, 0))  # even, or n − 1
    t = min(cfg.threshold or secagg.default_threshold(k), k)
    return k, max(t, 1)


def min_users(cfg: secagg.SecureAggregation) -> int:
    """The fewest uploads whose sum the server may learn."""
    return max(cfg.min_users or 2, 2)


def fixed_point(node, spec: SecureSum, n1: int) -> secagg.FixedPoint:
    cfg = settings(node)
    return secagg.FixedPoint(cfg.bound or spec.bound(node.config), max(n1, 1))


def _dropped(node, stage: str) -> bool:
    p = settings(node).stage_dropout
    if p <= 0:
        return False
    h = hashlib.sha256(f"secagg-drop:{node.ctx.seed}:{node.round}:{stage}:{node.id}".encode())
    return int.from_bytes(h.digest()[:8], "little") / 2**64 < p


def guarantee(cfg: secagg.SecureAggregation) -> dict:
    """What secure aggregation adds to a run's privacy figures, and what it leaves as it was (the
    report's ``privacy.secure_aggregation``)."""
    k = cfg.neighbours or "the smallest even number >= 3·log2 n, at least 4 (n: the round's users)"
    t = cfg.threshold or "⌈k/3⌉ + 1"
    return {
        "protocol": "SecAgg+ (Bell et al. 2020), semi-honest",
        "neighbours": k,
        "threshold": t,
        "min_users": min_users(cfg),
        "server_sees": f"the sum of at least {min_users(cfg)} users' uploads per round, "
        "densified over the whole item table; the sets of users at each stage",
        "not_covered": "a malicious server (key substitution, inconsistent survivor lists), "
        "collusion with t or more of a user's neighbours, a malicious user's effect on the sum, "
        "what the sum itself reveals",
        "epsilon": "unchanged: the LDP mechanism's ε is accounted as without secure aggregation",
    }


# --- payloads ---------------------------------------------------------------------------------------
def encode_keys(c_pk: bytes, s_pk: bytes) -> bytes:
    return wire.encode_record([c_pk, s_pk])


def decode_keys(payload: bytes) -> tuple[bytes, bytes]:
    c_pk, s_pk = wire.decode_record(payload, 2)
    if len(c_pk) != secagg.KEY_BYTES or len(s_pk) != secagg.KEY_BYTES:
        raise wire.WireError("secagg keys: two 32-byte public keys expected")
    return c_pk, s_pk


def encode_neighbours(n1: int, ids, c_pks: list[bytes], s_pks: list[bytes]) -> bytes:
    return wire.encode_record(
        [
            wire.encode_ids([n1]),
            wire.encode_ids(ids),
            wire.encode_chunks(c_pks, secagg.KEY_BYTES),
            wire.encode_chunks(s_pks, secagg.KEY_BYTES),
        ]
    )


def decode_neighbours(payload: bytes):
    """(|U1|, neighbour ids, their c keys, their s keys)."""
    f = wire.decode_record(payload, 4)
    n1 = wire.decode_ids(f[0], max_count=1)
    ids = wire.decode_ids(f[1], max_count=MAX_DEGREE)
    c_pks = wire.decode_chunks(f[2], secagg.KEY_BYTES, max_count=MAX_DEGREE)
    s_pks = wire.decode_chunks(f[3], secagg.KEY_BYTES, max_count=MAX_DEGREE)
    if len(n1) != 1 or not len(ids) == len(c_pks) == len(s_pks):
        raise wire.WireError("secagg neighbours: ids and keys do not match")
    if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
        raise wire.WireError("secagg neighbours: ids not sorted and distinct")
    return int(n1[0]), ids, c_pks, s_pks


def encode_sealed(ids, sealed: list[bytes]) -> bytes:
    """Ciphertexts with the user each is for (``secagg_shares``) or from (``secagg_shares_for``)."""
    return wire.encode_record([wire.encode_ids(ids), wire.encode_chunks(sealed, SEALED_BYTES)])


def decode_sealed(payload: bytes) -> tuple[np.ndarray, list[bytes]]:
    f = wire.decode_record(payload, 2)
    ids = wire.decode_ids(f[0], max_count=MAX_DEGREE)
    sealed = wire.decode_chunks(f[1], SEALED_BYTES, max_count=MAX_DEGREE)
    if len(ids) != len(sealed):
        raise wire.WireError("secagg shares: ids and ciphertexts do not match")
    if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
        raise wire.WireError("secagg shares: ids not sorted and distinct")
    return ids, sealed


def encode_masked(y: np.ndarray) -> bytes:
    return wire.encode_dense(np.asarray(y, dtype=np.uint32).view(np.int32), "int32")


def decode_masked(payload: bytes, length: int) -> np.ndarray:
    arr = wire.view_dense(payload, max_numel=length)
    if arr.dtype != np.dtype("<i4") or arr.shape != (length,):
        raise wire.WireError(f"secagg masked input: int32 [{length}] expected")
    return arr.view("<u4").astype(np.uint32)


def encode_survivors(n3: int, ids) -> bytes:
    return wire.encode_record([wire.encode_ids([n3]), wire.encode_ids(ids)])


def decode_survivors(payload: bytes) -> tuple[int, np.ndarray]:
    f = wire.decode_record(payload, 2)
    n3 = wire.decode_ids(f[0], max_count=1)
    ids = wire.decode_ids(f[1], max_count=MAX_DEGREE)
    if len(n3) != 1:
        raise wire.WireError("secagg survivors: a count expected")
    return int(n3[0]), ids


def encode_reveal(ids, which: list[int], shares: list[bytes]) -> bytes:
    """Per source u: 0 and its share of b_u, or 1 and its share of s_u^SK."""
    return wire.encode_record(
        [
            wire.encode_ids(ids),
            wire.encode_blob(bytes(which)),
            wire.encode_chunks(shares, secagg.SHARE_BYTES),
        ]
    )


def decode_reveal(payload: bytes) -> tuple[np.ndarray, bytes, list[bytes]]:
    f = wire.decode_record(payload, 3)
    ids = wire.decode_ids(f[0], max_count=MAX_DEGREE)
    which = wire.decode_blob(f[1], max_len=MAX_DEGREE)
    shares = wire.decode_chunks(f[2], secagg.SHARE_BYTES, max_count=MAX_DEGREE)
    if not len(ids) == len(which) == len(shares) or any(w > 1 for w in which):
        raise wire.WireError("secagg reveal: ids, flags and shares do not match")
    return ids, which, shares


def _check(decode) -> Callable[[bytes, Any], None]:
    def check(payload: bytes, shared) -> None:
        v.decoded(decode, payload)

    return check


def accepts(spec: SecureSum, role: str) -> dict[str, v.Accept]:
    """What the server's role and the users accept of these stages (cluster/validate.py)."""
    if role == role_of(spec.server):

        def check_masked(payload: bytes, shared) -> None:
            v.decoded(decode_masked, payload, spec.length(shared))

        return {
            KEYS: v.Accept(("user",), (GRAPH,), _check(decode_keys)),
            SHARES: v.Accept(("user",), (ROUTE,), _check(decode_sealed)),
            MASKED: v.Accept(("user",), (SURVIVORS,), check_masked),
            REVEAL: v.Accept(("user",), ("aggregate",), _check(decode_reveal)),
        }
    server = (role_of(spec.server),)
    return {
        NEIGHBOURS: v.Accept(server, (SHARE,), _check(decode_neighbours)),
        SHARES_FOR: v.Accept(server, (MASK,), _check(decode_sealed)),
        SURVIVOR_LIST: v.Accept(server, (UNMASK,), _check(decode_survivors)),
    }


# --- the users' side ----------------------------------------------------------------------------------
@dataclasses.dataclass
class UserState:
    """One user's secure-aggregation state for one round (bytes and arrays: it pickles with the
    node for a snapshot or a rollback)."""

    round: int
    c_sk: bytes
    s_sk: bytes
    b: bytes = b""
    parts: dict = dataclasses.field(default_factory=dict)  # kind -> the held payloads
    n1: int = 0
    neighbours: dict = dataclasses.field(default_factory=dict)  # v -> (c_pk, s_pk)
    held: dict = dataclasses.field(default_factory=dict)  # u -> (share of b_u, share of s_u)
    masked_with: tuple = ()
    dropped: bool = False
    # x_u as encoded, from the masked input to this user's reveal (tests read it; never sent)
    encoded: np.ndarray | None = None


def hold(node, spec: SecureSum, kind: str, payload: bytes) -> None:
    """A user's upload of a summed ``kind``: densified and kept for this round's masked input; the
    first one of a round draws the user's two key pairs and advertises the public keys."""
    st = getattr(node, "_secagg", None)
    if st is None or st.round != node.round:
        c_sk, c_pk = secagg.new_keypair()
        s_sk, s_pk = secagg.new_keypair()
        st = node._secagg = UserState(node.round, c_sk, s_sk)
        node._outbox.append(
            Message(KEYS, node.id, spec.server, node.round, node.phase, encode_keys(c_pk, s_pk))
        )
    st.parts.setdefault(kind, []).append(payload)  # densified when masked: kept small till then


def _input(node, spec: SecureSum, st: UserState) -> np.ndarray:
    """x_u: the held uploads densified, in the order of ``spec.parts`` (zero for a kind the user
    did not upload this round)."""
    shared, out = node.ctx.shared, []
    for part in spec.parts:
        x = np.zeros(part.length(shared), dtype=np.float64)
        for payload in st.parts.get(part.kind, []):
            dense = np.asarray(part.densify(payload, shared), dtype=np.float64).reshape(-1)
            if dense.shape != x.shape:
                raise ValueError(f"{part.kind}: densified to {dense.shape}, expected {x.shape}")
            x += dense
        out.append(x)
    return np.concatenate(out) if out else np.zeros(0)


def _state(node) -> UserState | None:
    st = getattr(node, "_secagg", None)
    return st if st is not None and st.round == node.round and not st.dropped else None


def user_stage(node, spec: SecureSum, phase: str, inbox: list[Message]) -> None:
    """One user's handler of a user stage (each user alone: the work is per-user crypto)."""
    st = _state(node)
    if st is None:  # it held no upload this round (not sampled, or offline), or dropped out
        for m in inbox:
            node.reject(m, "order" if m.round != node.round else "peer")
        return
    if _dropped(node, phase):
        st.dropped, st.parts, st.held, st.encoded = True, {}, {}, None
        node.report("secagg_dropped", 1.0)
        return
    kind = {SHARE: NEIGHBOURS, MASK: SHARES_FOR, UNMASK: SURVIVOR_LIST}[phase]
    m = node.admit_one(inbox, kind)  # the host's screen let through only the server's
    if m is None:
        return
    if m.src != spec.server:
        node.reject(m, "sender")
        return
    if phase == SHARE:
        _share(node, spec, st, m)
    elif phase == MASK:
        _mask(node, spec, st, m)
    else:
        _reveal(node, spec, st, m)


def _share(node, spec, st: UserState, m: Message) -> None:
    me = index_of(node.id)
    n1, ids, c_pks, s_pks = decode_neighbours(m.payload)
    k, t = degree_and_threshold(settings(node), n1)
    if me in ids or len(ids) < t or len(ids) > max(k, 1) or n1 < len(ids) + 1:
        node.reject(m, "range")  # not a neighbourhood of this round's graph: it takes no part
        st.dropped = True
        return
    st.n1 = n1
    st.neighbours = {int(u): (c, s) for u, c, s in zip(ids, c_pks, s_pks)}
    st.b = secagg.new_seed()
    b_shares = secagg.share_secret(st.b, len(ids), t)
    s_shares = secagg.share_secret(st.s_sk, len(ids), t)
    sealed, c_sk = [], secagg.private_key(st.c_sk)
    for i, u in enumerate(ids):
        u = int(u)
        try:
            key = secagg.agree(c_sk, c_pks[i], secagg.share_key_info(node.round, me, u))
        except secagg.SecAggError:  # a neighbour key no agreement can use: sit the round out
            node.reject(m, "range")
            st.dropped = True
            return
        sealed.append(seal_shares(key, node.round, me, u, b_shares[i], s_shares[i]))
    node.send(SHARES, spec.server, encode_sealed(ids, sealed))


def _aad(round_: int, src: int, dst: int) -> bytes:
    return f"privrec secagg/{round_}/{src}->{dst}".encode()


def seal_shares(key: bytes, round_: int, src: int, dst: int, b_share: bytes, s_share: bytes):
    """What user ``src`` sends ``dst`` through the server: its shares of b_src and s_src^SK, sealed
    under their agreed key with the round and both ids (SEALED_BYTES)."""
    plain = src.to_bytes(4, "little") + dst.to_bytes(4, "little") + b_share + s_share
    return secagg.seal(key, plain, _aad(round_, src, dst))


def open_shares(key: bytes, round_: int, src: int, dst: int, sealed: bytes) -> tuple[bytes, bytes]:
    """(share of b_src, share of s_src^SK) of :func:`seal_shares`; SecAggError where the
    ciphertext does not authenticate or names other users."""
    plain = secagg.open_sealed(key, sealed, _aad(round_, src, dst))
    if plain[:8] != src.to_bytes(4, "little") + dst.to_bytes(4, "little"):
        raise secagg.SecAggError("sealed shares name other users")
    return plain[8 : 8 + secagg.SHARE_BYTES], plain[8 + secagg.SHARE_BYTES :]


def _mask(node, spec, st: UserState, m: Message) -> None:
    me = index_of(node.id)
    sources, sealed = decode_sealed(m.payload)
    pairs, c_sk, s_sk = {}, secagg.private_key(st.c_sk), secagg.private_key(st.s_sk)
    for u, ct in zip(sources, sealed):
        u = int(u)
        if u not in st.neighbours:
            node.reject(m, "peer")  # not one of this round's neighbours: no mask, no share
            continue
        c_pk, s_pk = st.neighbours[u]
        # the pairwise mask goes with every source the server forwarded, whether or not its
        # shares open, so that the server's view of who masked with whom is right
        try:
            pairs[u] = secagg.agree(s_sk, s_pk, secagg.mask_info(node.round, me, u))
        except secagg.SecAggError:  # no mask can be agreed with u: send no masked input
            node.reject(m, "range")
            st.dropped = True
            return
        try:
            key = secagg.agree(c_sk, c_pk, secagg.share_key_info(node.round, me, u))
            st.held[u] = open_shares(key, node.round, u, me, ct)
        except secagg.SecAggError:
            node.reject(m, "range")
    st.masked_with = tuple(sorted(pairs))
    encoded, clipped = fixed_point(node, spec, st.n1).encode(_input(node, spec, st))
    st.encoded = encoded
    if clipped:
        node.report("secagg_clipped", float(clipped))
    st.parts = {}  # the plain upload is no longer needed
    node.send(MASKED, spec.server, encode_masked(secagg.masked_input(encoded, st.b, pairs, me)))


def _reveal(node, spec, st: UserState, m: Message) -> None:
    n3, alive = decode_survivors(m.payload)
    alive = {int(u) for u in alive}
    k, t = degree_and_threshold(settings(node), st.n1)
    if n3 < min_users(settings(node)) or not alive <= set(st.masked_with) or n3 < len(alive):
        node.reject(m, "range")  # a sum of too few, or survivors it never masked with
        return
    ids, which, shares = [], [], []
    for u in st.masked_with:
        if u not in st.held:
            continue
        ids.append(u)
        if u in alive:  # u sent its masked input: its self mask must go
            which.append(0)
            shares.append(st.held[u][0])
        else:  # u dropped after masking: its pairwise masks must go
            which.append(1)
            shares.append(st.held[u][1])
    st.held, st.encoded = {}, None
    node.send(REVEAL, spec.server, encode_reveal(ids, which, shares))


# --- the server's side ----------------------------------------------------------------------------------
@dataclasses.dataclass
class ServerState:
    round: int
    n1: int = 0
    keys: dict = dataclasses.field(default_factory=dict)  # u -> (c_pk, s_pk), U1
    graph: dict = dataclasses.field(default_factory=dict)  # u -> sorted neighbours
    sources: dict = dataclasses.field(default_factory=dict)  # v -> users whose shares went to v
    shared: tuple = ()  # U2
    total: np.ndarray | None = None  # Σ y_u over U3
    survivors: tuple = ()  # U3
    views: dict = dataclasses.field(default_factory=dict)  # sender id -> y_u, for the attack
    failed: str = ""


def server_stage(node, spec: SecureSum, phase: str, inbox: list[Message], peers=None) -> None:
    """The server's handler of ``secagg_graph``, ``secagg_route`` and ``secagg_survivors``;
    ``peers``: the user indices whose uploads may count this round (None: any user)."""
    if phase == GRAPH:
        st = node._secagg = ServerState(node.round)
        for m in node.admit(inbox, peers):
            keys = decode_keys(m.payload)  # the host's screen checked the sizes
            try:
                for pk in keys:
                    secagg.check_public(pk)
            except secagg.SecAggError:
                node.reject(m, "range")  # a key no agreement can use: it takes no part
                continue
            st.keys[index_of(m.src)] = keys
        users = sorted(st.keys)
        st.n1 = len(users)
        cfg = settings(node)
        k, t = degree_and_threshold(cfg, st.n1)
        if st.n1 < min_users(cfg):
            st.failed = f"{st.n1} users sent keys, fewer than {min_users(cfg)}"
            return
        st.graph = secagg.harary_graph(users, k)
        for u in users:
            nb = st.graph[u]
            payload = encode_neighbours(
                st.n1, nb, [st.keys[x][0] for x in nb], [st.keys[x][1] for x in nb]
            )
            node.send(NEIGHBOURS, node_id("user", u), payload)
        return
    st = getattr(node, "_secagg", None)
    if st is None or st.round != node.round or st.failed:
        for m in inbox:
            node.reject(m, "order")
        return
    if phase == ROUTE:
        outgoing: dict[int, list[tuple[int, bytes]]] = {}
        shared = []
        for m in node.admit(inbox, set(st.graph)):
            u = index_of(m.src)
            ids, sealed = decode_sealed(m.payload)
            if ids.tolist() != st.graph[u]:
                node.reject(m, "range")  # shares for users who are not its neighbours
                continue
            shared.append(u)
            for x, ct in zip(ids.tolist(), sealed):
                outgoing.setdefault(x, []).append((u, ct))
        st.shared = tuple(sorted(shared))
        members = set(st.shared)
        for x in st.shared:
            got = sorted((u, ct) for u, ct in outgoing.get(x, []) if u in members)
            st.sources[x] = tuple(u for u, _ in got)
            node.send(
                SHARES_FOR, node_id("user", x), encode_sealed(st.sources[x], [c for _, c in got])
            )
    elif phase == SURVIVORS:
        length = spec.length(node.ctx.shared)
        total = np.zeros(length, dtype=np.uint32)
        alive = []
        for m in node.admit(inbox, set(st.shared)):
            y = decode_masked(m.payload, length)
            total += y
            alive.append(index_of(m.src))
            if getattr(node, "keep_masked_views", False):
                st.views[m.src] = y
        st.survivors = tuple(sorted(alive))
        st.total = total
        cfg = settings(node)
        _, t = degree_and_threshold(cfg, st.n1)
        if len(alive) < min_users(cfg):
            st.failed = f"{len(alive)} masked inputs, fewer than {min_users(cfg)}"
            return
        members = set(st.survivors)
        for x in st.survivors:
            told = [u for u in st.sources.get(x, ()) if u in members]
            node.send(SURVIVOR_LIST, node_id("user", x), encode_survivors(len(alive), told))
    else:
        raise ValueError(f"{type(node).__name__}: no secure-aggregation stage {phase!r}")


def server_sum(node, spec: SecureSum, inbox: list[Message]) -> SumResult | None:
    """The aggregation step's unmasking: the sum of the survivors' uploads, or None (reported as
    ``secagg_failed``) where a mask cannot be removed or too few took part."""
    st = getattr(node, "_secagg", None)
    reveals = [m for m in inbox if m.kind == REVEAL]
    if st is None or st.round != node.round or st.failed or st.total is None:
        for m in reveals:
            node.reject(m, "order")
        return _failed(node, st.failed if st is not None and st.round == node.round else "")
    node._secagg = None  # the round's state is spent whatever happens below
    cfg = settings(node)
    _, t = degree_and_threshold(cfg, st.n1)
    alive, shared = set(st.survivors), set(st.shared)
    b_shares: dict[int, dict[int, bytes]] = {}
    s_shares: dict[int, dict[int, bytes]] = {}
    for m in node.admit(reveals, alive):
        x = index_of(m.src)
        ids, which, shares = decode_reveal(m.payload)
        allowed = set(st.sources.get(x, ()))
        if not set(ids.tolist()) <= allowed:
            node.reject(m, "peer")
            continue
        if any((w == 0) != (int(u) in alive) for u, w in zip(ids, which)):
            node.reject(m, "range")  # a share the server may not have for that user
            continue
        for u, w, share in zip(ids.tolist(), which, shares):
            point = st.graph[u].index(x) + 1  # x's share of u's secrets is f(position + 1)
            (b_shares if w == 0 else s_shares).setdefault(u, {})[point] = share
    try:
        self_seeds = [secagg.combine_shares(b_shares.get(u, {}), t) for u in st.survivors]
        pairs = []
        for u in sorted(shared - alive):
            # the survivors that masked with u: its neighbours to whom u's shares went
            masked_with_u = [x for x in st.graph[u] if x in alive and u in st.sources.get(x, ())]
            if not masked_with_u:
                continue
            s_sk = secagg.private_key(secagg.combine_shares(s_shares.get(u, {}), t))
            if s_sk.public_key().public_bytes_raw() != st.keys[u][1]:
                raise secagg.SecAggError(f"user {u}'s rebuilt key does not match its public key")
            for x in masked_with_u:
                seed = secagg.agree(s_sk, st.keys[x][1], secagg.mask_info(node.round, u, x))
                pairs.append((x, u, seed))
    except secagg.SecAggError as e:
        return _failed(node, str(e))
    total = secagg.remove_masks(st.total, self_seeds, pairs)
    fp = fixed_point(node, spec, st.n1)
    flat = fp.decode(total)
    parts = {kind: flat[s] for kind, s in spec.slices(node.ctx.shared).items()}
    node.report("secagg_users", float(len(alive)))
    node.report("secagg_dropped_mid", float(st.n1 - len(alive)))
    return SumResult(parts, len(alive), fp.resolution, st.views)


def _failed(node, why: str) -> None:
    """The round's sum is abandoned: reported, and the reason kept on the server (``last_failure``
    of :func:`failure`)."""
    node.report("secagg_failed", 1.0)
    node._secagg_failure = (node.round, why or "no secure-aggregation state for this round")
    return None


def failure(node) -> tuple[int, str] | None:
    """(round, reason) of the server's last abandoned sum, or None."""
    return getattr(node, "_secagg_failure", None)


# --- the round ------------------------------------------------------------------------------------
def run_stages(dep, round_: int) -> dict[str, float]:
    """The supersteps between a protocol's training step (users held their uploads and sent their
    keys) and its aggregation step (the server unmasks with :func:`server_sum`); nothing without
    the run condition ``secure_aggregation``. Returns the round's figures of the stages: users who
    dropped between them (``secagg_dropped``) and upload coordinates the fixed-point bound clipped
    (``secagg_clipped``)."""
    if getattr(dep.conditions, "secure_aggregation", None) is None:
        return {}
    dropped = clipped = 0.0
    for stage in STAGES:
        reports = dep.superstep(round_, stage).reports
        dropped += sum(reports.get("secagg_dropped", []))
        clipped += sum(reports.get("secagg_clipped", []))
    return {"secagg_dropped": dropped, "secagg_clipped": clipped}
