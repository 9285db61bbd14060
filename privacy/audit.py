"""Privacy audits: an empirical, statistically valid LOWER bound on the privacy of a mechanism,
measured by attacking it, to set beside the accountant's rigorous UPPER bound and the paper's claim
(Jagielski, Ullman & Oprea, "Auditing differentially private machine learning: how
private is private SGD?", NeurIPS 2020; Nasr, Song, Thakurta, Papernot & Carlini, "Adversary
instantiation: lower bounds for differentially private machine learning", IEEE S&P 2021).

An accountant says what a mechanism *should* cost; it cannot see an implementation bug (a noise
scale off by a factor, a clip applied after the noise). An audit runs the mechanism's own code on
two neighbouring inputs D and D' (the worst case of the unit's neighbouring relation), reduces
every output to a scalar *score* (larger: more like D'), and turns the error rates of the
threshold tests "guess D' when score ≥ t" into a lower bound on ε. Nothing here re-implements a
mechanism: the samplers call the functions of privacy/ with the arguments the protocols pass.

The statistics
--------------

*Hypothesis-testing view of DP* (Kairouz, Oh & Viswanath 2015; Wasserman & Zhou 2010). If M is
(ε, δ)-DP, then for ANY test (any measurable set S of outputs, "guess D' when M(·) ∈ S"), with
FPR = P[M(D) ∈ S] (false positive: D guessed D') and FNR = P[M(D') ∉ S],

    FPR + e^ε · FNR ≥ 1 − δ        and        FNR + e^ε · FPR ≥ 1 − δ,

(the second is the first with D and D' swapped: DP is symmetric in the neighbours), hence

    ε ≥ ln((1 − δ − FNR) / FPR)        and        ε ≥ ln((1 − δ − FPR) / FNR).          (1)

Likewise, at a fixed ε, δ ≥ 1 − FNR − e^ε·FPR and δ ≥ 1 − FPR − e^ε·FNR (``kind="delta"``: the
measured δ of a mechanism with no finite ε, such as VerFedGNN's ternary quantizer). And since Rényi
divergence obeys the data-processing inequality, D_α(M(D')‖M(D)) ≥ D_α(Ber(TPR)‖Ber(FPR)) and
D_α(M(D)‖M(D')) ≥ D_α(Ber(FPR)‖Ber(TPR)), TPR = 1 − FNR, so a test also lower-bounds the RDP ε at
order α (``kind="rdp"``: to set beside a claim stated as RDP, DGREC's (1.5, 0.54)).

*Confidence* (Clopper–Pearson). FPR and FNR are estimated from n₀ and n₁ independent runs of
the mechanism; the false positives are Binomial(n₀, FPR). The exact one-sided Clopper–Pearson
upper bound at level 1 − a for k successes in n trials is

    p̄(k, n; a) = Beta⁻¹(1 − a; k + 1, n − k)      (= 1 when k = n),

and P[FPR ≤ p̄] ≥ 1 − a whatever FPR is. Each error rate gets a = α/2, so both upper bounds hold
together with probability ≥ 1 − α (union bound; α = 0.05: 95 % confidence). Every bound in (1)
decreases in FPR and FNR, so putting the upper bounds FPR̄, FNR̄ in (1),

    ε_lb = max( ln((1 − δ − FNR̄) / FPR̄),  ln((1 − δ − FPR̄) / FNR̄) )                  (2)

is ≤ ε with probability ≥ 1 − α (0 where no numerator is positive: no bound). δ is the δ at which
the accountant states ε (``privacy_delta``, 1e-5), so ε_lb and the accountant's ε are the same
quantity. The δ bound uses 1 − FNR̄ − e^ε·FPR̄ (both forms); the RDP bound uses TPR ≥ 1 − FNR̄ and
FPR ≤ FPR̄: D_α(Ber(a)‖Ber(b)) is increasing in a and decreasing in b while a ≥ b, so
D_α(Ber(1 − FNR̄)‖Ber(FPR̄)) (and the reverse order) bounds the true divergence from below.

*No overfitting of the threshold.* The bound (2) holds for ONE test fixed in advance; the maximum
of (2) over many thresholds evaluated on the same samples would not be a valid 95 % bound (it
would pick the threshold whose errors happened to come out low). So the samples of each
hypothesis are split in two halves: the threshold t, the direction (score ≥ t, or −score ≥ −t)
and which of the two forms of (2) to use are chosen on the FIRST half (maximizing (2) computed
there, Clopper–Pearson included, which favours thresholds with enough counts; among equally good
thresholds the middle one), and the bound is then computed once, on the SECOND half, which played
no part in the choice. The reported samples
are per hypothesis and in all (both halves).

*Two levels.* A 95 % bound is wrong with probability up to 5 %, and for a mechanism whose best
test is tight (randomized response, optimized unary encoding, one Laplace coordinate) that
happens: over 300 seeds of the OUE audit at ε = 6.67 with 2·10⁴ runs, 1.7 % of the 95 % bounds were
above ε. So :func:`run_audit` also bounds at 1 − :data:`STRICT_ALPHA` (10⁻⁶) on the same runs,
and a verdict of INCONSISTENT (a bug) needs both above the rigorous figure; the tests use that
level alone, so a correct mechanism fails one of them with probability ≤ 10⁻⁶.

*One run* (Steinke, Nasr & Jagielski, "Privacy auditing with one (1) training run", NeurIPS 2023).
For a whole composed run, m canaries are each included independently with probability ½, the
run is made once, and the auditor guesses inclusion from the output (abstaining on some). If the
run is (ε, δ)-DP for each canary, the number W of correct guesses among r satisfies P[W ≥ v] ≤
P[Bin(r, q) ≥ v] + 2mδ·max_{1≤i≤v} P[v − i ≤ Bin(r, q) < v]/i, q = e^ε/(1 + e^ε)
(:func:`one_run_p_value`); the ε lower bound is the largest ε that this p-value rejects at level
α (:func:`one_run_epsilon_lower_bound`). :func:`one_run_audit` guesses on the f·m canaries of
largest |score| for a few fractions f fixed in advance (Bonferroni over them). The δ term is
2mδ times a probability: at δ = 10⁻⁵ it alone exceeds 10⁻⁶ for m ≳ 100, so a one-run audit has no
strict-level bound (it reports 0 there).

The bound is only as tight as the attack: the scores here are the likelihood ratio of the
worst-case pair (or a monotone function of it) where that is simple, so they are the optimal
tests of the pair (Neyman–Pearson); with n samples per half an FPR below ≈ 3.7/n cannot be seen,
so no audit can show an ε much above ln(n/3.7) (≈ 14 at n = 5·10⁶), whatever the true ε.

The mechanisms
--------------

Samplers (``sampler(n, seed) -> (scores under D, scores under D')``), vectorized over n runs:
FedPerGNN/FedLightGCN's upload through :func:`privacy.ldp.perturbed_upload` (clip to [−δ, δ], then
Laplace(λ)); DGREC's one-bit code (:func:`privacy.onebit.encode_onebit`); VerFedGNN's ternary
quantizer (:func:`privacy.ternary.ternary_quantize`); DIPSGNN's piecewise mechanism, optimized
unary encoding and Algorithm 3 (:mod:`privacy.piecewise`, :mod:`privacy.oue`,
:func:`privacy.feature_perturbation.perturb_user_features`). The protocol-level call sites that
live outside privacy/ (DGREC's ``encode_gradient``, VerFedGNN's party release, DIPSGNN's noisy
aggregation eq. 7 and its calibrations) have their samplers beside that code (protocols/<name>/
audit.py); each protocol declares the audits of its run (``Protocol.audits()``, run by a run's
``--audit``: engine/audit.py), and benchmarks/audit.py holds the full catalogue (mechanism,
rigorous ε by privacy/accountant.py, the paper's claim) and the end-to-end one-run audits.

:data:`PLANTED_BUGS` are two deliberately wrong Laplace uploads (noise scale halved; clip applied
after the noise) that the tests and the benchmark use to show that an audit catches them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from scipy.stats import beta as _beta
from scipy.stats import binom as _binom

from privacy.feature_perturbation import (
    CATEGORICAL,
    NUMERIC,
    feature_vector_layout,
    perturb_user_features,
    sampled_feature_count,
)
from privacy.ldp import clip_and_laplace, laplace_noise, perturbed_upload
from privacy.onebit import encode_onebit
from privacy.oue import oue_perturb
from privacy.piecewise import piecewise
from privacy.ternary import ternary_quantize

ALPHA = 0.05  # 1 − confidence of every bound (95 %)
KINDS = ("epsilon", "delta", "rdp")
Sampler = Callable[[int, int], tuple[np.ndarray, np.ndarray]]

# ------------------------------------------------------------------------------- statistics


def clopper_pearson_upper(k, n, a: float) -> np.ndarray:
    """One-sided exact upper confidence bound at level 1 − ``a`` on a binomial proportion from
    ``k`` successes in ``n`` trials: Beta⁻¹(1 − a; k + 1, n − k), 1 when k = n (vectorized)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if not 0 < a < 1:
        raise ValueError(f"a must lie in (0, 1), got {a!r}")
    if np.any(n < 1) or np.any(k < 0) or np.any(k > n):
        raise ValueError("need 0 <= k <= n and n >= 1")
    full = k >= n
    with np.errstate(all="ignore"):
        ub = _beta.ppf(1.0 - a, k + 1.0, np.where(full, 1.0, n - k))
    return np.where(full, 1.0, ub)


