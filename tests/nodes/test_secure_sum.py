"""``--secure-aggregation`` through the real runtime (nodes/secure_sum.py's stages as messages
between Ray hosts), on fedmf and small synthetic data:

* a secure run's figures are the plain run's, up to the fixed-point resolution, and nothing of
  the summed kind (``item_grads``) is ever sent — only the ``secagg_*`` kinds;
* the server's unmasked sum is, to the last unit of Z_2^32, the sum of the survivors' encoded
  inputs when users drop between the stages (``stage_dropout``); where too many drop to rebuild
  a mask the round's sum is abandoned (``secagg_failed``, update skipped), never wrong;
* what the server receives of one user (``secagg_masked``) looks uniform on Z_2^32;
* whole-round dropout (offline users) never fails a round;
* refusals in one line before Ray starts: a protocol without a summing server, a defence that
  needs each upload, bad ``[secure_aggregation]`` values.

The primitives' own tests (Shamir, masks, fixed point, the record) are in tests/privacy/test_secagg.py."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import ray.cloudpickle
from scipy import stats

from adversaries.condition import Adversaries
from cluster.message import index_of
from data.synthetic import synthetic
from engine import RunSettings, run
from engine.loop import run_rounds
from engine.report import read_rows
from engine.runner import deploy, prepare
from nodes import secure_sum
from nodes.conditions import Conditions
from privacy import secagg
from privacy.secagg import SecureAggregation
from protocols.base import ConfigError, build_config
from protocols.fedmf import messages as fm_msg
from protocols.fedmf.protocol import FedMF
from protocols.fedmf.roles import SECURE_SUM, SERVER, FedMFServer, FedMFUser
from protocols.sparse_rows import step_on_sum

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

PARAMS = {"dim": 8, "users_per_round": 0, "pairs": 8, "eval_every": 1}
SECAGG_KINDS = {
    secure_sum.KEYS,
    secure_sum.NEIGHBOURS,
    secure_sum.SHARES,
    secure_sum.SHARES_FOR,
    secure_sum.MASKED,
    secure_sum.SURVIVOR_LIST,
    secure_sum.REVEAL,
}


def _data(n_users: int = 24):
    return synthetic(n_users=n_users, n_items=40, avg_interactions=10, seed=0)


def _run(tmp_path, name: str, rounds: int = 3, **conditions):
    settings = RunSettings(
        protocol="fedmf",
        rounds=rounds,
        seed=0,
        params=dict(PARAMS),
        out=str(tmp_path / name),
        progress=False,
        conditions=Conditions(snapshot_every=0, **conditions),
    )
    run_dir, summary = run(settings, _data())
    return read_rows(run_dir), summary


# --------------------------------------------------------------------------- whole runs


@pytest.mark.ray
def test_a_secure_run_is_the_plain_run_up_to_the_fixed_point(ray_local, tmp_path):
    """Same seed, with and without secure aggregation: the server steps on the same mean up to
    n · resolution / 2 per coordinate (resolution 2^-26 here), so every round's loss and metrics
    agree to 1e-6; no ``item_grads`` message exists in the secure run, only the stages' kinds."""
    plain, s_plain = _run(tmp_path, "plain")
    secure, s_secure = _run(tmp_path, "secure", secure_aggregation=SecureAggregation())
    assert s_plain["status"] == s_secure["status"] == "ok"
    assert len(plain) == len(secure) == 3
    for p, s in zip(plain, secure):
        assert abs(p["train"]["loss"] - s["train"]["loss"]) < 1e-6
        assert p["metrics"].keys() == s["metrics"].keys()
        for name, value in p["metrics"].items():
            assert abs(value - s["metrics"][name]) < 1e-6, (p["round"], name)
        assert s["train"]["secagg_failed"] == 0 and s["train"]["skipped"] == 0
        assert s["train"]["secagg_users"] == s["train"]["participants"] == 24
        kinds = set(s["bytes_by_kind"])
        assert fm_msg.ITEM_GRADS not in kinds  # nothing of the summed kind in the clear
        assert kinds - {fm_msg.ITEM_FACTORS, fm_msg.EVAL_ITEM_FACTORS} == SECAGG_KINDS
        assert fm_msg.ITEM_GRADS in p["bytes_by_kind"]
        assert not set(p["bytes_by_kind"]) & SECAGG_KINDS
        assert s["rejected"] == {} and s["faults"] == []
    for name, value in s_plain["metrics"].items():
        assert abs(value - s_secure["metrics"][name]) < 1e-6


