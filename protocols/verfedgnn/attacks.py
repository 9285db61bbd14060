"""The attacks in VerFedGNN: compromised *parties* (:class:`protocols.verfedgnn.roles.VerFedGNNParty`
played by an attack class), chosen by the hash of (seed, party node id) (adversaries/condition.py,
``ADVERSARY_ROLE = "party"``). A Byzantine party trains honestly and changes both things it
sends, through the protocol's own encoders:

- its neighbour aggregates X_p^k (``tamper_aggregates``, before the projection Φ; the other
  participants cannot check them: they are dense fp32, and Φ mixes users);
- its gradient of θ (``tamper_gradient``, after the clip to [−B, B] and before the release
  mechanism): with the ternary code the crafted gradient is clipped to the code's own range
  [−r, r] instead of [−B, B] and quantized by the protocol's encoder, so the message is a valid
  ternary vector with the public scale r (the server cannot tell it apart by its form); with
  Laplace noise or none it is sent as it is.

A compromised party reports no evaluation figure (its items' held-out ratings and its targets are
left out of the RMSE and of the targets' exposure). The defence is the server's: it combines the
parties' gradients (eq. 21) with the run's rule (``adversaries.defences.defended_vectors``).
"""

from __future__ import annotations

import numpy as np
import torch

from adversaries.attacks import common, malformed
from cluster.device import to_device
from protocols.verfedgnn.roles import VerFedGNNParty


class _ByzantineParty(VerFedGNNParty):
    adversary = True

    def __init__(self, nid, ctx, *args, knowledge=None, **kwargs):
        super().__init__(nid, ctx, *args, **kwargs)
        self.knowledge = knowledge

    def byzantine(self, rows: np.ndarray, scale: float) -> np.ndarray:
        raise NotImplementedError

    def _crafted(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.detach().double().cpu().numpy().reshape(-1, x.shape[-1])
        out = self.byzantine(rows, float(self.knowledge.params["scale"]))
        return to_device(np.asarray(out).reshape(tuple(x.shape)), x.device, x.dtype)

    def tamper_aggregates(self, xs):
        return [self._crafted(x) for x in xs]

    def tamper_gradient(self, g):
        return self._crafted(g.reshape(1, -1)).reshape(g.shape)

    def release_bound(self) -> float:
        return float(self.config.ternary_r)  # the code's range, not the honest clip B

    def _evaluate(self) -> None:  # no evaluation figure from an adversary
        self.participating = False

    def get_target_view(self):
        return None


class ByzantineScaled(_ByzantineParty):
    """A compromised party sends its honest aggregates and gradient times ``scale``."""

    def byzantine(self, rows, scale):
        return common.scaled(rows, scale)


class ByzantineSignFlip(_ByzantineParty):
    """A compromised party sends its honest aggregates and gradient times −``scale``."""

    def byzantine(self, rows, scale):
        return common.scaled(rows, -scale)


class ByzantineRandom(_ByzantineParty):
    """A compromised party sends Gaussian aggregates and gradient with the honest rows' norms
    times ``scale`` (the gradient is one row)."""

    def byzantine(self, rows, scale):
        return common.gaussian_like(self.rng, rows, scale)


class Malformed(malformed.Malformed, VerFedGNNParty):
    """A compromised party that adds hostile messages to its honest ones (malformed.py)."""
