"""FedPerGNN's GAT backbone (``backbone = "gat"``): what a sampled user computes in a round
(``train_users``) and at evaluation (``evaluate_held_out``), and the server's step on the averaged
uploads. The model and its equations are in protocols/fedpergnn/gat_model.py.

Round (step 3 of protocols/fedpergnn): the user receives E (all item embeddings) and the flat GAT
weights θ; on its local subgraph u – I_u – U_u it computes r̂_ui = h_u·h_i and
L_u = MSE over its own ratings + α L2; it takes e_u ← e_u − η ∂L_u/∂e_u locally and uploads

* ``item_grads``: ∂L_u/∂e_i for i ∈ I_u plus M pseudo items with gradients ~ N(μ, σ²) fitted to
  the real rows, rows sorted by item id;
* ``gat_grads``:  ∂L_u/∂θ (one dense vector);

every coordinate clipped to [−clip, clip] plus Laplace(0, b) noise (b: ``upload_laplace``). The
server averages each over the uploads and takes one Adam step on (E, θ).

Each user's forward/backward is its own autograd graph (a loop over the host's users): the
gradient of the shared θ must be each user's alone, which one stacked graph would not give.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from cluster import wire
from cluster.device import build, to_device
from nodes.node import decode_shared, expect_kinds
from privacy.ldp import clip_and_laplace, perturbed_upload
from protocols.fedpergnn import messages as msg
from protocols.fedpergnn.config import upload_laplace
from protocols.fedpergnn.gat_model import (
    LocalGAT,
    build_local_gat_graph,
    local_gat_forward,
    predict_candidates,
    rating_loss,
)

_MODELS: dict[tuple[int, int], LocalGAT] = {}


def shape_model(dim: int, layers: int) -> LocalGAT:
    """A LocalGAT used only for its parameter names and shapes (weights come from the wire)."""
    key = (dim, layers)
    if key not in _MODELS:  # on the CPU: the weights it runs with are the users' (any device)
        _MODELS[key] = build(lambda: LocalGAT(dim, layers), "cpu")
    return _MODELS[key]


def gat_weight_count(dim: int, layers: int) -> int:
    return shape_model(dim, layers).n_parameters()


def train_users(nodes: list, inboxes: list, server: str) -> None:
    """Step 3 for every sampled user of this host (one autograd graph per user)."""
    for n, inbox in zip(nodes, inboxes):
        expect_kinds(inbox, "item_embeddings", "gat_weights", node=n.id)
    e_list = decode_shared(inboxes, "item_embeddings", wire.decode_dense)
    w_list = decode_shared(inboxes, "gat_weights", wire.decode_dense)
    c, n_items, dev = nodes[0].config, nodes[0].public.n_items, nodes[0].device
    model = shape_model(c.dim, c.layers)
    for n, e, w in zip(nodes, e_list, w_list):
        g = n.noise_generator()  # the upload's noise (--secure-rng: the secure one)
        item_leaf = n.tensor(e[n.train_items]).requires_grad_(True)
        user_leaf = n.embedding.clone().requires_grad_(True)
        weights = n.tensor(np.array(w, dtype=np.float32)).requires_grad_(True)
        # the rated items are scored as candidate nodes, as held-out items are at evaluation
        k = len(n.train_items)
        graph = build_local_gat_graph(k, n.nbr_links, n_candidates=k, device=dev)
        h = local_gat_forward(model, weights, graph, user_leaf, item_leaf, n.nbr_emb, item_leaf)
        ratings = n.tensor(n.train_ratings)
        pred = predict_candidates(h, graph)
        loss = rating_loss(pred, ratings, user_leaf, item_leaf, c.l2)
        loss.backward()
        n.embedding = (user_leaf - c.lr_user * user_leaf.grad).detach()
        real = item_leaf.grad.detach()
        m = min(c.pseudo_items, n_items - len(n.train_items))
        ids, noisy, n.last_pseudo_items = perturbed_upload(
            n_items, n.train_items, real, m, c.clip, upload_laplace(c), g
        )
        n.send("item_grads", server, msg.encode_item_grads(ids, noisy))
        # K = 0 (plain MF) has no weights: θ is empty and gets no gradient
        w_grad = weights.grad if weights.grad is not None else torch.zeros_like(weights)
        w_noisy = clip_and_laplace(w_grad.detach(), c.clip, upload_laplace(c), g)
        n.send("gat_grads", server, wire.encode_dense(w_noisy))
        n.last_upload_ids = ids  # for measuring attacks (never sent apart from the upload)
        if n.secure_aggregation:  # the server cannot count the rows: the user tells the driver
            n.report(f"upload_coords/{n.id}", noisy.numel() + w_noisy.numel())
        n.report("loss", loss.item())


def evaluate_held_out(nodes: list, inboxes: list) -> None:
    """Step 5: each user with held-out ratings predicts them (clamped to the rating range) and
    reports its squared-error sum and count; the driver forms RMSE = √(Σ sq / Σ n)."""
    e_list = decode_shared(inboxes, "eval_item_embeddings", wire.decode_dense)
    w_list = decode_shared(inboxes, "eval_gat_weights", wire.decode_dense)
    c, public = nodes[0].config, nodes[0].public
    model = shape_model(c.dim, c.layers)
    lo, hi = public.rating_min, public.rating_max
    for n, e, w in zip(nodes, e_list, w_list):
        if not len(n.test_items):
            continue
        graph = build_local_gat_graph(
            len(n.train_items), n.nbr_links, len(n.test_items), device=n.device
        )
        with torch.no_grad():
            h = local_gat_forward(
                model,
                n.tensor(np.array(w, dtype=np.float32)),
                graph,
                n.embedding,
                n.tensor(e[n.train_items]),
                n.nbr_emb,
                n.tensor(e[n.test_items]),
            )
            pred = predict_candidates(h, graph).clamp(lo, hi)
        err = (pred.double() - n.tensor(n.test_ratings).double()).pow(2)
        n.report("sq_err", float(err.sum()))
        n.report("n_rated", float(len(err)))


def rmse_from_reports(reports: dict[str, list[float]]) -> float:
    count = math.fsum(reports.get("n_rated", []))
    return math.sqrt(math.fsum(reports.get("sq_err", [])) / count) if count else float("nan")


def step_on_mean_dense(
    flat: torch.nn.Parameter, optimizer: torch.optim.Optimizer, uploads: list[np.ndarray]
) -> None:
    """Average the dense uploads (float64, in the given order) and take one optimizer step."""
    if not uploads:
        return
    total = np.zeros(tuple(flat.shape), dtype=np.float64)
    for u in uploads:
        if u.shape != tuple(flat.shape):
            raise wire.WireError(f"gat gradients of shape {u.shape}, expected {tuple(flat.shape)}")
        total += u
    flat.grad = to_device((total / len(uploads)).astype(np.float32), flat.device)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