@pytest.mark.ray
def test_whole_round_dropout_never_fails_a_secure_round(ray_local, tmp_path):
    """Users offline for a round (``dropout``) send no keys: the round's graph is over those
    online, and every round sums their uploads."""
    rows, summary = _run(
        tmp_path, "dropout", rounds=4, dropout=0.3, secure_aggregation=SecureAggregation()
    )
    assert summary["status"] == "ok"
    assert sum(r["dropped"] for r in rows) > 0  # users did go offline
    for r in rows:
        train = r["train"]
        assert train["secagg_failed"] == 0 and train["skipped"] == 0, r["round"]
        assert train["secagg_users"] == train["participants"] == 24 - r["dropped"]
        assert fm_msg.ITEM_GRADS not in r["bytes_by_kind"]
        assert r["rejected"] == {} and r["faults"] == []


# --------------------------------------------------------------------------- one round, inspected


class KeepingServer(FedMFServer):
    """fedmf's server keeping what a curious server holds, for the test to read: each user's
    masked input (``keep_masked_views``), its round state before :func:`server_sum` spends it,
    and the sum. The aggregation is fedmf's own (roles.py, the secure branch)."""

    keep_masked_views = True
    kept: tuple = (None, None)

    def handle(self, phase: str, inbox) -> None:
        if phase != "aggregate":
            return super().handle(phase, inbox)
        state = getattr(self, "_secagg", None)
        total = secure_sum.server_sum(self, SECURE_SUM, inbox)
        self.kept = (state, total)
        if total is None or total.n < max(1, self.min_participants):
            self.report("skipped", 1.0)
            return
        grads = total.parts[fm_msg.ITEM_GRADS].reshape(tuple(self.item_factors.shape))
        step_on_sum(self.item_factors, self.optimizer, grads, total.n)

    def kept_round(self):
        return self.kept


class KeepingUser(FedMFUser):
    def secagg_state(self):
        return getattr(self, "_secagg", None)


@dataclasses.dataclass
class Round:
    """One inspected secure round: the server's state and sum, each user's state, every message."""

    cfg: SecureAggregation
    state: secure_sum.ServerState
    result: secure_sum.SumResult | None
    users: dict  # user index -> UserState, after the round
    encoded: dict  # user index -> x_u (uint32) right after the masking stage, None if not masked
    tapped: list
    q_before: np.ndarray
    q_after: np.ndarray
    train: dict

    @property
    def length(self) -> int:
        return len(self.q_before.reshape(-1))


def _one_round(cfg: SecureAggregation, n_users: int = 40, seed: int = 0) -> Round:
    """Round 0 of fedmf as the runner plays it (``run_rounds``), every message tapped; each
    user's encoded input is read right after ``secagg_mask`` (a user keeps it only until it
    reveals or drops)."""
    from tests.conftest import start_test_ray

    start_test_ray()
    protocol = FedMF(_data(n_users), build_config(FedMF.Config, dict(PARAMS)), seed=seed)
    specs = [
        dataclasses.replace(s, cls={FedMFServer: KeepingServer, FedMFUser: KeepingUser}[s.cls])
        for s in protocol.node_specs()
    ]
    users = [s.nid for s in specs if s.nid != SERVER]
    dep = deploy(
        protocol,
        tap=True,
        specs=specs,
        conditions=Conditions(snapshot_every=0, secure_aggregation=cfg),
    )
    encoded: dict = {}
    superstep = dep.superstep

    def inspecting_superstep(round_, phase, *args, **kwargs):
        res = superstep(round_, phase, *args, **kwargs)
        if phase == secure_sum.MASK:
            for nid in users:
                st = dep.call(nid, "secagg_state")
                encoded[index_of(nid)] = None if st is None else st.encoded
        return res

    dep.superstep = inspecting_superstep
    try:
        q_before = dep.call(SERVER, "get_item_factors")
        (done,) = run_rounds(protocol, dep, 1, eval_every=0, evaluate_last=False)
        state, result = dep.call(SERVER, "kept_round")
        return Round(
            cfg,
            state,
            result,
            {index_of(nid): dep.call(nid, "secagg_state") for nid in users},
            encoded,
            list(dep.tapped),
            q_before,
            dep.call(SERVER, "get_item_factors"),
            done.train,
        )
    finally:
        dep.close()