def clopper_pearson_lower(k, n, a: float) -> np.ndarray:
    """One-sided exact lower confidence bound at level 1 − ``a``: Beta⁻¹(a; k, n − k + 1), 0 when
    k = 0 (vectorized)."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    return 1.0 - clopper_pearson_upper(n - k, n, a)


def renyi_bernoulli(a, b, order: float) -> np.ndarray:
    """D_α(Ber(a) ‖ Ber(b)) = 1/(α−1) · ln(a^α b^{1−α} + (1−a)^α (1−b)^{1−α}), α > 1 (vectorized;
    +inf where b puts no mass on an outcome a has)."""
    if not order > 1:
        raise ValueError(f"Rényi order must be > 1, got {order!r}")
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    with np.errstate(all="ignore"):
        t1 = np.where(a > 0, order * np.log(a) + (1 - order) * np.log(b), -np.inf)
        t0 = np.where(a < 1, order * np.log1p(-a) + (1 - order) * np.log1p(-b), -np.inf)
        return np.logaddexp(t1, t0) / (order - 1)


def _objective(kind: str, fpr_ub, fnr_ub, delta: float, epsilon: float, order) -> np.ndarray:
    """The two forms of the bound (module docstring, (1)–(2)) from upper bounds on the error
    rates: [..., 2] (form 0: the test as is; form 1: D and D' swapped); −inf where none."""
    fpr_ub, fnr_ub = np.asarray(fpr_ub, dtype=np.float64), np.asarray(fnr_ub, dtype=np.float64)
    with np.errstate(all="ignore"):
        if kind == "epsilon":
            num0, num1 = 1.0 - delta - fnr_ub, 1.0 - delta - fpr_ub
            f0 = np.where(num0 > 0, np.log(num0) - np.log(fpr_ub), -np.inf)
            f1 = np.where(num1 > 0, np.log(num1) - np.log(fnr_ub), -np.inf)
        elif kind == "delta":
            f0 = 1.0 - fnr_ub - math.exp(epsilon) * fpr_ub
            f1 = 1.0 - fpr_ub - math.exp(epsilon) * fnr_ub
        elif kind == "rdp":
            tpr_lb = 1.0 - fnr_ub
            ok = tpr_lb > fpr_ub
            f0 = np.where(ok, renyi_bernoulli(tpr_lb, fpr_ub, order), -np.inf)
            f1 = np.where(ok, renyi_bernoulli(fpr_ub, tpr_lb, order), -np.inf)
        else:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    out = np.stack([f0, f1], axis=-1)
    return np.where(np.isnan(out), -np.inf, out)


def _candidates(s0: np.ndarray, s1: np.ndarray, grid: int = 512) -> np.ndarray:
    """Thresholds t for the tests "score ≥ t": every distinct score when there are few (discrete
    outputs), else order statistics of both samples, geometrically dense in both tails (where the
    ε-optimal thresholds lie) and linear in the bulk; each value v also as the next float above
    it (the test that excludes v)."""
    pooled = np.unique(np.concatenate([s0, s1]))
    if len(pooled) <= 4 * grid:
        values = pooled
    else:
        parts = []
        for s in (np.sort(s0), np.sort(s1)):
            n = len(s)
            ranks = np.concatenate(
                [np.geomspace(1, n, grid).astype(np.int64) - 1, np.linspace(0, n - 1, grid)]
            ).astype(np.int64)
            parts.append(s[np.unique(np.concatenate([ranks, n - 1 - ranks]))])
        values = np.unique(np.concatenate(parts))
    return np.unique(np.concatenate([values, np.nextafter(values, np.inf)]))


def _errors(s0_sorted: np.ndarray, s1_sorted: np.ndarray, t) -> tuple[np.ndarray, np.ndarray]:
    """False positives #{s0 ≥ t} and false negatives #{s1 < t} of the tests "score ≥ t"."""
    fp = len(s0_sorted) - np.searchsorted(s0_sorted, t, side="left")
    fn = np.searchsorted(s1_sorted, t, side="left")
    return fp, fn


@dataclasses.dataclass(frozen=True)
class Bound:
    """A lower bound of ``kind`` ("epsilon": ε at ``delta``; "delta": δ at ``epsilon``; "rdp": RDP
    ε at ``order``) with probability ≥ ``confidence``, from the test "direction·score ≥
    threshold" chosen on the selection half and evaluated on the held-out half: ``fp`` of ``n0``
    runs on D guessed D', ``fn`` of ``n1`` runs on D' guessed D, their Clopper–Pearson upper
    bounds, the form of (2) used (0: as is, 1: D and D' swapped) and ``point`` (the same
    expression with the raw rates, no confidence: an estimate, not a bound)."""

    value: float
    kind: str
    delta: float
    epsilon: float
    order: float | None
    confidence: float
    threshold: float
    direction: int
    form: int
    fp: int
    n0: int
    fn: int
    n1: int
    fpr_ub: float
    fnr_ub: float
    point: float
    selection_value: float

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def lower_bound(
    scores0,
    scores1,
    kind: str = "epsilon",
    *,
    delta: float = 0.0,
    epsilon: float = 0.0,
    order: float | None = None,
    alpha: float = ALPHA,
) -> Bound:
    """The (1 − ``alpha``)-confidence lower bound of ``kind`` from the scores of runs on D
    (``scores0``) and on D' (``scores1``): threshold, direction and form chosen on the first half
    of each sample, the bound evaluated on the second half (module docstring). The samples must
    be i.i.d. runs of the mechanism (their order carries no information)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "rdp" and not (order is not None and order > 1):
        raise ValueError("an RDP bound needs an order > 1")
    if not 0 <= delta < 1:
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    s0 = np.asarray(scores0, dtype=np.float64).ravel()
    s1 = np.asarray(scores1, dtype=np.float64).ravel()
    if len(s0) < 2 or len(s1) < 2 or not (np.isfinite(s0).all() and np.isfinite(s1).all()):
        raise ValueError("need at least two finite scores per hypothesis")
    h0, h1 = len(s0) // 2, len(s1) // 2
    sel0, ev0, sel1, ev1 = s0[:h0], s0[h0:], s1[:h1], s1[h1:]
    a = alpha / 2.0  # each error rate: both upper bounds hold together with prob. ≥ 1 − alpha

    best = (-np.inf, 0.0, 1, 0)  # (value, threshold, direction, form)
    for direction in (1, -1):
        x0, x1 = np.sort(direction * sel0), np.sort(direction * sel1)
        t = _candidates(x0, x1)
        fp, fn = _errors(x0, x1, t)
        obj = _objective(
            kind,
            clopper_pearson_upper(fp, h0, a),
            clopper_pearson_upper(fn, h1, a),
            delta,
            epsilon,
            order,
        )
        i, form = np.unravel_index(int(np.argmax(obj)), obj.shape)
        # among thresholds that do equally well (e.g. anywhere between two separated samples),
        # the middle one: a margin on both sides for the held-out half
        ties = np.flatnonzero(obj[:, form] >= obj[i, form])
        i = int(ties[len(ties) // 2])
        if obj[i, form] > best[0]:
            best = (float(obj[i, form]), float(t[i]), direction, int(form))
    selection_value, threshold, direction, form = best

    x0, x1 = np.sort(direction * ev0), np.sort(direction * ev1)
    fp, fn = (int(v) for v in _errors(x0, x1, threshold))
    n0, n1 = len(ev0), len(ev1)
    fpr_ub = float(clopper_pearson_upper(fp, n0, a))
    fnr_ub = float(clopper_pearson_upper(fn, n1, a))
    value = float(_objective(kind, fpr_ub, fnr_ub, delta, epsilon, order)[form])
    point = float(_objective(kind, fp / n0, fn / n1, delta, epsilon, order)[form])
    return Bound(
        value=max(value, 0.0),
        kind=kind,
        delta=float(delta),
        epsilon=float(epsilon),
        order=order,
        confidence=1.0 - alpha,
        threshold=threshold,
        direction=direction,
        form=form,
        fp=fp,
        n0=n0,
        fn=fn,
        n1=n1,
        fpr_ub=fpr_ub,
        fnr_ub=fnr_ub,
        point=point,
        selection_value=selection_value,
    )


def epsilon_lower_bound(scores0, scores1, delta: float, alpha: float = ALPHA) -> Bound:
    """ε lower bound at ``delta`` (module docstring, (2))."""
    return lower_bound(scores0, scores1, "epsilon", delta=delta, alpha=alpha)


def delta_lower_bound(scores0, scores1, epsilon: float, alpha: float = ALPHA) -> Bound:
    """δ lower bound at ``epsilon``: max over the two forms of 1 − FNR̄ − e^ε·FPR̄."""
    return lower_bound(scores0, scores1, "delta", epsilon=epsilon, alpha=alpha)


def rdp_lower_bound(scores0, scores1, order: float, alpha: float = ALPHA) -> Bound:
    """RDP ε lower bound at ``order``: D_α(Ber(1 − FNR̄) ‖ Ber(FPR̄)) or the reverse."""
    return lower_bound(scores0, scores1, "rdp", order=order, alpha=alpha)


# ------------------------------------------------------------------------------- one run


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P-value of "v of r guesses correct" under the null hypothesis that the run is (ε, δ)-DP,
    for m canaries each included independently with probability ½ (Steinke, Nasr & Jagielski,
    "Privacy auditing with one (1) training run", NeurIPS 2023: their bound for (ε, δ)-DP, as the
    algorithm published with the paper computes it):
    with q = e^ε/(1 + e^ε) (the accuracy of ε-randomized response),

        p = P[Bin(r, q) ≥ v] + 2mδ · max_{1≤i≤v} P[v − i ≤ Bin(r, q) < v] / i.

    The guesses may depend on the whole output in any way (abstaining on the others)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(_binom.sf(v - 1, r, q))  # P[Bin(r, q) ≥ v]
    if delta == 0 or v == 0:
        return min(1.0, tail)
    i = np.arange(1, v + 1)
    below = _binom.cdf(v - 1, r, q) - _binom.cdf(v - 1 - i, r, q)  # P[v − i ≤ Bin < v]
    return min(1.0, tail + 2.0 * m * delta * float(np.max(below / i)))


def one_run_epsilon_lower_bound(
    m: int, r: int, v: int, delta: float, alpha: float = ALPHA
) -> float:
    """The largest ε whose null hypothesis "(ε, δ)-DP" the observed v of r correct guesses rejects
    at level ``alpha`` (p-value < alpha; the p-value increases with ε): bisection, 0 when even
    ε = 0 is not rejected."""
    if one_run_p_value(m, r, v, 0.0, delta) >= alpha:
        return 0.0
    low, high = 0.0, 1.0
    while one_run_p_value(m, r, v, high, delta) < alpha:
        low, high = high, 2.0 * high
    for _ in range(60):
        mid = 0.5 * (low + high)
        if one_run_p_value(m, r, v, mid, delta) < alpha:
            low = mid
        else:
            high = mid
    return low


ONE_RUN_GUESS_FRACTIONS = (1.0, 0.5, 0.2, 0.1)  # fixed in advance (Bonferroni over them)


def one_run_audit(
    scores, included, delta: float, alpha: float = ALPHA, fractions=ONE_RUN_GUESS_FRACTIONS
) -> dict:
    """The one-run ε lower bound from the canaries' ``scores`` and their secret inclusion bits
    ``included`` (positive score: more likely included). For each fraction f (fixed in advance)
    the auditor guesses on the f·m canaries of largest |score| — "included" when the score is
    positive — and abstains on the rest: a function of the output alone, as the theorem requires,
    so the bound is valid whatever the scores; it is a powerful guess when they are symmetric about
    0 between the two hypotheses, as the log-likelihood-ratio scores of the audits here are. Each f is bounded with :func:`one_run_epsilon_lower_bound` at level
    alpha/len(fractions), and the largest bound is reported (valid at 1 − alpha by the union
    bound)."""
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    m = len(scores)
    if included.shape != scores.shape or m < 2:
        raise ValueError("need one inclusion bit per canary score, at least two canaries")
    order = np.argsort(-np.abs(scores), kind="stable")
    per = alpha / len(fractions)
    best: dict = {}
    for f in fractions:
        r = max(1, int(f * m))
        guessed = order[:r]
        v = int(((scores[guessed] > 0) == included[guessed]).sum())
        eps = one_run_epsilon_lower_bound(m, r, v, delta, per)
        if not best or eps > best["epsilon_lb"]:
            best = {"epsilon_lb": eps, "guesses": r, "correct": v, "fraction": f}
    return {**best, "canaries": m, "delta": delta, "confidence": 1.0 - alpha}


# ------------------------------------------------------------------------------- audits


@dataclasses.dataclass(frozen=True)
class Claim:
    """A paper's privacy figure: ``value`` of ``kind`` ("epsilon" at the audit's δ, "delta" at
    its ε, "rdp" at its order), described by ``text``."""

    value: float
    kind: str
    text: str


@dataclasses.dataclass(frozen=True)
class Audit:
    """One audit: ``sampler(n, seed)`` runs the mechanism (``code_path``) n times on each of the
    neighbouring inputs described by ``neighbours`` and returns the two score arrays; the bound is
    of ``kind`` (at ``delta``, ``epsilon`` or ``order``); ``rigorous`` is the accountant's figure
    of the same kind for the same release (``rigorous_text`` says how), ``paper`` the paper's
    claim (None: no claim); ``samples`` the benchmark's size (runs per hypothesis)."""

    name: str
    code_path: str
    neighbours: str
    sampler: Sampler
    rigorous: float
    rigorous_text: str
    kind: str = "epsilon"
    delta: float = 1e-5
    epsilon: float = 0.0
    order: float | None = None
    paper: Claim | None = None
    samples: int = 1_000_000
    note: str = ""


