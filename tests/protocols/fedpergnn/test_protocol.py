"""fedpergnn / fedlightgcn on a real local Ray instance: graph expansion against brute force,
bytes per kind against the formula, placement invariance, no raw item id in any payload, a
tiny run beating popularity, the privacy report; and (Ray-free) batched == one-by-one local
training."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch
from conftest import start_test_ray

from cluster import wire
from cluster.message import Message, index_of
from data.synthetic import synthetic
from engine import deploy, rounds, run_rounds
from models.baselines import popularity_metrics
from nodes.node import NodeContext
from privacy import oprf
from privacy.leakage import dictionary_attack
from protocols import get_protocol
from protocols.base import ConfigError, build_config
from protocols.fedpergnn import messages as msg
from protocols.fedpergnn.protocol import FedLightGCN, FedPerGNN
from protocols.fedpergnn.roles import User

N_USERS, N_ITEMS, DIM = 10, 40, 8
BASE = {
    "dim": DIM,
    "users_per_round": 4,
    "negatives": 6,
    "pseudo_items": 3,
    "key_bits": 1024,
    "max_neighbors": 100,
}


def small_dataset(seed=0, n_users=N_USERS, n_items=N_ITEMS, avg=6):
    return synthetic(n_users=n_users, n_items=n_items, avg_interactions=avg, seed=seed)


def make(params, dataset=None, seed=3, cls=FedPerGNN):
    ds = dataset or small_dataset()
    return cls(ds, build_config(cls.Config, {**BASE, **params}), seed=seed)


# Every deployment in this file but the slow placement test's packs the users on one host: 4
# hosts with the server's, the key server's and the matcher's. A released deployment's host actors
# are reset and reused by the next one of the same shape; starting them (a Python process with
# torch each) dominates the cost of these tests on a small machine.


@pytest.fixture(scope="module")
def shared_run():
    """One tapped 2-round run (+ evaluation) shared by the scans below."""
    start_test_ray()
    ds = small_dataset()
    protocol = make({"clip": 1e-3, "laplace_scale": 10.0}, ds)
    dep = deploy(protocol, "packed", 1, tap=True)
    try:
        initial = {u: dep.call(f"user/{u}", "get_embedding") for u in protocol.users}
        # round 1 is not an expansion round (epoch = ceil(10/4) = 3 rounds); evaluated after it
        for res in rounds(protocol, dep, 2, eval_every=0):
            if res.round == 0:
                views = {u: dep.call(f"user/{u}", "neighbour_view") for u in protocol.users}
        return {
            "protocol": protocol,
            "dataset": ds,
            "initial": initial,
            "views": views,
            "rows": dep.ledger.rows(),
            "tapped": dep.tapped,
        }
    finally:
        dep.close()


def brute_force_neighbours(train: list[np.ndarray]) -> dict[int, dict[int, list[int]]]:
    """For every user u: {v: sorted shared items} over all v != u sharing at least one item."""
    out = {}
    for u in range(len(train)):
        out[u] = {}
        for v in range(len(train)):
            shared = np.intersect1d(train[u], train[v])
            if v != u and shared.size:
                out[u][v] = shared.tolist()
    return out


# --------------------------------------------------------------------------- config


def test_registry_and_config_errors():
    assert get_protocol("fedpergnn") is FedPerGNN and get_protocol("fedlightgcn") is FedLightGCN
    with pytest.raises(ConfigError, match="backbone"):
        build_config(FedPerGNN.Config, {"backbone": "gcn"})
    with pytest.raises(ConfigError, match="negatives"):
        build_config(FedPerGNN.Config, {"negatives": 0})
    with pytest.raises(ConfigError, match="key_bits"):
        build_config(FedPerGNN.Config, {"key_bits": 512})


# --------------------------------------------------------------------------- batched == alone


def _users(ds, cfg, seed, ids):
    train = ds.train.items_by_user(ds.n_users)
    ctx = NodeContext(seed, torch.device("cpu"), FedPerGNN(ds, cfg, seed).shared())
    rng = np.random.default_rng(11)
    nodes = []
    for u in ids:
        n = User(f"user/{u}", ctx, train[u], np.zeros(0, dtype=np.int64))
        k = len(n.train_items)
        n_nbrs = int(rng.integers(0, 4))
        v = np.repeat(np.arange(n_nbrs), 2)
        i = rng.integers(0, k, size=len(v))
        keep = np.unique(np.stack([v, i], 1), axis=0)
        n.nbr_links = (keep[:, 0], keep[:, 1])
        n.nbr_emb = torch.from_numpy(rng.normal(size=(n_nbrs, cfg.dim)).astype(np.float32))
        nodes.append(n)
    return nodes


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_batched_training_equals_one_by_one(seed):
    """A user's upload and new embedding do not depend on which users share its batched pass:
    bit for bit, for batches of 3–29 users whose element counts put each user's pairs at every
    offset of ATen's SIMD blocks (softplus or sigmoid in the loss failed this: see models/bpr.py)."""
    n_users, n_items = 40, 60
    ds = small_dataset(seed=seed, n_users=n_users, n_items=n_items, avg=9)
    cfg = build_config(FedPerGNN.Config, {**BASE, "negatives": 23})
    rng = np.random.default_rng(seed)
    ids = sorted(rng.choice(n_users, size=int(rng.integers(3, 30)), replace=False).tolist())
    e = rng.normal(size=(n_items, DIM)).astype(np.float32)
    payload = wire.encode_dense(e)

    def inbox(n):
        return [Message("item_embeddings", "server/0", n.id, 0, "train", payload)]

    batch = _users(ds, cfg, 1, ids)
    User.handle_batch(batch, "train", [inbox(n) for n in batch])
    alone = _users(ds, cfg, 1, ids)
    for n in alone:
        User.handle_batch([n], "train", [inbox(n)])
    for a, b in zip(batch, alone):
        out_a, rep_a = a._drain()
        out_b, rep_b = b._drain()
        assert [m.payload for m in out_a] == [m.payload for m in out_b]
        assert rep_a == rep_b
        assert torch.equal(a.embedding, b.embedding)


