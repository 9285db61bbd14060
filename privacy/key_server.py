"""The two ends of the blind-RSA OPRF of privacy/oprf.py as plain state, used by FedPerGNN (item
tokens) and VerFedGNN (user alignment by PSI): the key server (an RSA key drawn from a seeded
generator, signing of blinded elements) and its client.

The key server publishes (N, e) and answers every blinded value m' with s' = m'^d mod N
(``oprf.blind_sign``); it sees only uniformly random numbers and never an id or a token. The
client caches (N, e), blinds its ids (m' = H(x)·r^e) and turns the signatures into tokens
(s = s'·r⁻¹, s^e = H(x)?, token = SHA-256(s)).

The key's primes come from the caller's seeded generator (gmpy2.next_prime on seeded random
numbers), so that a run is reproducible from its seed; a real deployment would draw the key from
the operating system's generator (``oprf.generate_key``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gmpy2
import numpy as np
from cryptography.hazmat.primitives.asymmetric import rsa

from privacy import oprf

PUBLIC_EXPONENT = 65537


def _prime(rng: np.random.Generator, bits: int) -> int:
    """The next prime after a random ``bits``-bit odd number with its top two bits set (so that
    the product of two has exactly 2·bits bits), with p − 1 prime to e."""
    while True:
        x = int.from_bytes(rng.bytes(bits // 8), "big") | (3 << (bits - 2)) | 1
        p = int(gmpy2.next_prime(x))
        if p.bit_length() == bits and math.gcd(PUBLIC_EXPONENT, p - 1) == 1:
            return p


def seeded_rsa_key(rng: np.random.Generator, bits: int = 2048) -> rsa.RSAPrivateKey:
    """An RSA key (e = 65537, modulus of ``bits`` bits) determined by ``rng``'s stream."""
    if bits < 1024 or bits % 16:
        raise ValueError(f"RSA modulus must have at least 1024 bits (multiple of 16), got {bits}")
    while True:
        p, q = _prime(rng, bits // 2), _prime(rng, bits // 2)
        if p != q and (p * q).bit_length() == bits:
            break
    if p < q:
        p, q = q, p
    d = pow(PUBLIC_EXPONENT, -1, math.lcm(p - 1, q - 1))
    numbers = rsa.RSAPrivateNumbers(
        p=p,
        q=q,
        d=d,
        dmp1=rsa.rsa_crt_dmp1(d, p),
        dmq1=rsa.rsa_crt_dmq1(d, q),
        iqmp=rsa.rsa_crt_iqmp(p, q),
        public_numbers=rsa.RSAPublicNumbers(PUBLIC_EXPONENT, p * q),
    )
    return numbers.private_key()


class BlindSigner:
    """The key server's state: the private key, and a count of the values it signed."""

    def __init__(self, key: rsa.RSAPrivateKey):
        self.key = key
        self.public = oprf.public_numbers(key)
        self.signed = 0

    @classmethod
    def seeded(cls, rng: np.random.Generator, bits: int) -> BlindSigner:
        return cls(seeded_rsa_key(rng, bits))

    def public_numbers(self) -> tuple[int, int]:
        """(N, e): what the key server publishes."""
        return self.public.n, self.public.e

    def sign(self, blinded: Sequence[int]) -> list[int]:
        """s' = m'^d mod N for every blinded value m'."""
        signed = oprf.blind_sign(self.key, blinded)
        self.signed += len(signed)
        return signed


class OprfClient:
    """A key server's client: the public key once received, and the blinding of one exchange."""

    def __init__(self, blinding: oprf.SupportsGetrandbits):
        self.blinding = blinding
        self.public: rsa.RSAPublicNumbers | None = None
        self._unblinders: list[int] = []

    def receive_key(self, n: int, e: int) -> None:
        self.public = rsa.RSAPublicNumbers(e, n)

    def blind(self, ids: Sequence[int]) -> list[int]:
        """m' = H(x)·r^e mod N for every id x (the factors r are kept for ``finalize``)."""
        blinded, self._unblinders = oprf.blind(ids, self.public, self.blinding)
        return blinded

    def finalize(self, ids: Sequence[int], signed: Sequence[int]) -> list[bytes]:
        """The tokens of ``ids`` (in their order) from the key server's signatures."""
        tokens = oprf.unblind_and_finalize(ids, signed, self._unblinders, self.public)
        self._unblinders = []
        return tokens
