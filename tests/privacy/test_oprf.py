"""RSA blind-signature OPRF (privacy/oprf.py): correctness of the round trip, determinism per
(seed, node), detection of a cheating key server, the FDH, the baselines and input checks."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import sympy
from cryptography.hazmat.primitives.asymmetric import rsa
from scipy import stats

from privacy import oprf


def fixed_key(seed: int, bits: int = 1024) -> rsa.RSAPrivateKey:
    """A deterministic RSA key (cryptography's generator cannot be seeded)."""
    rnd = random.Random(seed)
    e = 65537
    while True:
        p, q = (sympy.nextprime(rnd.getrandbits(bits // 2) | (3 << (bits // 2 - 2))) for _ in "pq")
        phi = (p - 1) * (q - 1)
        if p != q and math.gcd(e, phi) == 1:
            break
    d = pow(e, -1, phi)
    pub = rsa.RSAPublicNumbers(e, p * q)
    numbers = rsa.RSAPrivateNumbers(
        p, q, d, rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q), pub
    )
    return numbers.private_key()


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return fixed_key(1)


def test_round_trip_2048_bit_key_gives_the_prf_value():
    key = oprf.generate_key(2048)
    assert key.key_size == 2048
    ids = [0, 1, 7, 40_000, 2**40]
    tokens = oprf.oprf_tokens(ids, key, oprf.BlindingRng.from_seed(0, "user-3"))
    assert tokens == oprf.shared_key_tokens(ids, key)
    assert all(len(t) == oprf.TOKEN_BYTES for t in tokens)
    assert len(set(tokens)) == len(ids)


def test_two_users_get_the_same_token_for_the_same_item(key):
    ids = [5, 17, 99]
    a = oprf.oprf_tokens(ids, key, oprf.BlindingRng.from_seed(0, 1))
    b = oprf.oprf_tokens(ids[::-1], key, oprf.BlindingRng.from_seed(0, 2))
    assert a == b[::-1]
    other_key = fixed_key(2)
    assert oprf.oprf_tokens(ids, other_key, 3) != a  # tokens depend on the key server's key


def test_blinding_is_deterministic_per_seed_and_node(key):
    pub = oprf.public_numbers(key)
    b1, u1 = oprf.blind([3, 4], pub, oprf.BlindingRng.from_seed(7, 11))
    b2, u2 = oprf.blind([3, 4], pub, oprf.BlindingRng.from_seed(7, 11))
    b3, _ = oprf.blind([3, 4], pub, oprf.BlindingRng.from_seed(7, 12))
    assert (b1, u1) == (b2, u2)
    assert set(b1).isdisjoint(b3)
    assert oprf.blind([3], pub, 5) == oprf.blind([3], pub, 5)  # an int seed works too
    assert all(r_inv * pow(r_inv, -1, pub.n) % pub.n == 1 for r_inv in u1)


def test_blind_sign_matches_plain_exponentiation(key):
    pub = oprf.public_numbers(key)
    d = key.private_numbers().d
    rnd = random.Random(0)
    values = [2, pub.n - 1, 123456789, *(rnd.getrandbits(1000) + 2 for _ in range(5))]
    assert oprf.blind_sign(key, values) == [pow(v, d, pub.n) for v in values]


def test_python_fallback_gives_identical_tokens(key, monkeypatch):
    ids = list(range(10))
    fast = oprf.oprf_tokens(ids, key, 9)
    monkeypatch.setattr(oprf, "_powmod", pow)
    monkeypatch.setattr(oprf, "_invert", lambda a, m: pow(a, -1, m))
    monkeypatch.setattr(oprf, "_mpz", int)
    assert oprf.oprf_tokens(ids, key, 9) == fast


def test_cheating_key_server_is_detected(key):
    pub = oprf.public_numbers(key)
    ids = [1, 2, 3]
    blinded, unblinders = oprf.blind(ids, pub, 0)
    signed = oprf.blind_sign(key, blinded)
    tampered = list(signed)
    tampered[1] = tampered[1] * 2 % pub.n
    with pytest.raises(oprf.OprfVerificationError, match="1 of 3"):
        oprf.unblind_and_finalize(ids, tampered, unblinders, pub)
    other = fixed_key(3)
    wrong = [
        s % pub.n
        for s in oprf.blind_sign(
            other, [b % other.public_key().public_numbers().n for b in blinded]
        )
    ]
    with pytest.raises(oprf.OprfVerificationError, match="3 of 3"):  # signed with another key
        oprf.unblind_and_finalize(ids, wrong, unblinders, pub)
    with pytest.raises(ValueError):  # key server signed values in a different order
        oprf.unblind_and_finalize(ids, signed[::-1], unblinders, pub)


def test_full_domain_hash_is_in_range_deterministic_and_uniform(key):
    n = oprf.public_numbers(key).n
    h = [oprf.full_domain_hash(x, n) for x in range(4000)]
    assert all(0 <= v < n for v in h)
    assert oprf.full_domain_hash(123, n) == h[123]
    assert len(set(h)) == len(h)
    assert oprf.full_domain_hash(5, n) != oprf.full_domain_hash(5, n - 2)
    top = np.array([v * 16 // n for v in h])  # which sixteenth of [0, N) each value lies in
    assert stats.chisquare(np.bincount(top, minlength=16)).pvalue > 1e-3


def test_textbook_rsa_token_is_deterministic_encryption(key):
    pub = oprf.public_numbers(key)
    t = oprf.textbook_rsa_token(42, pub)
    assert t == oprf.textbook_rsa_token(42, pub)
    assert int.from_bytes(t, "big") == pow(42, pub.e, pub.n)


def test_blinding_rng_bits():
    rng = oprf.BlindingRng.from_seed(0, 0)
    draws = [rng.getrandbits(10) for _ in range(2000)]
    assert 0 <= min(draws) and max(draws) < 1024
    assert abs(np.mean(draws) - 511.5) < 5 * 295.6 / math.sqrt(2000)
    assert rng.getrandbits(0) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda k, p: oprf.generate_key(512),
        lambda k, p: oprf.full_domain_hash(-1, p.n),
        lambda k, p: oprf.full_domain_hash("3", p.n),
        lambda k, p: oprf.full_domain_hash(2**64, p.n),
        lambda k, p: oprf.blind_sign(k, [0]),
        lambda k, p: oprf.blind_sign(k, [p.n]),
        lambda k, p: oprf.blind_sign(k, [1.5]),
        lambda k, p: oprf.blind([1], p, object()),
        lambda k, p: oprf.unblind_and_finalize([1, 2], [3], [4], p),
        lambda k, p: oprf.textbook_rsa_token(p.n, p),
        lambda k, p: oprf.public_numbers("key"),
        lambda k, p: oprf.BlindingRng("seed"),
    ],
)
def test_bad_input_raises_value_error(key, call):
    with pytest.raises(ValueError):
        call(key, oprf.public_numbers(key))


def test_unsigned_hash_token_is_no_oprf_token(key):
    """The keyless guess SHA-256(label ‖ H(x)) that a matcher can evaluate never equals the token."""
    from privacy.leakage import dictionary_attack

    n = oprf.public_numbers(key).n
    ids = list(range(30))
    tokens = oprf.oprf_tokens(ids, key, 5)
    guess = [oprf.token_of_unsigned_hash(x, n) for x in ids]
    assert len(guess[0]) == oprf.TOKEN_BYTES and guess == [
        oprf.token_of_unsigned_hash(x, n) for x in ids
    ]
    assert not set(guess) & set(tokens)
    assert dictionary_attack(tokens, ids, lambda x: oprf.token_of_unsigned_hash(x, n)) == {}


def test_keys_and_public_numbers_pickle_for_checkpoints():
    import pickle

    from ray import cloudpickle

    key = oprf.generate_key(1024)
    public = oprf.public_numbers(key)
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        key2, public2 = loads(dumps((key, public)))
        assert public2 == public and oprf.public_numbers(key2) == public
        assert key2.private_numbers() == key.private_numbers()
        blinded, unblinders = oprf.blind([5, 9], public2, 7)
        signed = oprf.blind_sign(key2, blinded)
        assert oprf.unblind_and_finalize([5, 9], signed, unblinders, public) == oprf.oprf_tokens(
            [5, 9], key, 8
        )


def test_key_server_and_client_give_the_prf_value():
    """privacy/key_server.py: the signer/client pair computes the same tokens as the one-call
    OPRF, with blinding factors from the operating system (OsRandom, which pickles)."""
    import pickle

    from privacy.key_server import BlindSigner, OprfClient

    key = fixed_key(5)
    signer = BlindSigner(key)
    client = OprfClient()
    assert isinstance(client.blinding, oprf.OsRandom)
    assert pickle.loads(pickle.dumps(client)).blinding == client.blinding
    assert client.receive_key(*signer.public_numbers(), min_bits=1024) is None
    ids = [3, 1, 4]
    blinded = client.blind(ids)
    assert client.pending == 3 and client.answer_problem(signer.sign(blinded)) is None
    tokens = client.finalize(ids, signer.sign(blinded))
    assert tokens == oprf.oprf_tokens(ids, key, oprf.BlindingRng.from_seed(0, "other"))
    assert signer.signed == 2 * len(ids) and client.pending == 0
    assert client.blind(ids) != blinded  # fresh factors every exchange
