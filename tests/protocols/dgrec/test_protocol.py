"""DGREC as a distributed program on a real local Ray instance: the gossip delivers every encoded
gradient of a neighbourhood along the sampled tree exactly as Algorithm 2 schedules it, bytes
equal the wire formula and stay under the paper's worst case, a user's private (unpublicized)
items never travel, results do not depend on placement, and a small run beats popularity."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
from dp_accounting import dp_event

from cluster import wire
from cluster.message import index_of
from data.synthetic import synthetic
from engine import deploy, run_rounds
from models.baselines import popularity_metrics
from privacy.accountant import epsilon_of, randomized_response_event
from protocols.base import ConfigError, build_config
from protocols.dgrec.messages import decode_share, decode_status, share_message_size
from protocols.dgrec.protocol import DGREC
from protocols.dgrec.sampling import gossip_rounds, local_edges, worst_case_bits
from protocols.dlgnn.protocol import DLGNN

pytestmark = pytest.mark.ray

SMALL = {"dim": 4, "n_interests": 2, "hidden": 4, "hops": 2, "n_u": 2, "neighbourhoods": 6}


def small_dataset(n_users=12, n_items=40, seed=0):
    return synthetic(n_users=n_users, n_items=n_items, avg_interactions=8, seed=seed)


def run(
    params,
    placement="packed",
    hosts=1,
    rounds=2,
    dataset=None,
    tap=False,
    inspect=False,
    cls=DGREC,
    snapshot=False,
):
    ds = dataset or small_dataset()
    protocol = cls(ds, build_config(cls.Config, {**SMALL, **params}), seed=3)
    dep = deploy(protocol, placement, hosts, tap=tap)
    try:
        done = run_rounds(protocol, dep, rounds, eval_every=0)  # evaluated after the last
        trains = [r.train for r in done]
        metrics = done[-1].metrics
        out = {
            "protocol": protocol,
            "train": trains,
            "metrics": metrics,
            "ledger": dep.ledger.rows(),
            "tapped": dep.tapped,
            "hosts": dep.n_hosts,
            "privacy": protocol.privacy(),
            "pending": dep.has_pending(),
        }
        if inspect:
            users = [s.nid for s in protocol.node_specs()]
            out["last"] = {index_of(u): dep.call(u, "get_last_round") for u in users}
            out["public"] = {index_of(u): dep.call(u, "get_public_items") for u in users}
            out["params"] = {index_of(u): dep.call(u, "get_parameters") for u in users}
        if snapshot:
            out["snapshot"] = dep.snapshot()
        return out
    finally:
        dep.close()


def trees_of(last: dict, round_: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Root → (members, (parent, child) edges) of the neighbourhoods sampled in ``round_``."""
    parent = {u: r["parent"] for u, r in last.items() if r and r["round"] == round_}

    def root(u):
        while parent[u] is not None:
            u = parent[u]
        return u

    groups: dict[int, list[int]] = defaultdict(list)
    for u in sorted(parent):
        groups[root(u)].append(u)
    return {
        r: (
            np.array(members),
            np.array([(parent[u], u) for u in members if parent[u] is not None]).reshape(-1, 2),
        )
        for r, members in groups.items()
    }


def share_deliveries(tapped, round_: int, hops: int) -> set[tuple[int, int, int, int]]:
    """(step, src, dst, origin) of every encoded gradient sent in ``round_``."""
    out = set()
    for m in tapped:
        if m.kind != "share" or m.round != round_:
            continue
        step = 1 if m.phase == "train" else int(m.phase.split("/")[1])
        assert 1 <= step <= 2 * hops
        for origin, _ in decode_share(m.payload):
            out.add((step, index_of(m.src), index_of(m.dst), origin))
    return out


def test_gossip_completes_and_follows_algorithm2(ray_local):
    out = run({}, rounds=1, tap=True, inspect=True)
    assert not out["pending"]
    trees = trees_of(out["last"], 0)
    assert trees, "no neighbourhood was sampled"
    assert any(len(m) > 2 for m, _ in trees.values())
    hops = SMALL["hops"]
    expected = set()
    for members, edges in trees.values():
        assert len(members) <= 1 + SMALL["n_u"] + SMALL["n_u"] ** 2
        for u in members:  # after 2H steps every member holds every gradient of its tree
            assert out["last"][u]["held"] == sorted(members.tolist())
            assert out["last"][u]["hop"] <= hops
        schedule = gossip_rounds(local_edges(members, edges), len(members), 2 * hops)
        for step, deliveries in enumerate(schedule, start=1):
            expected |= {(step, *members[d[:2]].tolist(), members[d[2]]) for d in deliveries}
    assert share_deliveries(out["tapped"], 0, hops) == expected
    assert out["train"][0]["held_mean"] == pytest.approx(
        sum(len(m) ** 2 for m, _ in trees.values()) / sum(len(m) for m, _ in trees.values())
    )


