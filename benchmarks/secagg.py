"""The cost of one SecAgg+ round (nodes/secure_sum.py, privacy/secagg.py) where a server sums the
users' item-table uploads: client seconds per stage, server seconds per stage, bytes per user per
stage beside the plaintext uploads it replaces, the fixed-point error of the mean, and whether the
server unmasked the sum — in this process, without Ray, through the real code.

    python -m benchmarks.secagg              # n in {100, 1000, 10000} x {ml-100k, gowalla}, ~5 min
    python -m benchmarks.secagg --quick      # n in {20, 100}, ml-100k, seconds (CI)
    python -m benchmarks.secagg --users 1000 --tables gowalla --dropouts 0.3 --name secagg-gowalla

What runs is the deployed code: users are :class:`nodes.node.Node` objects whose fedmf upload
(``protocols.fedmf.roles.SECURE_SUM``: 2P = 64 ``item_grads`` rows, densified over the whole item
table, n_items · dim coordinates, clipped at its declared bound 1) goes through ``Node.send`` into
``secure_sum.hold``, and then ``secure_sum.user_stage`` for ``secagg_share``, ``secagg_mask`` and
``secagg_unmask`` (client "keys": ``hold``, the key pairs; "mask" includes densifying and encoding
the upload); the server is a Node whose ``secure_sum.server_stage`` runs ``secagg_graph``,
``secagg_route`` and ``secagg_survivors`` and whose ``secure_sum.server_sum`` unmasks. Messages are
handed from outbox to inbox as Python objects; a byte count is ``len()`` of the payload a user sent
or was sent (the message envelope is not counted).

A *sample* of clients (``--clients``, default 32; all of them with ``--quick``) runs every user stage
through those handlers, and the client figures are medians over it. Every other user (a "light"
user: identical work in distribution) runs only what the server's computation needs, with the same
primitives: its two key pairs and keys message, its real Shamir shares of b_u and s_u^SK (sealed
with AES-GCM only where the recipient is a sampled client, which opens them), its reveal through
the real ``secagg_unmask`` handler, and, in place of its masked input, its contribution to the
server's total: x_u + PRG(b_u) ± PRG(s_uv) for each neighbour v that is sampled or dropped (the
masks between two light survivors cancel in the sum, so they are left out). The light survivors'
contributions reach the server summed in one message, the other light survivors sending an
all-zero masked input of the full length, so the server decodes and adds one full-length input
per survivor as it would. The server's stages (each run ``--repeats`` times on the same input, the
fastest kept: other jobs on a shared machine only slow a run down; the clients' figures are one run
per sampled client), its unmasking included, are the real computation
over every survivor and every dropped user; the unmasked sum must equal Σ x_u over the survivors
exactly (in Z_2^32), which is checked.

Dropout: ``--dropouts`` (0, 10 %, 30 %) of the round's users drop after ``secagg_share`` and before
``secagg_mask`` — after their shares went out, before their masked input: the recovery path, where
the server rebuilds each dropped user's s_u^SK and regenerates its pairwise mask with each
surviving neighbour. A user's masked input does not depend on who drops later, so the setup and the
sampled clients' masking run once per (table, n) and each dropout rate replays the rest.

Where n · L is above ``--server-limit`` coordinate-users (gowalla at 10,000 users: 2.6M coordinates
each), the server's sum and unmask are not run: they are extrapolated from the same table's largest
measured n at the same dropout, per mask expansion (unmask: the PRG expansions, one per survivor and
one per surviving neighbour of each dropped user, counted on the real graph and drop set) and per
survivor (sum), and marked ``extrapolated`` (the table shows them with a ~); ``extrapolation_check``
in the JSON predicts each measured size from the next smaller one the same way, beside what was
measured. The clients' figures and
the bytes of those cells are still measured (the sampled clients run; their survivor lists are made
as the server's ``secagg_survivors`` makes them). ``--quick`` uses the constant table sizes; the full
run loads ml-100k and gowalla (a second each) to check n_items and take FedLightGCN's median profile.

Writes ``benchmarks/out/NAME.json`` (``--name``; default ``secagg``, ``secagg-quick`` with
``--quick``; machine, date, command, the commit and the digests of the secure-aggregation sources)
and prints the tables; a recorded result (a file git tracks) is refused before anything runs
unless ``--write`` is given.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

import numpy as np

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    claim_result,
    result_name,
    run_main,
    shown_path,
    write_result,
)

MODULE = "benchmarks.secagg"
ROUND = 1


@dataclasses.dataclass(frozen=True)
class Table:
    """An item table the server sums: n_items · dim coordinates; ``median_profile``: the median
    number of distinct training items per user (FedLightGCN uploads rows for each of them, its
    sampled negatives and its pseudo items)."""

    name: str
    n_items: int
    dim: int
    median_profile: int = 0

    @property
    def length(self) -> int:
        return self.n_items * self.dim


# Item counts after the repository's preprocessing (data/registry.py, default split), as
# benchmarks/out/data_loading.json records them: ml-100k 1,682 items (u1 split), gowalla 40,981
# (the published LightGCN split). The median profile is the median count of distinct training
# items per user (ml-100k 50, gowalla 16). dim: ml-100k at 32 (fedmf's QUICK settings,
# protocols/fedmf/protocol.py), gowalla at 64 (the default dim of fedmf and FedLightGCN). The full
# run reloads both and uses what it finds.
TABLES = {
    "ml-100k": Table("ml-100k", 1682, 32, 50),
    "gowalla": Table("gowalla", 40981, 64, 16),
}
# Bonawitz et al. (CCS 2017), abstract and §7: 1.73x communication expansion for 2^10 users and
# 2^20-element vectors of 16-bit inputs, over sending the vector in the clear
BONAWITZ = {"users": 1024, "length": 2**20, "input_bits": 16, "expansion": 1.73}
BONAWITZ_TABLE = Table("L = 2^20", 2**14, 64)

FULL_USERS = (100, 1000, 10000)
QUICK_USERS = (20, 100)
DROPOUTS = (0.0, 0.1, 0.3)
DROPPED_WHEN = "after secagg_share, before secagg_mask"
SERVER_LIMIT = 4e9  # n · L above this: the server's sum and unmask are extrapolated
USER_STAGES = ("keys", "share", "mask", "unmask")
SERVER_STAGES = ("graph", "route", "sum", "unmask")
UPLOADS = ("keys", "shares", "masked", "reveal")
DOWNLOADS = ("neighbours", "shares_for", "survivors")


# --- the nodes -----------------------------------------------------------------------------------
def _node_classes():
    from nodes.node import Node
    from protocols.fedmf.roles import SECURE_SUM

    class BenchUser(Node):
        role = "user"

    class BenchServer(Node):
        role = "server"

    BenchUser.SECURE_SUM = BenchServer.SECURE_SUM = SECURE_SUM
    return BenchUser, BenchServer, SECURE_SUM


def fedmf_upload(seed: int, user: int, table: Table, pairs: int, bound: float):
    """A fedmf-shaped upload: 2P distinct item rows (P positive, P negative slots) of width dim,
    uniform in [−bound, bound] as float32 (the protocol's clip: nothing is clipped)."""
    rng = np.random.default_rng([seed, user, table.n_items, table.dim])
    ids = np.sort(rng.choice(table.n_items, size=min(2 * pairs, table.n_items), replace=False))
    rows = rng.uniform(-bound, bound, size=(len(ids), table.dim)).astype(np.float32)
    return ids, rows


def _positions(ids: np.ndarray, dim: int) -> np.ndarray:
    """The coordinates of rows ``ids`` in the table flattened row-major (densify's layout)."""
    return (ids[:, None] * dim + np.arange(dim)).reshape(-1)


@dataclasses.dataclass
class RoundResult:
    """One dropout rate of one (table, n): the JSON record, and (where the server ran) the sum it
    unmasked and the plain sum of the survivors' encoded inputs, both decoded (float64)."""

    record: dict
    secure_sum: np.ndarray | None = None
    plain_sum: np.ndarray | None = None


def _median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def secagg_round(
    n: int,
    table: Table,
    dropouts=DROPOUTS,
    *,
    clients: int = 32,
    seed: int = 0,
    pairs: int = 32,
    run_server: bool = True,
    repeats: int = 1,
) -> list[RoundResult]:
    """One SecAgg+ round of ``n`` users over ``table`` with the default degree and threshold,
    replayed from ``secagg_mask`` on for each rate of ``dropouts``; ``clients`` users run every
    stage through the nodes' handlers (the others are light users, see the module docstring);
    ``run_server``: False leaves the server's sum and unmask unrun (their seconds None);
    ``repeats``: each server stage runs that many times on the same input (the fastest is kept)."""
    from cluster.message import Message, index_of, node_id
    from nodes import secure_sum as ss
    from nodes.conditions import Conditions
    from nodes.node import NodeContext, Shared
    from privacy import secagg
    from protocols.fedmf import messages as msg
    from protocols.fedmf.config import FedMFConfig, FedMFPublic

    if n < 3:
        raise ValueError(f"secagg_round: n = {n}, need at least 3 users")
    BenchUser, BenchServer, spec = _node_classes()
    server_id = spec.server
    kind = msg.ITEM_GRADS
    cfg = secagg.SecureAggregation()
    shared = Shared(config=FedMFConfig(dim=table.dim), public=FedMFPublic(n, table.n_items))
    ctx = NodeContext(seed, "cpu", shared, Conditions(secure_aggregation=cfg))
    k, t = ss.degree_and_threshold(cfg, n)
    L = spec.length(shared)
    assert L == table.length
    bound = cfg.bound or spec.bound(shared.config)
    fp = secagg.FixedPoint(bound, n)
    rng = np.random.default_rng([seed, n, L])
    sampled = sorted(int(u) for u in rng.choice(n, size=min(clients, n), replace=False))
    is_sampled = np.zeros(n, dtype=bool)
    is_sampled[sampled] = True
    light_users = [u for u in range(n) if not is_sampled[u]]
    up: dict[str, dict[int, int]] = {s: {} for s in UPLOADS}  # stage -> sampled user -> bytes
    down: dict[str, dict[int, int]] = {s: {} for s in DOWNLOADS}
    client_s: dict[str, dict[int, float]] = {s: {} for s in USER_STAGES}
    server_all: dict[str, list[float]] = {}  # server stage -> seconds of each repeat
    harness = 0.0

    def new_user(u: int, phase: str):
        node = BenchUser(node_id("user", u), ctx)
        node.round, node.phase = ROUND, phase
        return node

    rejected = [0]  # messages a node dropped (an honest round drops none)

    def drain(node) -> list[Message]:
        rejected[0] += len(node._rejected)
        return node._drain()[0]

    def drain_one(node, kind_: str) -> Message:
        (m,) = [m for m in drain(node) if m.kind == kind_]
        return m

    # --- keys (the training step): a sampled user's upload goes through Node.send -> hold
    users = {}
    keys_msgs: list[Message] = []
    for u in sampled:
        node = users[u] = new_user(u, "train")
        payload = msg.encode_item_grads(*fedmf_upload(seed, u, table, pairs, bound))
        t0 = time.perf_counter()
        node.send(kind, server_id, payload)  # held; two key pairs drawn
        client_s["keys"][u] = time.perf_counter() - t0
        m = drain_one(node, ss.KEYS)
        up["keys"][u] = len(m.payload)
        keys_msgs.append(m)
    t0 = time.perf_counter()
    light_sk: dict[int, tuple[bytes, bytes]] = {}
    for u in light_users:
        c_sk, c_pk = secagg.new_keypair()
        s_sk, s_pk = secagg.new_keypair()
        light_sk[u] = (c_sk, s_sk)
        keys_msgs.append(
            Message(
                ss.KEYS, node_id("user", u), server_id, ROUND, "train", ss.encode_keys(c_pk, s_pk)
            )
        )
    harness += time.perf_counter() - t0
    keys_msgs.sort(key=lambda m: index_of(m.src))

    # --- secagg_graph (server)
    server = BenchServer(server_id, ctx)
    server.round, server.phase = ROUND, ss.GRAPH
    t0 = time.perf_counter()
    ss.server_stage(server, spec, ss.GRAPH, keys_msgs, None)
    server_all["graph"] = [time.perf_counter() - t0]
    out = drain(server)
    for _ in range(repeats - 1):  # timed again on a scratch server (each draws its own graph)
        scratch = BenchServer(server_id, ctx)
        scratch.round, scratch.phase = ROUND, ss.GRAPH
        t0 = time.perf_counter()
        ss.server_stage(scratch, spec, ss.GRAPH, keys_msgs, None)
        server_all["graph"].append(time.perf_counter() - t0)
        drain(scratch)
    sst = server._secagg
    if sst.failed:
        raise RuntimeError(f"secagg_graph failed: {sst.failed}")
    to_user = {index_of(m.dst): m for m in out}
    graph, pub = sst.graph, sst.keys

    # --- secagg_share: sampled users through the handler; light users share for real, sealing
    # only what a sampled client will open
    share_msgs: list[Message] = []
    for u in sampled:
        node = users[u]
        node.phase = ss.SHARE
        m_in = to_user[u]
        down["neighbours"][u] = len(m_in.payload)
        t0 = time.perf_counter()
        ss.user_stage(node, spec, ss.SHARE, [m_in])
        client_s["share"][u] = time.perf_counter() - t0
        m = drain_one(node, ss.SHARES)
        up["shares"][u] = len(m.payload)
        share_msgs.append(m)
    t0 = time.perf_counter()
    placeholder = bytes(ss.SEALED_BYTES)  # never opened: its recipient is a light user
    light_b: dict[int, bytes] = {}
    held: dict[int, dict[int, tuple[bytes, bytes]]] = {u: {} for u in light_users}
    for u in light_users:
        c_sk, s_sk = light_sk[u]
        c_key = secagg.private_key(c_sk)  # one key object per user and stage, as _share does
        ids = graph[u]
        b = light_b[u] = secagg.new_seed()
        b_sh, s_sh = secagg.share_secret(b, len(ids), t), secagg.share_secret(s_sk, len(ids), t)
        sealed = []
        for i, v in enumerate(ids):
            if is_sampled[v]:
                key = secagg.agree(c_key, pub[v][0], secagg.share_key_info(ROUND, u, v))
                sealed.append(ss.seal_shares(key, ROUND, u, v, b_sh[i], s_sh[i]))
            else:
                sealed.append(placeholder)
                held[v][u] = (b_sh[i], s_sh[i])
        share_msgs.append(
            Message(
                ss.SHARES,
                node_id("user", u),
                server_id,
                ROUND,
                ss.SHARE,
                ss.encode_sealed(ids, sealed),
            )
        )
    harness += time.perf_counter() - t0
    share_msgs.sort(key=lambda m: index_of(m.src))

    # --- secagg_route (server)
    server.phase = ss.ROUTE
    graphed, server_all["route"] = sst, []
    for _ in range(repeats):  # the same input each time: the same output
        server._secagg = dataclasses.replace(graphed, sources={})
        t0 = time.perf_counter()
        ss.server_stage(server, spec, ss.ROUTE, share_msgs)
        server_all["route"].append(time.perf_counter() - t0)
        out = drain(server)
    to_user = {index_of(m.dst): m for m in out}
    del share_msgs, out

    # --- secagg_mask of the sampled users (independent of who drops later)
    masked: dict[int, Message] = {}
    encoded: dict[int, np.ndarray] = {}
    for u in sampled:
        node = users[u]
        node.phase = ss.MASK
        m_in = to_user[u]
        down["shares_for"][u] = len(m_in.payload)
        t0 = time.perf_counter()
        ss.user_stage(node, spec, ss.MASK, [m_in])
        client_s["mask"][u] = time.perf_counter() - t0
        masked[u] = drain_one(node, ss.MASKED)
        encoded[u] = node._secagg.encoded  # x_u as the handler encoded it (the reveal drops it)
        up["masked"][u] = len(masked[u].payload)
    # light users open what sampled neighbours sealed for them
    t0 = time.perf_counter()
    for u in light_users:
        c_key = secagg.private_key(light_sk[u][0])
        for src, ct in zip(*ss.decode_sealed(to_user[u].payload)):
            src = int(src)
            if is_sampled[src]:
                key = secagg.agree(c_key, pub[src][0], secagg.share_key_info(ROUND, u, src))
                held[u][src] = ss.open_shares(key, ROUND, src, u, ct)
    harness += time.perf_counter() - t0
    del to_user
    routed = server._secagg  # the server's state after secagg_route: each rate starts from it
    user_held = {u: users[u]._secagg.held for u in sampled}
    zero_payload = ss.encode_masked(np.zeros(L, dtype=np.uint32))
    light_node = new_user(light_users[0] if light_users else sampled[0], ss.UNMASK)

    results = []
    for p in dropouts:
        t_rate = time.perf_counter()
        harness_rate = 0.0
        drng = np.random.default_rng([seed, n, L, round(p * 1e6)])
        n_drop = round(p * n)
        dropped = np.zeros(n, dtype=bool)
        dropped[drng.choice(n, size=n_drop, replace=False)] = True
        alive = [u for u in range(n) if not dropped[u]]
        pairs_dropped = sum(1 for u in range(n) if dropped[u] for v in graph[u] if not dropped[v])
        expansions = len(alive) + pairs_dropped  # PRG expansions of the server's unmask
        # the survivors' plain sum (encoded and float64) and the light survivors' contribution
        t0 = time.perf_counter()
        plain = np.zeros(L, dtype=np.uint32)
        ref = np.zeros(L, dtype=np.float64)
        light_total = np.zeros(L, dtype=np.uint32) if run_server else None
        clipped = 0
        for u in alive:
            ids, rows = fedmf_upload(seed, u, table, pairs, bound)
            pos, x = _positions(ids, table.dim), rows.astype(np.float64).reshape(-1)
            ref[pos] += x
            if is_sampled[u]:
                plain += encoded[u]
                continue
            enc, c = fp.encode(x)
            clipped += c
            plain[pos] += enc
            if not run_server:
                continue
            light_total[pos] += enc
            light_total += secagg.prg(light_b[u], L)
            s_key = secagg.private_key(light_sk[u][1])
            for v in graph[u]:
                if is_sampled[v] or dropped[v]:  # masks with light survivors cancel in the sum
                    seed_uv = secagg.agree(s_key, pub[v][1], secagg.mask_info(ROUND, u, v))
                    if v > u:
                        light_total += secagg.prg(seed_uv, L)
                    else:
                        light_total -= secagg.prg(seed_uv, L)
        harness_rate += time.perf_counter() - t0
        rec: dict = {
            "table": table.name,
            "n_items": table.n_items,
            "dim": table.dim,
            "length": L,
            "users": n,
            "k": k,
            "t": t,
            "dropout": p,
            "dropped": n_drop,
            "dropped_when": DROPPED_WHEN,
            "clients_sampled": len(sampled),
            "clients_light": len(light_users),
            "dropped_pairs": pairs_dropped,
            "mask_expansions": expansions,
        }
        rate_all = {s: list(v) for s, v in server_all.items()}
        reveals: list[Message] = []
        result = None
        if run_server:
            inbox = []
            first_light = True
            for u in alive:
                if is_sampled[u]:
                    inbox.append(masked[u])
                else:
                    payload = ss.encode_masked(light_total) if first_light else zero_payload
                    first_light = False
                    inbox.append(
                        Message(ss.MASKED, node_id("user", u), server_id, ROUND, ss.MASK, payload)
                    )
            if first_light:
                assert not light_total.any()
            server.phase, rate_all["sum"] = ss.SURVIVORS, []
            for _ in range(repeats):
                server._secagg = dataclasses.replace(routed, views={})
                t0 = time.perf_counter()
                ss.server_stage(server, spec, ss.SURVIVORS, inbox)
                rate_all["sum"].append(time.perf_counter() - t0)
                out = drain(server)
            del inbox
            summed = server._secagg
            survivor_msgs = {index_of(m.dst): m for m in out}
            failed = server._secagg.failed
        else:
            told_of = {
                x: [u for u in routed.sources.get(x, ()) if not dropped[u]]
                for x in sampled
                if not dropped[x]
            }
            survivor_msgs = {
                x: Message(
                    ss.SURVIVOR_LIST,
                    server_id,
                    node_id("user", x),
                    ROUND,
                    ss.SURVIVORS,
                    ss.encode_survivors(len(alive), told),
                )  # fmt: skip
                for x, told in told_of.items()
            }
            failed = ""
        # --- secagg_unmask: sampled survivors through the handler, light survivors too (untimed)
        unmask_s, rev_b, surv_b = {}, {}, {}
        if not failed:
            for u in alive:
                if not is_sampled[u]:
                    continue
                node = users[u]
                node.phase = ss.UNMASK
                node._secagg.held = user_held[u]  # the reveal spends it; each rate starts anew
                m_in = survivor_msgs[u]
                surv_b[u] = len(m_in.payload)
                t0 = time.perf_counter()
                ss.user_stage(node, spec, ss.UNMASK, [m_in])
                unmask_s[u] = time.perf_counter() - t0
                m = drain_one(node, ss.REVEAL)
                rev_b[u] = len(m.payload)
                reveals.append(m)
            if run_server:
                t0 = time.perf_counter()
                for u in alive:
                    if is_sampled[u]:
                        continue
                    light_node.id = node_id("user", u)
                    light_node._secagg = ss.UserState(
                        ROUND, *light_sk[u], n1=n, held=dict(held[u]), masked_with=tuple(graph[u])
                    )
                    ss.user_stage(light_node, spec, ss.UNMASK, [survivor_msgs[u]])
                    reveals.append(drain_one(light_node, ss.REVEAL))
                harness_rate += time.perf_counter() - t0
        del survivor_msgs
        if run_server:
            server.phase, rate_all["unmask"] = "aggregate", []
            for _ in range(repeats):
                server._secagg = dataclasses.replace(summed)
                t0 = time.perf_counter()
                result = ss.server_sum(server, spec, reveals)
                rate_all["unmask"].append(time.perf_counter() - t0)
                drain(server)
            if result is None and not failed:
                why = ss.failure(server)
                failed = f"server_sum: {why[1] if why else 'secagg_failed'}"
        else:
            rate_all["sum"] = rate_all["unmask"] = []
        del reveals
        rec["client_seconds"] = {
            "keys": _median(client_s["keys"].values()),
            "share": _median(client_s["share"].values()),
            "mask": _median(client_s["mask"].values()),
            "unmask": _median(unmask_s.values()),
        }
        # the fastest repeat: the one least slowed by other jobs on a shared machine
        server_rate = {s: min(rate_all.get(s) or [None]) for s in SERVER_STAGES}
        rec["server_seconds"] = server_rate
        rec["server_seconds_runs"] = rate_all
        rec["server_source"] = {
            s: ("measured" if server_rate.get(s) is not None else "not run") for s in SERVER_STAGES
        }
        rec["bytes"] = {
            "upload": {
                "keys": _median(up["keys"].values()),
                "shares": _median(up["shares"].values()),
                "masked": _median(up["masked"].values()),
                "reveal": _median(rev_b.values()),
            },
            "download": {
                "neighbours": _median(down["neighbours"].values()),
                "shares_for": _median(down["shares_for"].values()),
                "survivors": _median(surv_b.values()),
            },
        }
        rec["bytes"]["upload_total"] = sum(v or 0 for v in rec["bytes"]["upload"].values())
        rec["bytes"]["download_total"] = sum(v or 0 for v in rec["bytes"]["download"].values())
        n3 = len(alive)
        exact = err = None
        secure = plain_dec = None
        plain_dec = fp.decode(plain)
        if result is not None:
            secure = result.parts[kind]
            exact = bool(result.n == n3 and np.array_equal(secure, plain_dec))
            err = float(np.max(np.abs(secure / n3 - ref / n3)))
        else:
            err = float(np.max(np.abs(plain_dec / n3 - ref / n3)))  # the encoding alone
        rec["unmasked"] = None if not run_server else (result is not None)
        rec["exact"] = exact
        rec["failure"] = failed or None
        rec["rejected"] = rejected[0]
        rec["fixed_point"] = {
            "bound": bound,
            "bits": fp.bits,
            "resolution": fp.resolution,
            "clipped": clipped,
            "max_abs_error_of_mean": err,
            "error_over_half_resolution": err / (fp.resolution / 2),
            "source": "secure sum" if result is not None else "encoding alone (no masks)",
        }
        rec["harness_seconds"] = harness + harness_rate
        rec["wall_seconds"] = time.perf_counter() - t_rate
        results.append(RoundResult(rec, secure, plain_dec))
    return results


def failure_probability(n: int, k: int, t: int, p: float, trials: int, seed: int = 0) -> float:
    """The probability that a round of ``n`` users on H(k, n) cannot be unmasked when round(p·n)
    users drawn at random drop after sharing: some survivor, or some dropped user a survivor
    masked with, has fewer than ``t`` surviving neighbours (Monte Carlo over ``trials`` drop
    sets; the graph's random cycle order is absorbed by the random drop set)."""
    n_drop = round(p * n)
    if n_drop == 0:
        return 0.0
    rng = np.random.default_rng([seed, n, k, t, n_drop])
    fails, batch = 0, max(1, min(trials, 2_000_000 // n))
    for start in range(0, trials, batch):
        b = min(batch, trials - start)
        alive = np.argsort(rng.random((b, n)), axis=1) >= n_drop  # n_drop random users drop
        if k >= n - 1:  # everyone is everyone's neighbour
            surviving = alive.sum(axis=1, keepdims=True) - alive
        else:
            surviving = np.zeros((b, n), dtype=np.int32)
            for j in range(1, k // 2 + 1):
                surviving += np.roll(alive, j, axis=1)
                surviving += np.roll(alive, -j, axis=1)
        needed = alive | (surviving > 0)  # survivors' b_u; dropped users' s_u^SK where masked
        fails += int(np.count_nonzero((needed & (surviving < t)).any(axis=1)))
    return fails / trials


# --- what a user would send without secure aggregation -----------------------------------------
def plaintext_bytes(table: Table, pairs: int = 32) -> dict:
    """Bytes of one user's upload without secure aggregation: fedmf's 2P rows and FedLightGCN's
    rows at the table's median profile (protocols/sparse_rows.py encode_rows), and the whole
    table as fp32 (wire.encode_dense)."""
    from cluster import wire
    from protocols.fedmf import messages as msg
    from protocols.fedpergnn.config import FedPerGNNConfig
    from protocols.fedpergnn.messages import upload_rows
    from protocols.sparse_rows import rows_size

    ids, rows = fedmf_upload(0, 0, table, pairs, 1.0)
    c = FedPerGNNConfig()
    flg_rows = upload_rows(table.median_profile, table.n_items, c.negatives, c.pseudo_items)
    return {
        "fedmf_sparse": len(msg.encode_item_grads(ids, rows)),
        "fedmf_rows": len(ids),
        "fedlightgcn_sparse": rows_size(flg_rows, table.dim),
        "fedlightgcn_rows": flg_rows,
        "fedlightgcn_assumption": (
            f"median profile {table.median_profile} items + min(negatives {c.negatives}, rest) "
            f"+ pseudo items {c.pseudo_items} (protocols/fedpergnn/messages.py upload_rows)"
        ),
        "dense_fp32": wire.dense_size((table.n_items, table.dim)),
    }


def _expansion(rec: dict, plain: dict) -> dict:
    up = rec["bytes"]["upload_total"]
    return {
        "vs_fedmf_sparse": up / plain["fedmf_sparse"],
        "vs_fedlightgcn_sparse": up / plain["fedlightgcn_sparse"],
        "vs_dense_fp32": up / plain["dense_fp32"],
    }


# --- extrapolation ----------------------------------------------------------------------------------
def extrapolate(cells: list[dict]) -> None:
    """Fill the server's sum and unmask of the cells that did not run them from the same table's
    largest measured n at the same dropout: unmask per mask expansion, sum per survivor."""
    for rec in cells:
        if rec["server_seconds"]["unmask"] is not None:
            continue
        refs = [
            r
            for r in cells
            if r["table"] == rec["table"]
            and r["dropout"] == rec["dropout"]
            and r["server_seconds"]["unmask"] is not None
            and r["unmasked"]
        ]
        if not refs:
            continue
        ref = max(refs, key=lambda r: r["users"])
        scale = _scale(ref, rec)
        for stage in ("sum", "unmask"):
            rec["server_seconds"][stage] = ref["server_seconds"][stage] * scale[stage]
            rec["server_source"][stage] = "extrapolated"
        rec["extrapolated_from"] = {"users": ref["users"], **scale}


def _scale(ref: dict, rec: dict) -> dict:
    return {
        "sum": (rec["users"] - rec["dropped"]) / (ref["users"] - ref["dropped"]),
        "unmask": rec["mask_expansions"] / ref["mask_expansions"],
    }


def extrapolation_check(cells: list[dict]) -> list[dict]:
    """Where a table has two measured sizes: the larger one's server seconds predicted from the
    smaller one as :func:`extrapolate` would, beside the measured seconds."""
    out = []
    for rec in cells:
        if rec["server_source"]["unmask"] != "measured" or not rec["unmasked"]:
            continue
        smaller = [
            r
            for r in cells
            if r["table"] == rec["table"]
            and r["dropout"] == rec["dropout"]
            and r["users"] < rec["users"]
            and r["server_source"]["unmask"] == "measured"
            and r["unmasked"]
        ]
        if not smaller:
            continue
        ref = max(smaller, key=lambda r: r["users"])
        scale = _scale(ref, rec)
        out.append(
            {
                "table": rec["table"],
                "dropout": rec["dropout"],
                "from_users": ref["users"],
                "to_users": rec["users"],
                **{
                    f"{s}_predicted_s": ref["server_seconds"][s] * scale[s]
                    for s in ("sum", "unmask")
                },
                **{f"{s}_measured_s": rec["server_seconds"][s] for s in ("sum", "unmask")},
            }
        )
    return out


# --- the tables --------------------------------------------------------------------------------------
def _ms(x) -> str:
    return "—" if x is None else f"{1e3 * x:.3g}"


def _s(rec: dict, stage: str) -> str:
    x = rec["server_seconds"][stage]
    if x is None:
        return "—"
    text = f"{x:.3g}" if x < 100 else f"{x:.0f}"
    return ("~" + text) if rec["server_source"][stage] == "extrapolated" else text


def _pfail(rec: dict) -> str:
    fp = rec.get("failure_probability")
    return "—" if fp is None else f"{fp['estimate']:.1%}"


def _kib(b) -> str:
    if b is None:
        return "—"
    return f"{b / 1024:,.1f}" if b < 10 * 2**20 else f"{b / 2**20:,.1f} Mi"


def time_table(cells: list[dict]) -> str:
    head = (
        "| table (items × dim) | n | k / t | dropout | client ms: keys / share / mask / unmask "
        "| server s: graph / route / sum / unmask | unmasked | P(fail) | max err of mean (× res/2) |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in cells:
        c = r["client_seconds"]
        unmasked = {True: "yes, exact" if r["exact"] else "yes, NOT exact", False: "**no**"}.get(
            r["unmasked"], "not run"
        )
        fx = r["fixed_point"]
        lines.append(
            f"| {r['table']} ({r['n_items']:,} × {r['dim']}) | {r['users']:,} | {r['k']} / {r['t']} "
            f"| {r['dropout']:.0%} ({r['dropped']:,}) "
            f"| {' / '.join(_ms(c[s]) for s in USER_STAGES)} "
            f"| {' / '.join(_s(r, s) for s in SERVER_STAGES)} | {unmasked} | {_pfail(r)} "
            f"| {fx['max_abs_error_of_mean']:.2e} ({fx['error_over_half_resolution']:.2f}) |"
        )
    return "\n".join(lines)


def bytes_table(cells: list[dict], plain: dict) -> str:
    head = (
        "| table | n | up KiB: keys / shares / masked / reveal | down KiB: neighbours / shares "
        "/ survivors | up total | plaintext up: fedmf sparse / FedLightGCN sparse / dense fp32 "
        "| expansion of up vs fedmf / FedLightGCN / dense |"
    )
    lines = [head, "|" + "---|" * 7]
    for r in cells:
        if r["dropout"] != 0:
            continue
        b, pl, e = r["bytes"], plain[r["table"]], r["expansion"]
        lines.append(
            f"| {r['table']} | {r['users']:,} "
            f"| {' / '.join(_kib(b['upload'][s]) for s in UPLOADS)} "
            f"| {' / '.join(_kib(b['download'][s]) for s in DOWNLOADS)} "
            f"| {_kib(b['upload_total'])} "
            f"| {_kib(pl['fedmf_sparse'])} / {_kib(pl['fedlightgcn_sparse'])} "
            f"({pl['fedlightgcn_rows']:,} rows) / {_kib(pl['dense_fp32'])} "
            f"| {e['vs_fedmf_sparse']:,.0f}× / {e['vs_fedlightgcn_sparse']:.2f}× "
            f"/ {e['vs_dense_fp32']:.3f}× |"
        )
    return "\n".join(lines)


def bonawitz_table(b: dict) -> str:
    return "\n".join(
        [
            "| configuration | ours: upload / 16-bit plaintext | ours: (upload + download) / "
            "16-bit plaintext | ours: upload / fp32 plaintext | Bonawitz et al. 2017 |",
            "|---|---|---|---|---|",
            f"| n = {b['users']:,}, L = 2^20, 16-bit inputs (k = {b['k']}, t = {b['t']}) "
            f"| {b['expansion_upload']:.3f}× | {b['expansion_total']:.3f}× "
            f"| {b['expansion_upload_vs_fp32']:.3f}× | {BONAWITZ['expansion']}× |",
        ]
    )


# --- the command ----------------------------------------------------------------------------------
def load_tables(names: list[str], quick: bool) -> tuple[dict[str, Table], dict]:
    """The tables by name: constants with --quick, else n_items and the median profile from the
    loaded datasets (where they load; else the constants, said so)."""
    tables, source = {}, {}
    for name in names:
        const = TABLES[name]
        if quick:
            tables[name], source[name] = const, "constant (--quick)"
            continue
        try:
            from data.registry import default_data_dir, load_dataset

            ds = load_dataset(name, default_data_dir())
            prof = [len(x) for x in ds.train.items_by_user(ds.n_users)]
            tables[name] = Table(name, int(ds.n_items), const.dim, int(np.median(prof)))
            source[name] = f"loaded ({ds.n_users:,} users, {len(ds.train):,} train interactions)"
        except (OSError, ValueError) as e:
            tables[name], source[name] = const, f"constant (dataset not loaded: {e})"
    return tables, source


def code_version() -> dict:
    """The commit, and digests of the sources the figures depend on (they may be uncommitted)."""
    import hashlib
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = ""
    files = ("privacy/secagg.py", "nodes/secure_sum.py", "protocols/fedmf/roles.py")
    return {
        "commit": commit or None,
        "sha256": {
            f: hashlib.sha256((root / f).read_bytes()).hexdigest()[:16]
            for f in files
            if (root / f).exists()
        },
    }


def main(argv=None) -> int:
    return run_main(MODULE, _main, argv)


def _main(argv) -> int:
    p = ArgumentParser(MODULE, __doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="n in {20, 100}, ml-100k, every client")
    p.add_argument("--users", type=int, nargs="+", default=None, help="users per round")
    p.add_argument("--tables", nargs="+", choices=sorted(TABLES), default=None)
    p.add_argument("--dropouts", type=float, nargs="+", default=list(DROPOUTS))
    p.add_argument("--clients", type=int, default=None, help="clients run in full (default 32)")
    p.add_argument(
        "--server-limit", type=float, default=SERVER_LIMIT, help="n·L above: extrapolate"
    )
    p.add_argument("--no-bonawitz", action="store_true", help="skip the n=1024, L=2^20 row")
    p.add_argument("--repeats", type=int, default=3, help="runs of each server stage (fastest)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None, help="benchmarks/out/NAME.json (default secagg[-quick])")
    p.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = p.parse_args(argv)
    users = args.users or list(QUICK_USERS if args.quick else FULL_USERS)
    names = args.tables or (["ml-100k"] if args.quick else list(TABLES))
    clients = args.clients if args.clients is not None else (max(users) if args.quick else 32)
    name = args.name or result_name("secagg", quick=args.quick)
    if min(users) < 3 or clients < 1 or args.repeats < 1:
        raise UsageError("--users must be >= 3, --clients and --repeats >= 1")
    if any(not 0 <= d < 1 for d in args.dropouts):
        raise UsageError("--dropouts must be in [0, 1)")
    bonawitz = not (args.quick or args.no_bonawitz)
    claim_result(name, write=args.write)  # a recorded result is refused before anything runs

    from privacy import secagg

    start = time.perf_counter()
    tables, source = load_tables(names, args.quick)
    plain = {nm: plaintext_bytes(tb) for nm, tb in tables.items()}
    cells: list[dict] = []
    for nm, tb in tables.items():
        for n in sorted(users):
            run_server = n * tb.length <= args.server_limit
            t0, load = time.perf_counter(), os.getloadavg()[0]
            for res in secagg_round(
                n, tb, args.dropouts, clients=clients, seed=args.seed, run_server=run_server,
                repeats=args.repeats,
            ):  # fmt: skip
                rec = res.record
                rec["load_average"] = [round(load, 2), round(os.getloadavg()[0], 2)]
                trials = max(2000, 4 * 10**7 // (n * max(rec["k"], 1)))
                rec["failure_probability"] = {
                    "estimate": failure_probability(n, rec["k"], rec["t"], rec["dropout"], trials),
                    "trials": trials,
                    "how": "Monte Carlo over random drop sets of this size on H(k, n)",
                }
                rec["expansion"] = _expansion(rec, plain[nm])
                cells.append(rec)
                unmask = rec["server_seconds"]["unmask"]
                print(
                    f"{nm} n={n:,} dropout {rec['dropout']:.0%}: unmasked {rec['unmasked']}, "
                    f"exact {rec['exact']}, server unmask "
                    + ("not run" if unmask is None else f"{unmask:.3g} s")
                    + f" ({rec['wall_seconds']:.1f} s)",
                    flush=True,
                )
            print(f"  {nm} n={n:,}: {time.perf_counter() - t0:.1f} s in all", flush=True)
    check = extrapolation_check(cells)
    extrapolate(cells)
    figures: dict = {
        "what": "one SecAgg+ round in-process (no Ray), fedmf's declared sum (item_grads over the "
        "whole item table), default degree k and threshold t (privacy/secagg.py)",
        "dropped_when": DROPPED_WHEN,
        "clients_sampled": clients,
        "server_repeats": args.repeats,
        "server_limit": args.server_limit,
        "tables": {
            nm: {**dataclasses.asdict(tb), "source": source[nm]} for nm, tb in tables.items()
        },
        "plaintext_bytes": plain,
        "cells": cells,
        "extrapolation_check": check,
    }
    if bonawitz:
        tb = BONAWITZ_TABLE
        t0 = time.perf_counter()
        (res,) = secagg_round(
            BONAWITZ["users"], tb, (0.0,), clients=clients, seed=args.seed, repeats=args.repeats
        )
        rec = res.record
        raw16 = BONAWITZ["length"] * BONAWITZ["input_bits"] // 8
        up, dn = rec["bytes"]["upload_total"], rec["bytes"]["download_total"]
        figures["bonawitz"] = {
            **rec,
            "plaintext_16bit_bytes": raw16,
            "expansion_upload": up / raw16,
            "expansion_total": (up + dn) / raw16,
            "expansion_upload_vs_fp32": up / (4 * BONAWITZ["length"]),
            "paper": BONAWITZ,
            "note": "our masked words are 32 bits whatever the input width (FixedPoint over "
            "Z_2^32); Bonawitz et al. size the modulus to the sum of n 16-bit inputs",
        }
        print(f"bonawitz n=1024 L=2^20: {time.perf_counter() - t0:.1f} s", flush=True)
    figures["wall_s"] = round(time.perf_counter() - start, 1)
    figures["code"] = code_version()
    figures["defaults"] = {
        str(n): {
            "k": secagg.default_degree(n),
            "t": secagg.default_threshold(secagg.default_degree(n)),
        }
        for n in sorted(users)
    }
    path = write_result(name, figures, echo=False, write=args.write)
    print()
    print(time_table(cells))
    print()
    print(bytes_table(cells, plain))
    if bonawitz:
        print()
        print(bonawitz_table(figures["bonawitz"]))
    if check:
        print()
        for c in check:
            print(
                f"extrapolation check {c['table']} {c['dropout']:.0%}: {c['from_users']:,} -> "
                f"{c['to_users']:,} users, unmask predicted {c['unmask_predicted_s']:.2f} s, "
                f"measured {c['unmask_measured_s']:.2f} s; sum predicted {c['sum_predicted_s']:.2f} "
                f"s, measured {c['sum_measured_s']:.2f} s"
            )
    print(f"\n{shown_path(path)} ({figures['wall_s']} s)")
    bad = [c for c in cells if c["unmasked"] is False or c["exact"] is False]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