STRICT_ALPHA = 1e-6  # the confirmation level of a verdict (and the tests' level)

# the quick sizes (runs per hypothesis): `python -m benchmarks.audit --quick`, the tests, a run's
# --audit (engine/audit.py); seconds for each audit
QUICK_SAMPLES = 20_000
QUICK_SLOW_SAMPLES = 2_000  # the audits that call a mechanism once per run (full size ≤ 10⁵)


def quick_samples(audit: Audit) -> int:
    """``audit``'s quick size: :data:`QUICK_SLOW_SAMPLES` when its full size is at most 10⁵
    (a mechanism called once per run, in Python), else :data:`QUICK_SAMPLES` (vectorized)."""
    return QUICK_SLOW_SAMPLES if audit.samples <= 100_000 else QUICK_SAMPLES


CONSISTENT = "consistent"
REFUTED = "paper's claim refuted by measurement"
INCONSISTENT = "INCONSISTENT: lower bound above the rigorous figure (a bug)"
ABOVE_AT_95_ONLY = (
    "consistent at 1 − 1e-6; above the rigorous figure at 95 % only (the ≤ 5 % chance of a "
    "wrong 95 % bound)"
)


def verdict(value: float, strict: float, rigorous: float, claim: Claim | None, kind: str) -> str:
    """From the 95 % bound ``value`` and the same audit's bound at 1 − :data:`STRICT_ALPHA`
    (``strict``): ``INCONSISTENT`` when both exceed the rigorous figure (the mechanism leaks more
    than its accounting says); ``ABOVE_AT_95_ONLY`` when only the 95 % bound does (a 95 % bound
    is wrong with probability up to 5 %: for a mechanism whose best test is tight, such as
    randomized response, that happens in a few percent of seeds); else ``CONSISTENT``, and
    ``REFUTED`` when the 95 % bound also exceeds a claim of the same kind ("also at 1 − 1e-6"
    when the strict bound does too)."""
    if value > rigorous:
        return INCONSISTENT if strict > rigorous else ABOVE_AT_95_ONLY
    if claim is not None and claim.kind == kind and value > claim.value:
        also = " (also at 1 − 1e-6)" if strict > claim.value else " (at 95 %)"
        return f"{CONSISTENT}; {REFUTED}{also}"
    return CONSISTENT


