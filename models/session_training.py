"""The curator's computation for DIPSGNN, free of Ray: one training epoch over next-item examples
(Algorithm 4 with eqs. 4–13, Adam) and full-catalogue top-K ranking for evaluation prefixes.

Everything here is a deterministic function of its arguments and the given generators, so the
protocol's results do not depend on where the server runs or how the users are placed.
"""

from __future__ import annotations

import numpy as np
import torch

from data.sequences import PrefixExamples, pad_behaviour_graphs
from models.gated_session_gnn import DIPSGNN, batch_tensors
from privacy.noise import keyed_generator


def edgerand_noise(graphs, example_ids: np.ndarray, sigma: float, seed: int | bytes) -> None:
    """EdgeRand: IN PLACE, A_out of each prefix graph gets N(0, σ²) on every entry of its node
    block (zeros too, so the noise hides which edges exist) and A_in becomes its transpose. The
    noise of an example is a function of (seed, example id) alone: the same perturbed graph in
    every epoch, so each prefix graph is released once. ``seed`` is an int (seeded from the run's
    seed) or, with ``--secure-rng``, a secret key from the OS (bytes): each example's noise then
    comes from ChaCha20 under a key derived from it (privacy/noise.py ``keyed_generator``)."""
    for r, ex in enumerate(example_ids):
        k = int(graphs.node_mask[r].sum())
        if isinstance(seed, bytes):
            rng = keyed_generator(seed, int(ex))
        else:
            rng = np.random.default_rng([seed, int(ex)])
        graphs.a_out[r, :k, :k] += (sigma * rng.standard_normal((k, k))).astype(np.float32)
        graphs.a_in[r, :k, :k] = graphs.a_out[r, :k, :k].T


def _batch(
    model: DIPSGNN,
    prefixes: list[np.ndarray],
    users: np.ndarray,
    features: torch.Tensor | None,
    max_weight: float,
    device: torch.device,
    edge_noise: tuple[float, int | bytes, np.ndarray] | None = None,
) -> dict:
    graphs = pad_behaviour_graphs(prefixes, max_weight=max_weight)  # eq. 4, counts capped
    if edge_noise is not None and edge_noise[0] > 0:
        edgerand_noise(graphs, edge_noise[2], edge_noise[0], edge_noise[1])
    tensors = batch_tensors(graphs, device)
    u = torch.as_tensor(users, dtype=torch.long, device=device)
    if model.use_features:
        tensors["user_features"] = features[u]
    elif model.user_map is not None:
        tensors["users"] = u
    return tensors


def train_epoch(
    model: DIPSGNN,
    optimizer: torch.optim.Optimizer,
    examples: PrefixExamples,
    features: torch.Tensor | None,
    *,
    batch_size: int,
    max_weight: float,
    order_rng: np.random.Generator,
    noise: torch.Generator | np.random.Generator,
    edgerand: tuple[float, int | bytes] | None = None,
) -> float:
    """One pass over every training prefix in a shuffled order (every prefix once: no
    subsampling, which the privacy accounting assumes). Returns the mean loss (eq. 13).
    ``edgerand=(σ_A, seed)`` perturbs the adjacency instead (the EdgeRand baseline; the model's
    own σ is then 0). ``noise`` draws the aggregation noise of eq. 7: a torch generator, or a
    numpy one (the secure generator of ``--secure-rng``, privacy/noise.py)."""
    model.train()
    device = next(model.parameters()).device
    order = order_rng.permutation(len(examples))
    total, count = 0.0, 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        tensors = _batch(
            model,
            [examples.prefixes[i] for i in idx],
            examples.user[idx],
            features,
            max_weight,
            device,
            None if edgerand is None else (edgerand[0], edgerand[1], idx),
        )
        scores = model(**tensors, generator=noise)
        target = torch.as_tensor(examples.target[idx], dtype=torch.long, device=device)
        loss = model.loss(scores, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += float(loss.detach()) * len(idx)
        count += len(idx)
    return total / max(count, 1)


@torch.no_grad()
def rank_prefixes(
    model: DIPSGNN,
    prefixes: list[np.ndarray],
    users: np.ndarray,
    features: torch.Tensor | None,
    *,
    k: int,
    max_weight: float,
    batch_size: int = 256,
) -> np.ndarray:
    """Top-k item ids [N, k] per prefix (no noise: evaluation, ties by lower item id)."""
    from models.metrics import topk_excluding

    model.eval()
    device = next(model.parameters()).device
    out = np.zeros((len(prefixes), k), dtype=np.int64)
    for start in range(0, len(prefixes), batch_size):
        stop = min(start + batch_size, len(prefixes))
        tensors = _batch(
            model, prefixes[start:stop], users[start:stop], features, max_weight, device
        )
        scores = model(**tensors).float()
        top = topk_excluding(scores, [np.zeros(0, dtype=np.int64)] * (stop - start), k)
        out[start:stop] = top.cpu().numpy()
    return out
