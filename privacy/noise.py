"""Where the privacy mechanisms draw their noise: seeded (the default) or cryptographically secure.

By default every noise sample comes from the drawing node's own stream, seeded from ``(seed,
node id)`` (nodes/node.py ``Node.noise_rng`` / ``Node.noise_generator``): a run is reproducible,
and two runs with one seed add the same noise. The seed is written to config.json and
summary.json, so whoever reads a run's report can regenerate that noise and subtract it from what
a participant released: fine for research, not for data that must stay private.

With the run condition ``secure_rng`` (``--secure-rng``; as Opacus's ``secure_mode``) every noise
sample comes from :class:`SecureGenerator`: a numpy ``Generator`` over the ChaCha20 stream cipher
(``randomgen.ChaCha``, 20 rounds) keyed with 256 bits from the operating system (``secrets``).
Nothing of the run's seed enters it, so the noise cannot be predicted from the report, and a run
is not reproducible (its noise, hence its metrics, differ from run to run).

The mechanisms take a numpy ``Generator`` or a torch ``Generator``. A torch generator
(Mersenne Twister or Philox) is not cryptographically secure, so in secure mode a mechanism that
computes in torch draws its uniforms/normals through the secure numpy generator and converts
them (:func:`uniform_tensor`, :func:`normal_tensor`); with a torch generator it draws from that
generator alone, so the default's noise depends on the seed alone.

A secure generator is never written anywhere: pickling one (a host's snapshot, a checkpoint, the
per-round copy a host keeps to roll back a failed participant) stores no key and no position, and
loading it makes a fresh generator with a fresh OS key. A restored node therefore never replays
noise it may already have released (reusing noise on a different value would leak the
difference), and no key reaches disk.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

import numpy as np

SEEDED = "seeded"
SECURE = "secure (ChaCha20, OS key)"
CHACHA_ROUNDS = 20


def describe(secure: bool) -> str:
    """The report's ``noise_rng``: which generator the run's noise came from."""
    return SECURE if secure else SEEDED


def _chacha(key: int):
    from randomgen import ChaCha

    return ChaCha(key=key, counter=0, rounds=CHACHA_ROUNDS)


class SecureGenerator(np.random.Generator):
    """A numpy ``Generator`` over ChaCha20 keyed with 256 bits from ``secrets`` (the OS's
    generator). Every distribution numpy offers (``random``, ``laplace``, ``standard_normal``,
    ``integers``, ``choice``, ``permutation``) draws from the ChaCha keystream. Pickles (and
    deep-copies) as a fresh generator with a new key: its key and position never leave it."""

    def __init__(self):
        super().__init__(_chacha(secrets.randbits(256)))

    def __reduce__(self):
        return (SecureGenerator, ())

    def __deepcopy__(self, memo):
        return SecureGenerator()

    def __repr__(self) -> str:
        return f"SecureGenerator({SECURE})"


def keyed_generator(key: bytes, *parts: int) -> np.random.Generator:
    """A ChaCha20 generator whose 256-bit key is SHA-256(``key`` ‖ ``parts``): the same stream
    for the same secret key and parts (e.g. EdgeRand's noise of one example, drawn again in
    every epoch), unpredictable without ``key`` (from :func:`secret_key`)."""
    h = hashlib.sha256(b"privrec-noise:" + bytes(key))
    for p in parts:
        h.update(int(p).to_bytes(16, "little", signed=True))
    return np.random.Generator(_chacha(int.from_bytes(h.digest(), "little")))


def secret_key() -> bytes:
    """32 bytes from the operating system's generator: the key of :func:`keyed_generator`."""
    return secrets.token_bytes(32)


def is_numpy(generator) -> bool:
    return isinstance(generator, np.random.Generator)


def _np_dtype(dtype):
    """The numpy float type to draw in for a torch float ``dtype`` (float32 draws float32, so a
    uniform never rounds up to 1.0; everything else draws float64)."""
    import torch

    return np.float32 if dtype == torch.float32 else np.float64


def uniform_tensor(generator: np.random.Generator, shape: Sequence[int], dtype, device=None):
    """Uniforms on [0, 1) drawn from a numpy ``generator``, as a torch tensor of ``dtype`` on
    ``device`` (drawn on the CPU, then moved)."""
    from cluster.device import to_device

    u = generator.random(tuple(int(s) for s in shape), dtype=_np_dtype(dtype))
    return to_device(u, device, dtype)


def normal_tensor(generator: np.random.Generator, shape: Sequence[int], dtype, device=None):
    """Standard normals drawn from a numpy ``generator``, as a torch tensor of ``dtype`` on
    ``device`` (drawn on the CPU, then moved)."""
    from cluster.device import to_device

    z = generator.standard_normal(tuple(int(s) for s in shape), dtype=_np_dtype(dtype))
    return to_device(z, device, dtype)