def run_audit(audit: Audit, n: int | None = None, seed: int = 0, alpha: float = ALPHA) -> dict:
    """Run ``audit`` with ``n`` runs per hypothesis (default ``audit.samples``) from ``seed``;
    returns a JSON-able record: the (1 − ``alpha``) bound and its test, the bound at
    1 − :data:`STRICT_ALPHA` on the same runs, the rigorous figure, the claim, the verdict, the
    wall time (runs and statistics)."""
    import time

    n = int(audit.samples if n is None else n)
    start = time.perf_counter()
    s0, s1 = audit.sampler(n, seed)
    options = dict(
        kind=audit.kind,
        delta=audit.delta if audit.kind == "epsilon" else 0.0,
        epsilon=audit.epsilon,
        order=audit.order,
    )
    bound = lower_bound(s0, s1, alpha=alpha, **options)
    strict = lower_bound(s0, s1, alpha=STRICT_ALPHA, **options)
    wall = time.perf_counter() - start
    return {
        "name": audit.name,
        "code_path": audit.code_path,
        "neighbours": audit.neighbours,
        "kind": audit.kind,
        "delta": options["delta"] if audit.kind == "epsilon" else None,
        "epsilon": audit.epsilon if audit.kind == "delta" else None,
        "order": audit.order,
        "samples_per_hypothesis": n,
        "seed": seed,
        "lower_bound": bound.value,
        "confidence": 1.0 - alpha,
        "bound": bound.as_dict(),
        "lower_bound_strict": strict.value,
        "strict_confidence": 1.0 - STRICT_ALPHA,
        "rigorous": audit.rigorous,
        "rigorous_text": audit.rigorous_text,
        "paper": dataclasses.asdict(audit.paper) if audit.paper else None,
        "verdict": verdict(bound.value, strict.value, audit.rigorous, audit.paper, audit.kind),
        "note": audit.note,
        "wall_s": round(wall, 3),
    }