def test_bytes_equal_wire_formula_and_stay_under_worst_case(ray_local):
    out = run({}, rounds=2, tap=True, inspect=True)
    protocol = out["protocol"]
    n_s = protocol.n_s
    # the ledger is exactly the encoded payloads that were sent
    assert sum(r["bytes"] for r in out["ledger"]) == sum(len(m.payload) for m in out["tapped"])
    for m in out["tapped"]:
        if m.kind == "share":
            fields = decode_share(m.payload)
            assert len(m.payload) == share_message_size(len(fields), n_s)
            for _, enc in fields:  # bit-packed: ceil(n_s / 8) bytes + 5 per gradient
                assert len(enc) == wire.signs_size(n_s) == 5 + math.ceil(n_s / 8)
                assert wire.decode_signs(enc).shape == (n_s,)
    # last round: bytes from Algorithm 2's schedule on the sampled trees
    hops = SMALL["hops"]
    predicted = 0
    for members, edges in trees_of(out["last"], 1).values():
        schedule = gossip_rounds(local_edges(members, edges), len(members), 2 * hops)
        for deliveries in schedule:
            per_message = defaultdict(int)
            for src, dst, _ in deliveries.tolist():
                per_message[(src, dst)] += 1
            predicted += sum(share_message_size(k, n_s) for k in per_message.values())
    measured = sum(r["bytes"] for r in out["ledger"] if r["round"] == 1 and r["kind"] == "share")
    assert measured == predicted
    worst = worst_case_bits(hops, SMALL["n_u"], n_s) / 8
    for row in out["train"]:
        assert row["members"] > 0
        assert row["share_bytes_per_member"] <= worst
        assert row["worst_case_bytes_per_user"] == worst


def test_private_items_never_leave_a_user(ray_local):
    ds = small_dataset()
    out = run({"public_ratio": 0.5}, rounds=2, dataset=ds, tap=True, inspect=True)
    train = ds.train.items_by_user(ds.n_users)
    test = ds.test.items_by_user(ds.n_users)
    n_s = out["protocol"].n_s
    kinds = set()
    for m in out["tapped"]:
        kinds.add(m.kind)
        u = index_of(m.src)
        private = np.setdiff1d(train[u], out["public"][u])
        if m.kind == "public_items":
            ids = wire.decode_ids(m.payload)
            assert np.array_equal(ids, out["public"][u])
            assert not np.isin(ids, private).any() and not np.isin(ids, test[u]).any()
            assert index_of(m.dst) in out["protocol"].graph[u]
        elif m.kind == "status":
            decode_status(m.payload)
            assert len(m.payload) == wire.dense_size((2,)) == 15
        elif m.kind == "invite":
            assert wire.decode_ids(m.payload).shape == (1,)
        elif m.kind == "join":
            assert wire.decode_blob(m.payload) == b""
        elif m.kind == "share":
            for _, enc in decode_share(m.payload):
                assert wire.peek_tag(enc) == "signs" and len(enc) == wire.signs_size(n_s)
        else:
            raise AssertionError(f"unexpected message kind {m.kind}")
    assert kinds == {"public_items", "status", "invite", "join", "share"}
    for u in out["public"]:  # ρ = 0.5 really keeps half of the items private
        assert len(out["public"][u]) == round(0.5 * len(train[u]))


def test_no_public_items_sent_without_neighbour_items(ray_local):
    out = run({"use_public": False}, rounds=1, tap=True)
    assert "public_items" not in {m.kind for m in out["tapped"]}


@pytest.mark.slow  # an actor per participant (dedicated): CI runs `-m slow`
@pytest.mark.parametrize(
    "cls,mechanism",
    [
        (DGREC, "onebit"),
        (DGREC, "laplace"),  # the same choreography with another encoder
        (DLGNN, "laplace"),  # same choreography as DGREC's
    ],
)
def test_placement_invariance(ray_local, cls, mechanism):
    params, ds = {"mechanism": mechanism}, small_dataset(n_users=8)
    runs = [
        run(params, p, h, dataset=ds, cls=cls)
        for p, h in (("dedicated", 1), ("packed", 1), ("packed", 3))
    ]
    assert runs[0]["hosts"] > runs[2]["hosts"] > runs[1]["hosts"]
    for other in runs[1:]:
        assert other["metrics"] == runs[0]["metrics"]
        assert other["train"] == runs[0]["train"]
        assert other["ledger"] == runs[0]["ledger"]
        assert other["privacy"] == runs[0]["privacy"]
    assert all(math.isfinite(v) for v in runs[0]["metrics"].values())


