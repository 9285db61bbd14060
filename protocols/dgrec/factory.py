"""The DGREC / DLGNN user model as the protocols build it (protocols/dgrec/roles.py): the model
class and its arguments from the protocol's Config and public record (``DGRECConfig``,
``DGRECPublic`` of protocols/dgrec/config.py), the run's public initialisation
(one per run, cached in this process so a host's users do not each draw it), and the split of its
parameters into the shared (gossiped) and private ones.

It lives here, beside protocols/dgrec/model.py, rather than in the protocol's roles: it is the model's
construction (which class, which arguments, which parameters are shared), used by both the user
node and the driver (n_s), and needs nothing of the protocol's nodes or messages.
"""

from __future__ import annotations

import torch
from torch.nn.utils import parameters_to_vector

from protocols.dgrec.model import DGRECUserModel, DLGNNUserModel

_INIT_CACHE: dict[tuple, torch.Tensor] = {}


def model_kwargs(config, public) -> dict:
    """The model's constructor arguments from ``config`` (a DGRECConfig) and ``public`` (its
    DGRECPublic: the catalogue's sizes)."""
    c = config
    if c.model == "lightgcn":
        return {
            "n_items": public.n_items,
            "dim": c.dim,
            "layers": c.layers,
            "l2": c.l2,
            "init_std": c.init_std,
        }
    return {
        "n_items": public.n_items,
        "n_tags": public.n_tags,
        "dim": c.dim,
        "n_interests": c.n_interests,
        "hidden": c.hidden,
        "use_hypergraph": c.use_hypergraph,
        "use_bipartite": c.use_bipartite,
        "interest_attention": c.interest_attention,
        "pearson": c.pearson,
        "scorer": c.scorer,
        "pearson_weight": c.pearson_weight,
        "l2": c.l2,
        "init_std": c.init_std,
    }


def model_class(config) -> type[DGRECUserModel] | type[DLGNNUserModel]:
    return DLGNNUserModel if config.model == "lightgcn" else DGRECUserModel


def public_model(init_seed: int, config, public) -> DGRECUserModel | DLGNNUserModel:
    """A fresh model holding the run's public initialisation, drawn with torch seed ``init_seed``
    (the same for every user; a DLGNN user then draws its private user embedding itself)."""
    kw = model_kwargs(config, public)
    cls = model_class(config)
    key = (cls.__name__, init_seed, tuple(sorted(kw.items())))
    model = cls(**kw)
    if key not in _INIT_CACHE:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            _INIT_CACHE[key] = parameters_to_vector(cls(**kw).parameters()).detach()
    load_vector(_INIT_CACHE[key], list(model.parameters()))
    return model


def load_vector(vector: torch.Tensor, params: list) -> None:
    """Copy a flat vector's values into ``params`` in place. Unlike torch's
    ``vector_to_parameters``, which makes every parameter a view of ``vector``, each parameter
    keeps a storage of its own: pickling a view writes the whole underlying vector, so a user's
    checkpoint would hold every parameter vector many times over."""
    sizes = [p.numel() for p in params]
    if vector.numel() != sum(sizes):
        raise ValueError(f"vector of {vector.numel()} elements for {sum(sizes)} parameters")
    with torch.no_grad():
        for p, chunk in zip(params, vector.split(sizes), strict=True):
            p.copy_(chunk.view_as(p))


def split_parameters(model: torch.nn.Module) -> tuple[list, list]:
    """(shared, private) parameters: the shared ones' gradients are gossiped (DGREC: all of them;
    DLGNN: the item table), the private ones (DLGNN's user embedding) never leave the user."""
    shared, private = [], []
    for name, p in model.named_parameters():
        (private if name in model.private_parameter_names else shared).append(p)
    return shared, private


def grad_vector(params: list) -> torch.Tensor:
    """The parameters' gradients as one flat vector (zeros where a parameter has none)."""
    return parameters_to_vector(
        [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    ).detach()


def n_shared(config, public) -> int:
    """n_s: the number of elements of one shared gradient."""
    model = model_class(config)(**model_kwargs(config, public))
    return sum(p.numel() for p in split_parameters(model)[0])