def test_user_steps_lower_each_users_own_loss():
    """``user_steps = S``: S − 1 local steps on e_u before the step that uploads, on the round's
    pairs: each user's loss on its pairs (reported at the last step) falls below the one-step
    figure, and a user's result still does not depend on its batch."""
    n_users, n_items = 30, 60
    ds = small_dataset(seed=0, n_users=n_users, n_items=n_items, avg=9)
    rng = np.random.default_rng(0)
    e = rng.normal(size=(n_items, DIM)).astype(np.float32)
    payload = wire.encode_dense(e)
    ids = list(range(0, n_users, 3))

    def train(steps, batched=True):
        cfg = build_config(FedPerGNN.Config, {**BASE, "negatives": 23, "user_steps": steps})
        nodes = _users(ds, cfg, 1, ids)
        boxes = [[Message("item_embeddings", "server/0", n.id, 0, "train", payload)] for n in nodes]
        if batched:
            User.handle_batch(nodes, "train", boxes)
        else:
            for n, box in zip(nodes, boxes):
                User.handle_batch([n], "train", [box])
        return nodes, [n._drain()[1]["loss"][0] for n in nodes]

    _, one = train(1)
    many_nodes, many = train(4)
    assert all(b < a for a, b in zip(one, many))
    alone_nodes, alone = train(4, batched=False)
    assert alone == many
    assert all(torch.equal(a.embedding, b.embedding) for a, b in zip(many_nodes, alone_nodes))


# --------------------------------------------------------------------------- graph expansion


def check_views(views, initial, train, max_neighbors):
    truth = brute_force_neighbours(train)
    for u, view in views.items():
        expected = {(initial[v].tobytes(), tuple(shared)) for v, shared in truth[u].items()}
        got = {(emb.tobytes(), tuple(shared)) for emb, shared in view}
        assert len(view) == min(max_neighbors, len(truth[u]))
        assert got <= expected
        if max_neighbors >= len(truth[u]):
            assert got == expected
        # never the user's own embedding
        assert initial[u].tobytes() not in {emb.tobytes() for emb, _ in view}