def test_batched_users_get_what_they_get_one_by_one(ray_local):
    """A host's users trained and evaluated in one batched pass (default) end with the very
    parameters, messages and metrics of the one-by-one path (``batch_users = False``)."""
    ds = small_dataset(n_users=10)
    one_by_one = run({"batch_users": False}, dataset=ds, inspect=True)
    batched = run({}, dataset=ds, inspect=True)
    assert batched["train"][0]["members"] > 1  # the batch really held several users
    for u, params in one_by_one["params"].items():
        assert np.array_equal(batched["params"][u], params), u
    assert batched["metrics"] == one_by_one["metrics"]
    assert batched["train"] == one_by_one["train"]
    assert batched["ledger"] == one_by_one["ledger"]


@pytest.mark.parametrize("cls", [DGREC, DLGNN])
def test_checkpoint_holds_each_users_parameters_once(ray_local, cls):
    """A checkpoint stores each user's model about once: its parameters must not be views of
    one flat vector (pickling a view writes the whole vector, once per parameter tensor)."""
    ds = small_dataset(n_users=12, n_items=300)
    out = run({"dim": 16}, rounds=2, dataset=ds, snapshot=True, cls=cls)
    assert out["train"][-1]["members"] > 0  # some users stepped (their parameters were rewritten)
    model_bytes = out["protocol"].n_s * 4  # float32, shared part; DLGNN adds a d-vector
    stored = sum(len(blob) for blob in out["snapshot"]["hosts"])
    assert stored < ds.n_users * 2 * model_bytes, (stored, ds.n_users * model_bytes)


@pytest.mark.parametrize("mechanism", ["float", "laplace"])
def test_dlgnn_shares_item_table_gradients_and_keeps_the_user_embedding(ray_local, mechanism):
    ds = small_dataset()
    out = run({"mechanism": mechanism}, rounds=2, dataset=ds, tap=True, inspect=True, cls=DLGNN)
    protocol = out["protocol"]
    assert protocol.n_s == ds.n_items * SMALL["dim"]  # the item table only, no user embedding
    kinds = {m.kind for m in out["tapped"]}
    assert kinds == {"status", "invite", "join", "share"}  # no publicized items
    shares = [m for m in out["tapped"] if m.kind == "share"]
    assert shares
    origins_seen = set()
    for m in shares:
        for origin, enc in decode_share(m.payload):
            origins_seen.add(origin)
            vec = wire.decode_dense(enc)
            assert vec.shape == (protocol.n_s,) and vec.dtype == np.float32
    assert origins_seen
    grads = [wire.decode_dense(enc) for m in shares for _, enc in decode_share(m.payload)]
    if mechanism == "float":  # raw gradients: rows of items a user never touched are exactly 0
        assert any((g.reshape(ds.n_items, -1) == 0).all(axis=1).any() for g in grads)
    else:  # clipped + Laplace: every element is noisy
        assert all(np.count_nonzero(g) == g.size for g in grads)
        assert out["privacy"]["epsilon_per_element"] == pytest.approx(1.0)
    # every user drew its own private embedding (the first d parameters): all differ
    user_embs = np.stack([p[: SMALL["dim"]] for p in out["params"].values()])
    assert len(np.unique(user_embs.round(6), axis=0)) == len(user_embs)
    assert out["train"][-1]["members"] > 0 and math.isfinite(out["train"][-1]["loss"])


def test_privacy_composes_shares_with_dp_accounting(ray_local):
    out = run({"beta": 1.0}, rounds=2)
    priv, n_s = out["privacy"], out["protocol"].n_s
    assert priv["epsilon_per_element"] == 1.0 and priv["epsilon_per_vector"] == n_s
    shares = priv["shares_max"]
    assert 1 <= shares <= 2
    composed = epsilon_of(
        dp_event.SelfComposedDpEvent(randomized_response_event(1.0), n_s), shares, 1e-5
    )
    assert priv["epsilon"] == pytest.approx(composed)
    assert priv["epsilon"] <= shares * n_s * 1.0  # tighter than basic composition
    assert priv["rdp_per_element_order_1.5"] == pytest.approx(0.6273, abs=1e-4)