def _why_no_sum(r: Round) -> str:
    """Why the server cannot learn the round's sum from what was sent ("" where it can): too few
    users, or a mask some user needs removed that fewer than t reveals cover."""
    st = r.state
    _, t = secure_sum.degree_and_threshold(r.cfg, st.n1)
    least = secure_sum.min_users(r.cfg)
    if st.n1 < least or len(st.survivors) < least:
        return f"{st.n1} keys, {len(st.survivors)} masked inputs, fewer than {least}"
    revealers = {index_of(m.src) for m in r.tapped if m.kind == secure_sum.REVEAL}
    alive = set(st.survivors)
    needed = set(alive)  # self masks of the survivors
    needed |= {  # pairwise masks of users who shared and then dropped, where a survivor used them
        u for u in set(st.shared) - alive if any(u in st.sources.get(x, ()) for x in alive)
    }
    short = {
        u: n
        for u in sorted(needed)
        if (n := sum(u in st.sources.get(x, ()) for x in revealers & alive)) < t
    }
    return f"reveals for {short} below t = {t}" if short else ""


def _check_exact_or_abandoned(r: Round) -> bool:
    """The round's sum is exact, or abandoned where it could not be rebuilt: never wrong.
    Returns whether it was exact."""
    st, res = r.state, r.result
    assert st is not None  # the server ran the stages
    why = _why_no_sum(r)
    if res is None:
        assert why, "the server abandoned a sum it could rebuild"
        assert r.train["secagg_failed"] == 1 and r.train["skipped"] == 1
        assert np.array_equal(r.q_before, r.q_after)  # no update from a failed round
        return False
    assert not why, why
    alive = st.survivors
    assert res.n == len(alive) and r.train["secagg_users"] == len(alive)
    expected = np.zeros(r.length, dtype=np.uint32)
    for u in alive:
        x = r.encoded[u]
        assert x is not None and x.dtype == np.uint32 and x.shape == (r.length,)
        expected += x
    fp = secagg.FixedPoint(r.cfg.bound or SECURE_SUM.bound(None), st.n1)
    got = res.parts[fm_msg.ITEM_GRADS]
    assert res.resolution == fp.resolution
    # decode is exact (an int32 times 2^-bits): re-encoding gives back the uint32 sum
    as_u32 = (got * 2.0**fp.bits).astype(np.int64).astype(np.uint32)
    assert np.array_equal(as_u32, expected)  # to the last unit of Z_2^32
    assert np.array_equal(got, fp.decode(expected))
    assert not np.array_equal(r.q_before, r.q_after)  # the server stepped on it
    return True


@pytest.fixture(scope="module")
def dropout_round() -> Round:
    """One fedmf round, 40 users, each dropping before each of its three stages with probability
    0.3, on a complete graph (neighbours beyond n − 1) with t = 4: which users drop is a function
    of the seed (nodes/secure_sum.py's _dropped) and the complete graph is the same whatever the
    OS draws, so the round's outcome is deterministic; ~13 of 39 neighbours reveal per user."""
    return _one_round(SecureAggregation(stage_dropout=0.3, neighbours=64, threshold=4))


@pytest.mark.ray
def test_the_unmasked_sum_is_exact_under_mid_protocol_dropout(dropout_round):
    r = dropout_round
    st = r.state
    u1, u2, u3 = set(st.keys), set(st.shared), set(st.survivors)
    assert u1 == set(r.users) and st.n1 == 40  # every user trained and sent keys
    assert u3 <= u2 <= u1 and len(u3) >= 2
    # users did drop: before sharing, after sharing but before masking (their pairwise masks had
    # to be rebuilt from s_u^SK), and after masking but before revealing (their self masks too)
    dropped_at_share = u1 - u2
    dropped_at_mask = u2 - u3
    dropped_at_unmask = {u for u in u3 if r.users[u].dropped}
    assert dropped_at_share and dropped_at_mask and dropped_at_unmask
    assert all(r.encoded[u] is None for u in dropped_at_mask | dropped_at_share)
    assert all(r.encoded[u] is not None for u in u3)
    # what a user keeps of its input lasts no longer than the round's stages
    assert all(st.encoded is None and not st.held and not st.parts for st in r.users.values())
    # a survivor masked with every user whose shares it was forwarded: the dropped ones too
    for x in u3:
        assert r.users[x].masked_with == tuple(st.sources[x])
    assert set().union(*(st.sources[x] for x in u3)) & dropped_at_mask
    assert _check_exact_or_abandoned(r)
    assert r.train["secagg_failed"] == 0 and r.train["skipped"] == 0


