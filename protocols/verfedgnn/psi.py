"""User alignment for VerFedGNN (Algorithm 1, step 1) by an OPRF-based private set intersection.

Every party turns each of its user ids into a token with the blind-RSA OPRF of privacy/oprf.py
(a key-server node signs blinded values it cannot read), sends only the sorted tokens to the
server, and the server intersects the token sets. It answers each party with the positions of the
common tokens in that party's sorted token list, in the order of the sorted common tokens, which
is the aligned user index 0..N−1 that all parties and the server then share. The server sees
tokens (pseudo-random 32-byte strings; without the key it cannot evaluate id ↦ token) and the
key server sees uniformly random blinded values; no raw user id leaves a party.

The key server's RSA key is drawn from its node RNG (primes found with gmpy2.next_prime on
seeded random numbers) so that a run is reproducible from its seed; a real deployment would draw
it from the operating system's generator (privacy.oprf.generate_key).
"""

from __future__ import annotations

import math

import gmpy2
import numpy as np
from cryptography.hazmat.primitives.asymmetric import rsa

from privacy.oprf import TOKEN_BYTES

PUBLIC_EXPONENT = 65537


def _prime(rng: np.random.Generator, bits: int) -> int:
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


def pack_tokens(tokens: list[bytes]) -> bytes:
    """Concatenate 32-byte tokens (a blob payload's content)."""
    if any(len(t) != TOKEN_BYTES for t in tokens):
        raise ValueError(f"tokens must be {TOKEN_BYTES} bytes each")
    return b"".join(tokens)


def unpack_tokens(raw: bytes) -> list[bytes]:
    if len(raw) % TOKEN_BYTES:
        raise ValueError(f"token blob of {len(raw)} bytes is not a multiple of {TOKEN_BYTES}")
    return [raw[i : i + TOKEN_BYTES] for i in range(0, len(raw), TOKEN_BYTES)]


def intersect_positions(token_lists: list[list[bytes]]) -> list[np.ndarray]:
    """For each party's sorted token list, the positions of the common tokens, in the order of
    the sorted common tokens (aligned user index j ↦ position in that party's list)."""
    common = set(token_lists[0])
    for toks in token_lists[1:]:
        common &= set(toks)
    order = sorted(common)
    out = []
    for toks in token_lists:
        where = {t: i for i, t in enumerate(toks)}
        out.append(np.array([where[t] for t in order], dtype=np.int64))
    return out


def common_positions(tokens: list[bytes], common: list[bytes]) -> np.ndarray | None:
    """Positions of the ``common`` tokens (in their order) in one party's sorted token list, or
    None if one is missing: how a party that lost its alignment rejoins the set-up's index."""
    where = {t: i for i, t in enumerate(tokens)}
    if any(t not in where for t in common):
        return None
    return np.array([where[t] for t in common], dtype=np.int64)