@pytest.mark.ray
def test_graph_expansion_equals_brute_force(shared_run):
    r = shared_run
    check_views(r["views"], r["initial"], r["protocol"].train_items, 100)
    # equal ids give equal tokens across users: distinct tokens == distinct items held
    reqs = [m for m in r["tapped"] if m.kind == "expand_request"]
    tokens = {t for m in reqs for t in msg.decode_expand_request(m.payload)[0]}
    assert len(tokens) == len(np.unique(r["dataset"].train.item))


@pytest.mark.ray
def test_graph_expansion_caps_neighbours(ray_local):
    protocol = make({"max_neighbors": 2})
    dep = deploy(protocol, "packed", 1)
    try:
        initial = {u: dep.call(f"user/{u}", "get_embedding") for u in protocol.users}
        protocol.tokenize(dep, 0)
        protocol.expand(dep, 0)
        views = {u: dep.call(f"user/{u}", "neighbour_view") for u in protocol.users}
    finally:
        dep.close()
    check_views(views, initial, protocol.train_items, 2)


# --------------------------------------------------------------------------- bytes


@pytest.mark.ray
def test_round_bytes_equal_formula(shared_run):
    protocol, rows, tapped = shared_run["protocol"], shared_run["rows"], shared_run["tapped"]
    train = protocol.train_items
    users = protocol.users
    truth = brute_force_neighbours(train)
    by_kind = {}
    for r in rows:
        if r["round"] == 1 and not r["phase"].startswith("eval"):
            by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["bytes"]
    # round 1: E down to |Ū| users, one upload each
    sampled = sorted(
        index_of(m.dst) for m in tapped if m.round == 1 and m.kind == "item_embeddings"
    )
    assert len(sampled) == 4
    download = 1 + 1 + 1 + 4 * 2 + 4 * N_ITEMS * DIM  # dense: tag, dtype, ndim, 2 dims, fp32
    upload = 0
    for u in sampled:
        n_rows = len(train[u]) + min(6, N_ITEMS - len(train[u]) - 3) + 3
        # record(tag, u16 count, 2 × u32 length) + ids(tag, u32, u8, 4/id) + dense
        upload += 1 + 2 + 4 + (1 + 4 + 1 + 4 * n_rows) + 4 + (3 + 8 + 4 * n_rows * DIM)
        assert msg.item_grads_size(msg.upload_rows(len(train[u]), N_ITEMS, 6, 3), DIM) == (
            1 + 2 + 4 + (1 + 4 + 1 + 4 * n_rows) + 4 + (3 + 8 + 4 * n_rows * DIM)
        )
    assert by_kind == {"item_embeddings": 4 * download, "item_grads": upload}
    # round 0 also carries the OPRF and the graph expansion
    r0 = {}
    for r in rows:
        if r["round"] == 0:
            r0[r["kind"]] = r0.get(r["kind"], 0) + r["bytes"]
    n_u = len(users)
    key = [m for m in tapped if m.kind == "oprf_public_key"][0]
    big_n, e = wire.decode_bigints(key.payload)
    assert r0["oprf_public_key"] == n_u * (5 + (2 + 128) + (2 + 3))  # 1024-bit N, e = 65537
    # blinded values and signatures at the modulus' byte length: a blob of 128 bytes a value,
    # whatever the key and the blinding factors
    for kind in ("oprf_blinded", "oprf_signed"):
        assert r0[kind] == sum(5 + 128 * len(train[u]) for u in users)
        assert msg.blinded_size(len(train[users[0]]), 1024) == 5 + 128 * len(train[users[0]])
        for m in tapped:
            if m.kind == kind:
                values = msg.decode_blinded(m.payload, 1024)
                u = index_of(m.src if kind == "oprf_blinded" else m.dst)
                assert len(values) == len(train[u]) and all(0 < v < big_n for v in values)
    assert r0["expand_request"] == sum(
        1 + 2 + 4 + (5 + 32 * len(train[u])) + 4 + (3 + 4 + 4 * DIM) for u in users
    )
    expected_reply = 0
    for u in users:
        nb = len(truth[u])
        shared = sum(len(s) for s in truth[u].values())
        expected_reply += 1 + 2 + 3 * 4 + (3 + 8 + 4 * nb * DIM) + (6 + 4 * nb) + (5 + 32 * shared)
        assert msg.expand_reply_size(nb, shared, DIM) == (
            1 + 2 + 3 * 4 + (3 + 8 + 4 * nb * DIM) + (6 + 4 * nb) + (5 + 32 * shared)
        )
    assert r0["expand_reply"] == expected_reply
    assert sum(r["bytes"] for r in rows) == sum(len(m.payload) for m in tapped)


