"""RSA blind-signature OPRF for item tokens (FedPerGNN, Wu et al. 2022, §"privacy-preserving
user-item graph expansion"; Chaum blind signatures over a full-domain hash).

A key server holds an RSA key (N, e, d). A user turns an item id x into a token that the
matcher can compare across users but that nobody without d can compute:

    user:        m  = H(x)                    full-domain hash into Z_N      (FDH)
                 m' = m · r^e  mod N          r uniform in Z_N^*             (blind)
    key server:  s' = m'^d     mod N          via CRT with p, q              (blind_sign)
    user:        s  = s' · r⁻¹ mod N          = H(x)^d mod N                 (unblind)
                 check s^e ≡ H(x) (mod N)     else the key server cheated    (verify)
                 token = SHA-256(label ‖ s)   32 bytes                       (finalize)

Because r ↦ r^e is a bijection of Z_N^*, m' is uniform in Z_N^* whatever x is: the key
server sees random numbers. The matcher sees only tokens; without d it cannot evaluate
x ↦ token, so enumerating the small id space does not help it (see
privacy/leakage/dictionary.py). It could still query the key server like a user (an online
dictionary attack); the defence is the key server's signature budget
(``privacy.key_server.BlindSigner``, FedPerGNN's ``oprf_budget``): it signs at most that many
values for one user over a run and refuses the rest, so one identity maps at most that many
item ids to tokens (a Sybil with many identities multiplies it: the budget bounds the attack per
identity, it does not stop it).

Secrets: the key (``generate_key``) and the blinding factors r come from the operating system's
generator (OpenSSL's, and ``secrets`` through :class:`OsRandom`), never from a run's seed; the
tokens depend on the key and the ids only, so nothing a run computes depends on them.
:class:`BlindingRng` is a seeded generator for tests that need repeatable blinded values.

Baselines a naive design would use, kept here for the attack tests:
``textbook_rsa_token`` (deterministic RSA encryption of the id under the public key, which
anyone can recompute) and ``shared_key_tokens`` (every client holds the signing key and
computes the PRF itself, so one leaked client key opens every token).

Modular exponentiation uses ``gmpy2`` when it is importable (about 8× faster for 2048-bit
keys) and Python's 3-argument ``pow`` otherwise; both give identical results.
"""

from __future__ import annotations

import copyreg
import hashlib
import math
import operator
import secrets
from collections.abc import Iterable, Sequence
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

try:  # optional accelerator; pure-Python pow is the fallback
    import gmpy2

    BACKEND = "gmpy2"

    def _powmod(base: int, exp: int, mod: int) -> int:
        return int(gmpy2.powmod(base, exp, mod))

    def _invert(a: int, mod: int) -> int:
        return int(gmpy2.invert(a, mod))

    _mpz = gmpy2.mpz
except ImportError:  # pragma: no cover - exercised only where gmpy2 is absent
    BACKEND = "python"

    def _powmod(base: int, exp: int, mod: int) -> int:
        return pow(base, exp, mod)

    def _invert(a: int, mod: int) -> int:
        return pow(a, -1, mod)

    def _mpz(a: int) -> int:
        return a


FDH_LABEL = b"privrec/oprf/fdh/v1"
TOKEN_LABEL = b"privrec/oprf/token/v1"
RNG_LABEL = b"privrec/oprf/blinding-rng/v1"
TOKEN_BYTES = 32
_ID_BYTES = 8  # item ids are encoded as unsigned 64-bit big-endian integers
_FDH_EXTRA_BYTES = 16  # 128 extra bits make the reduction mod N statistically uniform


class OprfVerificationError(ValueError):
    """A signature returned by the key server does not verify: s^e ≢ H(x) (mod N)."""


class SupportsGetrandbits(Protocol):
    def getrandbits(self, k: int, /) -> int: ...


class OsRandom:
    """Blinding factors from the operating system's generator (``secrets``): what every protocol
    uses. It holds no state, so a node that keeps one pickles (``random.SystemRandom`` refuses
    to, having no state to save)."""

    def getrandbits(self, k: int) -> int:
        if k < 0:
            raise ValueError(f"number of bits must be non-negative, got {k}")
        return secrets.randbits(k)

    def __eq__(self, other) -> bool:
        return isinstance(other, OsRandom)

    def __hash__(self) -> int:
        return hash(OsRandom)