# ------------------------------------------------------------------------------- samplers


_SECURE = [False]  # set by ``secure_generators``


class secure_generators:
    """``with secure_generators():`` the samplers draw their noise from
    :class:`privacy.noise.SecureGenerator` (ChaCha20 keyed by the OS: what a node uses with
    ``--secure-rng``), so the audit covers the mechanisms' secure path; the seed is then ignored
    (the runs are not reproducible, as with ``--secure-rng``)."""

    def __init__(self, on: bool = True):
        self.on, self.before = bool(on), _SECURE[0]

    def __enter__(self):
        _SECURE[0] = self.on
        return self

    def __exit__(self, *exc):
        _SECURE[0] = self.before


def torch_generator(seed: int):
    """What a node's ``noise_generator()`` gives: a seeded CPU torch generator by default, the
    secure numpy generator within :class:`secure_generators`."""
    if _SECURE[0]:
        from privacy.noise import SecureGenerator

        return SecureGenerator()
    return torch.Generator().manual_seed(int(seed))


def numpy_generator(seed: int) -> np.random.Generator:
    """What a node's ``noise_rng`` gives: a seeded numpy generator by default, the secure one
    within :class:`secure_generators`."""
    if _SECURE[0]:
        from privacy.noise import SecureGenerator

        return SecureGenerator()
    return np.random.default_rng(int(seed))