# --------------------------------------------------------------------------- placement


@pytest.mark.slow  # an actor per participant (dedicated): CI runs `-m slow`
@pytest.mark.ray
def test_placement_invariance(ray_local):
    def run(placement, hosts):
        ds = small_dataset(n_users=6, n_items=30)  # dedicated: 6 + 3 actors
        protocol = make({"laplace_scale": 1e-4, "clip": 0.01}, ds)
        dep = deploy(protocol, placement, hosts)
        try:
            done = run_rounds(protocol, dep, 4, eval_every=0)  # evaluated after the last
            train, metrics = [r.train for r in done], done[-1].metrics
            return train, metrics, dep.ledger.rows(), dep.n_hosts, protocol.privacy()["epsilon"]
        finally:
            dep.close()

    runs = [run("dedicated", 1), run("packed", 1), run("packed", 3)]
    assert runs[0][3] > runs[2][3] > runs[1][3]
    for other in runs[1:]:
        assert other[0] == runs[0][0]
        assert other[1] == runs[0][1]
        assert other[2] == runs[0][2]
        assert other[4] == runs[0][4]
    assert all(math.isfinite(v) for v in runs[0][1].values())


# --------------------------------------------------------------------------- what leaves a device


@pytest.mark.ray
def test_no_raw_item_id_in_any_message(shared_run):
    protocol, tapped = shared_run["protocol"], shared_run["tapped"]
    train = protocol.train_items
    kinds = {(m.src_role, m.dst_role, m.kind) for m in tapped}
    assert kinds == {
        ("key_server", "user", "oprf_public_key"),
        ("user", "key_server", "oprf_blinded"),
        ("key_server", "user", "oprf_signed"),
        ("user", "matcher", "expand_request"),
        ("matcher", "user", "expand_reply"),
        ("server", "user", "item_embeddings"),
        ("user", "server", "item_grads"),
        ("server", "user", "eval_item_embeddings"),
    }
    big_n, e = wire.decode_bigints(next(m for m in tapped if m.kind == "oprf_public_key").payload)
    pub = oprf.rsa.RSAPublicNumbers(e, big_n)
    hashes = {oprf.full_domain_hash(x, big_n) for x in range(N_ITEMS)}

    # the key server only sees blinded values: no id, no FDH of an id, no value twice
    blinded = [
        v for m in tapped if m.kind == "oprf_blinded" for v in msg.decode_blinded(m.payload, 1024)
    ]
    assert not set(blinded) & (hashes | set(range(N_ITEMS)))
    assert len(set(blinded)) == len(blinded) == sum(len(train[u]) for u in protocol.users)

    # the matcher sees tokens it cannot invert by enumerating ids with any public function
    reqs = [m for m in tapped if m.kind == "expand_request"]
    tokens = [t for m in reqs for t in msg.decode_expand_request(m.payload)[0]]
    guesses = {
        "textbook": lambda x: hashlib.sha256(oprf.textbook_rsa_token(x, pub)).digest(),
        "textbook_raw": lambda x: oprf.textbook_rsa_token(x, pub),
        "sha256": lambda x: hashlib.sha256(str(x).encode()).digest(),
        "fdh": lambda x: hashlib.sha256(
            oprf.full_domain_hash(x, big_n).to_bytes(128, "big")
        ).digest(),
    }
    for fn in guesses.values():
        assert dictionary_attack(tokens, range(N_ITEMS), fn) == {}

    # the server's uploads: rows sorted by id, every one carries M pseudo items (and negatives)
    for m in tapped:
        if m.kind != "item_grads":
            continue
        u = index_of(m.src)
        ids, grads = msg.decode_item_grads(m.payload)
        assert np.all(np.diff(ids) > 0)
        n_neg = min(6, N_ITEMS - len(train[u]) - 3)
        assert len(ids) == len(train[u]) + n_neg + 3
        assert np.isin(train[u], ids).all()
        assert (~np.isin(ids, train[u])).sum() == n_neg + 3

    # no payload that leaves a user for the key server or the matcher carries its item list in
    # any integer encoding, and no payload from the server / matcher / key server carries it
    for m in tapped:
        if m.kind == "item_grads":
            continue  # the ids there are mixed with negatives and pseudo items (checked above)
        holders = [index_of(m.src)] if m.src.startswith("user/") else protocol.users
        for u in holders:
            items = train[u]
            if len(items) < 3:
                continue
            for dtype in ("<u1", "<u2", "<u4", "<u8"):
                assert items.astype(dtype).tobytes() not in m.payload, (m.kind, u)


