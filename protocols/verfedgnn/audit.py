"""VerFedGNN's privacy audits (privacy/audit.py explains the statistics): a party's
release through ``VerFedGNNParty._release`` and the wire. Used by :meth:`VerFedGNN.audits
<protocols.verfedgnn.protocol.VerFedGNN.audits>` (``--audit``: the run's own parameters) and by
``python -m benchmarks.audit`` (the catalogue)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from privacy import audit as pa
from privacy.accountant import epsilon_of, laplace_vector_event


def verfedgnn_release_sampler(config, n_coords: int = 1) -> pa.Sampler:
    """VerFedGNN's party release, ``VerFedGNNParty._release`` itself on a stand-in for the node
    (its config, an honest ``tamper_gradient`` and ``release_bound``, and the node's kinds of
    generator): clip to [−B, B], then ternary (eqs. 19–20) or Laplace(b), the payload decoded from
    the wire. n runs are n·``n_coords`` coordinates of one gradient. Neighbours: every coordinate
    −B vs +B. Score: #(+r) − #(−r) (ternary) or Σ clamp(y, −B, B) (Laplace)."""
    from cluster import wire
    from protocols.verfedgnn.roles import VerFedGNNParty

    c = config

    def release(grad: torch.Tensor, seed: int) -> np.ndarray:
        gen = pa.torch_generator(seed)
        party = SimpleNamespace(
            config=c,
            tamper_gradient=lambda g: g,
            release_bound=lambda: c.clip,
            noise_generator=lambda gen=gen: gen,
            noise_rng=pa.numpy_generator(seed),
        )
        payload = VerFedGNNParty._release(party, grad)
        if c.mechanism == "ternary":
            return np.sign(wire.decode_ternary(payload, length=grad.numel())).astype(np.float64)
        return np.clip(wire.decode_dense(payload).astype(np.float64), -c.clip, c.clip)

    return pa.sign_pair_sampler(c.clip, n_coords, release)


def run_audits(config) -> list[pa.Audit]:
    """The audit of one coordinate of a release with ``config``'s parameters: the ternary
    quantizer's δ at ε = 0 (it has no finite ε) beside the paper's (0, 1/r), or the Laplace
    release's ε at ``privacy_delta`` beside 2B/b."""
    from privacy.ternary import ternary_delta

    c = config
    path = "VerFedGNNParty._release"
    if c.mechanism == "ternary":
        per = ternary_delta(2.0 * c.clip, c.ternary_r)  # the protocol's Δ₁ = 2B·d, d = 1
        return [
            pa.Audit(
                name=f"ternary quantizer, r = {c.ternary_r:g}, one coordinate (δ at ε = 0)",
                code_path=path + " → privacy.ternary.ternary_quantize",
                neighbours="coordinate −B vs +B",
                sampler=verfedgnn_release_sampler(c, 1),
                kind="delta",
                epsilon=0.0,
                rigorous=per.delta,
                rigorous_text="min(1, Δ₁/r), Δ₁ = 2B (ternary_delta, as the protocol)",
                paper=pa.Claim(per.paper_delta, "delta", "(0, 1/r) per release"),
                samples=4_000_000,
            )
        ]
    return [
        pa.Audit(
            name=f"Laplace release, b = {c.laplace_scale:g}, one coordinate",
            code_path=path + " (mechanism = laplace)",
            neighbours="coordinate −B vs +B",
            sampler=verfedgnn_release_sampler(c, 1),
            rigorous=epsilon_of(
                laplace_vector_event(c.clip, c.laplace_scale, 1), 1, c.privacy_delta
            ),
            rigorous_text="accountant: laplace_vector_event(B, b, 1)",
            delta=c.privacy_delta,
            paper=pa.Claim(2 * c.clip / c.laplace_scale, "epsilon", "2B/b per coordinate"),
            samples=10_000_000,
        )
    ]
