"""The two ends of the blind-RSA OPRF of privacy/oprf.py as plain state, used by FedPerGNN (item
tokens) and VerFedGNN (user alignment by PSI): the key server (an RSA key, signing of blinded
values within a budget) and its client; and the wire form of the RSA values they exchange.

The key server publishes (N, e) and answers a blinded value m' with s' = m'^d mod N
(``oprf.blind_sign``); it sees only uniformly random numbers and never an id or a token. The
client checks (N, e) before it uses it (:func:`public_key_problem`), blinds its ids
(m' = H(x)·r^e) and turns the signatures into tokens (s = s'·r⁻¹, s^e = H(x)?, token =
SHA-256(s)).

**Secrets.** The key comes from the operating system's generator (:func:`new_key`, OpenSSL's
``rsa.generate_private_key``) and the blinding factors from ``secrets`` (``oprf.OsRandom``), in
every mode: nothing about them follows from a run's seed, which config.json and summary.json
publish. A run does not depend on them: a token depends on the key, but the protocols use tokens
only for equality (the matcher, the PSI) and order nothing by their value, and every RSA value
travels at the modulus' byte length (:func:`encode_residues`), so two runs with one seed give
the same metrics and bytes with different keys. What a run reports of the key is its
fingerprint (:func:`key_fingerprint`).

**What the key server checks** (:meth:`BlindSigner.refusal`): every blinded value lies in
1..N−1 and is prime to N (0, N or more, or a multiple of p or q is refused: reason ``range``),
and the values it signed for one client stay within its budget (reason ``budget``). A refused
request gets no signature at all (nothing of it is signed or counted).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from cluster import wire
from privacy import oprf

PUBLIC_EXPONENT = 65537
SECURE_KEY_BITS = 2048  # below this a report flags the key (quick settings only)
# the odd primes below 1000: a modulus divisible by one is no RSA modulus (a cheap sanity check)
_SMALL_PRIMES = math.prod(p for p in range(3, 1000, 2) if all(p % q for q in range(3, p, 2)))


def new_key(bits: int) -> rsa.RSAPrivateKey:
    """A fresh key server key from the operating system's generator (e = 65537, a modulus of
    exactly ``bits`` bits)."""
    return oprf.generate_key(bits)


def key_to_der(key: rsa.RSAPrivateKey) -> bytes:
    """The private key as PKCS#8 DER: how the driver hands one key to the replicas of a key
    server (plain bytes, whatever carries a node's constructor arguments)."""
    return key.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def key_from_der(der: bytes) -> rsa.RSAPrivateKey:
    key = serialization.load_der_private_key(bytes(der), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError(f"expected an RSA private key, got {type(key).__name__}")
    return key


def key_fingerprint(n: int, e: int) -> str:
    """SHA-256 (hex) of the public key (N, e) in its standard DER form (SubjectPublicKeyInfo), as
    a TLS or SSH key pin: what a report says of the key server's key."""
    der = (
        rsa.RSAPublicNumbers(e, n)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return hashlib.sha256(der).hexdigest()


def key_report(bits: int, fingerprint: str | None) -> dict[str, str]:
    """The key's lines of a privacy report: its fingerprint, its size and, below 2048 bits, that
    it is a quick setting and not a deployment's security level."""
    out = {}
    if fingerprint is not None:
        out["key_fingerprint"] = fingerprint
    out["key_size"] = f"RSA-{bits}, e = {PUBLIC_EXPONENT}, drawn from the operating system"
    if bits < SECURE_KEY_BITS:
        out["key_warning"] = (
            f"a {bits}-bit RSA modulus, below the {SECURE_KEY_BITS} bits of the default: "
            "fine for a quick run, not a deployment's security level"
        )
    return out


def public_key_problem(n: int, e: int, min_bits: int) -> str | None:
    """Why a client must not use (N, e), or None: e must be 65537 and N an odd modulus of at least
    ``min_bits`` bits with no small factor (a key that breaks these would let the key server
    bias or read the blinded values)."""
    if e != PUBLIC_EXPONENT:
        return f"public exponent {e}, expected {PUBLIC_EXPONENT}"
    if n.bit_length() < min_bits:
        return f"a modulus of {n.bit_length()} bits, expected at least {min_bits}"
    if n % 2 == 0 or math.gcd(n, _SMALL_PRIMES) != 1:
        return "the modulus has a small factor"
    return None


# --- RSA values on the wire --------------------------------------------------------------------
def residue_bytes(bits: int) -> int:
    """Bytes of one value below a ``bits``-bit modulus."""
    return (bits + 7) // 8


def encode_residues(values: Sequence[int], bits: int) -> bytes:
    """Values below a ``bits``-bit modulus (blinded values, signatures), each at the modulus' byte
    length: its size never depends on the values, hence on the key or the blinding factors."""
    width = residue_bytes(bits)
    return wire.encode_chunks([int(v).to_bytes(width, "big") for v in values], width)


def decode_residues(payload: bytes, bits: int, *, max_count: int | None = None) -> list[int]:
    width = residue_bytes(bits)
    return [
        int.from_bytes(c, "big") for c in wire.decode_chunks(payload, width, max_count=max_count)
    ]


def residues_size(count: int, bits: int) -> int:
    """Bytes of ``count`` values of :func:`encode_residues`."""
    return wire.blob_size(count * residue_bytes(bits))


class BlindSigner:
    """The key server's state: the private key, the values it signed in all and per client, and
    the budget of signatures per client (None: none)."""

    def __init__(self, key: rsa.RSAPrivateKey, budget: int | None = None):
        self.key = key
        self.public = oprf.public_numbers(key)
        self.budget = budget
        self.signed = 0
        self.issued: dict[str, int] = {}  # client -> values signed for it

    def public_numbers(self) -> tuple[int, int]:
        """(N, e): what the key server publishes."""
        return self.public.n, self.public.e

    def fingerprint(self) -> str:
        return key_fingerprint(self.public.n, self.public.e)

    def refusal(self, client: str, blinded: Sequence[int]) -> str | None:
        """Why a request of ``client`` is refused (a ``cluster.validate.REASONS`` entry), or None:
        ``range`` where a value is not in 1..N−1 or shares a factor with N, ``budget`` where
        signing it would take ``client`` past its budget."""
        n = self.public.n
        if any(not 0 < v < n or math.gcd(v, n) != 1 for v in blinded):
            return "range"
        if self.budget is not None and self.issued.get(client, 0) + len(blinded) > self.budget:
            return "budget"
        return None

    def sign(self, blinded: Sequence[int], client: str = "") -> list[int]:
        """s' = m'^d mod N for every blinded value m' (checked first: :meth:`refusal`)."""
        signed = oprf.blind_sign(self.key, blinded)
        self.signed += len(signed)
        self.issued[client] = self.issued.get(client, 0) + len(signed)
        return signed


class OprfClient:
    """A key server's client: the public key once received and checked, and the blinding of one
    exchange (factors from the operating system's generator unless a test passes its own)."""

    def __init__(self, blinding: oprf.SupportsGetrandbits | None = None):
        self.blinding = blinding if blinding is not None else oprf.OsRandom()
        self.public: rsa.RSAPublicNumbers | None = None
        self._unblinders: list[int] = []

    def receive_key(self, n: int, e: int, min_bits: int = SECURE_KEY_BITS) -> str | None:
        """Keep (N, e) if it passes :func:`public_key_problem`; else keep nothing and return why."""
        problem = public_key_problem(n, e, min_bits)
        if problem is None:
            self.public = rsa.RSAPublicNumbers(e, n)
        return problem

    @property
    def pending(self) -> int:
        """Values blinded and not yet finalized (the size of the answer it waits for)."""
        return len(self._unblinders)

    def blind(self, ids: Sequence[int]) -> list[int]:
        """m' = H(x)·r^e mod N for every id x (the factors r are kept for ``finalize``)."""
        blinded, self._unblinders = oprf.blind(ids, self.public, self.blinding)
        return blinded

    def answer_problem(self, signed: Sequence[int]) -> str | None:
        """Why the key server's answer cannot be finalized (a ``REASONS`` entry), or None: it must
        hold one value per value blinded (``shape``), each in 1..N−1 (``range``)."""
        if self.public is None or len(signed) != self.pending or not self.pending:
            return "shape"
        if any(not 0 < s < self.public.n for s in signed):
            return "range"
        return None

    def finalize(self, ids: Sequence[int], signed: Sequence[int]) -> list[bytes]:
        """The tokens of ``ids`` (in their order) from the key server's signatures; raises
        ``oprf.OprfVerificationError`` where one does not verify (the exchange is over either
        way: the blinding factors are dropped)."""
        unblinders, self._unblinders = self._unblinders, []
        return oprf.unblind_and_finalize(ids, signed, unblinders, self.public)
