"""SecAgg+'s primitives (privacy/secagg.py), Ray-free: Shamir's t-of-n shares over GF(2^521 − 1),
X25519 + HKDF key agreement bound to its context, AES-GCM share transport, the ChaCha20 PRG, the
Harary graph, the fixed-point encoding over Z_2^32, masking and unmasking (exact in Z_2^32 under
any dropout after masking), the ``secure_aggregation`` record's validation, and a statistical
check that a masked input is uniform on Z_2^32 whatever the input.

The run-level tests (stages as messages, dropout mid-protocol, refusals) are in
tests/nodes/test_secure_sum.py."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from nodes.conditions import Conditions, ConditionsError
from privacy import secagg
from privacy.secagg import FixedPoint, SecAggError, SecureAggregation


def _seed(label: str) -> bytes:
    """A fixed 32-byte seed (the statistical tests are deterministic in outcome)."""
    return hashlib.sha256(label.encode()).digest()


# --------------------------------------------------------------------------- Shamir


@pytest.mark.parametrize("n, t", [(7, 3), (6, 1), (5, 5), (9, 4)])
def test_any_t_of_n_shares_rebuild_the_secret_and_t_minus_1_do_not(n, t):
    secret = secagg.new_seed()
    shares = secagg.share_secret(secret, n, t)
    assert len(shares) == n and all(len(s) == secagg.SHARE_BYTES for s in shares)
    points = {i + 1: s for i, s in enumerate(shares)}  # share i is f(i + 1)
    for subset in itertools.combinations(points, t):
        assert secagg.combine_shares({x: points[x] for x in subset}, t) == secret
    assert secagg.combine_shares(points, t) == secret  # more than t: the first t are used
    for subset in itertools.combinations(points, t - 1):
        with pytest.raises(SecAggError, match=f"{t - 1} shares, {t} needed"):
            secagg.combine_shares({x: points[x] for x in subset}, t)


def test_t_minus_1_shares_read_as_a_lower_threshold_give_another_secret():
    """Fewer than t shares fix nothing: read with a threshold of t − 1 they rebuild some other
    value (a random field element, almost never a 32-byte secret), never the secret."""
    secret = secagg.new_seed()
    shares = secagg.share_secret(secret, 6, 4)
    for subset in itertools.combinations(range(1, 7), 3):
        try:
            got = secagg.combine_shares({x: shares[x - 1] for x in subset}, 3)
        except SecAggError:
            continue
        assert got != secret


def test_a_tampered_share_never_rebuilds_the_secret():
    secret = secagg.new_seed()
    shares = secagg.share_secret(secret, 5, 3)
    for victim in (1, 2, 3):  # one of the t shares combine_shares interpolates
        for flip in (0, 30, 65):  # a bit in the first, a middle and the last byte
            bad = bytearray(shares[victim - 1])
            bad[flip] ^= 0x01
            if int.from_bytes(bad, "big") >= secagg.PRIME:
                continue  # outside the field: refused below
            pts = {1: shares[0], 2: shares[1], 3: shares[2], victim: bytes(bad)}
            try:  # exactly t: some other value, almost never a 32-byte secret
                assert secagg.combine_shares(pts, 3) != secret
            except SecAggError:
                pass
            # one share more: the tampered one is caught (it is not on the others' polynomial)
            with pytest.raises(SecAggError, match="not of one polynomial"):
                secagg.combine_shares({**pts, 4: shares[3]}, 3)
    # a tampered share beyond the first t + 1 is not used at all
    assert secagg.combine_shares({**dict(enumerate(shares[:4], 1)), 5: bytes(66)}, 3) == secret
    # malformed points and values are refused
    with pytest.raises(SecAggError, match="outside the field"):
        secagg.combine_shares({1: b"\xff" * secagg.SHARE_BYTES, 2: shares[1]}, 2)
    with pytest.raises(SecAggError, match="outside the field"):
        secagg.combine_shares({0: shares[0], 2: shares[1]}, 2)


def test_share_secret_refuses_a_threshold_outside_1_to_n():
    for n, t in ((3, 0), (3, 4)):
        with pytest.raises(ValueError, match="threshold"):
            secagg.share_secret(secagg.new_seed(), n, t)


def test_shares_are_fresh_each_time():
    secret = secagg.new_seed()
    a, b = secagg.share_secret(secret, 4, 2), secagg.share_secret(secret, 4, 2)
    assert a != b  # a new random polynomial each time
    assert secagg.combine_shares({1: a[0], 4: a[3]}, 2) == secret
    assert secagg.combine_shares({2: b[1], 3: b[2]}, 2) == secret


# --------------------------------------------------------------------------- key agreement


def test_agree_is_symmetric_and_bound_to_its_context():
    a_sk, a_pk = secagg.new_keypair()
    b_sk, b_pk = secagg.new_keypair()
    c_sk, c_pk = secagg.new_keypair()
    assert secagg.public_of(a_sk) == a_pk and len(a_sk) == len(a_pk) == secagg.KEY_BYTES
    info = secagg.mask_info(3, 5, 9)
    ab = secagg.agree(a_sk, b_pk, info)
    assert len(ab) == secagg.KEY_BYTES
    assert ab == secagg.agree(b_sk, a_pk, info)  # both ends derive it
    assert ab != secagg.agree(a_sk, b_pk, secagg.mask_info(4, 5, 9))  # another round
    assert ab != secagg.agree(a_sk, b_pk, secagg.share_key_info(3, 5, 9))  # another purpose
    assert ab != secagg.agree(a_sk, c_pk, info) != secagg.agree(c_sk, b_pk, info)  # other peers
    # the contexts name the pair whatever the order, and differ by round and pair
    assert secagg.mask_info(3, 9, 5) == info and secagg.share_key_info(3, 9, 5) != info
    assert len({secagg.mask_info(r, a, b) for r in (0, 1) for a, b in ((1, 2), (1, 3))}) == 4


def test_agree_refuses_a_bad_peer_key():
    sk, _ = secagg.new_keypair()
    with pytest.raises(SecAggError, match="31 bytes"):
        secagg.agree(sk, bytes(31), b"x")
    with pytest.raises(SecAggError, match="key agreement failed"):
        secagg.agree(sk, bytes(32), b"x")  # a low-order point: the shared secret is zero
    secagg.check_public(secagg.new_keypair()[1])  # what the server checks of each key
    for bad in (bytes(32), bytes(31), (1).to_bytes(32, "little")):  # low-order points, a size
        with pytest.raises(SecAggError):
            secagg.check_public(bad)


# --------------------------------------------------------------------------- AES-GCM transport


def test_open_sealed_rejects_a_wrong_key_aad_or_a_tampered_ciphertext():
    key, other = secagg.new_seed(), secagg.new_seed()
    plain = b"shares of b_u and s_u" * 6
    aad = b"privrec secagg/0/1->2"
    sealed = secagg.seal(key, plain, aad)
    assert secagg.open_sealed(key, sealed, aad) == plain
    assert secagg.seal(key, plain, aad) != sealed  # a fresh nonce each time
    with pytest.raises(SecAggError, match="does not authenticate"):
        secagg.open_sealed(other, sealed, aad)
    with pytest.raises(SecAggError, match="does not authenticate"):
        secagg.open_sealed(key, sealed, b"privrec secagg/0/2->1")  # the reverse direction
    for at in (0, secagg.NONCE_BYTES, len(sealed) // 2, len(sealed) - 1):  # nonce, body, tag
        bad = bytearray(sealed)
        bad[at] ^= 0x80
        with pytest.raises(SecAggError, match="does not authenticate"):
            secagg.open_sealed(key, bytes(bad), aad)
    with pytest.raises(SecAggError, match="does not authenticate"):
        secagg.open_sealed(key, sealed[:-1], aad)
    with pytest.raises(SecAggError, match="too short"):
        secagg.open_sealed(key, sealed[: secagg.NONCE_BYTES + 15], aad)


# --------------------------------------------------------------------------- the PRG


def test_prg_is_deterministic_per_seed_and_differs_across_seeds():
    s, t = _seed("prg/a"), _seed("prg/b")
    a = secagg.prg(s, 1000)
    assert a.dtype == np.uint32 and a.shape == (1000,)
    assert np.array_equal(a, secagg.prg(s, 1000))
    assert np.array_equal(a[:10], secagg.prg(s, 10))  # one keystream: a prefix is a prefix
    b = secagg.prg(t, 1000)
    assert np.count_nonzero(a == b) < 5  # ~1000/2^32 equal words expected
    assert secagg.prg(s, 0).shape == (0,)


# --------------------------------------------------------------------------- the graph


@pytest.mark.parametrize("n, k", [(5, 2), (10, 4), (31, 6), (64, 12), (9, 8), (6, 5), (6, 40)])
def test_harary_graph_is_k_regular_symmetric_loop_free(n, k):
    users = [3 * i + 7 for i in range(n)]  # ids need not be 0..n-1
    g = secagg.harary_graph(users, k)
    assert sorted(g) == users
    degree = n - 1 if k >= n - 1 else k
    for u, nb in g.items():
        assert u not in nb and nb == sorted(set(nb)) and len(nb) == degree
        assert set(nb) <= set(users)
        for v in nb:
            assert u in g[v]
    if k >= n - 1:
        assert all(set(nb) == set(users) - {u} for u, nb in g.items())


@pytest.mark.parametrize("n, k", [(10, 3), (12, 7)])
def test_harary_graph_refuses_an_odd_degree_below_n_minus_1(n, k):
    # H(k, n) is k-regular for even k only; SecureAggregation refuses an odd neighbours too
    with pytest.raises(ValueError, match="even degree"):
        secagg.harary_graph(list(range(n)), k)
    with pytest.raises(ValueError, match="neighbours: an even number"):
        SecureAggregation(neighbours=k)


def test_harary_graph_is_drawn_afresh():
    users = list(range(40))
    graphs = {tuple(tuple(nb) for nb in secagg.harary_graph(users, 6).values()) for _ in range(5)}
    assert len(graphs) > 1  # the cycle order is random (from the OS)


def test_default_degree_and_threshold():
    assert secagg.default_degree(0) == secagg.default_degree(1) == 0
    for n in range(2, 3000, 7):
        k = secagg.default_degree(n)
        assert 1 <= k <= n - 1
        assert k == n - 1 or (k % 2 == 0 and k >= 3 * math.log2(n) and k >= 4)
        t = secagg.default_threshold(k)
        assert 1 <= t <= k and (k < 3 or t > k / 3)


# --------------------------------------------------------------------------- fixed point


def test_a_sum_of_encodings_decodes_within_n_half_resolutions():
    rng = np.random.default_rng(0)
    for bound, n_max, n in ((0.5, 64, 64), (1.0, 24, 10), (3.0, 1000, 1000)):
        fp = FixedPoint(bound, n_max)
        assert n_max * bound * 2.0**fp.bits < 2**31 <= 2 * n_max * bound * 2.0**fp.bits
        xs = rng.uniform(-bound, bound, size=(n, 2048))
        xs[0, :4] = (bound, -bound, bound, -bound)
        total = np.zeros(2048, dtype=np.uint32)
        for x in xs:
            enc, clipped = fp.encode(x)
            assert enc.dtype == np.uint32 and clipped == 0
            total += enc  # wraps in Z_2^32 like the masked sum
        err = np.abs(fp.decode(total) - xs.sum(axis=0))
        assert err.max() <= n * fp.resolution / 2 + 1e-9
        assert err.max() > 0  # the check is not vacuous
    # n_max inputs at either end of the bound sum without wrapping
    fp = FixedPoint(1.0, 1000)
    for end in (1.0, -1.0):
        enc, _ = fp.encode(np.full(3, end))
        assert np.array_equal(fp.decode(enc * np.uint32(1000)), np.full(3, 1000 * end))


def test_clipping_is_counted_and_clips_to_the_bound():
    fp = FixedPoint(0.5, 8)
    x = np.array([0.1, 0.7, -2.0, 0.5, -0.5, 0.0])
    enc, clipped = fp.encode(x)
    assert clipped == 2  # 0.7, -2.0; ±0.5 is at the bound, not beyond it
    got = fp.decode(enc)
    assert list(got[1:5]) == [0.5, -0.5, 0.5, -0.5]  # clipped to ±bound exactly
    assert abs(got[0] - 0.1) <= fp.resolution / 2 and got[5] == 0.0
    for bad in (np.inf, -np.inf, np.nan):  # a diverged input is refused, never zeroed
        with pytest.raises(ValueError, match="NaN or infinite"):
            fp.encode(np.array([0.1, bad]))


@pytest.mark.parametrize(
    "bound, n_max, match",
    [
        (2.0**31, 1, "overflow 32 bits"),
        (1.0, 2**31, "overflow 32 bits"),
        (1e6, 10_000, "overflow 32 bits"),
        (0.0, 4, "bound must be > 0"),
        (-1.0, 4, "bound must be > 0"),
        (math.inf, 4, "bound must be > 0"),
        (math.nan, 4, "bound must be > 0"),
        (1.0, 0, "n_max must be >= 1"),
    ],
)
def test_fixed_point_refuses_what_cannot_sum_in_32_bits(bound, n_max, match):
    with pytest.raises(ValueError, match=match):
        FixedPoint(bound, n_max)


def test_n_max_inputs_at_the_bound_never_wrap_even_after_rounding():
    bound = 2.0**30 - 0.5  # bits = 0; rint(bound) = 2^30 (ties to even)
    fp = FixedPoint(bound, 2)
    enc, _ = fp.encode(np.array([bound]))
    assert fp.decode(enc + enc)[0] > 0


# --------------------------------------------------------------------------- masking


def _pair_seed(keys, round_, u, v) -> bytes:
    return secagg.agree(keys[u][0], keys[v][1], secagg.mask_info(round_, u, v))


@pytest.mark.parametrize("n, k", [(12, 4), (15, 6), (9, 8), (20, 0)])
def test_unmasking_after_random_drops_is_exact(n, k):
    """Users mask with every neighbour; a random set drops after masking (sends no y). The server
    sums the survivors' y, removes their self masks and the masks they share with the dropped:
    the survivors' encoded inputs, to the last unit of Z_2^32."""
    rng = np.random.default_rng(n)
    users = sorted(int(u) for u in rng.choice(500, n, replace=False))
    keys = {u: secagg.new_keypair() for u in users}
    graph = secagg.harary_graph(users, k or secagg.default_degree(n))
    fp = FixedPoint(1.0, n)
    length, round_ = 257, 7
    x = {u: fp.encode(rng.uniform(-1.2, 1.2, length))[0] for u in users}
    b = {u: secagg.new_seed() for u in users}
    y = {
        u: secagg.masked_input(x[u], b[u], {v: _pair_seed(keys, round_, u, v) for v in graph[u]}, u)
        for u in users
    }
    assert all(y[u].dtype == np.uint32 and not np.array_equal(y[u], x[u]) for u in users)
    for n_dropped in (0, 1, 2, n // 3, n // 2, n - 2):
        for _ in range(3):
            dropped = {int(u) for u in rng.choice(users, n_dropped, replace=False)}
            alive = [u for u in users if u not in dropped]
            total = np.zeros(length, dtype=np.uint32)
            for u in alive:
                total += y[u]
            expected = np.zeros(length, dtype=np.uint32)
            for u in alive:
                expected += x[u]
            # the server's pairs: (survivor v, dropped u, s_uv), from u's rebuilt key and v's public
            pairs = [
                (v, u, _pair_seed(keys, round_, u, v))
                for u in sorted(dropped)
                for v in graph[u]
                if v not in dropped
            ]
            out = secagg.remove_masks(total, [b[u] for u in alive], pairs)
            assert out.dtype == np.uint32 and np.array_equal(out, expected)
            if pairs:  # the dropped users' masks do not cancel by themselves
                assert not np.array_equal(
                    secagg.remove_masks(total, [b[u] for u in alive], []), expected
                )
            assert not np.array_equal(secagg.remove_masks(total, [], pairs), expected)


def test_unmasking_from_shamir_shares_as_the_server_does():
    """The server's path end to end (complete graph, so that it is deterministic): shares of b_u
    and s_u^SK with each neighbour; after drops the survivors reveal one share of each source —
    of b_u for a survivor, of s_u^SK for a dropped user — and the server rebuilds the seeds and
    the dropped users' keys (checked against their public keys) from t of them."""
    users, round_, length = [2, 3, 5, 8, 13, 21, 34], 1, 64
    n = len(users)
    graph = secagg.harary_graph(users, n - 1)
    k = n - 1
    t = secagg.default_threshold(k)
    keys = {u: secagg.new_keypair() for u in users}
    b = {u: secagg.new_seed() for u in users}
    held = {v: {} for v in users}  # v -> u -> (share of b_u, share of s_u^SK)
    for u in users:
        bs, ss = secagg.share_secret(b[u], k, t), secagg.share_secret(keys[u][0], k, t)
        for i, v in enumerate(graph[u]):
            held[v][u] = (bs[i], ss[i])
    fp = FixedPoint(2.0, n)
    rng = np.random.default_rng(5)
    x = {u: fp.encode(rng.uniform(-2, 2, length))[0] for u in users}
    y = {
        u: secagg.masked_input(x[u], b[u], {v: _pair_seed(keys, round_, u, v) for v in graph[u]}, u)
        for u in users
    }
    dropped = {5, 21}
    alive = [u for u in users if u not in dropped]
    total = np.sum([y[u] for u in alive], axis=0, dtype=np.uint32)
    b_pts, s_pts = {}, {}
    for v in alive:  # each survivor reveals, per source, one share, never both
        for u, (sb, ss) in held[v].items():
            point = graph[u].index(v) + 1
            (b_pts if u not in dropped else s_pts).setdefault(u, {})[point] = (
                sb if u not in dropped else ss
            )
    self_seeds = [secagg.combine_shares(b_pts[u], t) for u in alive]
    assert self_seeds == [b[u] for u in alive]
    pairs = []
    for u in sorted(dropped):
        s_sk = secagg.combine_shares(s_pts[u], t)
        assert secagg.public_of(s_sk) == keys[u][1]
        pairs += [
            (v, u, secagg.agree(s_sk, keys[v][1], secagg.mask_info(round_, u, v)))
            for v in graph[u]
            if v not in dropped
        ]
    out = secagg.remove_masks(total, self_seeds, pairs)
    assert np.array_equal(out, np.sum([x[u] for u in alive], axis=0, dtype=np.uint32))
    sums = np.sum([fp.decode(x[u]) for u in alive], axis=0)
    assert np.allclose(fp.decode(out), sums, atol=len(alive) * fp.resolution)


# --------------------------------------------------------------------------- a masked input is uniform

N_WORDS = 1 << 16  # 256 per byte value: the chi-square tests' expected counts
P_MIN = 1e-6  # a p-value threshold with a huge margin (seeds fixed: deterministic anyway)


def _masked(x: np.ndarray, label: str, me: int = 10) -> np.ndarray:
    pairs = {v: _seed(f"{label}/pair/{v}") for v in (3, 7, 12, 15)}  # 2 below me, 2 above
    return secagg.masked_input(x, _seed(f"{label}/self"), pairs, me)


def _uniform_p(words: np.ndarray) -> float:
    """The smallest p-value of chi-square tests against uniform: each of the 4 bytes (256
    bins) and the top bit."""
    ps = []
    for shift in (0, 8, 16, 24):
        counts = np.bincount(
            ((words >> np.uint32(shift)) & np.uint32(0xFF)).astype(np.int64), minlength=256
        )
        ps.append(stats.chisquare(counts).pvalue)
    top = np.bincount((words >> np.uint32(31)).astype(np.int64), minlength=2)
    ps.append(stats.chisquare(top).pvalue)
    return min(ps)


def test_a_masked_input_is_uniform_whatever_the_input():
    fp = FixedPoint(1.0, 100)
    x_zero = fp.encode(np.zeros(N_WORDS))[0]
    x_bound = fp.encode(np.ones(N_WORDS))[0]  # every coordinate at the bound: one constant
    x_ramp = fp.encode(np.linspace(-1, 1, N_WORDS))[0]
    ys = {
        name: _masked(x, name)
        for name, x in (("zero", x_zero), ("bound", x_bound), ("ramp", x_ramp))
    }
    for name, y in ys.items():
        assert _uniform_p(y) > P_MIN, name
        assert abs(float(np.mean(y >> np.uint32(31))) - 0.5) < 0.01, name  # σ = 0.002
    # the two very different inputs cannot be told apart from their masked vectors
    low = {
        name: np.bincount((y & np.uint32(0xFF)).astype(np.int64), minlength=256)
        for name, y in ys.items()
    }
    assert stats.chi2_contingency(np.stack([low["zero"], low["bound"]])).pvalue > P_MIN
    assert (
        stats.ks_2samp(ys["zero"].astype(np.float64), ys["bound"].astype(np.float64)).pvalue > P_MIN
    )
    assert (
        stats.ks_2samp(ys["zero"].astype(np.float64), ys["ramp"].astype(np.float64)).pvalue > P_MIN
    )
    # the tests have the power to see a weak mask: the inputs plus a 16-bit mask are told apart
    # (and the inputs themselves are far from uniform)
    weak = secagg.prg(_seed("weak"), N_WORDS) >> np.uint32(16)
    assert _uniform_p(x_bound + weak) < 1e-100 and _uniform_p(x_ramp) < 1e-100
    assert (
        stats.ks_2samp(
            (x_zero + weak).astype(np.float64), (x_bound + weak).astype(np.float64)
        ).pvalue
        < 1e-100
    )


def test_one_coordinate_over_many_masks_is_uniform():
    """The same fixed input coordinate masked with fresh seeds (one per round): its values over
    4096 rounds are uniform too, for 0 and for the bound alike."""
    fp = FixedPoint(1.0, 100)
    for value in (0.0, 1.0):
        x = fp.encode(np.full(1, value))[0]
        words = np.array(
            [_masked(x, f"round/{r}/{value}")[0] for r in range(4096)], dtype=np.uint32
        )
        top = np.bincount((words >> np.uint32(28)).astype(np.int64), minlength=16)  # 256 a bin
        assert stats.chisquare(top).pvalue > P_MIN


# --------------------------------------------------------------------------- the run's record


@pytest.mark.parametrize(
    "values, field",
    [
        ({"neighbours": -1}, "neighbours"),
        ({"neighbours": 1}, "neighbours"),
        ({"neighbours": 2.5}, "neighbours"),
        ({"neighbours": True}, "neighbours"),
        ({"threshold": -2}, "threshold"),
        ({"threshold": 5, "neighbours": 4}, "threshold"),
        ({"min_users": "2"}, "min_users"),
        ({"bound": -1.0}, "bound"),
        ({"bound": math.inf}, "bound"),
        ({"bound": math.nan}, "bound"),
        ({"bound": "1"}, "bound"),
        ({"stage_dropout": 1.0}, "stage_dropout"),
        ({"stage_dropout": -0.1}, "stage_dropout"),
        ({"stage_dropout": True}, "stage_dropout"),
    ],
)
def test_bad_secure_aggregation_values_are_one_line_errors(values, field):
    with pytest.raises(ValueError) as err:
        SecureAggregation.from_dict(values)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"secure_aggregation.{field}:"), text
    with pytest.raises(ConditionsError, match=f"secure_aggregation.{field}"):
        Conditions(secure_aggregation=dict(values))


