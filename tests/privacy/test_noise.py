"""``--secure-rng``: the privacy mechanisms' noise from a cryptographically secure
generator (ChaCha20 keyed from the operating system, privacy/noise.py) instead of each node's
stream seeded from (seed, node id); seeded stays the default, and with it every draw is the one it
always was (tests/integration/test_golden.py guards that).

Ray-free: the secure generator (ChaCha20, 20 rounds, a fresh OS key per generator, nothing of it in
a pickle), a node's ``noise_rng`` / ``noise_generator`` in both modes, every mechanism drawing
through a numpy generator, the flag and the TOML key. With Ray: two DGREC runs with one seed are
identical when seeded and differ when secure, and the report says which generator was used."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from nodes.conditions import Conditions, ConditionsError
from nodes.node import Node, NodeContext, Shared
from privacy.noise import (
    SECURE,
    SEEDED,
    SecureGenerator,
    describe,
    keyed_generator,
    secret_key,
)

SECURE_ON = Conditions(secure_rng=True, snapshot_every=0)


# --------------------------------------------------------------------------- the generator


def test_secure_generator_is_chacha20_keyed_from_the_os():
    from randomgen import ChaCha

    g = SecureGenerator()
    assert isinstance(g, np.random.Generator)
    assert isinstance(g.bit_generator, ChaCha) and isinstance(
        g.bit_generator, np.random.BitGenerator
    )
    assert g.bit_generator.state["state"]["rounds"] == 20
    assert len(g.bit_generator.state["state"]["keysetup"]) * 32 == 256  # a 256-bit key
    # two generators made the same way draw different numbers: nothing seeds them but the OS
    assert not np.array_equal(g.random(8), SecureGenerator().random(8))
    # every distribution the mechanisms use is there
    assert (
        g.laplace(0.0, 1.0, 4).shape == (4,)
        and g.standard_normal(3, dtype=np.float32).dtype == np.float32
    )
    assert (
        sorted(g.permutation(5)) == [0, 1, 2, 3, 4]
        and len(set(g.choice(10, 4, replace=False))) == 4
    )


def test_a_secure_generator_pickles_without_its_key():
    """A snapshot, checkpoint or rollback copy holds no key and no position: it loads as a fresh
    generator, so a restored node never replays noise it may already have released."""
    import copy

    a, b = SecureGenerator(), SecureGenerator()
    assert pickle.dumps(a) == pickle.dumps(b)  # the same bytes: neither key is in them
    a_next = a.random(4)
    for twin in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a)):
        assert isinstance(twin, SecureGenerator)
        assert not np.array_equal(twin.random(4), a_next)


def test_keyed_generator_regenerates_from_a_secret_key():
    key = secret_key()
    assert len(key) == 32 and key != secret_key()
    same = keyed_generator(key, 7).standard_normal(5)
    assert np.array_equal(same, keyed_generator(key, 7).standard_normal(5))
    assert not np.array_equal(same, keyed_generator(key, 8).standard_normal(5))
    assert not np.array_equal(same, keyed_generator(secret_key(), 7).standard_normal(5))


# --------------------------------------------------------------------------- a node


class User(Node):  # any node: its randomness is the base class's
    role = "user"


def _node(conditions: Conditions | None, seed: int = 5, nid: str = "user/3"):
    return User(nid, NodeContext(seed, torch.device("cpu"), Shared(), conditions))


def test_seeded_noise_is_the_node_stream():
    a, b = _node(None), _node(None)
    assert a.noise_rng is a.rng and not a.secure_rng
    assert np.array_equal(a.noise_rng.random(6), b.rng.random(6))
    # a torch mechanism's generator: the one torch_generator() gives, or the caller's own
    g1, g2 = a.noise_generator(), b.torch_generator()
    assert isinstance(g1, torch.Generator)
    assert torch.equal(torch.rand(5, generator=g1), torch.rand(5, generator=g2))
    held = torch.Generator().manual_seed(1)
    assert a.noise_generator(held) is held
    assert isinstance(a.noise_seed(), int)


def test_secure_noise_is_not_the_seeded_stream():
    a, b = _node(SECURE_ON), _node(SECURE_ON)  # the same seed and node id
    assert a.secure_rng and isinstance(a.noise_rng, SecureGenerator)
    assert a.noise_rng is not a.rng and a.noise_rng is a.noise_rng  # one per node
    assert not np.array_equal(a.noise_rng.random(8), b.noise_rng.random(8))
    # a torch mechanism gets the secure numpy generator, never a torch one
    assert a.noise_generator() is a.noise_rng
    assert a.noise_generator(torch.Generator().manual_seed(1)) is a.noise_rng
    assert isinstance(a.noise_seed(), bytes) and a.noise_seed() != b.noise_seed()
    # the rest of the node's randomness (sampling, initialisation) stays seeded
    assert np.array_equal(a.rng.random(4), b.rng.random(4))
    # a copy of the node (a host's snapshot or rollback) gets a fresh key
    twin = pickle.loads(pickle.dumps(a))
    assert not np.array_equal(twin.noise_rng.random(4), a.noise_rng.random(4))


# --------------------------------------------------------------------------- the mechanisms


def test_mechanisms_draw_through_a_numpy_generator():
    from privacy.ldp import laplace_noise, perturbed_upload
    from privacy.onebit import encode_onebit, onebit_probability
    from privacy.ternary import ternary_quantize

    g = SecureGenerator()
    lam = 0.5
    x = laplace_noise((200_000,), lam, g)
    assert x.dtype == torch.float32 and x.shape == (200_000,)
    assert abs(float(x.mean())) < 0.01 and float(x.abs().mean()) == pytest.approx(lam, rel=0.02)

    grads = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    ids, noisy, pseudo = perturbed_upload(50, np.arange(5) * 3, grads, 4, 0.1, 0.01, g)
    assert len(ids) == 9 and noisy.shape == (9, 3) and (np.diff(ids) > 0).all()
    assert len(pseudo) == 4 and not np.isin(pseudo, np.arange(5) * 3).any()
    # few free items: the permutation branch
    _, _, few = perturbed_upload(8, np.arange(5), grads, 3, 0.1, 0.0, g)
    assert sorted(few.tolist()) == [5, 6, 7]

    grad = torch.full((100_000,), 0.05)
    bits = encode_onebit(grad, 0.1, 1.0, g)
    assert bits.dtype == torch.int8 and set(bits.unique().tolist()) == {-1, 1}
    p_plus = float(onebit_probability(torch.tensor([0.05]), 0.1, 1.0)[0])
    assert float((bits == 1).double().mean()) == pytest.approx(p_plus, abs=0.01)

    values, scale = ternary_quantize(torch.full((100_000,), 0.3), 3.0, g, clip=1.0)
    assert set(values.unique().tolist()) <= {-3.0, 0.0, 3.0} and scale == 3.0
    assert float((values != 0).double().mean()) == pytest.approx(0.1, abs=0.01)


def test_dipsgnn_noise_draws_through_a_numpy_generator():
    from models.gated_session_gnn import DIPSGNN
    from models.session_training import edgerand_noise
    from protocols.dipsgnn.dpsgd import dpsgd_step  # noqa: F401  (takes either generator too)

    model = DIPSGNN(10, 0, use_features=False, hidden_dim=4, user_dim=2, steps=1, sigma=2.0)
    model.train()
    adjacency, h_bar = torch.zeros(64, 8, 8), torch.zeros(64, 8, 6)
    g = SecureGenerator()
    noise = model.noisy_aggregate(adjacency, h_bar, g)
    assert noise.shape == (64, 8, 6) and noise.dtype == torch.float32
    assert float(noise.std()) == pytest.approx(2.0, rel=0.05)
    assert not torch.equal(noise, model.noisy_aggregate(adjacency, h_bar, SecureGenerator()))

    class Graphs:  # what edgerand_noise reads of pad_behaviour_graphs' output
        def __init__(self):
            self.node_mask = np.ones((2, 3), dtype=bool)
            self.a_out = np.zeros((2, 3, 3), dtype=np.float32)
            self.a_in = np.zeros((2, 3, 3), dtype=np.float32)

    key, a, b = secret_key(), Graphs(), Graphs()
    edgerand_noise(a, np.array([4, 9]), 1.0, key)
    edgerand_noise(b, np.array([4, 9]), 1.0, key)  # the same example: the same noise, each epoch
    assert np.array_equal(a.a_out, b.a_out) and np.abs(a.a_out).sum() > 0
    assert np.array_equal(a.a_in[0], a.a_out[0].T)
    c = Graphs()
    edgerand_noise(c, np.array([4, 9]), 1.0, secret_key())
    assert not np.array_equal(a.a_out, c.a_out)


def _dgrec_user(conditions, mechanism: str, seed: int = 3):
    from data.synthetic import synthetic
    from protocols.base import build_config
    from protocols.dgrec.protocol import DGREC

    ds = synthetic(n_users=12, n_items=40, avg_interactions=8, seed=0)
    config = build_config(DGREC.Config, {"pairs": 4, "mechanism": mechanism})
    protocol = DGREC(ds, config, seed=seed)
    ctx = NodeContext(seed, torch.device("cpu"), protocol.shared(), conditions)
    spec = protocol.node_specs()[0]
    return spec.cls(spec.nid, ctx, **spec.kwargs)


@pytest.mark.parametrize("mechanism", ["onebit", "laplace"])
def test_dgrec_shares_carry_secure_noise(mechanism):
    """A DGREC member's encoded gradient (eq. 5 or Laplace): the same bytes from two users made
    with one seed when seeded, different bytes when secure."""
    grad = torch.linspace(-0.2, 0.2, 500)

    def shares(conditions):  # two nodes made alike: the same seed and node id
        return [_dgrec_user(conditions, mechanism).encode_own(grad) for _ in range(2)]

    seeded = shares(None)
    assert seeded[0] == seeded[1]
    secure = shares(SECURE_ON)
    assert secure[0] != secure[1] and len(secure[0]) == len(seeded[0])


# --------------------------------------------------------------------------- the flag


def test_the_flag_and_the_toml_key(tmp_path):
    import cli.run

    assert Conditions().secure_rng is False
    assert Conditions.from_dict({"secure_rng": True}).secure_rng is True
    with pytest.raises(ConditionsError, match="secure_rng"):
        Conditions(secure_rng="yes")

    def values(*argv):
        return cli.run.parse(["--protocol", "dgrec", *argv])[4]

    assert "secure_rng" not in values()
    assert values("--secure-rng")["secure_rng"] is True
    toml = tmp_path / "run.toml"
    toml.write_text("[conditions]\nsecure_rng = true\n")
    assert values("--config", str(toml))["secure_rng"] is True
    assert values("--config", str(toml), "--no-secure-rng")["secure_rng"] is False  # flag wins


# --------------------------------------------------------------------------- whole runs


def _dgrec_run(tmp_path, name: str, secure: bool) -> tuple[dict, dict, list]:
    from data.synthetic import synthetic
    from engine import RunSettings, run
    from engine.report import read_rows

    settings = RunSettings(
        protocol="dgrec",
        rounds=2,
        seed=0,
        params={"pairs": 8, "eval_every": 1},
        out=str(tmp_path / name),
        progress=False,
        conditions=Conditions(snapshot_every=0, secure_rng=secure),
    )
    run_dir, summary = run(settings, synthetic(n_users=40, n_items=60, avg_interactions=12, seed=0))
    config = json.loads((run_dir / "config.json").read_text())
    losses = [(r.get("train") or {}).get("loss") for r in read_rows(run_dir)]
    return summary, config, losses


def test_runs_with_one_seed_same_noise_when_seeded_fresh_noise_when_secure(ray_local, tmp_path):
    a, config_a, loss_a = _dgrec_run(tmp_path, "a", secure=False)
    b, _, loss_b = _dgrec_run(tmp_path, "b", secure=False)
    assert a["metrics"] == b["metrics"] and loss_a == loss_b
    assert a["bytes_by_kind"] == b["bytes_by_kind"]
    assert a["privacy"]["noise_rng"] == config_a["privacy"]["noise_rng"] == SEEDED
    assert config_a["settings"]["conditions"]["secure_rng"] is False

    c, config_c, loss_c = _dgrec_run(tmp_path, "c", secure=True)
    d, _, loss_d = _dgrec_run(tmp_path, "d", secure=True)
    assert c["status"] == d["status"] == "ok"
    assert c["privacy"]["noise_rng"] == config_c["privacy"]["noise_rng"] == SECURE
    assert config_c["settings"]["conditions"]["secure_rng"] is True
    # the noise differs: so do the models the gossiped codes trained (the round-1 loss is after
    # round 0's noisy update) ...
    assert loss_c[1] != loss_d[1] and (c["metrics"], loss_c) != (d["metrics"], loss_d)


# every noise-bearing mechanism in a whole run, small (tests/integration/test_golden.py's settings)
SECURE_CASES = [
    ("fedlightgcn", {"dim": 8, "negatives": 16, "key_bits": 1024, "users_per_round": 0}),
    ("fedpergnn", {"backbone": "gat", "key_bits": 1024}),
    ("fedpergnn", {"backbone": "gat", "key_bits": 1024, "calibration": "authors_code"}),
    ("dgrec", {"pairs": 8, "mechanism": "laplace"}),
    ("verfedgnn", {"parties": 2, "psi_key_bits": 1024}),
    ("verfedgnn", {"parties": 2, "psi_key_bits": 1024, "mechanism": "laplace"}),
    ("dipsgnn", {"epochs": 2, "hidden_dim": 8, "user_dim": 4}),
    ("dipsgnn", {"epochs": 2, "hidden_dim": 8, "user_dim": 4, "mechanism": "edgerand"}),
    (
        "dipsgnn",
        {
            "epochs": 2,
            "hidden_dim": 8,
            "user_dim": 4,
            "mechanism": "dpsgd",
            "dpsgd_batch_users": 16,
        },
    ),
]


def _figures(protocol: str, params: dict, secure: bool, out) -> tuple[dict, list]:
    from data.synthetic import synthetic
    from engine import RunSettings, run
    from engine.report import read_rows

    settings = RunSettings(
        protocol=protocol,
        rounds=2,
        seed=0,
        params={**params, "eval_every": 1},
        out=str(out),
        progress=False,
        conditions=Conditions(snapshot_every=0, secure_rng=secure),
    )
    run_dir, summary = run(settings, synthetic(n_users=40, n_items=60, avg_interactions=12, seed=0))
    assert summary["status"] == "ok" and summary["privacy"]["noise_rng"] == describe(secure)
    rows = read_rows(run_dir)
    return summary["metrics"], [(r.get("train") or {}).get("loss") for r in rows]


@pytest.mark.parametrize(
    "protocol, params", SECURE_CASES, ids=[f"{p}-{i}" for i, (p, _) in enumerate(SECURE_CASES)]
)
def test_every_mechanism_runs_with_secure_noise(protocol, params, ray_local, tmp_path):
    """A secure run of each noise-bearing protocol completes, says so, and two of them with one
    seed draw different noise (different losses or metrics)."""
    first = _figures(protocol, params, True, tmp_path / "first")
    second = _figures(protocol, params, True, tmp_path / "second")
    assert first != second