def pair_seeds(seed: int) -> tuple[int, int]:
    """Distinct, reproducible seeds for the runs on D and on D'."""
    ss = np.random.SeedSequence(int(seed)).spawn(2)
    return tuple(int(s.generate_state(1, np.uint64)[0] >> np.uint64(1)) for s in ss)


def sign_pair_sampler(
    bound: float, n_coords: int, release: Callable[[torch.Tensor, int], np.ndarray]
) -> Sampler:
    """The runs of a coordinate-wise release on its extreme neighbours: n runs are n rows of
    ``n_coords`` elements of one flat float32 gradient, every element −``bound`` on D and
    +``bound`` on D'. ``release(grad, seed)`` releases it with the generators of ``seed`` and
    returns each element's score (float64); a run's score is its row's sum."""

    def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for sign, s in zip((-1.0, 1.0), pair_seeds(seed), strict=True):
            grad = torch.full((n * n_coords,), sign * bound, dtype=torch.float32)
            out.append(release(grad, s).reshape(n, n_coords).sum(axis=1))
        return out[0], out[1]

    return sample


LaplaceRelease = Callable[[torch.Tensor, float, float, Any], torch.Tensor]


def laplace_upload_sampler(
    clip: float,
    lam: float,
    n_coords: int = 1,
    *,
    release: LaplaceRelease | None = None,
    magnitude: float = 1e3,
) -> Sampler:
    """FedPerGNN/FedLightGCN's upload: n runs are n rows of one user's upload [n, n_coords]
    through :func:`privacy.ldp.perturbed_upload` (no pseudo items; clip to [−δ, δ], then
    Laplace(λ)), as protocols/fedpergnn calls it; ``release(grad, clip, lam, generator)`` replaces
    it (a planted bug). Neighbours (LDP: any input for any other): every coordinate −G on D, +G on
    D', G = ``magnitude``·clip, far outside the clip range (a clip applied too late shows). Score:
    Σ_j clamp(y_j, −δ, δ), the Laplace log-likelihood ratio of ±δ up to a factor."""

    def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for sign, s in zip((-1.0, 1.0), pair_seeds(seed), strict=True):
            grads = torch.full((n, n_coords), sign * magnitude * clip, dtype=torch.float32)
            gen = torch_generator(s)
            if release is None:
                ids = np.arange(n, dtype=np.int64)
                _, noisy, _ = perturbed_upload(n, ids, grads, 0, clip, lam, gen)
            else:
                noisy = release(grads, clip, lam, gen)
            out.append(noisy.double().clamp(-clip, clip).sum(dim=1).numpy())
        return out[0], out[1]

    return sample