@pytest.mark.ray
def test_the_server_holds_no_plaintext_upload(dropout_round):
    """No ``item_grads`` message exists; what users send the server is only the stages' kinds;
    each masked input it holds differs from the user's encoded input and is uniform on Z_2^32
    (chi-square on every byte, pooled over users), while the encoded inputs are far from it."""
    r = dropout_round
    kinds = {m.kind for m in r.tapped}
    assert fm_msg.ITEM_GRADS not in kinds
    to_server = {m.kind for m in r.tapped if m.dst == SERVER}
    assert to_server == {
        secure_sum.KEYS,
        secure_sum.SHARES,
        secure_sum.MASKED,
        secure_sum.REVEAL,
    }
    masked = {
        index_of(m.src): secure_sum.decode_masked(m.payload, r.length)
        for m in r.tapped
        if m.kind == secure_sum.MASKED
    }
    assert set(masked) == set(r.state.survivors)
    # the server's views (keep_masked_views) are exactly what was sent
    views = {index_of(src): y for src, y in r.result.views.items()}
    assert views.keys() == masked.keys()
    assert all(np.array_equal(views[u], masked[u]) for u in masked)
    ys = np.concatenate([masked[u] for u in sorted(masked)])
    xs = np.concatenate([r.encoded[u] for u in sorted(masked)])
    assert ys.size >= 256 * 20  # ≥ 20 expected counts per byte value
    for shift in (0, 8, 16, 24):
        y_bytes = ((ys >> np.uint32(shift)) & np.uint32(0xFF)).astype(np.int64)
        x_bytes = ((xs >> np.uint32(shift)) & np.uint32(0xFF)).astype(np.int64)
        assert stats.chisquare(np.bincount(y_bytes, minlength=256)).pvalue > 1e-6
        assert stats.chisquare(np.bincount(x_bytes, minlength=256)).pvalue < 1e-100
    for u in masked:  # no coordinate in the clear beyond chance (~length / 2^32)
        assert np.count_nonzero(masked[u] == r.encoded[u]) <= 2
    # an upload touches 2P of 40 item rows: the encoded input is mostly zeros, the masked one not
    assert np.mean(xs == 0) > 0.3 and np.mean(ys == 0) < 0.01


@pytest.mark.ray
def test_a_sparse_graph_sum_is_exact_or_abandoned():
    """The default Harary graph (k = 16, t = 7 for 40 users) with light stage dropout (0.05):
    the sum is exact (a user's mask is lost with probability ~1e-5), and wherever it is not
    rebuilt, the reveals that arrived could not rebuild it."""
    r = _one_round(SecureAggregation(stage_dropout=0.05))
    k, t = secure_sum.degree_and_threshold(r.cfg, r.state.n1)
    assert (k, t) == (16, 7)
    assert all(len(nb) == k for nb in r.state.graph.values())
    _check_exact_or_abandoned(r)


@pytest.mark.ray
def test_too_many_stage_dropouts_abandon_the_sum_never_a_wrong_one():
    """stage_dropout 0.3 with the default k = 16, t = 7: a user's mask needs t reveals, but only
    (1 − 0.3)^3 ≈ 34% of its neighbours survive all three stages (~5.5 of 16), so the round's
    sum cannot be rebuilt (P(success) ~ 1e-16): reported ``secagg_failed``, update skipped, Q
    unchanged."""
    r = _one_round(SecureAggregation(stage_dropout=0.3))
    assert r.result is None
    assert not _check_exact_or_abandoned(r)


