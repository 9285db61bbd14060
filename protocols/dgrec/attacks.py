"""The attacks in DGREC and DLGNN: classes playing :class:`protocols.dgrec.roles.DGRECUser`. What
a member gossips is changed in ``encode_own``, the step that turns its local gradient into the
encoded share (``messages.encode_gradient``: eq. 5's one-bit code, Laplace or float); every
adversary forwards the others' shares honestly (Algorithm 2), so it cannot alter them.

- ``random`` / ``bandwagon`` (data poisoning): fake peers, befriending real users
  (adversaries/graph.py), with a made-up profile (common.fake_profile); they publicize part of it,
  get sampled into neighbourhoods and gossip honestly encoded gradients of it.
- ``pipattack`` (model poisoning): a fake peer shares the gradient g of PipAttack's promotion
  term (−ŷ(e, t), e its own user representation, through its own copy of the model: the
  targets' item rows, the MLP, everything the score depends on) plus its popularity term
  (½‖q_t − c‖², c the popular items' centroid). One-bit: the attacker *chooses* each bit,
  sign(g), instead of drawing it (eq. 5's randomized response is the honest member's duty, not
  something the receivers can check); it still sends one bit per coordinate, honestly encoded
  where g is 0. Laplace / float (DLGNN): g scaled to the clip bound δ (Laplace: no noise) or to
  the largest magnitude of its honest gradient (float).
- ``byzantine-scaled`` / ``-signflip`` / ``-random`` (compromised members): the honest gradient
  times ``scale``, times −``scale``, or Gaussian with its norm times ``scale``, handed to the
  protocol's own encoder (one-bit: clipped to [−δ, δ] and encoded by eq. 5, so the crafted share
  is a valid one-bit code).

FedRecAttack is not implemented here: its promotion loss assumes dot-product scores, and DGREC
scores with an MLP (a run asking for it refuses in one line)."""

from __future__ import annotations

import numpy as np
import torch

from adversaries.attacks import common, malformed
from cluster import wire
from protocols.dgrec.factory import grad_vector
from protocols.dgrec.roles import DGRECUser

_Member = common.Adversary  # a fake peer's made-up profile, no evaluation figures


class RandomFake(_Member, DGRECUser):
    """Data poisoning, random attack (Lam & Riedl, WWW 2004): a fake peer whose profile is the
    targets plus random filler items, trained and gossiped honestly."""


class BandwagonFake(_Member, DGRECUser):
    """Data poisoning, bandwagon attack (Mobasher et al., ACM TOIT 2007): the targets plus popular
    filler items."""

    POPULAR_PROFILE = True


class PipAttack(_Member, DGRECUser):
    """Model poisoning, PipAttack (Zhang et al., WSDM 2022) within DGREC's encoder (module
    docstring): the crafted gradient is that of PipAttack's promotion term (−ŷ(e, t) for the
    attacker's own user representation e, through its own model: item rows, MLP and all) plus
    its popularity term (½‖q_t − c‖², c the centroid of the popular items' rows)."""

    def crafted_gradient(self) -> torch.Tensor:
        t = self.knowledge.targets
        self._ensure_graph()
        self.model.zero_grad(set_to_none=True)
        table = self.model.item_emb.weight
        centre = table[self.tensor(common.popular_items(self.knowledge, t))].detach().mean(0)
        promote = -self.model.score(self.model(self.node_item_ids, self.incidence), t).sum()
        pull = 0.5 * ((table[self.tensor(t)] - centre) ** 2).sum()
        (promote + pull).backward()
        g = grad_vector(self.shared_params)
        self.model.zero_grad(set_to_none=True)
        return g

    def encode_own(self, grad: torch.Tensor) -> bytes:
        honest = super().encode_own(grad)  # kept where the crafted gradient is 0
        c = self.config
        g = self.crafted_gradient().cpu().numpy()
        moved = g != 0
        if c.mechanism == "onebit":  # the attacker chooses the bits: sign(g)
            bits = wire.decode_signs(honest).astype(np.int8)
            bits[moved] = np.sign(g[moved]).astype(np.int8)
            return wire.encode_signs(bits)
        vec = wire.decode_dense(honest).astype(np.float32)
        size = (
            c.clip
            if c.mechanism == "laplace"
            else float(np.abs(grad.cpu().numpy()).max() or c.clip)
        )
        vec[moved] = (g[moved] * size / np.abs(g).max()).astype(np.float32)  # no noise
        return wire.encode_dense(vec)


class _Byzantine(_Member):
    FAKE = False

    def crafted(self, grad: torch.Tensor, scale: float) -> torch.Tensor:
        raise NotImplementedError

    def encode_own(self, grad: torch.Tensor) -> bytes:
        return super().encode_own(self.crafted(grad, float(self.knowledge.params["scale"])))


class ByzantineScaled(_Byzantine, DGRECUser):
    """A compromised member gossips its honest gradient times ``scale``, encoded by the protocol
    (Blanchard et al., NeurIPS 2017)."""

    def crafted(self, grad, scale):
        return grad * scale


class ByzantineSignFlip(_Byzantine, DGRECUser):
    """A compromised member gossips its honest gradient times −``scale``, encoded by the
    protocol (Damaskinos et al., ICML 2018)."""

    def crafted(self, grad, scale):
        return grad * -scale


class ByzantineRandom(_Byzantine, DGRECUser):
    """A compromised member gossips a Gaussian vector with its gradient's norm times ``scale``,
    encoded by the protocol (Blanchard et al., NeurIPS 2017)."""

    def crafted(self, grad, scale):
        g = self.tensor(self.rng.standard_normal(grad.shape[0]).astype(np.float32))
        return g * (grad.norm() * scale / g.norm().clamp_min(1e-12))


class Malformed(malformed.Malformed, DGRECUser):
    """A compromised member that adds hostile messages to its honest gossip (malformed.py)."""