# --------------------------------------------------------------------------- accuracy and privacy


@pytest.mark.slow  # an accuracy check (8–9 s): `.ci/run` runs `-m slow` too
@pytest.mark.ray
def test_tiny_run_beats_popularity(ray_local):
    ds = synthetic(n_users=30, n_items=60, avg_interactions=10, seed=0)
    protocol = make(
        {
            "dim": 16,
            "users_per_round": 10,
            "negatives": 16,
            "pseudo_items": 8,
            "lr_item": 0.05,
            "clip": 0.05,
            "laplace_scale": 1e-4,
        },
        ds,
    )
    dep = deploy(protocol, "packed", 1)
    try:
        metrics = run_rounds(protocol, dep, 40, eval_every=0)[-1].metrics  # after round 39
    finally:
        dep.close()
    pop = popularity_metrics(ds)
    assert metrics["recall@20"] > 1.2 * pop["recall@20"], (metrics, pop)
    assert metrics["ndcg@20"] > pop["ndcg@20"]
    priv = protocol.privacy()
    assert priv["epsilon_per_coordinate_thesis"] == pytest.approx(2 * 0.05 / 1e-4)
    assert 0 < priv["epsilon"] < math.inf


@pytest.mark.ray
def test_privacy_accounts_every_upload(shared_run):
    protocol, tapped = shared_run["protocol"], shared_run["tapped"]
    acc = protocol.accountant
    basic = {}
    for m in tapped:
        if m.kind == "item_grads":
            rows, _ = msg.decode_item_grads(m.payload)
            n = len(rows) * DIM
            basic[m.src] = basic.get(m.src, 0.0) + 2 * 1e-3 * n / 10.0
    for u in protocol.users:
        nid = f"user/{u}"
        sent = sum(1 for m in tapped if m.kind == "item_grads" and m.src == nid)
        assert acc.count(nid) == sent
    worst = protocol.privacy()["epsilon"]
    # rigorous, never below the worst single upload's exact ε at δ > 0 by much, and not above
    # the basic composition of the (rounded-up) vectors
    assert 0 < worst <= 1.5 * max(basic.values())


# --------------------------------------------------------------------------- attacks on uploads


