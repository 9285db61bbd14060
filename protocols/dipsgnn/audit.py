"""DIPSGNN's privacy audits (privacy/audit.py explains the statistics): the user's
feature perturbation (Algorithm 3, ``perturb_user_features``) and the noisy aggregation of eq. 7
(the model's ``noisy_aggregate``). Used by :meth:`DIPSGNNProtocol.audits
<protocols.dipsgnn.protocol.DIPSGNNProtocol.audits>` (``--audit``: the run's own parameters)
and by ``python -m benchmarks.audit`` (the catalogue)."""

from __future__ import annotations

import torch

from privacy import audit as pa


def dipsgnn_aggregate_sampler(sigma: float, clip_norm: float, w_max: float, releases: int):
    """DIPSGNN's noisy aggregation (eq. 7): the model's own ``noisy_aggregate`` (training mode,
    σ as given) on the two directed adjacencies of a two-node graph, ``releases`` times (the
    releases of one edge in an epoch: every prefix that contains it, every step), n graphs at
    once. H̄ = the model's ``normalized_rows`` (rows of norm C; one hidden dimension: the test
    statistic is the projection on the difference, whatever the width). Neighbours: the edge
    0 → 1 with weight w_max present (A_out[0, 1] = A_in[1, 0] = w_max) vs absent (edge-level DP).
    Score: Σ over releases of M_out[0] + M_in[1], the Gaussian log-likelihood ratio up to an
    affine map (the optimal test)."""
    from models.gated_session_gnn import DIPSGNN

    model = DIPSGNN(
        n_items=2, use_features=False, n_users=0, hidden_dim=1, clip_norm=clip_norm, sigma=sigma
    )
    model.train()

    def sample(n: int, seed: int):
        out = []
        for w, s in zip((0.0, w_max), pa.pair_seeds(seed), strict=True):
            gen = pa.torch_generator(s)
            a_out = torch.zeros(n, 2, 2)
            a_out[:, 0, 1] = w
            a_in = a_out.transpose(1, 2).contiguous()
            score = torch.zeros(n, dtype=torch.float64)
            with torch.no_grad():
                h_bar = model.normalized_rows(torch.ones(n, 2, 1), None)
                for _ in range(releases):
                    m_in = model.noisy_aggregate(a_in, h_bar, gen)
                    m_out = model.noisy_aggregate(a_out, h_bar, gen)
                    score += (m_out[:, 0, 0] + m_in[:, 1, 0]).double()
            out.append(score.numpy())
        return out[0], out[1]

    return sample


def run_audits(protocol) -> list[pa.Audit]:
    """The audits of ``protocol``'s run (a built :class:`DIPSGNNProtocol`, its own parameters):
    Algorithm 3 on the run's feature layout and public domains at ε1 (when features are
    uploaded perturbed), and one release of eq. 7's noisy aggregation at the run's σ (the
    aggregate mechanism with a private graph), each beside the accountant's ε of that release
    at ``privacy_delta`` and the paper's claim."""
    from dp_accounting import dp_event

    from privacy.accountant import approx_dp_event, epsilon_of, gaussian_event
    from privacy.calibration import theorem_4_2_epsilon
    from privacy.feature_perturbation import sampled_feature_count

    c, public = protocol.config, protocol.public
    out = []
    kinds = dict(public.feature_kinds)
    if c.use_features and c.private_features and kinds:
        k = sampled_feature_count(len(kinds), c.eps1)
        out.append(
            pa.Audit(
                name=f"Algorithm 3, ε1 = {c.eps1:g} (k = {k} of {len(kinds)} features)",
                code_path="privacy.feature_perturbation.perturb_user_features",
                neighbours="users differing in every feature (numeric: the public range's "
                "ends; categorical: codes 0 and 1)",
                sampler=pa.algorithm3_sampler(
                    c.eps1, kinds, dict(public.feature_cardinality), dict(public.public_ranges)
                ),
                rigorous=epsilon_of(
                    dp_event.SelfComposedDpEvent(approx_dp_event(c.eps1 / k, 0.0), k),
                    1,
                    c.privacy_delta,
                ),
                rigorous_text=f"accountant: {k} × approx_dp_event(ε1/k, 0)",
                delta=c.privacy_delta,
                paper=pa.Claim(c.eps1, "epsilon", "ε1-LDP"),
                samples=100_000,
            )
        )
    if c.mechanism == "aggregate" and c.private_graph and protocol.sigma > 0:
        sigma, sens = protocol.sigma, protocol.sensitivity
        if c.calibration == "rigorous":
            claim = pa.Claim(
                theorem_4_2_epsilon(sigma, c.privacy_delta, c.steps, c.clip_norm),
                "epsilon",
                "Theorem 4.2, one release (Δ = C)",
            )
        else:
            claim = pa.Claim(c.eps2, "epsilon", f"ε2 = {c.eps2:g} per epoch")
        out.append(
            pa.Audit(
                name=f"eq. 7 noise, {c.calibration} σ = {sigma:.3g}, one release",
                code_path="models.gated_session_gnn.DIPSGNN.noisy_aggregate, σ = "
                "privacy.calibration.noise_sigma",
                neighbours=f"edge of weight w_max = {c.max_edge_weight:g} present vs absent",
                sampler=dipsgnn_aggregate_sampler(sigma, c.clip_norm, c.max_edge_weight, 1),
                rigorous=epsilon_of(gaussian_event(sigma, sens), 1, c.privacy_delta),
                rigorous_text="accountant: gaussian_event(σ, √2·w_max·C)",
                delta=c.privacy_delta,
                paper=claim,
                samples=10_000_000,
                note="the paper modes claim ε2 per epoch; a single release is part of one"
                if c.calibration != "rigorous"
                else "",
            )
        )
    return out