def halved_noise_release(grad, clip, lam, generator):
    """PLANTED BUG: the Laplace scale halved (λ/2 where λ is accounted): ε doubles."""
    return clip_and_laplace(grad, clip, lam / 2.0, generator)


def clip_after_noise_release(grad, clip, lam, generator):
    """PLANTED BUG: clip(g + Laplace(λ), −δ, δ): the clip no longer bounds the sensitivity."""
    noise = laplace_noise(grad.shape, lam, generator).to(grad.dtype)
    return (grad + noise).clamp(-clip, clip)


PLANTED_BUGS: Mapping[str, LaplaceRelease] = {
    "noise scale halved": halved_noise_release,
    "clip after the noise": clip_after_noise_release,
}


def onebit_sampler(clip: float, beta: float, n_coords: int = 1) -> Sampler:
    """DGREC's one-bit code (eq. 5) via :func:`privacy.onebit.encode_onebit` on a torch gradient
    with a torch generator, as protocols/dgrec/messages.py calls it. Neighbours: every element −C
    vs +C (the extreme probabilities 1/(1+e^β), e^β/(1+e^β)). Score: the sum of the bits."""

    def release(grad: torch.Tensor, seed: int) -> np.ndarray:
        return encode_onebit(grad, clip, beta, torch_generator(seed)).to(torch.float64).numpy()

    return sign_pair_sampler(clip, n_coords, release)