def test_unknown_secure_aggregation_keys_are_named():
    with pytest.raises(ValueError) as err:
        SecureAggregation.from_dict({"neighbors": 4, "k": 2, "threshold": 2})
    text = str(err.value)
    assert "\n" not in text and "unknown key(s) k, neighbors" in text and "neighbours" in text
    with pytest.raises(ConditionsError, match="neighbors"):
        Conditions(secure_aggregation={"neighbors": 4})


def test_good_secure_aggregation_values():
    assert SecureAggregation.from_dict({}) == SecureAggregation()
    sa = SecureAggregation.from_dict(
        {"neighbours": 6, "threshold": 3, "bound": 2, "min_users": 3, "stage_dropout": 0.25}
    )
    assert (sa.neighbours, sa.threshold, sa.bound, sa.min_users, sa.stage_dropout) == (
        6,
        3,
        2,
        3,
        0.25,
    )
    c = Conditions(secure_aggregation={"stage_dropout": 0.3})
    assert c.secure_aggregation == SecureAggregation(stage_dropout=0.3)
    assert Conditions().secure_aggregation is None
    assert (
        Conditions.from_dict({"secure_aggregation": {}}).secure_aggregation == SecureAggregation()
    )


def test_secure_aggregation_true_false_or_a_table_nothing_else():
    # `secure_aggregation = true` under [conditions]: the defaults; false: off
    assert Conditions(secure_aggregation=True).secure_aggregation == SecureAggregation()
    assert Conditions(secure_aggregation=False).secure_aggregation is None
    for value in ("yes", 1, [2]):
        with pytest.raises(ConditionsError, match="secure_aggregation"):
            Conditions(secure_aggregation=value)
