"""DGREC's privacy audits (privacy/audit.py explains the statistics): its share as a
member gossips it, through ``messages.encode_gradient`` and the receiver's decoding. Used by
:meth:`DGREC.audits <protocols.dgrec.protocol.DGREC.audits>` (``--audit``: the run's own
parameters) and by ``python -m benchmarks.audit`` (the catalogue)."""

from __future__ import annotations

import numpy as np
import torch

from privacy import audit as pa
from privacy.accountant import (
    epsilon_of,
    laplace_vector_event,
    randomized_response_event,
    rdp_of_randomized_response,
)


def dgrec_share_sampler(config, n_coords: int = 1) -> pa.Sampler:
    """DGREC's share as a member gossips it: ``protocols.dgrec.messages.encode_gradient`` (clip to
    [−δ, δ], then the one-bit code of eq. 5 or Laplace(λ), λ = ``resolved_laplace_scale``), the
    payload decoded as the receiver decodes it. n runs are n·``n_coords`` elements of one gradient.
    Neighbours: every element −δ vs +δ. Score: Σ bits (one-bit) or Σ clamp(y, −δ, δ) (Laplace)."""
    from cluster import wire
    from protocols.dgrec.messages import encode_gradient

    c = config
    laplace_scale = c.resolved_laplace_scale()

    def release(grad: torch.Tensor, seed: int) -> np.ndarray:
        gen, rng = pa.torch_generator(seed), pa.numpy_generator(seed)
        payload = encode_gradient(grad, c, laplace_scale, rng, lambda gen=gen: gen)
        if c.mechanism == "onebit":
            return wire.decode_signs(payload).astype(np.float64)
        return np.clip(wire.decode_dense(payload).astype(np.float64), -c.clip, c.clip)

    return pa.sign_pair_sampler(c.clip, n_coords, release)


def run_audits(config) -> list[pa.Audit]:
    """The audits of one element of a share with ``config``'s parameters: the one-bit code's ε
    (β) and its RDP at the paper's order beside the paper's claim, or the Laplace share's ε, each
    at ``privacy_delta``; none for raw float shares (no mechanism)."""
    from protocols.dgrec.config import PAPER_RDP

    c = config
    path = "protocols.dgrec.messages.encode_gradient"
    if c.mechanism == "onebit":
        order, claimed = PAPER_RDP
        return [
            pa.Audit(
                name=f"one-bit code, β = {c.beta:g}, one element (ε)",
                code_path=path + " → privacy.onebit.encode_onebit",
                neighbours="element −δ vs +δ",
                sampler=dgrec_share_sampler(c),
                rigorous=epsilon_of(randomized_response_event(c.beta), 1, c.privacy_delta),
                rigorous_text="accountant: randomized_response_event(β)",
                delta=c.privacy_delta,
                paper=pa.Claim(claimed, "rdp", f"({order:g}, {claimed})-RDP: see the RDP row"),
                samples=10_000_000,
            ),
            pa.Audit(
                name=f"one-bit code, β = {c.beta:g}, one element (RDP, order {order:g})",
                code_path=path + " → privacy.onebit.encode_onebit",
                neighbours="element −δ vs +δ",
                sampler=dgrec_share_sampler(c),
                kind="rdp",
                order=order,
                rigorous=rdp_of_randomized_response(c.beta, order),
                rigorous_text=f"privacy.accountant.rdp_of_randomized_response(β, {order:g})",
                paper=pa.Claim(claimed, "rdp", f"({order:g}, {claimed})-RDP per element"),
                samples=10_000_000,
            ),
        ]
    if c.mechanism != "laplace":  # "float" (DLGNN's default): no privacy mechanism to audit
        return []
    lam = c.resolved_laplace_scale()
    return [
        pa.Audit(
            name=f"Laplace share, λ = {lam:.3g}, one element",
            code_path=path + " (mechanism = laplace)",
            neighbours="element −δ vs +δ",
            sampler=dgrec_share_sampler(c),
            rigorous=epsilon_of(laplace_vector_event(c.clip, lam, 1), 1, c.privacy_delta),
            rigorous_text="accountant: laplace_vector_event(clip, λ, 1)",
            delta=c.privacy_delta,
            samples=10_000_000,
        )
    ]
