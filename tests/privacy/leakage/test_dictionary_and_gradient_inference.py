"""Attacks on FedPerGNN's building blocks: the matcher's dictionary attack (textbook RSA and a
shared client key fall, the blind-RSA OPRF does not), the key server's view of blinded ids
(independent of the id), and the server's positive-item inference from an upload (accurate on
clean BPR gradients, degraded by Laplace noise plus pseudo items)."""

from __future__ import annotations

import hashlib
import math
import random

import numpy as np
import pytest
import sympy
import torch
from cryptography.hazmat.primitives.asymmetric import rsa
from scipy import stats

from privacy import oprf
from privacy.ldp import choose_pseudo_items, clip_and_laplace, pseudo_item_gradients
from privacy.leakage import (
    dictionary_attack,
    infer_positive_items,
    precision_recall_f1,
    recovery_rate,
)

N_ITEMS = 400


def fixed_key(seed: int, bits: int = 1024) -> rsa.RSAPrivateKey:
    """A deterministic RSA key, so the statistical tests below are reproducible."""
    rnd = random.Random(seed)
    e = 65537
    while True:
        p, q = (sympy.nextprime(rnd.getrandbits(bits // 2) | (3 << (bits // 2 - 2))) for _ in "pq")
        phi = (p - 1) * (q - 1)
        if p != q and math.gcd(e, phi) == 1:
            break
    d = pow(e, -1, phi)
    numbers = rsa.RSAPrivateNumbers(
        p,
        q,
        d,
        rsa.rsa_crt_dmp1(d, p),
        rsa.rsa_crt_dmq1(d, q),
        rsa.rsa_crt_iqmp(p, q),
        rsa.RSAPublicNumbers(e, p * q),
    )
    return numbers.private_key()


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return fixed_key(10)


@pytest.fixture(scope="module")
def user_items() -> list[int]:
    return random.Random(0).sample(range(N_ITEMS), 60)


# ---------------------------------------------------------------------------- dictionary attack


def test_textbook_rsa_falls_to_the_dictionary_attack(key, user_items):
    pub = oprf.public_numbers(key)
    truth = {oprf.textbook_rsa_token(x, pub): x for x in user_items}
    recovered = dictionary_attack(truth, range(N_ITEMS), lambda c: oprf.textbook_rsa_token(c, pub))
    assert recovery_rate(recovered, truth) == 1.0


def test_shared_client_key_falls_once_one_client_leaks_it(key, user_items):
    truth = dict(zip(oprf.shared_key_tokens(user_items, key), user_items, strict=True))
    leaked = key  # every client holds it; a colluding client hands it to the matcher
    recovered = dictionary_attack(
        truth, range(N_ITEMS), lambda c: oprf.shared_key_tokens([c], leaked)[0]
    )
    assert recovery_rate(recovered, truth) == 1.0


def test_blind_rsa_tokens_resist_the_matchers_best_guesses(key, user_items):
    pub = oprf.public_numbers(key)
    tokens = oprf.oprf_tokens(user_items, key, oprf.BlindingRng.from_seed(0, "user-1"))
    truth = dict(zip(tokens, user_items, strict=True))
    own_key = fixed_key(11)  # the matcher's own key: it has no access to the key server's
    guesses = {
        "textbook RSA": lambda c: oprf.textbook_rsa_token(c, pub),
        "SHA-256 of id": lambda c: hashlib.sha256(str(c).encode()).digest(),
        "FDH of id": lambda c: oprf.full_domain_hash(c, pub.n).to_bytes(128, "big"),
        "PRF under another key": lambda c: oprf.shared_key_tokens([c], own_key)[0],
    }
    for name, token_fn in guesses.items():
        recovered = dictionary_attack(truth, range(N_ITEMS), token_fn)
        assert recovery_rate(recovered, truth) == 0.0, name
    # positive control: the same tokens are recovered by whoever holds the key server's key
    assert (
        recovery_rate(
            dictionary_attack(truth, range(N_ITEMS), lambda c: oprf.shared_key_tokens([c], key)[0]),
            truth,
        )
        == 1.0
    )


# ---------------------------------------------------------------------------- key server's view


def _view_features(values: list[int], n: int) -> list[np.ndarray]:
    v = np.array([x * 16 // n for x in values])  # which sixteenth of [0, N)
    return [v, *(np.array([x % p for x in values]) for p in (3, 5, 7))]


def _same_distribution_pvalue(a: list[int], b: list[int], n: int) -> float:
    """Smallest chi-square homogeneity p-value over the features (top bits, residues)."""
    pvalues = []
    for fa, fb in zip(_view_features(a, n), _view_features(b, n), strict=True):
        cats = np.union1d(fa, fb)
        table = np.array([[np.sum(f == c) for c in cats] for f in (fa, fb)])
        pvalues.append(stats.chi2_contingency(table).pvalue if len(cats) > 1 else 1.0)
    return min(pvalues)


def test_key_server_sees_id_independent_random_values(key):
    pub = oprf.public_numbers(key)
    n_samples = 1500
    rng = oprf.BlindingRng.from_seed(1, "view")
    view_a, _ = oprf.blind([7] * n_samples, pub, rng)
    view_b, _ = oprf.blind([301] * n_samples, pub, rng)
    assert len(set(view_a)) == n_samples  # the same id blinded twice never repeats
    assert _same_distribution_pvalue(view_a, view_b, pub.n) > 1e-3
    # and each view looks uniform over [0, N) in its top bits
    top = np.array([x * 16 // pub.n for x in view_a])
    assert stats.chisquare(np.bincount(top, minlength=16)).pvalue > 1e-3
    # positive control: without blinding (r = 1) the test tells the two ids apart
    weak_a = [oprf.full_domain_hash(7, pub.n)] * n_samples
    weak_b = [oprf.full_domain_hash(301, pub.n)] * n_samples
    assert _same_distribution_pvalue(weak_a, weak_b, pub.n) < 1e-6


# ---------------------------------------------------------------------------- gradient inference


def synthetic_bpr_upload(seed: int, n_pos: int = 20, negatives_per_pos: int = 3, dim: int = 16):
    """Item-embedding gradients of one user's BPR loss Σ −log σ(e_u·e_i − e_u·e_j) with an L2
    term on the touched items: rows for positives and sampled negatives, and the truth mask."""
    g = torch.Generator().manual_seed(seed)
    items = 0.3 * torch.randn(N_ITEMS, dim, generator=g, dtype=torch.float64)
    e_u = torch.randn(dim, generator=g, dtype=torch.float64) / math.sqrt(dim)
    perm = torch.randperm(N_ITEMS, generator=g)
    pos = perm[:n_pos]
    neg = perm[n_pos : n_pos * (1 + negatives_per_pos)]
    grads = torch.zeros(N_ITEMS, dim, dtype=torch.float64)
    for a, i in enumerate(pos):
        for j in neg[a * negatives_per_pos : (a + 1) * negatives_per_pos]:
            c = 1 - torch.sigmoid(e_u @ (items[i] - items[j]))
            grads[i] -= c * e_u
            grads[j] += c * e_u
    ids = torch.cat([pos, neg])
    upload = grads[ids] + 1e-2 * items[ids]
    truth = torch.zeros(len(ids), dtype=torch.bool)
    truth[:n_pos] = True
    return ids, upload, truth, e_u, g


def test_precision_recall_f1_by_hand():
    assert precision_recall_f1([1, 1, 0, 0], [1, 0, 1, 0]) == (0.5, 0.5, 0.5)
    assert precision_recall_f1([1, 0, 0], [1, 0, 0]) == (1.0, 1.0, 1.0)
    assert precision_recall_f1([0, 0], [1, 0]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError):
        precision_recall_f1([1, 0], [1, 0, 0])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clean_bpr_gradients_reveal_the_positive_items(seed):
    ids, upload, truth, e_u, _ = synthetic_bpr_upload(seed)
    assert precision_recall_f1(infer_positive_items(ids, upload), truth)[2] >= 0.95
    assert precision_recall_f1(infer_positive_items(ids, upload, e_u), truth)[2] >= 0.95
    # one negative per positive: mirror-image sides; the split is found, its label needs e_u
    ids1, upload1, truth1, e_u1, _ = synthetic_bpr_upload(seed, negatives_per_pos=1)
    split = infer_positive_items(ids1, upload1.numpy())
    f1_either = max(precision_recall_f1(split, truth1)[2], precision_recall_f1(~split, truth1)[2])
    assert f1_either >= 0.95
    assert precision_recall_f1(infer_positive_items(ids1, upload1, e_u1), truth1)[2] >= 0.95


def test_laplace_noise_and_pseudo_items_degrade_the_inference():
    clean_f1, protected_f1 = [], []
    m_pseudo, delta, lam = 80, 0.1, 0.2  # FedPerGNN-style: ε = 2δ/λ = 1 per coordinate
    for seed in range(4):
        ids, upload, truth, _, g = synthetic_bpr_upload(seed)
        clean_f1.append(precision_recall_f1(infer_positive_items(ids, upload), truth)[2])
        pseudo_ids = choose_pseudo_items(N_ITEMS, ids, m_pseudo, g)
        all_ids = torch.cat([ids, pseudo_ids])
        all_grads = torch.cat([upload, pseudo_item_gradients(upload, m_pseudo, g)])
        noisy = clip_and_laplace(all_grads, delta, lam, g)
        all_truth = torch.cat([truth, torch.zeros(m_pseudo, dtype=torch.bool)])
        protected_f1.append(precision_recall_f1(infer_positive_items(all_ids, noisy), all_truth)[2])
    assert min(clean_f1) >= 0.95
    assert max(protected_f1) < 0.6
    assert np.mean(protected_f1) < np.mean(clean_f1) - 0.4


@pytest.mark.parametrize(
    "call",
    [
        lambda: infer_positive_items([1, 2], torch.zeros(3, 4)),
        lambda: infer_positive_items([1, 2], torch.zeros(2)),
        lambda: infer_positive_items([1, 2], torch.full((2, 3), math.nan)),
        lambda: infer_positive_items([1, 2], torch.ones(2, 3), user_signal=torch.ones(4)),
        lambda: dictionary_attack(["not bytes"], range(3), lambda c: b"x"),
        lambda: dictionary_attack([b"x"], range(3), "not callable"),
        lambda: recovery_rate({}, {}),
    ],
)
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("seed", [0, 1])
def test_real_rows_stand_out_from_pseudo_rows_by_rank(seed):
    """Rating-loss gradients are (error × a shared direction): low rank. Pseudo rows drawn from
    the per-coordinate Gaussian fitted to them are not, and the residual split finds the real
    rows; Laplace noise far above the signal hides them again."""
    from privacy.ldp import pseudo_item_gradients
    from privacy.leakage import infer_real_rows

    gen = torch.Generator().manual_seed(seed)
    d, n_real, m = 16, 40, 30
    direction = torch.randn(d, generator=gen)
    real = torch.randn(n_real, 1, generator=gen) * direction + 0.01 * torch.randn(
        n_real, d, generator=gen
    )
    pseudo = pseudo_item_gradients(real, m, gen)
    rows = torch.cat([real, pseudo])
    truth = np.arange(n_real + m) < n_real
    _, _, f1 = precision_recall_f1(infer_real_rows(rows), truth)
    assert f1 > 0.9
    noisy = rows + 10.0 * torch.randn(rows.shape, generator=gen)
    _, _, f1_noisy = precision_recall_f1(infer_real_rows(noisy), truth)
    assert f1_noisy < f1 - 0.2
    with pytest.raises(ValueError, match="rank"):
        infer_real_rows(rows, rank=d)
