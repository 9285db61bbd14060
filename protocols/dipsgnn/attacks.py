"""The attacks in DIPSGNN: fake users (:class:`protocols.dipsgnn.roles.DIPSGNNUser` played by an
attack class, ids after the real users) whose uploads a validator of the curator cannot tell from
honest ones, and which promote the targets (data poisoning: DIPSGNN has no client-side model to
poison; the curator trains on what users upload).

- ``sequence``: a made-up training sequence whose every other transition ends at a target:
  f₁ t f₂ t′ f₃ t … (f the profile's filler items in a random order, t the targets in turn): the
  profile is the targets plus filler items (random ones: ``random``; popular ones:
  ``bandwagon``, so that the targets follow what many honest users click), of the honest users'
  mean length, at most the longest training part an honest user uploads (⌊train_fraction ·
  max_len⌋), ids of the catalogue — the range of an honest upload.
- ``features``: feature values drawn uniformly from the public domains (numeric) and categories,
  then perturbed on the device by the protocol's own Algorithm 3 (ε1), so the vector is an
  output of the mechanism (``privacy.feature_perturbation.in_output_range``).

A fake user sends no evaluation context and reports nothing: every metric is the honest users'.
"""

from __future__ import annotations

import numpy as np

from adversaries.attacks import common, malformed
from data.sequences import train_length
from protocols.dipsgnn.roles import DIPSGNNUser


def crafted_sequence(rng: np.random.Generator, knowledge, popular: bool, longest: int):
    """Filler items and targets alternating, f₁ t₁ f₂ t₂ …, of at most ``longest`` items."""
    targets = knowledge.targets
    profile = common.fake_profile(rng, knowledge, popular)
    fillers = rng.permutation(np.setdiff1d(profile, targets))
    n = max(1, min(len(fillers), longest // 2))
    out = np.empty(2 * n, dtype=np.int64)
    out[0::2] = fillers[:n]
    out[1::2] = targets[np.arange(n) % len(targets)]
    return out


def random_feature_values(rng: np.random.Generator, public) -> dict:
    """One value per public feature: uniform in its public domain, or a uniform category."""
    out = {}
    for name, kind in public.feature_kinds.items():
        if kind == "numeric":
            low, high = public.public_ranges[name]
            out[name] = float(rng.uniform(low, high))
        else:
            out[name] = int(rng.integers(public.feature_cardinality[name]))
    return out


class _FakeSessionUser(DIPSGNNUser):
    adversary = True
    POPULAR_PROFILE = False

    def __init__(self, nid, ctx, sequence, features, knowledge=None):
        super().__init__(nid, ctx, sequence, features)
        self.knowledge = knowledge
        c = self.config
        longest = max(2, train_length(c.max_len, c.train_fraction))
        self.sequence = crafted_sequence(self.rng, knowledge, self.POPULAR_PROFILE, longest)
        self.n_train = len(self.sequence)  # all of it is uploaded; nothing is held out
        self.features = random_feature_values(self.rng, self.public)

    def handle(self, phase: str, inbox) -> None:
        if phase in ("eval_context", "eval"):
            return  # no held-out items, no evaluation figure
        super().handle(phase, inbox)


class RandomFake(_FakeSessionUser):
    """Fake users whose crafted sequences lead from random filler items to the targets."""


class BandwagonFake(_FakeSessionUser):
    """Fake users whose crafted sequences lead from popular items to the targets."""

    POPULAR_PROFILE = True


class Malformed(malformed.Malformed, DIPSGNNUser):
    """A compromised user that adds hostile messages to its honest uploads (malformed.py)."""
