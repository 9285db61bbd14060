"""Privacy audits of every mechanism privrec implements: an empirical lower bound on ε
(95 % confidence) beside the rigorous ε of the one accountant (privacy/accountant.py) and the
paper's claim.

    python -m benchmarks.audit                   # every audit at its full size (a few minutes)
    python -m benchmarks.audit --quick           # the tests' sizes (seconds), out/audit-quick.json
    python -m benchmarks.audit --only dipsgnn    # the audits whose name contains a word
    python -m benchmarks.audit --samples 100000  # one size for all
    python -m benchmarks.audit --dry-run         # list the audits and their sizes, run nothing

Each audit runs the mechanism's own code on the worst-case neighbouring inputs of its privacy
unit, scores every output, and bounds ε from the error rates of the best threshold test, chosen
on one half of the runs and evaluated on the other (privacy/audit.py explains the statistics:
Clopper–Pearson on both error rates, δ as the accountant states it). The mechanisms are called
where the protocols call them: FedLightGCN's upload through ``privacy.ldp.perturbed_upload``;
DGREC's share through ``protocols.dgrec.messages.encode_gradient`` (bits decoded from the wire);
VerFedGNN's release through its party's ``_release`` (clip, then ternary or Laplace, decoded from
the wire); DIPSGNN's features through ``perturb_user_features`` (and the piecewise and OUE
mechanisms it calls), its graph noise through the model's ``noisy_aggregate`` (eq. 7) with σ from
``privacy.calibration.noise_sigma`` for each calibration (rigorous, paper, authors' code).
Two end-to-end audits in one run each (Steinke, Nasr & Jagielski 2023): FedLightGCN's canary users
through the upload path and the wire, DIPSGNN's canary edges through the curator's training loop.

The verdict: lower bound ≤ rigorous figure → consistent (the audit found no bug); lower bound above
it → INCONSISTENT (a bug in the mechanism or its accounting; the two planted bugs of
privacy/audit.py show what that looks like); lower bound above a paper's claim of the same kind →
the claim is refuted by measurement. Writes ``benchmarks/out/NAME.json`` (figures, machine, date,
command) and ``benchmarks/out/NAME.md`` (the table for RESULTS.md); prints the table. NAME is
``--name``, else ``audit[-quick][-secure][-only-WORD]``; a recorded result (a file git tracks,
``audit.json``) is refused before anything runs unless ``--write`` is given.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np
import torch
from dp_accounting import dp_event

from benchmarks.common import (
    WRITE_HELP,
    ArgumentParser,
    UsageError,
    claim_result,
    dataset_tag,
    run_main,
    shown_path,
    text_table,
    writable,
    write_result,
)
from privacy import audit as pa
from privacy.accountant import (
    approx_dp_event,
    epsilon_of,
    gaussian_event,
    laplace_vector_event,
    randomized_response_event,
    rdp_of_randomized_response,
)

# the protocol-level samplers live beside the code they call, so that a run's --audit
# (engine/audit.py, Protocol.audits) uses them too
from protocols.dgrec.audit import dgrec_share_sampler
from protocols.dipsgnn.audit import dipsgnn_aggregate_sampler
from protocols.verfedgnn.audit import verfedgnn_release_sampler

MODULE = "benchmarks.audit"
QUICK_SAMPLES = (
    pa.QUICK_SAMPLES
)  # runs per hypothesis in --quick and in tests/privacy/test_audit.py
QUICK_SLOW_SAMPLES = pa.QUICK_SLOW_SAMPLES  # the same for the audits that call a mechanism once

# --------------------------------------------------------------------- the catalogue

DELTA = 1e-5  # every protocol's default privacy_delta: the δ at which the accountant states ε


def _fedlightgcn(quick: bool) -> list[pa.Audit]:
    from privacy.ldp import laplace_epsilon_per_coordinate
    from protocols.fedpergnn.config import FedPerGNNConfig, upload_laplace

    out = []
    default = FedPerGNNConfig()
    moderate = FedPerGNNConfig(laplace_scale=2 * default.clip)  # thesis ε = 1 per coordinate
    code = FedPerGNNConfig(laplace_scale=2 * default.clip, calibration="authors_code")
    for label, c, n_coords in (
        ("defaults (δ = 5e-4, λ = 1e-5)", default, 1),
        ("λ = 2δ", moderate, 1),
        ("λ = 2δ, authors' code (upload clipped only)", code, 1),
    ):
        lam = upload_laplace(c)  # the noise on what the server receives
        claim = laplace_epsilon_per_coordinate(c.clip, c.laplace_scale)
        out.append(
            pa.Audit(
                name=f"FedLightGCN upload, one coordinate, {label}",
                code_path="privacy.ldp.perturbed_upload (as protocols/fedpergnn/lightgcn.py)",
                neighbours="gradient coordinate −1000δ vs +1000δ (clipped to ∓δ)",
                sampler=pa.laplace_upload_sampler(c.clip, lam, n_coords),
                rigorous=epsilon_of(laplace_vector_event(c.clip, lam, n_coords), 1, DELTA),
                rigorous_text="accountant: laplace_vector_event(clip, λ, 1)",
                paper=pa.Claim(claim, "epsilon", "2δ/λ per coordinate (thesis)"),
                samples=10_000_000,
                note="authors' code: the server adds the noise to the model; the upload it "
                "receives is only clipped"
                if c.calibration == "authors_code"
                else "",
            )
        )
    # a vector: 8 coordinates at λ = 16δ (ε = 1/8 per coordinate, 1 by basic composition)
    lam, n_coords = 16 * default.clip, 8
    out.append(
        pa.Audit(
            name="FedLightGCN upload, 8 coordinates, λ = 16δ",
            code_path="privacy.ldp.perturbed_upload",
            neighbours="8 coordinates −1000δ vs +1000δ",
            sampler=pa.laplace_upload_sampler(default.clip, lam, n_coords),
            rigorous=epsilon_of(laplace_vector_event(default.clip, lam, n_coords), 1, DELTA),
            rigorous_text="accountant: laplace_vector_event(clip, λ, 8) at δ = 1e-5",
            note="the thesis states ε per coordinate (2δ/λ = 0.125), not per vector",
            samples=4_000_000,
        )
    )
    # the planted bugs: accounted as λ = 2δ (ε = 1), released with the bug
    for bug, release in pa.PLANTED_BUGS.items():
        out.append(
            pa.Audit(
                name=f"planted bug: Laplace upload, {bug} (accounted λ = 2δ)",
                code_path=f"privacy.audit.{release.__name__}",
                neighbours="gradient coordinate −1000δ vs +1000δ",
                sampler=pa.laplace_upload_sampler(default.clip, 2 * default.clip, release=release),
                rigorous=epsilon_of(
                    laplace_vector_event(default.clip, 2 * default.clip, 1), 1, DELTA
                ),
                rigorous_text="accountant: laplace_vector_event(clip, λ, 1)",
                samples=4_000_000,
            )
        )
    return out


def _dgrec(quick: bool) -> list[pa.Audit]:
    from protocols.dgrec.config import PAPER_RDP, DGRECConfig

    onebit = DGRECConfig()  # β = 1, δ = 0.1
    laplace = DGRECConfig(mechanism="laplace")  # λ = 2δ/β
    order, claimed = PAPER_RDP
    return [
        pa.Audit(
            name=f"DGREC one-bit code, β = {onebit.beta:g}, one element (ε)",
            code_path="protocols.dgrec.messages.encode_gradient → privacy.onebit.encode_onebit",
            neighbours="element −δ vs +δ",
            sampler=dgrec_share_sampler(onebit),
            rigorous=epsilon_of(randomized_response_event(onebit.beta), 1, DELTA),
            rigorous_text="accountant: randomized_response_event(β)",
            paper=pa.Claim(claimed, "rdp", f"({order:g}, {claimed})-RDP: compared in the next row"),
            samples=10_000_000,
        ),
        pa.Audit(
            name=f"DGREC one-bit code, β = {onebit.beta:g}, one element (RDP, order {order:g})",
            code_path="protocols.dgrec.messages.encode_gradient → privacy.onebit.encode_onebit",
            neighbours="element −δ vs +δ",
            sampler=dgrec_share_sampler(onebit),
            kind="rdp",
            order=order,
            rigorous=rdp_of_randomized_response(onebit.beta, order),
            rigorous_text="privacy.accountant.rdp_of_randomized_response(β, 1.5)",
            paper=pa.Claim(claimed, "rdp", f"({order:g}, {claimed})-RDP per element"),
            samples=10_000_000,
        ),
        pa.Audit(
            name="DGREC Laplace share, λ = 2δ/β, one element",
            code_path="protocols.dgrec.messages.encode_gradient (mechanism = laplace)",
            neighbours="element −δ vs +δ",
            sampler=dgrec_share_sampler(laplace),
            rigorous=epsilon_of(
                laplace_vector_event(laplace.clip, laplace.resolved_laplace_scale(), 1), 1, DELTA
            ),
            rigorous_text="accountant: laplace_vector_event(clip, λ, 1)",
            samples=10_000_000,
        ),
    ]


def _verfedgnn(quick: bool) -> list[pa.Audit]:
    from privacy.ternary import ternary_delta
    from protocols.verfedgnn.config import VerFedGNNConfig

    c = VerFedGNNConfig()  # B = 0.5, r = 3
    lap = VerFedGNNConfig(mechanism="laplace")  # b = 0.5
    out = []
    for d in (1, 8):
        per = ternary_delta(2.0 * c.clip * d, c.ternary_r)  # the protocol's Δ₁ = 2B·d
        out.append(
            pa.Audit(
                name=f"VerFedGNN ternary, {d} coordinate{'s' if d > 1 else ''} (δ at ε = 0)",
                code_path="VerFedGNNParty._release → privacy.ternary.ternary_quantize",
                neighbours=f"{d} coordinate(s) −B vs +B",
                sampler=verfedgnn_release_sampler(c, d),
                kind="delta",
                epsilon=0.0,
                rigorous=per.delta,
                rigorous_text="min(1, Δ₁/r), Δ₁ = 2B·d (ternary_delta, as the protocol)",
                paper=pa.Claim(per.paper_delta, "delta", "(0, 1/r) per release"),
                samples=4_000_000,
            )
        )
    out.append(
        pa.Audit(
            name="VerFedGNN ternary, 8 coordinates (ε at δ = 1e-5)",
            code_path="VerFedGNNParty._release → privacy.ternary.ternary_quantize",
            neighbours="8 coordinates −B vs +B",
            sampler=verfedgnn_release_sampler(c, 8),
            rigorous=epsilon_of(
                approx_dp_event(0.0, ternary_delta(2.0 * c.clip * 8, c.ternary_r).delta), 1, DELTA
            ),
            rigorous_text="accountant: approx_dp_event(0, min(1, Δ₁/r)): no finite ε",
            samples=4_000_000,
            note="no finite ε: the bound grows with the samples (≈ ln(TPR·n/3.7))",
        )
    )
    out.append(
        pa.Audit(
            name=f"VerFedGNN Laplace, b = {lap.laplace_scale:g}, one coordinate",
            code_path="VerFedGNNParty._release (mechanism = laplace)",
            neighbours="coordinate −B vs +B",
            sampler=verfedgnn_release_sampler(lap, 1),
            rigorous=epsilon_of(laplace_vector_event(lap.clip, lap.laplace_scale, 1), 1, DELTA),
            rigorous_text="accountant: laplace_vector_event(B, b, 1)",
            paper=pa.Claim(2 * lap.clip / lap.laplace_scale, "epsilon", "2B/b per coordinate"),
            samples=10_000_000,
        )
    )
    return out


def _dipsgnn(quick: bool) -> list[pa.Audit]:
    from privacy.calibration import (
        calibrated_releases,
        graph_sensitivity,
        noise_sigma,
        theorem_4_2_epsilon,
    )
    from privacy.feature_perturbation import sampled_feature_count
    from protocols.dipsgnn.config import DIPSGNNConfig

    base = DIPSGNNConfig()  # ε1 = 20, ε2 = 5, δ = 1e-5, C = 0.5, w_max = 1, max_len 100, T = 1
    n_features = len(pa.ALGORITHM3_KINDS)
    k = sampled_feature_count(n_features, base.eps1)
    each = base.eps1 / k
    out = [
        pa.Audit(
            name=f"DIPSGNN piecewise mechanism, ε = ε1/k = {each:.3g}",
            code_path="privacy.piecewise.piecewise (as Algorithm 3 calls it)",
            neighbours="t = −1 vs +1",
            sampler=pa.piecewise_sampler(each),
            rigorous=epsilon_of(approx_dp_event(each, 0.0), 1, DELTA),
            rigorous_text="accountant: approx_dp_event(ε, 0)",
            paper=pa.Claim(each, "epsilon", "ε-LDP (Wang et al. 2019)"),
            samples=10_000_000,
        ),
        pa.Audit(
            name=f"DIPSGNN optimized unary encoding, ε = {each:.3g}",
            code_path="privacy.oue.oue_perturb (as Algorithm 3 calls it)",
            neighbours="category 0 vs 1",
            sampler=pa.oue_sampler(each),
            rigorous=epsilon_of(approx_dp_event(each, 0.0), 1, DELTA),
            rigorous_text="accountant: approx_dp_event(ε, 0)",
            paper=pa.Claim(each, "epsilon", "ε-LDP (Wang et al. 2017)"),
            samples=10_000_000,
        ),
    ]
    for eps1 in (2.0, base.eps1):
        k1 = sampled_feature_count(n_features, eps1)
        out.append(
            pa.Audit(
                name=f"DIPSGNN Algorithm 3, ε1 = {eps1:g} (k = {k1} of {n_features} features)",
                code_path="privacy.feature_perturbation.perturb_user_features",
                neighbours="users differing in age (range ends), gender and occupation",
                sampler=pa.algorithm3_sampler(eps1),
                rigorous=epsilon_of(
                    dp_event.SelfComposedDpEvent(approx_dp_event(eps1 / k1, 0.0), k1),
                    1,
                    DELTA,
                ),
                rigorous_text=f"accountant: {k1} × approx_dp_event(ε1/k, 0)",
                paper=pa.Claim(eps1, "epsilon", "ε1-LDP"),
                samples=100_000 if k1 == 1 else 40_000,
            )
        )
    for calibration in ("rigorous", "paper", "authors_code"):
        c = dataclasses.replace(base, calibration=calibration)
        sigma, sens = noise_sigma(c), graph_sensitivity(c)
        per_epoch = calibrated_releases(dataclasses.replace(c, epochs=1))
        for releases, what in (
            (1, "one release"),
            (per_epoch, f"one epoch ({per_epoch} releases)"),
        ):
            if calibration == "rigorous":
                claim = (
                    pa.Claim(
                        theorem_4_2_epsilon(sigma, c.privacy_delta, c.steps, c.clip_norm),
                        "epsilon",
                        "Theorem 4.2, one release (Δ = C)",
                    )
                    if releases == 1
                    else None
                )
            else:
                claim = pa.Claim(c.eps2, "epsilon", f"ε2 = {c.eps2:g} per epoch")
            out.append(
                pa.Audit(
                    name=f"DIPSGNN eq. 7 noise, {calibration} σ = {sigma:.3g}, {what}",
                    code_path="models.gated_session_gnn.DIPSGNN.noisy_aggregate, σ = "
                    "privacy.calibration.noise_sigma",
                    neighbours=f"edge of weight w_max = {c.max_edge_weight:g} present vs absent",
                    sampler=dipsgnn_aggregate_sampler(
                        sigma, c.clip_norm, c.max_edge_weight, releases
                    ),
                    rigorous=epsilon_of(gaussian_event(sigma, sens), releases, c.privacy_delta),
                    rigorous_text=f"accountant: {releases} × gaussian_event(σ, √2·w_max·C)",
                    paper=claim,
                    samples=10_000_000 if releases == 1 else 1_000_000,
                    note="the paper modes claim ε2 per epoch; a single release is part of one",
                )
            )
    return out


def catalogue(quick: bool = False) -> list[pa.Audit]:
    """Every audit, in the table's order, at its full size (``quick``: the tests' sizes)."""
    audits = [*_fedlightgcn(quick), *_dgrec(quick), *_verfedgnn(quick), *_dipsgnn(quick)]
    if quick:
        audits = [dataclasses.replace(a, samples=pa.quick_samples(a)) for a in audits]
    return audits


# --------------------------------------------------------------------- end to end (one run)

ONE_RUN_NAME = "FedLightGCN end to end, one run"
ONE_RUN_ITEMS = 1682  # the catalogue of ml-100k
ONE_RUN_REAL_ROWS = 16  # rows a canary user uploads besides its pseudo items


def fedlightgcn_one_run(config, canaries: int, rounds: int, seed: int = 0) -> dict:
    """A one-run audit of FedLightGCN's uploads in the style of Steinke, Nasr & Jagielski (2023):
    ``canaries`` canary users, each "included" with probability ½ (its data is x₁: every gradient
    coordinate of its real rows +1000δ) or not (x₀: −1000δ), upload in each of ``rounds`` rounds
    through the real path: ``privacy.ldp.perturbed_upload`` with the config's M pseudo items,
    δ and λ (``upload_laplace``: the authors' code's calibration uploads without noise), the
    payload encoded and decoded as the server decodes it
    (``protocols.fedpergnn.messages.encode_item_grads`` / ``decode_item_grads``). The canary's
    items are drawn once (the same under x₀ and x₁); every canary draws its noise from its own
    generator, as a node does. The server's score of a canary: Σ over its uploads of Σ clamp(y,
    −δ, δ) (pseudo rows included: they are fitted to the real rows). In local DP the server sees
    exactly these uploads; the rest of a run (other users, the server's Adam step, evaluation)
    is post-processing of them and of others' data, so this is the composed run as far as a
    canary user is concerned. The bound (privacy/audit.py ``one_run_audit``) is set beside the
    accountant's ε of the canary's ``rounds`` uploads of n = (16 + M)·d coordinates at δ = 1e-5
    (the protocol charges n rounded up, a larger figure)."""
    from privacy.ldp import perturbed_upload
    from protocols.fedpergnn import messages as msg
    from protocols.fedpergnn.config import upload_laplace

    c = config
    lam, big = upload_laplace(c), 1e3 * c.clip
    rng = np.random.default_rng(seed)
    included = rng.random(canaries) < 0.5
    items = [
        np.sort(rng.choice(ONE_RUN_ITEMS, ONE_RUN_REAL_ROWS, replace=False))
        for _ in range(canaries)
    ]
    _, pseudo = msg.upload_counts(ONE_RUN_REAL_ROWS, ONE_RUN_ITEMS, 0, c.pseudo_items)
    gens = [pa.torch_generator(s) for s in rng.integers(0, 2**62, size=canaries)]
    scores = np.zeros(canaries)
    start = time.perf_counter()
    for _ in range(rounds):
        for i in range(canaries):
            grads = torch.full((ONE_RUN_REAL_ROWS, c.dim), big if included[i] else -big)
            ids, noisy, _ = perturbed_upload(
                ONE_RUN_ITEMS, items[i], grads, pseudo, c.clip, lam, gens[i]
            )
            payload = msg.encode_item_grads(ids, noisy.numpy())
            _, rows = msg.decode_item_grads(payload, ONE_RUN_ITEMS)  # the server's view
            scores[i] += np.clip(rows.astype(np.float64), -c.clip, c.clip).sum()
    wall = time.perf_counter() - start
    n_coords = (ONE_RUN_REAL_ROWS + pseudo) * c.dim
    event = laplace_vector_event(c.clip, lam, n_coords)
    result = pa.one_run_audit(scores, included, DELTA)
    return {
        **result,
        "scores": scores,
        "included": included,
        "rounds": rounds,
        "coordinates_per_upload": n_coords,
        "clip": c.clip,
        "laplace_scale": lam,
        "rigorous": epsilon_of(event, rounds, DELTA),
        # the same uploads accounted coordinate by coordinate (each clipped coordinate one
        # Laplace release of sensitivity 2δ): a tighter valid figure than the vector event
        "rigorous_per_coordinate": epsilon_of(
            laplace_vector_event(c.clip, lam, 1), rounds * n_coords, DELTA
        ),
        "wall_s": round(wall, 2),
    }


def _one_run_row(run: dict, seed: int, **fields) -> dict:
    """A one-run audit as a row of the table: the bound at 95 % and, for the verdict's
    confirmation, at 1 − 1e-6 on the same run; ``fields``: the row's name, code path, neighbours,
    samples and rigorous texts and note."""
    strict = pa.one_run_audit(run["scores"], run["included"], DELTA, alpha=pa.STRICT_ALPHA)
    run.pop("scores"), run.pop("included")  # not JSON: the bound above is what they give
    return {
        "kind": "epsilon",
        "delta": DELTA,
        "epsilon": None,
        "order": None,
        "samples_per_hypothesis": None,
        "seed": seed,
        "lower_bound": run["epsilon_lb"],
        "confidence": 1.0 - pa.ALPHA,
        "lower_bound_strict": strict["epsilon_lb"],
        "strict_confidence": 1.0 - pa.STRICT_ALPHA,
        "rigorous": run["rigorous"],
        "paper": None,
        "verdict": pa.verdict(
            run["epsilon_lb"], strict["epsilon_lb"], run["rigorous"], None, "epsilon"
        ),
        "one_run": run,
        "wall_s": run["wall_s"],
        **fields,
    }


def one_run_record(label: str, config, canaries: int, rounds: int, seed: int = 0) -> dict:
    """:func:`fedlightgcn_one_run` as a row of the table."""
    run = fedlightgcn_one_run(config, canaries, rounds, seed)
    return _one_run_row(
        run,
        seed,
        name=f"{ONE_RUN_NAME}, {label}",
        code_path="privacy.ldp.perturbed_upload + protocols.fedpergnn.messages, "
        "privacy.audit.one_run_audit",
        neighbours="canary user: real rows all +1000δ (included) or −1000δ",
        samples_text=f"m = {canaries:,} canaries, 1 run of {rounds} rounds ({run['wall_s']:.1f} s)",
        rigorous_text="accountant: rounds × laplace_vector_event(δ, λ, (16 + M)·d) at 1e-5, "
        "as the protocol charges an upload",
        rigorous_display=f"{run['rigorous']:.3g} (per coordinate: "
        f"{run['rigorous_per_coordinate']:.3g})",
        note="the thesis states ε per coordinate of one upload and never composes",
    )


def one_run_configs(quick: bool = False) -> list[tuple[str, object, int, int]]:
    """(label, config, canaries, rounds) of the end-to-end audits: FedLightGCN's quick shape
    (d = 32, M = 64; 4 rounds, every user every round) at its default noise, and at λ = 0.1
    (2δ/λ = 0.01 per coordinate), where the canaries' uploads are far from perfectly
    distinguishable."""
    from protocols.fedpergnn.config import FedPerGNNConfig

    canaries = 200 if quick else 2000
    shape = FedPerGNNConfig(dim=32)
    return [
        ("defaults (δ = 5e-4, λ = 1e-5)", shape, canaries, 4),
        ("λ = 0.1", dataclasses.replace(shape, laplace_scale=0.1), canaries, 4),
    ]


DIPSGNN_ONE_RUN_NAME = "DIPSGNN end to end, one run"


def dipsgnn_one_run(
    config, canaries: int, epochs: int, seed: int = 0, noise_factor: float = 1.0
) -> dict:
    """A one-run audit of DIPSGNN's edge-level guarantee through the curator's training, in the
    style of Steinke, Nasr & Jagielski (2023): ``canaries`` canary examples, each with its own two
    fresh items a_i < b_i and a random target; canary i's transition a_i → b_i is "included" with
    probability ½ (its prefix is [a_i, b_i]: the edge of weight 1 = w_max) or not (prefix [a_i]:
    the same graph without the edge; b_i's row is then padding, whose adjacency is zero). The
    examples are trained for ``epochs`` epochs by the curator's own loop
    (``models.session_training.train_epoch``: its shuffled batches of ``batch_size``, the model's
    forward with eq. 7's ``noisy_aggregate`` at σ, Adam steps), T = 1 gated step.

    The auditor sees every release (each batch's noisy A_in·H̄ and A_out·H̄: what the accountant
    composes; the model is post-processing of them) and knows everything but the inclusion bits:
    the parameters at each step (white box), hence H̄_a = C·e_a/‖e_a‖ and H̄_b = C·e_b/‖e_b‖
    from the item embedding at the moment of the release. The score of canary i: Σ over its
    releases of ⟨M_out[a_i], H̄_b⟩ + ⟨M_in[b_i's row], H̄_a⟩ − C² (the Gaussian log-likelihood
    ratio up to a factor, centred between the two hypotheses: 2C² apart per release, noise
    N(0, 2σ²C²)). Set beside the accountant's ε of ``epochs`` releases of gaussian_event(σ,
    √2·w_max·C) at δ = 1e-5 (one prefix holds the edge, once per epoch). ``noise_factor`` ≠ 1
    plants a bug: the model draws noise at noise_factor·σ while the accountant charges σ."""
    import torch.nn.functional as F

    from data.sequences import PrefixExamples
    from models.gated_session_gnn import DIPSGNN
    from models.session_training import train_epoch
    from privacy.calibration import graph_sensitivity, noise_sigma

    c = config
    sigma = noise_sigma(c)
    rng = np.random.default_rng(seed)
    included = rng.random(canaries) < 0.5
    a = 1 + 2 * np.arange(canaries)  # item 0 is the padding id
    b = a + 1
    n_items = 2 * canaries + 1
    examples = PrefixExamples(
        user=np.zeros(canaries, dtype=np.int64),
        prefixes=[
            np.array([a[i], b[i]] if included[i] else [a[i]], dtype=np.int64)
            for i in range(canaries)
        ],
        target=rng.integers(1, n_items, size=canaries),
    )
    torch.manual_seed(int(rng.integers(2**31)))
    model = DIPSGNN(
        n_items,
        use_features=False,
        hidden_dim=c.hidden_dim,
        steps=1,
        clip_norm=c.clip_norm,
        sigma=noise_factor * sigma,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=c.lr, weight_decay=c.l2)
    releases: list[tuple[torch.Tensor, torch.Tensor]] = []  # per batch: (M_in, M_out)
    real = model.noisy_aggregate

    def observed(adjacency, h_bar, generator):
        out = real(adjacency, h_bar, generator)
        if not releases or len(releases[-1]) == 2:
            releases.append((out.detach().clone(),))
        else:
            releases[-1] = (releases[-1][0], out.detach().clone())
        return out

    model.noisy_aggregate = observed
    embeddings: list[torch.Tensor] = []  # per batch: H̄ of every item when it was released
    real_forward = model.forward

    def forward(*args, **kwargs):
        with torch.no_grad():
            embeddings.append(F.normalize(model.item_embedding.weight, dim=-1) * c.clip_norm)
        return real_forward(*args, **kwargs)

    model.forward = forward
    scores = np.zeros(canaries)
    noise = pa.torch_generator(int(rng.integers(2**62)))
    start = time.perf_counter()
    for _ in range(epochs):
        order_seed = int(rng.integers(2**62))
        order = np.random.default_rng(order_seed).permutation(canaries)  # train_epoch's order
        releases.clear(), embeddings.clear()
        train_epoch(
            model,
            optimizer,
            examples,
            None,
            batch_size=c.batch_size,
            max_weight=c.max_edge_weight,
            order_rng=np.random.default_rng(order_seed),
            noise=noise,
        )
        for k, ((m_in, m_out), h) in enumerate(zip(releases, embeddings, strict=True)):
            idx = order[k * c.batch_size : (k + 1) * c.batch_size]
            rows = torch.arange(len(idx))
            s = (m_out[rows, 0] * h[b[idx]]).sum(-1)  # a_i is row 0 in both hypotheses
            if m_in.shape[1] > 1:  # b_i's row (padding when excluded)
                s = s + (m_in[rows, 1] * h[a[idx]]).sum(-1)
            scores[idx] += s.double().numpy() - c.clip_norm**2
    wall = time.perf_counter() - start
    sens = graph_sensitivity(c)
    result = pa.one_run_audit(scores, included, DELTA)
    return {
        **result,
        "scores": scores,
        "included": included,
        "epochs": epochs,
        "sigma": sigma,
        "sensitivity": sens,
        "rigorous": epsilon_of(gaussian_event(sigma, sens), epochs, DELTA),
        "wall_s": round(wall, 2),
    }


def dipsgnn_one_run_record(label: str, config, canaries: int, epochs: int, seed: int = 0) -> dict:
    """:func:`dipsgnn_one_run` as a row of the table."""
    run = dipsgnn_one_run(config, canaries, epochs, seed)
    return _one_run_row(
        run,
        seed,
        name=f"{DIPSGNN_ONE_RUN_NAME}, {label}",
        code_path="models.session_training.train_epoch (DIPSGNN.noisy_aggregate, eq. 7), "
        "privacy.audit.one_run_audit",
        neighbours="canary transition a → b (weight w_max = 1) in its prefix or not",
        samples_text=f"m = {canaries:,} canaries, 1 run of {epochs} epoch"
        f"{'s' if epochs > 1 else ''} ({run['wall_s']:.1f} s)",
        rigorous_text="accountant: epochs × gaussian_event(σ, √2·w_max·C) at 1e-5 (the "
        "canary's edge is in one prefix, released once an epoch)",
        note="the auditor sees every noisy aggregate of the training (white box)",
    )


def dipsgnn_one_run_configs(quick: bool = False) -> list[tuple[str, object, int, int]]:
    """(label, config, canaries, epochs) of DIPSGNN's end-to-end audits: its rigorous σ for the
    default budget (ε2 = 5 over the releases of a max_len-100 sequence: one epoch's releases of
    one edge are far fewer, so the bound is small), and the σ calibrated for ε2 = 2 over exactly
    these releases (max_len 4: one prefix holds the edge), where the bound is informative."""
    from protocols.dipsgnn.config import DIPSGNNConfig

    canaries = 500 if quick else 5000
    shape = DIPSGNNConfig(hidden_dim=8, use_features=False)
    tight = dataclasses.replace(shape, eps2=2.0, max_len=4, epochs=2)
    return [
        ("rigorous σ, defaults (ε2 = 5, max_len 100)", shape, canaries, 1),
        ("rigorous σ for ε2 = 2 over these 2 releases", tight, canaries, 2),
    ]


def end_to_end(quick: bool = False) -> list[tuple[str, object, str]]:
    """Every end-to-end (one-run) audit: (its name, run(seed) → its record, its size)."""
    out = []
    for label, config, canaries, rounds in one_run_configs(quick):
        run = functools.partial(one_run_record, label, config, canaries, rounds)
        out.append((f"{ONE_RUN_NAME}, {label}", run, f"{canaries:,} canaries, {rounds} rounds"))
    for label, config, canaries, epochs in dipsgnn_one_run_configs(quick):
        run = functools.partial(dipsgnn_one_run_record, label, config, canaries, epochs)
        size = f"{canaries:,} canaries, {epochs} epoch(s)"
        out.append((f"{DIPSGNN_ONE_RUN_NAME}, {label}", run, size))
    return out


# --------------------------------------------------------------------- the table


def _figure(value: float | None, kind: str, order: float | None = None, eps: float = 0.0) -> str:
    if value is None:
        return "—"
    v = "∞" if math.isinf(value) else f"{value:.3g}"
    if kind == "delta":
        return f"δ = {v} at ε = {eps:g}"
    if kind == "rdp":
        return f"RDP(α = {order:g}) {v}"
    return v


def table_rows(records: list[dict]) -> list[list[str]]:
    """One row per audit: the claim (with what it says), the rigorous figure, the 95 % lower
    bound with the 1 − 1e-6 one in brackets, the runs, the verdict."""
    rows = []
    for r in records:
        kind, order, eps = r["kind"], r["order"], r["epsilon"] or 0.0
        paper = r["paper"]
        if paper is None:
            claim = "—"
        elif paper["kind"] == kind:
            claim = f"{_figure(paper['value'], kind, order, eps)}: {paper['text']}"
        else:
            claim = paper["text"]
        lb = _figure(r["lower_bound"], kind, order, eps)
        strict = "∞" if math.isinf(r["lower_bound_strict"]) else f"{r['lower_bound_strict']:.3g}"
        rows.append(
            [
                r["name"],
                claim,
                r.get("rigorous_display") or _figure(r["rigorous"], kind, order, eps),
                f"{lb} [{strict}]",
                r.get("samples_text") or f"{r['samples_per_hypothesis']:,} × 2",
                r["verdict"],
            ]
        )
    return rows


HEADER = [
    "mechanism",
    "paper's claim",
    "rigorous (accountant)",
    "empirical lower bound (95 %)",
    "samples",
    "verdict",
]


def markdown(records: list[dict]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for row in table_rows(records):
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------- the command


def _progress(rec: dict) -> None:
    print(
        f"{rec['wall_s']:8.1f} s  {rec['name']}: lower bound {rec['lower_bound']:.4g} "
        f"(rigorous {rec['rigorous']:.4g}) — {rec['verdict']}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    return run_main(MODULE, _main, argv)


def _main(argv):
    p = ArgumentParser(MODULE, __doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the tests' sample sizes (seconds)")
    p.add_argument("--samples", type=int, default=None, help="runs per hypothesis, every audit")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default=None, help="only the audits whose name contains this word")
    p.add_argument(
        "--secure-rng",
        action="store_true",
        help="draw the noise from the secure generator (privacy/noise.py), as --secure-rng runs do",
    )
    p.add_argument("--dry-run", action="store_true", help="list the audits and sizes; run nothing")
    p.add_argument("--name", default=None, help="benchmarks/out/NAME.json and NAME.md")
    p.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = p.parse_args(argv)
    if args.samples is not None and args.samples < 4:
        raise UsageError(f"--samples {args.samples}: need at least 4 runs per hypothesis")
    audits = catalogue(quick=args.quick)
    ends = end_to_end(quick=args.quick)
    if args.only:
        audits = [a for a in audits if args.only.lower() in a.name.lower()]
        ends = [e for e in ends if args.only.lower() in e[0].lower()]
        if not audits and not ends:
            raise UsageError(f"--only {args.only}: no audit's name contains it")
    name = args.name or (
        ("audit-quick" if args.quick else "audit")
        + ("-secure" if args.secure_rng else "")
        + (f"-only-{dataset_tag(args.only)}" if args.only else "")
    )
    claim_result(name, write=args.write, suffixes=(".json", ".md"))
    if args.dry_run:
        for a in audits:
            print(f"{a.name}: {args.samples or a.samples:,} runs per hypothesis")
        for name, _, size in ends:
            print(f"{name}: {size}")
        print("(dry run: nothing run)")
        return 0
    records, start = [], time.perf_counter()
    with pa.secure_generators(args.secure_rng):
        for a in audits:
            records.append(pa.run_audit(a, args.samples, seed=args.seed))
            _progress(records[-1])
        for _, run, _ in ends:
            records.append(run(seed=args.seed))
            _progress(records[-1])
    figures = {
        "noise_rng": "secure (ChaCha20, OS key)" if args.secure_rng else "seeded",
        "alpha": pa.ALPHA,
        "delta": DELTA,
        "wall_s": round(time.perf_counter() - start, 1),
        "audits": records,
    }
    path = write_result(name, figures, echo=False, write=args.write)
    writable(path.with_suffix(".md"), args.write).write_text(markdown(records) + "\n")
    print(text_table(HEADER, table_rows(records)))
    print(shown_path(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
