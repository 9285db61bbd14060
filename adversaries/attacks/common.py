"""What the attacks do, independent of the protocol family: a fake user's profile, and the change
an adversary makes to its row-sparse upload (item ids, one gradient row each) before the
protocol's encoder sends it. The family modules (fedmf.py, fedpergnn.py) mix
:class:`Adversary` into the protocol's user role.

Every adversary reports no evaluation figure (its held-out items are dropped), so every metric is
the honest users'. A fake user joins with no data of its own and makes up its profile from its
own RNG stream (seed, node id) in its constructor.
"""

from __future__ import annotations

import numpy as np


def popular_items(knowledge, exclude: np.ndarray) -> np.ndarray:
    """The ``popular_share`` most popular items of the training data, without ``exclude``."""
    counts = knowledge.popularity
    n = max(1, int(round(knowledge.params.get("popular_share", 0.1) * len(counts))))
    order = np.argsort(-counts, kind="stable")
    return np.setdiff1d(order[:n], exclude)


def fake_profile(rng: np.random.Generator, knowledge, popular: bool) -> np.ndarray:
    """The targets plus filler items up to the honest users' mean profile size: random items, or
    popular ones (bandwagon)."""
    targets = knowledge.targets
    n_items = len(knowledge.popularity)
    pool = (
        popular_items(knowledge, targets) if popular else np.setdiff1d(np.arange(n_items), targets)
    )
    n_fill = max(1, min(knowledge.profile_size - len(targets), len(pool)))
    filler = rng.choice(pool, size=n_fill, replace=False)
    return np.unique(np.concatenate([targets, filler]).astype(np.int64))


def with_target_rows(
    ids: np.ndarray, rows: np.ndarray, targets: np.ndarray, target_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, rows)`` with target t's row set to ``target_rows[t]`` scaled to the largest norm of
    the upload's honest rows (the norm honest users show); a target missing from the ids takes
    the slot of a non-target id (the upload keeps its size), and repeated target ids keep only
    their first row."""
    ids, rows = ids.copy(), np.array(rows, dtype=np.float32, copy=True)
    norm = float(np.linalg.norm(rows, axis=1).max()) if len(rows) else 1.0
    free = [i for i in range(len(ids)) if ids[i] not in set(targets.tolist())]
    for t in targets:
        if t not in ids and free:
            ids[free.pop(0)] = t
    for t, r in zip(targets, target_rows):
        at = np.flatnonzero(ids == t)
        if not len(at):
            continue
        rows[at] = 0.0
        r = np.asarray(r, dtype=np.float64)
        rows[at[0]] = (r * (norm / max(np.linalg.norm(r), 1e-12))).astype(np.float32)
    return ids, rows


def promotion_rows(table: np.ndarray, knowledge, k: int, bias_column: bool = False) -> np.ndarray:
    """FedRecAttack: ∂L/∂q_t of L = Σ_u Σ_t [s_uK − s_ut]_+ over the users approximated from the
    public interactions (p̂_u: the mean of their public items' rows, a one-step approximation of
    the attacker's fit; s_uK: p̂_u's K-th best score), i.e. −Σ p̂_u over the users in whose top K
    target t is not yet. The server's descent on it lifts the targets into those users' top K.
    ``bias_column``: the table's last column is an item bias scored against a constant 1 in
    p_u (dmf), so p̂_u ends in that 1."""
    t = knowledge.targets
    if not knowledge.public_items:
        return np.zeros((len(t), table.shape[1]))
    rows = table.astype(np.float64) if bias_column else table  # (the mean as each attack took it)
    users = np.stack([rows[items].mean(0) for items in knowledge.public_items]).astype(np.float64)
    if bias_column:
        users[:, -1] = 1.0
    scores = users @ table.T.astype(np.float64)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
    out = []
    for item in t:
        below = scores[:, item] < kth
        out.append(-users[below].sum(0) if below.any() else -users.sum(0) * 1e-3)
    return np.stack(out)


def popularity_rows(table: np.ndarray, knowledge) -> np.ndarray:
    """PipAttack's popularity term: ∂/∂q_t of ½‖q_t − c‖², c the centroid of the popular items'
    rows, so that the server's descent makes the targets look like popular items."""
    t = knowledge.targets
    centre = table[popular_items(knowledge, t)].astype(np.float64).mean(0)
    return table[t].astype(np.float64) - centre


class Adversary:
    """Mixed into a protocol's user role: the attack's constructor and its change to the upload
    (:meth:`tamper_upload`, called by the role just before the protocol's encoder)."""

    FAKE = True  # joins as a fake user with a made-up profile (else: a compromised real user)
    POPULAR_PROFILE = False  # bandwagon: popular filler items
    adversary = True

    def __init__(self, nid, ctx, *args, knowledge=None, **kwargs):
        super().__init__(nid, ctx, *args, **kwargs)
        self.knowledge = knowledge
        self.test_items = np.zeros(0, dtype=np.int64)  # adversaries are not evaluated
        if hasattr(self, "test_ratings"):
            self.test_ratings = None if self.test_ratings is None else np.zeros(0, np.float32)
        if self.FAKE and not len(self.train_items):
            self.train_items = fake_profile(self.rng, knowledge, self.POPULAR_PROFILE)
            if getattr(self, "train_ratings", None) is not None:
                top = getattr(self.public, "rating_max", 5.0)
                self.train_ratings = np.full(len(self.train_items), top, dtype=np.float32)

    def tamper_upload(self, ids, rows, table):
        return ids, rows


class TargetRowsAdversary(Adversary):
    """Model poisoning: honest rows of its made-up profile, target rows replaced."""

    def target_rows(self, table: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def tamper_upload(self, ids, rows, table):
        table = np.asarray(table)
        return with_target_rows(ids, rows, self.knowledge.targets, self.target_rows(table))


class ByzantineAdversary(Adversary):
    """A compromised real user: it trains honestly and changes what it uploads."""

    FAKE = False

    def byzantine(self, rows: np.ndarray, scale: float) -> np.ndarray:
        raise NotImplementedError

    def tamper_upload(self, ids, rows, table):
        scale = float(self.knowledge.params["scale"])
        return ids, self.byzantine(np.asarray(rows, dtype=np.float32), scale).astype(np.float32)


def scaled(rows: np.ndarray, scale: float) -> np.ndarray:
    return rows * scale


def gaussian_like(rng: np.random.Generator, rows: np.ndarray, scale: float) -> np.ndarray:
    """Gaussian rows with the norms of ``rows`` times ``scale``."""
    g = rng.standard_normal(rows.shape)
    g /= np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    return g * np.linalg.norm(rows, axis=1, keepdims=True) * scale