@pytest.mark.ray
def test_fewer_users_than_min_users_abandon_the_round():
    r = _one_round(SecureAggregation(min_users=41))
    assert r.result is None and "fewer than 41" in _why_no_sum(r)
    assert not _check_exact_or_abandoned(r)
    assert not any(m.kind == secure_sum.NEIGHBOURS for m in r.tapped)  # it stopped at the graph


# --------------------------------------------------------------------------- refusals


def _refused(capsys, monkeypatch, argv) -> str:
    """launch.py's one-line error for ``argv``; Ray never starts (starting it fails the test)."""
    import cli
    import engine.runner

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray started before the refusal")

    monkeypatch.setattr(engine.runner, "start_or_join", no_ray)
    with pytest.raises(SystemExit) as e:
        cli.main(["--rounds", "1", "--out", "/nonexistent/never", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("protocol", ["dgrec", "verfedgnn"])
def test_a_protocol_without_a_summing_server_is_refused(capsys, monkeypatch, protocol):
    err = _refused(capsys, monkeypatch, ["--protocol", protocol, "--secure-aggregation"])
    assert f"--secure-aggregation: {protocol} has no server that sums user uploads" in err
    with pytest.raises(ConfigError, match=f"{protocol} has no server that sums"):
        prepare(
            RunSettings(
                protocol=protocol,
                rounds=1,
                conditions=Conditions(secure_aggregation=SecureAggregation()),
            ),
            _data(),
        )


def test_a_defence_is_refused(capsys, monkeypatch):
    argv = ["--protocol", "fedmf", "--secure-aggregation", "--adversaries", "0.1"]
    err = _refused(capsys, monkeypatch, [*argv, "--attack", "random", "--defence", "median"])
    assert "--secure-aggregation: the defence 'median' needs each upload" in err
    settings = RunSettings(
        protocol="fedmf",
        rounds=1,
        params=dict(PARAMS),
        conditions=Conditions(secure_aggregation=SecureAggregation()),
        adversaries=Adversaries(fraction=0.1, attack="random", defence="trimmed-mean"),
    )
    with pytest.raises(ConfigError, match="defence 'trimmed-mean' needs each upload"):
        prepare(settings, _data())
    # adversaries without a defence run: the server sums their uploads like everyone's
    prepare(
        dataclasses.replace(settings, adversaries=Adversaries(fraction=0.1, attack="random")),
        _data(),
    )


@pytest.mark.parametrize(
    "table, named",
    [
        ("neighbours = 1", "secure_aggregation.neighbours"),
        ("threshold = 9\nneighbours = 4", "secure_aggregation.threshold"),
        ("stage_dropout = 1.5", "secure_aggregation.stage_dropout"),
        ("bound = -1.0", "secure_aggregation.bound"),
        ("min_users = -3", "secure_aggregation.min_users"),
        ("neighbors = 4", "secure_aggregation: unknown key(s) neighbors"),
    ],
)
def test_bad_secure_aggregation_values_are_refused(capsys, monkeypatch, tmp_path, table, named):
    cfg = tmp_path / "run.toml"
    cfg.write_text(f"[secure_aggregation]\n{table}\n")
    err = _refused(capsys, monkeypatch, ["--protocol", "fedmf", "--config", str(cfg)])
    assert f"run condition {named}" in err


def test_the_table_turns_it_on_and_the_flag_off(tmp_path):
    import cli.run

    def values(*argv):
        return cli.run.parse(["--protocol", "fedmf", *argv])[4]

    assert "secure_aggregation" not in values()
    assert values("--secure-aggregation")["secure_aggregation"] == {}
    cfg = tmp_path / "run.toml"
    cfg.write_text("[secure_aggregation]\nneighbours = 6\nstage_dropout = 0.1\n")
    table = {"neighbours": 6, "stage_dropout": 0.1}
    assert values("--config", str(cfg))["secure_aggregation"] == table
    assert values("--config", str(cfg), "--secure-aggregation")["secure_aggregation"] == table
    assert "secure_aggregation" not in values("--config", str(cfg), "--no-secure-aggregation")
    c = Conditions.from_dict(values("--config", str(cfg)))
    assert c.secure_aggregation == SecureAggregation(neighbours=6, stage_dropout=0.1)
