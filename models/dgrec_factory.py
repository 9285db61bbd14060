"""The DGREC / DLGNN user model as the protocols build it (protocols/dgrec/roles.py): the model
class and its arguments from the protocol's shared configuration, the run's public initialisation
(one per run, cached in this process so a host's users do not each draw it), and the split of its
parameters into the shared (gossiped) and private ones.

It lives here, beside models/dgrec.py, rather than in the protocol's roles: it is the model's
construction (which class, which arguments, which parameters are shared), used by both the user
node and the driver (n_s), and needs nothing of the protocol's nodes or messages.
"""

from __future__ import annotations

import torch
from torch.nn.utils import parameters_to_vector

from models.dgrec import DGRECUserModel, DLGNNUserModel

_INIT_CACHE: dict[tuple, torch.Tensor] = {}


def model_kwargs(s: dict) -> dict:
    if s["model"] == "lightgcn":
        return {
            "n_items": s["n_items"],
            "dim": s["dim"],
            "layers": s["layers"],
            "l2_weight": s["l2"],
            "init_std": s["init_std"],
        }
    return {
        "n_items": s["n_items"],
        "n_tags": s["n_tags"],
        "dim": s["dim"],
        "n_interests": s["n_interests"],
        "hidden": s["hidden"],
        "use_hypergraph": s["use_hypergraph"],
        "use_bipartite": s["use_bipartite"],
        "interest_attention": s["interest_attention"],
        "pearson": s["pearson"],
        "scorer": s["scorer"],
        "pearson_weight": s["pearson_weight"],
        "l2_weight": s["l2"],
        "init_std": s["init_std"],
    }


def model_class(s: dict) -> type[DGRECUserModel] | type[DLGNNUserModel]:
    return DLGNNUserModel if s["model"] == "lightgcn" else DGRECUserModel


def public_model(init_seed: int, s: dict) -> DGRECUserModel | DLGNNUserModel:
    """A fresh model holding the run's public initialisation, drawn with torch seed ``init_seed``
    (the same for every user; a DLGNN user then draws its private user embedding itself)."""
    kw = model_kwargs(s)
    cls = model_class(s)
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
    keeps a storage of its own: pickling a view writes the whole underlying vector, so a
    checkpoint of a user held every parameter vector about ten times over (5.5 GB for ciao's
    2,557 users, enough for Ray's memory monitor to kill the run while writing it)."""
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


def n_shared(s: dict) -> int:
    """n_s: the number of elements of one shared gradient."""
    return sum(p.numel() for p in split_parameters(model_class(s)(**model_kwargs(s)))[0])