class BlindingRng:
    """Deterministic generator for blinding factors: keyed BLAKE2b in counter mode, for tests
    that need repeatable blinded values (``BlindingRng.from_seed(seed, label)``). A protocol
    never uses it: its blinding factors are secrets and come from :class:`OsRandom`; one
    derived from a published seed would let anyone unblind. (``random.Random`` works too but is
    not a cryptographic generator.)"""

    def __init__(self, seed: bytes) -> None:
        if not isinstance(seed, bytes | bytearray):
            raise ValueError(f"BlindingRng seed must be bytes, got {type(seed).__name__}")
        self._key = hashlib.blake2b(bytes(seed), digest_size=64, person=b"privrec-oprf").digest()
        self._counter = 0

    @classmethod
    def from_seed(cls, seed: int, node_id: int | str) -> BlindingRng:
        return cls(RNG_LABEL + repr((int(seed), node_id)).encode())

    def randbytes(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            block = self._counter.to_bytes(16, "big")
            out += hashlib.blake2b(block, key=self._key, digest_size=64).digest()
            self._counter += 1
        return bytes(out[:n])

    def getrandbits(self, k: int) -> int:
        if k < 0:
            raise ValueError(f"number of bits must be non-negative, got {k}")
        value = int.from_bytes(self.randbytes((k + 7) // 8), "big")
        return value >> (8 * ((k + 7) // 8) - k)


# ---------------------------------------------------------------------------- checkpoints


def _public_numbers_from(e: int, n: int) -> rsa.RSAPublicNumbers:
    return rsa.RSAPublicNumbers(e, n)


def _private_key_from_der(der: bytes) -> rsa.RSAPrivateKey:
    return serialization.load_der_private_key(der, password=None)


def _reduce_private_key(key: rsa.RSAPrivateKey):
    der = key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return _private_key_from_der, (der,)


# cryptography's key objects do not pickle; a run checkpoint (engine/checkpoint.py) pickles
# every node, key servers and users included, so teach pickle (and cloudpickle, which reads the
# same table) to carry keys as PKCS#8 DER and public numbers as (e, N). A checkpoint therefore
# holds the key server's secret key, like every other node's private state: keep it private.
copyreg.pickle(rsa.RSAPublicNumbers, lambda p: (_public_numbers_from, (p.e, p.n)))
try:
    from cryptography.hazmat.bindings._rust import openssl as _rust_openssl

    copyreg.pickle(_rust_openssl.rsa.RSAPrivateKey, _reduce_private_key)
except (ImportError, AttributeError):  # pragma: no cover - other cryptography builds
    pass


# ---------------------------------------------------------------------------- key server side


def generate_key(bits: int = 2048) -> rsa.RSAPrivateKey:
    """A fresh RSA key for the key server (public exponent 65537, a modulus of exactly ``bits``
    bits), drawn by OpenSSL from the operating system's generator."""
    if bits < 1024:
        raise ValueError(f"RSA modulus must have at least 1024 bits, got {bits}")
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def public_numbers(key: rsa.RSAPrivateKey | rsa.RSAPublicKey) -> rsa.RSAPublicNumbers:
    """(N, e) of a key: what the key server publishes."""
    if isinstance(key, rsa.RSAPrivateKey):
        return key.public_key().public_numbers()
    if isinstance(key, rsa.RSAPublicKey):
        return key.public_numbers()
    raise ValueError(f"expected an RSA key, got {type(key).__name__}")


def _check_residues(values: Sequence[int], n: int, what: str) -> list[int]:
    out = []
    for i, v in enumerate(values):
        try:
            v = operator.index(v)
        except TypeError:
            raise ValueError(f"{what}[{i}] is not an integer: {type(v).__name__}") from None
        if not 0 < v < n:
            raise ValueError(f"{what}[{i}] is outside 1..N-1 for this key")
        out.append(v)
    return out


def blind_sign(key: rsa.RSAPrivateKey, blinded: Sequence[int]) -> list[int]:
    """s' = m'^d mod N for every blinded value, computed with the CRT
    (s_p = m'^{d mod p-1} mod p, s_q = m'^{d mod q-1} mod q, s' = s_q + q·(q⁻¹(s_p − s_q) mod p))."""
    priv = key.private_numbers()
    n = priv.public_numbers.n
    values = _check_residues(blinded, n, "blinded")
    p, q, dp, dq, q_inv = (_mpz(x) for x in (priv.p, priv.q, priv.dmp1, priv.dmq1, priv.iqmp))
    out = []
    for m in values:
        m = _mpz(m)
        s_p = _powmod(m % p, dp, p)
        s_q = _powmod(m % q, dq, q)
        out.append(int(s_q + q * ((q_inv * (s_p - s_q)) % p)))
    return out


# ---------------------------------------------------------------------------- user side


def _encode_id(item_id: int) -> bytes:
    try:
        x = operator.index(item_id)
    except TypeError:
        raise ValueError(f"item id must be an integer, got {type(item_id).__name__}") from None
    if not 0 <= x < 2 ** (8 * _ID_BYTES):
        raise ValueError(f"item id must be in [0, 2^64), got {x}")
    return x.to_bytes(_ID_BYTES, "big")


def _modulus_bytes(n: int) -> int:
    return (n.bit_length() + 7) // 8


def full_domain_hash(item_id: int, n: int) -> int:
    """H(x) ∈ Z_N: SHA-256(label ‖ x ‖ counter) blocks (MGF1-style) expanded to len(N) + 16
    bytes and reduced mod N (the 128 extra bits make the result uniform in Z_N up to 2^-128)."""
    if n < 3:
        raise ValueError(f"modulus must be > 2, got {n}")
    prefix = FDH_LABEL + _encode_id(item_id)
    need = _modulus_bytes(n) + _FDH_EXTRA_BYTES
    stream = b"".join(
        hashlib.sha256(prefix + c.to_bytes(4, "big")).digest() for c in range(-(-need // 32))
    )
    return int.from_bytes(stream[:need], "big") % n


def _as_rng(rng: SupportsGetrandbits | int) -> SupportsGetrandbits:
    if isinstance(rng, int):
        return BlindingRng(RNG_LABEL + str(rng).encode())
    if not hasattr(rng, "getrandbits"):
        raise ValueError(f"rng must be a seed or have getrandbits(), got {type(rng).__name__}")
    return rng


def _uniform_unit(rng: SupportsGetrandbits, n: int) -> int:
    """r uniform in Z_N^* by rejection (expected < 2 draws)."""
    bits = n.bit_length()
    while True:
        r = rng.getrandbits(bits)
        if 1 < r < n and math.gcd(r, n) == 1:
            return r


def blind(
    ids: Iterable[int], public: rsa.RSAPublicNumbers, rng: SupportsGetrandbits | int
) -> tuple[list[int], list[int]]:
    """m' = H(x)·r^e mod N for every id, r fresh and uniform in Z_N^*.
    Returns (blinded values for the key server, unblinders r⁻¹ mod N kept by the user)."""
    n, e = public.n, public.e
    rng = _as_rng(rng)
    blinded, unblinders = [], []
    for x in ids:
        r = _uniform_unit(rng, n)
        blinded.append(full_domain_hash(x, n) * _powmod(r, e, n) % n)
        unblinders.append(_invert(r, n))
    return blinded, unblinders


def _token(signature: int, n: int) -> bytes:
    return hashlib.sha256(TOKEN_LABEL + signature.to_bytes(_modulus_bytes(n), "big")).digest()


def unblind_and_finalize(
    ids: Sequence[int],
    signed_blinded: Sequence[int],
    unblinders: Sequence[int],
    public: rsa.RSAPublicNumbers,
) -> list[bytes]:
    """s = s'·r⁻¹ mod N, verify s^e ≡ H(x), token = SHA-256(label ‖ s) (32 bytes per id).
    Raises OprfVerificationError if any signature does not verify (a cheating key server)."""
    n, e = public.n, public.e
    if not len(ids) == len(signed_blinded) == len(unblinders):
        raise ValueError(
            f"ids, signed values and unblinders differ in length: "
            f"{len(ids)}, {len(signed_blinded)}, {len(unblinders)}"
        )
    signed = _check_residues(signed_blinded, n, "signed_blinded")
    inverses = _check_residues(unblinders, n, "unblinders")
    tokens, bad = [], []
    for x, s_blind, r_inv in zip(ids, signed, inverses, strict=True):
        s = s_blind * r_inv % n
        if _powmod(s, e, n) != full_domain_hash(x, n):
            bad.append(x)
        tokens.append(_token(s, n))
    if bad:
        raise OprfVerificationError(
            f"{len(bad)} of {len(ids)} signatures from the key server do not verify "
            f"(first bad id: {bad[0]}); the key server is faulty or cheating"
        )
    return tokens


def oprf_tokens(
    ids: Sequence[int], key: rsa.RSAPrivateKey, rng: SupportsGetrandbits | int
) -> list[bytes]:
    """The whole round trip in one process (blind → blind_sign → unblind_and_finalize);
    for tests and benchmarks — a protocol runs the three steps on different nodes."""
    pub = public_numbers(key)
    blinded, unblinders = blind(ids, pub, rng)
    return unblind_and_finalize(ids, blind_sign(key, blinded), unblinders, pub)


# ---------------------------------------------------------------------------- baselines


def textbook_rsa_token(item_id: int, public: rsa.RSAPublicNumbers) -> bytes:
    """Deterministic textbook RSA encryption x^e mod N of the id (len(N) bytes): what a naive
    design sends. Anyone holding the public key can recompute it."""
    x = operator.index(item_id)
    if not 0 <= x < public.n:
        raise ValueError(f"item id must be in [0, N), got {x}")
    return _powmod(x, public.e, public.n).to_bytes(_modulus_bytes(public.n), "big")


def token_of_unsigned_hash(item_id: int, n: int) -> bytes:
    """SHA-256(label ‖ H(x)): the token with the signature left out, a keyless guess at the
    token function that anyone knowing N can evaluate (differs from every OPRF token)."""
    return _token(full_domain_hash(item_id, n), n)


def shared_key_tokens(ids: Iterable[int], key: rsa.RSAPrivateKey) -> list[bytes]:
    """The PRF evaluated directly with the private key: SHA-256(label ‖ H(x)^d mod N).
    Equal to the OPRF tokens for the same key. Models the "key shared by all clients" design,
    where every client holds ``key`` and computes tokens itself."""
    n = public_numbers(key).n
    ids = list(ids)
    signatures = blind_sign(key, [full_domain_hash(x, n) for x in ids])
    return [_token(s, n) for s in signatures]
