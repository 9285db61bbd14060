"""A synthetic recommendation world with known ground truth (the embedded default dataset).

Generative model (all draws from ``numpy.random.default_rng(SeedSequence([seed, part]))``,
one stream per part, so the result is a deterministic function of the arguments):

- **Clusters**: ``K = max(1, n_tags // 3)`` unit-norm centres ``c_k`` in R^dim. Item ``i``
  belongs to cluster ``z_i`` (uniform) and has taste ``v_i = c_{z_i} + σ_i ε_i`` (ε ~ N(0, I/dim)).
  User ``u`` has a main cluster ``m_u`` and a second one ``s_u`` and taste
  ``t_u = w_u c_{m_u} + (1 − w_u) c_{s_u} + σ_u ε_u`` with ``w_u ~ U(0.6, 1)``.
- **Popularity**: power law over a random ranking of the items, ``p_i ∝ (rank_i + 1)^(−a)``.
- **Interactions**: user ``u`` draws ``n_u`` distinct items (``n_u`` log-normal around
  ``avg_interactions``, clipped to ``[max(2, avg/4), min(n_items, 4 avg)]``) without replacement
  with probabilities ∝ ``p_i · exp(t_u · v_i / T)`` (Gumbel-top-k sampling). A caller may give
  the ``n_u`` instead (``interaction_counts``, e.g. a real dataset's degrees: benchmarks/scale.py);
  ``avg_interactions`` is then unused.
- **Sequences**: the drawn items are ordered by a noisy nearest-neighbour walk in taste space
  (next = argmax over unvisited j of ``v_prev · v_j / T_seq + Gumbel``), so consecutive items are
  close; timestamps increase along the walk (start uniform over a year, gaps 1 min + Exp(2 days)).
- **Ratings** 1..5: ``clip(round(3 + 1.1 z + 0.5 η), 1, 5)`` with ``z`` the standardized affinity
  ``t_u · v_i`` over all interactions and η ~ N(0, 1).
- **Tags**: cluster ``k`` owns tags ``{t : t mod K = k}``; each item gets 1–3 of its cluster's tags.
- **User features**: ``age`` (numeric) ``= clip(round(38 + 11 s_age + 6 η), 16, 80)``, ``gender``
  (2 codes, P(1) = sigmoid(1.5 s_g)), ``occupation`` (8 codes, argmax of 1.5 s_occ + Gumbel), where
  ``s_*`` are standardized random linear projections of ``t_u``: all correlate with taste.
- **Social links**: user ``u`` links (directed) to ``clip(Poisson(5), 1, M)`` users drawn from the
  ``M = 20`` users closest to it by taste cosine within a pool of 200 random other users (all
  others when there are at most 200); each link is replaced by a uniformly random other user
  with probability 0.1 (homophily with noise).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from data.filters import first_of_each_pair
from data.loaders.build import build_dataset
from data.loaders.raw import RawData
from data.types import Interactions, RecDataset

TEMPERATURE = 0.15  # T: preference sharpness
SEQUENCE_TEMPERATURE = 0.25  # T_seq: how tightly consecutive items follow each other
ZIPF_EXPONENT = 0.8  # a
ITEM_NOISE = 1.0  # σ_i
USER_NOISE = 0.7  # σ_u
N_OCCUPATIONS = 8
LINKS_PER_USER = 5
LINK_CANDIDATES = 20
LINK_POOL = 200
LINK_NOISE = 0.1


@dataclass
class SyntheticWorld:
    """The generated dataset together with the latent truth that produced it."""

    dataset: RecDataset
    user_taste: np.ndarray  # float32 [n_users, dim]
    item_taste: np.ndarray  # float32 [n_items, dim]
    item_popularity: np.ndarray  # float64 [n_items], sums to 1
    item_cluster: np.ndarray  # int64 [n_items]
    user_cluster: np.ndarray  # int64 [n_users] (main cluster)
    cluster_centers: np.ndarray  # float32 [K, dim]


def _rng(seed: int, part: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, part]))


def _standardize(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-12)


def _check_int(value: int, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _interaction_counts(
    rng: np.random.Generator, n_users: int, n_items: int, avg: int
) -> np.ndarray:
    low = max(2, round(avg / 4))
    high = min(n_items, 4 * avg)
    if low > high:
        raise ValueError(f"n_items={n_items} is too small for avg_interactions={avg}")
    sigma = 0.6
    raw = rng.lognormal(np.log(avg) - sigma**2 / 2, sigma, n_users)
    return np.clip(np.rint(raw), low, high).astype(np.int64)


def _given_counts(counts, n_users: int, n_items: int) -> np.ndarray:
    """``interaction_counts`` checked: one integer in ``1..n_items`` per user."""
    counts = np.asarray(counts)
    if counts.shape != (n_users,) or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError(f"interaction_counts must be {n_users} integers, one per user")
    if counts.min() < 1 or counts.max() > n_items:
        raise ValueError(f"interaction_counts must lie in 1..n_items={n_items}")
    return counts.astype(np.int64)


def _gumbel(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Standard Gumbel noise in float32 (``−log E`` with E ~ Exp(1))."""
    with np.errstate(divide="ignore"):
        return -np.log(rng.standard_exponential(shape, dtype=np.float32))