@pytest.mark.slow  # an accuracy check, 60 rounds (12–17 s): `.ci/run` runs `-m slow` too
def test_small_synthetic_run_beats_random(ray_local):
    ds = synthetic(n_users=30, n_items=60, avg_interactions=10, seed=0)
    params = {"dim": 16, "n_interests": 6, "hidden": 32, "lr": 0.05}
    out = run(params, rounds=60, dataset=ds)
    train, test = ds.train.items_by_user(ds.n_users), ds.test.items_by_user(ds.n_users)
    users = [u for u in range(ds.n_users) if len(test[u])]
    random_recall = np.mean([min(1.0, 20 / (ds.n_items - len(train[u]))) for u in users])
    assert out["metrics"]["recall@20"] > random_recall


@pytest.mark.slow
def test_small_synthetic_run_beats_popularity(ray_local):
    ds = synthetic(n_users=30, n_items=60, avg_interactions=10, seed=0)
    params = {"dim": 16, "n_interests": 6, "hidden": 32, "lr": 0.05}
    out = run(params, rounds=200, dataset=ds)
    pop = popularity_metrics(ds, k=20)
    assert out["metrics"]["recall@20"] > pop["recall@20"]
    assert out["metrics"]["ndcg@20"] > pop["ndcg@20"]


@pytest.mark.parametrize(
    "key,value",
    [
        ("mechanism", "gauss"),
        ("hops", 0),
        ("n_u", 0),
        ("public_ratio", 1.5),
        ("beta", 0.0),
        ("model", "mf"),
        ("loss_reduction", "max"),
        ("validation", 1.0),
        ("validate_every", 0),
        ("lr_decay", -0.1),
        ("lr_cooldown_rounds", -1),
    ],
)
def test_bad_config_names_the_parameter(key, value):
    with pytest.raises(ConfigError, match=key):
        build_config(DGREC.Config, {key: value})


def test_step_size_decays_then_cools_down_to_zero():
    c = build_config(DGREC.Config, {"lr": 0.5, "lr_decay": 0.1, "lr_cooldown_at": 10})
    assert [c.step_size(t) for t in (0, 10)] == [0.5, 0.25]  # no cooldown without its length
    c = build_config(DGREC.Config, {"lr": 0.5, "lr_cooldown_at": 10, "lr_cooldown_rounds": 4})
    assert [c.step_size(t) for t in (0, 9, 10, 11, 13, 14, 20)] == [
        0.5,
        0.5,
        0.5,
        0.375,
        0.125,
        0.0,
        0.0,
    ]


def test_held_out_items_never_leave_a_user_nor_count_as_test_candidates(ray_local):
    """``validation``: a user's held-out items are neither trained on nor publicized (ρ = 1
    publicizes every item it trains on) and the evaluation does not rank them."""
    ds = small_dataset()
    out = run({"validation": 0.25, "validate_every": 1}, rounds=1, dataset=ds, inspect=True)
    train = ds.train.items_by_user(ds.n_users)
    for u, public in out["public"].items():
        held = round(0.25 * len(train[u]))
        assert len(public) == len(train[u]) - held and np.isin(public, train[u]).all()
    assert out["train"][0]["kept_round"] == 0 and "valid_ndcg" in out["metrics"]


def test_evaluation_ranks_with_the_kept_model():
    """A user keeps a copy of its model when its NDCG@K on its held-out items is at least its best
    so far, and is evaluated with the kept copy, not with its current model."""
    import torch

    from nodes.node import NodeContext
    from protocols.dgrec.ranking import rank

    ds = small_dataset(n_users=16, n_items=60)
    protocol = DGREC(ds, build_config(DGREC.Config, {**SMALL, "validation": 0.3}), seed=3)
    ctx = NodeContext(3, torch.device("cpu"), protocol.shared())
    users = [s.cls(s.nid, ctx, **s.kwargs) for s in protocol.node_specs()]
    none = [[] for _ in users]

    def evaluate():
        rank(users, none, "eval")
        return [u._drain()[1]["ndcg@20"] for u in users]

    before = evaluate()
    for u in users:
        u.round = 0
    rank(users, none, "validate")  # the first check keeps every model
    assert all(u.best_round == 0 and u.best_model is not None for u in users)
    with torch.no_grad():  # every model moves on
        for u in users:
            for p in u.model.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(7)))
            u.round = 1
    for i, u in enumerate(users):  # half do worse on their held-out items, half better
        u.keep_if_best(u.best_score - 1.0 if i % 2 else u.best_score + 1.0)
    after = evaluate()
    for i, u in enumerate(users):
        kept = list(u.best_model.parameters())
        if i % 2:
            assert u.best_round == 0 and after[i] == before[i]
            assert not all(torch.equal(a, b) for a, b in zip(kept, u.model.parameters()))
        else:
            assert u.best_round == 1
            assert all(torch.equal(a, b) for a, b in zip(kept, u.model.parameters()))
    assert after != before