def _attack_f1(params: dict) -> float:
    """Mean F1 of the server's positive-item inference over the uploads the user code sends."""
    from privacy.leakage import infer_positive_items, precision_recall_f1

    ds = small_dataset(n_users=20, n_items=200, avg=15)
    cfg = build_config(FedPerGNN.Config, {**BASE, **params})
    ids = list(range(20))
    e = np.random.default_rng(0).normal(0, 0.1, size=(200, DIM)).astype(np.float32)
    payload = wire.encode_dense(e)
    nodes = _users(ds, cfg, 1, ids)
    User.handle_batch(
        nodes,
        "train",
        [[Message("item_embeddings", "server/0", n.id, 0, "train", payload)] for n in nodes],
    )
    f1s = []
    for n in nodes:
        (m,), _ = n._drain()
        item_ids, grads = msg.decode_item_grads(m.payload)
        pred = infer_positive_items(item_ids, grads).numpy()
        f1s.append(precision_recall_f1(pred, np.isin(item_ids, n.train_items))[2])
    return float(np.mean(f1s))


def test_gradient_inference_on_real_uploads():
    """Clean uploads give the positives away; pseudo items plus Laplace noise hide them."""
    clean = _attack_f1({"pseudo_items": 0, "laplace_scale": 0.0, "clip": 10.0, "negatives": 30})
    pseudo = _attack_f1({"pseudo_items": 30, "laplace_scale": 0.0, "clip": 10.0, "negatives": 30})
    noisy = _attack_f1({"pseudo_items": 30, "laplace_scale": 1e-2, "clip": 5e-3, "negatives": 30})
    print(f"gradient inference F1: clean {clean:.3f}, pseudo {pseudo:.3f}, pseudo+LDP {noisy:.3f}")
    assert clean > 0.8
    assert noisy < clean - 0.2


def _first_round(params):
    """(server's E after round 0, every item_grads upload of round 0, privacy) of a tapped run."""
    ds = synthetic(n_users=30, n_items=60, avg_interactions=10, seed=0)
    protocol = make({"dim": 16, "users_per_round": 10, "clip": 0.05, **params}, ds)
    dep = deploy(protocol, "packed", 1, tap=True)
    try:
        run_rounds(protocol, dep, 1, eval_every=0, evaluate_last=False)
        emb = dep.call("server/0", "get_item_embeddings")
        uploads = [
            msg.decode_item_grads(m.payload, ds.n_items)[1]
            for m in dep.tapped
            if m.kind == "item_grads"
        ]
    finally:
        dep.close()
    return emb, uploads, protocol.privacy(), protocol


@pytest.mark.ray
def test_authors_code_calibration_moves_the_noise_to_the_server(ray_local):
    """calibration = authors_code: uploads are only clipped (the server sees them in the clear:
    rigorous ε = ∞ beside the claimed 2δ/λ), and the server adds Laplace(η·λ/√B) to every weight
    of E after the update — the difference from the same round without any noise."""
    lam, lr = 0.05, 0.05
    emb, uploads, priv, protocol = _first_round(
        {"calibration": "authors_code", "laplace_scale": lam, "lr_item": lr}
    )
    clean_emb, clean_uploads, _, _ = _first_round({"laplace_scale": 0.0, "lr_item": lr})
    assert len(uploads) == 10 and all(np.abs(u).max() <= 0.05 for u in uploads)
    assert all(np.array_equal(a, b) for a, b in zip(uploads, clean_uploads, strict=True))
    noise = emb - clean_emb
    assert np.all(noise != 0)  # every weight, not only the rows the round touched
    scale = lr * lam / math.sqrt(10)
    assert abs(np.abs(noise).mean() / scale - 1) < 0.15  # E|Laplace(b)| = b; 960 draws
    assert priv["calibration"] == "authors_code" and priv["epsilon"] == math.inf
    assert priv["epsilon_per_coordinate_thesis"] == pytest.approx(2 * 0.05 / lam)
    _, thesis_uploads, thesis_priv, _ = _first_round({"laplace_scale": lam, "lr_item": lr})
    assert any(np.abs(u).max() > 0.05 for u in thesis_uploads)  # the thesis: noisy uploads
    assert thesis_priv["epsilon"] < math.inf