def _draw_sequences(
    rng: np.random.Generator,
    user_taste: np.ndarray,
    item_taste: np.ndarray,
    log_popularity: np.ndarray,
    n_per_user: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(user, item) rows grouped by user (ascending), each user's rows in sequence order.

    Users are processed in chunks of similar ``n_u`` so that the walk costs about
    ``Σ_u n_u²`` rather than ``n_users · max(n_u)²``."""
    n_users, n_items = len(user_taste), len(item_taste)
    user_taste = user_taste.astype(np.float32)
    item_taste = item_taste.astype(np.float32)
    log_popularity = log_popularity.astype(np.float32)
    by_size = np.argsort(n_per_user, kind="stable")
    users, items = [], []
    max_rows = max(1, 2_000_000 // n_items)  # bounds the [B, n_items] key matrix
    start = 0
    while start < n_users:
        widest = int(n_per_user[by_size[min(start + max_rows, n_users) - 1]])
        chunk = max(1, min(max_rows, 4_000_000 // (widest * widest)))  # bounds [B, W, W]
        block = by_size[start : start + chunk]
        width = int(n_per_user[block].max())
        start += chunk
        n_block = block.size
        keys = log_popularity + (user_taste[block] @ item_taste.T) / TEMPERATURE
        keys += _gumbel(rng, keys.shape)
        if width < n_items:
            top = np.argpartition(-keys, width - 1, axis=1)[:, :width]
        else:
            top = np.tile(np.arange(n_items), (n_block, 1))
        rows = np.arange(n_block)
        top = np.take_along_axis(top, np.argsort(-keys[rows[:, None], top], axis=1), axis=1)
        # noisy nearest-neighbour walk through each user's drawn items (padding pre-visited)
        vectors = item_taste[top]  # [B, W, dim]
        closeness = (vectors @ vectors.transpose(0, 2, 1)) / SEQUENCE_TEMPERATURE
        positions = np.arange(width)
        length = n_per_user[block]
        visited = positions[None, :] >= length[:, None]
        current = np.zeros(n_block, dtype=np.int64)
        walk = np.zeros((n_block, width), dtype=np.int64)
        visited[rows, current] = True
        for step in range(1, width):
            score = closeness[rows, current] + _gumbel(rng, (n_block, width))
            score[visited] = -np.inf
            current = np.argmax(score, axis=1)
            walk[:, step] = current
            visited[rows, current] = True
        ordered = np.take_along_axis(top, walk, axis=1)
        keep = positions[None, :] < length[:, None]
        users.append(np.broadcast_to(block[:, None], keep.shape)[keep])
        items.append(ordered[keep])
    user = np.concatenate(users).astype(np.int64)
    item = np.concatenate(items).astype(np.int64)
    order = np.argsort(user, kind="stable")
    return user[order], item[order]


def _item_tags(
    rng: np.random.Generator, item_cluster: np.ndarray, n_tags: int, n_clusters: int
) -> sp.csr_matrix:
    rows, cols = [], []
    for k in range(n_clusters):
        pool = np.arange(k, n_tags, n_clusters)
        members = np.flatnonzero(item_cluster == k)
        if members.size == 0:
            continue
        count = np.minimum(rng.integers(1, 4, members.size), pool.size)
        ranked = np.argsort(rng.random((members.size, pool.size)), axis=1)
        chosen = np.arange(pool.size)[None, :] < count[:, None]
        rows.append(np.broadcast_to(members[:, None], chosen.shape)[chosen])
        cols.append(pool[ranked][chosen])
    row = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    col = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    return sp.csr_matrix(
        (np.ones(row.size, dtype=np.float32), (row, col)), shape=(len(item_cluster), n_tags)
    )


def _user_features(rng: np.random.Generator, user_taste: np.ndarray) -> dict[str, np.ndarray]:
    n_users, dim = user_taste.shape
    projections = _standardize(user_taste @ rng.normal(size=(dim, 2 + N_OCCUPATIONS)))
    age = np.clip(np.rint(38 + 11 * projections[:, 0] + 6 * rng.normal(size=n_users)), 16, 80)
    p_gender = 1.0 / (1.0 + np.exp(-1.5 * projections[:, 1]))
    occupation = np.argmax(
        1.5 * projections[:, 2:] + rng.gumbel(size=(n_users, N_OCCUPATIONS)), axis=1
    )
    return {
        "age": age.astype(np.float32),
        "gender": (rng.random(n_users) < p_gender).astype(np.int64),
        "occupation": occupation.astype(np.int64),
    }


def _social_links(rng: np.random.Generator, user_taste: np.ndarray) -> np.ndarray:
    """Directed homophilous links: each user's targets come from the ``M`` users closest in
    taste cosine among a candidate pool (all other users when ``n_users <= LINK_POOL + 1``,
    else ``LINK_POOL`` random other users, which keeps the cost linear in ``n_users``)."""
    n_users = len(user_taste)
    if n_users < 2:
        return np.zeros((0, 2), dtype=np.int64)
    unit = (user_taste / np.linalg.norm(user_taste, axis=1, keepdims=True)).astype(np.float32)
    sources_all = np.arange(n_users)
    if n_users - 1 <= LINK_POOL:
        offsets = np.tile(np.arange(1, n_users), (n_users, 1))
    else:
        offsets = rng.integers(1, n_users, (n_users, LINK_POOL))
    pool = (sources_all[:, None] + offsets) % n_users  # never the user itself
    cosine = np.empty(pool.shape, dtype=np.float32)
    for start in range(0, n_users, 8192):
        rows = slice(start, start + 8192)
        cosine[rows] = np.einsum("ud,upd->up", unit[rows], unit[pool[rows]])
    m = min(LINK_CANDIDATES, pool.shape[1])
    nearest = np.take_along_axis(pool, np.argpartition(-cosine, m - 1, axis=1)[:, :m], axis=1)
    degree = np.clip(rng.poisson(LINKS_PER_USER, n_users), 1, m)
    ranked = np.argsort(rng.random((n_users, m)), axis=1)
    chosen = np.arange(m)[None, :] < degree[:, None]
    targets = np.take_along_axis(nearest, ranked, axis=1)[chosen]
    sources = np.broadcast_to(sources_all[:, None], chosen.shape)[chosen]
    noisy = rng.random(targets.size) < LINK_NOISE
    # a uniform other user: shift by 1..n-1 modulo n never lands on the source
    targets = np.where(noisy, (sources + rng.integers(1, n_users, targets.size)) % n_users, targets)
    links = np.stack([sources, targets], axis=1).astype(np.int64)
    return links[first_of_each_pair(Interactions(links[:, 0], links[:, 1]))]


def _generate(
    n_users: int,
    n_items: int,
    n_tags: int,
    dim: int,
    avg_interactions: int,
    seed: int,
    interaction_counts=None,
) -> tuple[RawData, dict[str, np.ndarray]]:
    n_users = _check_int(n_users, "n_users", 2)
    n_items = _check_int(n_items, "n_items", 2)
    n_tags = _check_int(n_tags, "n_tags", 1)
    dim = _check_int(dim, "dim", 1)
    avg_interactions = _check_int(avg_interactions, "avg_interactions", 1)
    seed = _check_int(seed, "seed", 0)
    n_clusters = max(1, n_tags // 3)

    rng = _rng(seed, 0)
    centers = rng.normal(size=(n_clusters, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    item_cluster = rng.integers(0, n_clusters, n_items)
    item_taste = centers[item_cluster] + ITEM_NOISE * rng.normal(size=(n_items, dim)) / np.sqrt(dim)
    user_cluster = rng.integers(0, n_clusters, n_users)
    second = rng.integers(0, n_clusters, n_users)
    weight = rng.uniform(0.6, 1.0, n_users)[:, None]
    user_taste = (
        weight * centers[user_cluster]
        + (1 - weight) * centers[second]
        + USER_NOISE * rng.normal(size=(n_users, dim)) / np.sqrt(dim)
    )
    popularity = (rng.permutation(n_items) + 1.0) ** -ZIPF_EXPONENT
    popularity /= popularity.sum()

    rng = _rng(seed, 1)
    if interaction_counts is None:
        n_per_user = _interaction_counts(rng, n_users, n_items, avg_interactions)
    else:
        n_per_user = _given_counts(interaction_counts, n_users, n_items)
    user, item = _draw_sequences(rng, user_taste, item_taste, np.log(popularity), n_per_user)

    rng = _rng(seed, 2)
    starts = 1_500_000_000 + rng.integers(0, 365 * 86_400, n_users)
    gaps = 60 + rng.exponential(2 * 86_400, len(user)).astype(np.int64)
    first_row = np.concatenate([[0], np.cumsum(n_per_user)[:-1]])
    gaps[first_row] = 0
    elapsed = np.cumsum(gaps)
    timestamp = starts[user] + elapsed - elapsed[first_row][user]
    affinity = np.einsum("ed,ed->e", user_taste[user], item_taste[item])
    noise = rng.normal(size=len(user))
    rating = np.clip(np.rint(3 + 1.1 * _standardize(affinity) + 0.5 * noise), 1, 5)

    tags = _item_tags(_rng(seed, 3), item_cluster, n_tags, n_clusters)
    features = _user_features(_rng(seed, 4), user_taste)
    links = _social_links(_rng(seed, 5), user_taste)

    params = {
        "n_users": n_users,
        "n_items": n_items,
        "n_tags": n_tags,
        "dim": dim,
        "avg_interactions": avg_interactions,
        "seed": seed,
    }
    if interaction_counts is not None:  # recorded by their sum, not one by one
        params["interaction_counts"] = f"given ({int(n_per_user.sum())} in all)"
    raw = RawData(
        name="synthetic",
        parts={
            "all": Interactions(user, item, rating.astype(np.float32), timestamp.astype(np.int64))
        },
        explicit=True,
        user_ids=np.arange(n_users, dtype=np.int64),
        item_ids=np.arange(n_items, dtype=np.int64),
        user_features=features,
        feature_kinds={"age": "numeric", "gender": "categorical", "occupation": "categorical"},
        feature_cardinality={"gender": 2, "occupation": N_OCCUPATIONS},
        item_tags=tags,
        tag_names=[f"tag_{t:02d}" for t in range(n_tags)],
        links=links,
        meta={
            "generator": params,
            "clusters": n_clusters,
            "temperature": TEMPERATURE,
            "sequence_temperature": SEQUENCE_TEMPERATURE,
            "zipf_exponent": ZIPF_EXPONENT,
            "timestamps": "synthetic unix seconds, increasing along each user's sequence",
            "feature_values": {
                "gender": ["g0", "g1"],
                "occupation": [f"occupation_{k}" for k in range(N_OCCUPATIONS)],
            },
        },
    )
    truth = {
        "user_taste": user_taste.astype(np.float32),
        "item_taste": item_taste.astype(np.float32),
        "item_popularity": popularity,
        "item_cluster": item_cluster.astype(np.int64),
        "user_cluster": user_cluster.astype(np.int64),
        "cluster_centers": centers.astype(np.float32),
    }
    return raw, truth


def synthetic_raw(
    n_users: int = 300,
    n_items: int = 500,
    n_tags: int = 12,
    dim: int = 8,
    avg_interactions: int = 30,
    seed: int = 0,
    interaction_counts=None,
) -> RawData:
    """The generated world's files-equivalent (all interactions pooled, before splitting).
    ``interaction_counts``: each user's number of items (None: the log-normal model)."""
    return _generate(n_users, n_items, n_tags, dim, avg_interactions, seed, interaction_counts)[0]


def synthetic_world(
    n_users: int = 300,
    n_items: int = 500,
    n_tags: int = 12,
    dim: int = 8,
    avg_interactions: int = 30,
    seed: int = 0,
    test_fraction: float = 0.2,
    interaction_counts=None,
) -> SyntheticWorld:
    """The dataset of :func:`synthetic` together with its latent tastes, clusters and popularity."""
    raw, truth = _generate(
        n_users, n_items, n_tags, dim, avg_interactions, seed, interaction_counts
    )
    dataset = build_dataset(raw, split="random", seed=seed, test_fraction=test_fraction)
    return SyntheticWorld(dataset=dataset, **truth)


def synthetic(
    n_users: int = 300,
    n_items: int = 500,
    n_tags: int = 12,
    dim: int = 8,
    avg_interactions: int = 30,
    seed: int = 0,
    test_fraction: float = 0.2,
    interaction_counts=None,
) -> RecDataset:
    """A synthetic :class:`RecDataset` (model in the module docstring) with every field filled
    and a per-user random split (:func:`data.splits.random_split` with ``seed``). Equal to
    ``load_dataset("synthetic", seed=seed, test_fraction=test_fraction, n_users=..., ...)``;
    ``interaction_counts``: each user's number of items, in place of the log-normal model."""
    return synthetic_world(
        n_users, n_items, n_tags, dim, avg_interactions, seed, test_fraction, interaction_counts
    ).dataset