def ternary_sampler(bound: float, r: float, n_coords: int = 1) -> Sampler:
    """VerFedGNN's ternary quantizer (eqs. 19–20) via :func:`privacy.ternary.ternary_quantize`
    with ``clip=bound``, as protocols/verfedgnn/roles.py calls it. Neighbours: every coordinate −B
    vs +B. Score: #(+r) − #(−r): on D it is never positive, so "score ≥ 1" has FPR 0 exactly
    and no finite ε (the measured δ is that test's TPR)."""

    def release(grad: torch.Tensor, seed: int) -> np.ndarray:
        values, _ = ternary_quantize(grad, r, torch_generator(seed), clip=bound)
        return torch.sign(values).to(torch.float64).numpy()

    return sign_pair_sampler(bound, n_coords, release)


def piecewise_sampler(eps: float) -> Sampler:
    """DIPSGNN's numeric features: the piecewise mechanism (:func:`privacy.piecewise.piecewise`,
    numpy generator, as Algorithm 3 calls it). Neighbours: t = −1 vs +1. Score: the output y
    (the density ratio is e^ε on [1, C], 1 on (−1, 1), e^−ε on [−C, −1])."""

    def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        s0, s1 = pair_seeds(seed)
        y0 = piecewise(np.full(n, -1.0), eps, numpy_generator(s0))
        y1 = piecewise(np.full(n, 1.0), eps, numpy_generator(s1))
        return y0, y1

    return sample


def oue_sampler(eps: float, categories: int = 4) -> Sampler:
    """DIPSGNN's categorical features: optimized unary encoding (:func:`privacy.oue.oue_perturb`,
    numpy generator). Neighbours: value 0 vs value 1. Score: b₁ − b₀ (the other bits are equally
    distributed under both)."""
    if categories < 2:
        raise ValueError("need at least two categories")

    def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for v, s in zip((0, 1), pair_seeds(seed), strict=True):
            onehot = np.zeros((n, categories), dtype=np.uint8)
            onehot[:, v] = 1
            bits = oue_perturb(onehot, eps, numpy_generator(s)).astype(np.float64)
            out.append(bits[:, 1] - bits[:, 0])
        return out[0], out[1]

    return sample


ALGORITHM3_KINDS = {"age": NUMERIC, "gender": CATEGORICAL, "occupation": CATEGORICAL}
ALGORITHM3_CARDINALITY = {"gender": 2, "occupation": 21}
ALGORITHM3_RANGES = {"age": (1.0, 56.0)}


def algorithm3_sampler(
    eps1: float,
    kinds: Mapping[str, str] = ALGORITHM3_KINDS,
    cardinalities: Mapping[str, int] = ALGORITHM3_CARDINALITY,
    public_ranges: Mapping[str, tuple[float, float]] = ALGORITHM3_RANGES,
) -> Sampler:
    """DIPSGNN's Algorithm 3 for one user (:func:`privacy.feature_perturbation.
    perturb_user_features`, one call per run, as protocols/dipsgnn/roles.py calls it). Neighbours:
    two users who differ in every feature (numeric: the ends of the public range; categorical:
    codes 0 and 1). Score: Σ over features of +1/−1 for an output in the region whose density
    ratio is e^{ε1/k} / e^{−ε1/k} (numeric y·k/n ≥ 1 / ≤ −1; categorical b at code 1 / at code 0),
    0 for a feature not sampled."""
    layout = feature_vector_layout(kinds, cardinalities)
    n_features = len(layout)
    k = sampled_feature_count(n_features, eps1)
    scale = n_features / k
    users = []
    for end in (0, 1):
        users.append(
            {s.name: (public_ranges[s.name][end] if s.kind == NUMERIC else end) for s in layout}
        )

    def score(x: np.ndarray) -> float:
        total = 0.0
        for s in layout:
            if s.kind == NUMERIC:
                y = x[s.start] / scale
                total += float(y >= 1.0 - 1e-6) - float(y <= -1.0 + 1e-6)
            else:
                total += float(x[s.start + 1] > 0) - float(x[s.start] > 0)
        return total

    def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        out = []
        for user, s in zip(users, pair_seeds(seed), strict=True):
            rng = numpy_generator(s)
            out.append(
                np.array(
                    [
                        score(
                            perturb_user_features(
                                user, kinds, cardinalities, public_ranges, eps1, rng
                            )
                        )
                        for _ in range(n)
                    ]
                )
            )
        return out[0], out[1]

    return sample
