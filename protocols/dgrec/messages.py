"""DGREC's wire formats (protocols/dgrec/roles.py sends them) and their sizes.

``public_items``  stage 1: the publicized item ids (``wire.encode_ids``).
``status``        (L_u, cnt_u) for eq. 4: 2 floats.
``invite``        the hop h of the invitee (``wire.encode_ids``, width 1); ``join``: an empty blob.
``share``         one gossip message: record(ids of the gradients' origins, one field per gradient),
                  each gradient bit-packed ±1 signs (``wire.encode_signs``, eq. 5) or, for the
                  Laplace and float variants, a dense float32 vector (:func:`encode_gradient`);
                  a member decodes the mean of those it holds with :func:`decode_held` (eq. 6).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from cluster import validate as v
from cluster import wire
from privacy.onebit import encode_onebit, onebit_scale


def encode_status(loss: float, count: int) -> bytes:
    """(L_u, cnt_u) for eq. 4: dense float32 [2] (3 + 4 + 8 = 15 bytes)."""
    return wire.encode_dense(np.array([loss, count], dtype=np.float32))


def decode_status(payload: bytes) -> tuple[float, int]:
    v = wire.decode_dense(payload)
    if v.shape != (2,) or not np.isfinite(v).all() or v[0] < 0 or v[1] < 0:
        raise wire.WireError(f"status: expected [loss >= 0, count >= 0], got {v!r}")
    return float(v[0]), int(v[1])


def encode_share(origins: list[int], encoded: list[bytes]) -> bytes:
    """One gossip message: the origin user of each gradient, then each encoded gradient as is."""
    return wire.encode_record([wire.encode_ids(np.asarray(origins, dtype=np.int64)), *encoded])


def decode_share(payload: bytes) -> list[tuple[int, bytes]]:
    fields = wire.decode_record(payload)
    if not fields:
        raise wire.WireError("share: empty record")
    origins = wire.decode_ids(fields[0])
    if len(origins) != len(fields) - 1:
        raise wire.WireError(f"share: {len(origins)} origins but {len(fields) - 1} gradients")
    return [(int(o), f) for o, f in zip(origins, fields[1:])]


def encode_gradient(
    grad: torch.Tensor,
    config,
    laplace_scale: float,
    rng: np.random.Generator,
    torch_generator: Callable[[], torch.Generator],
) -> bytes:
    """A member's local gradient as it is shared (``config``: a DGRECConfig): clipped to
    [−δ, δ] and one-bit encoded, bit-packed (eq. 5, ``mechanism = "onebit"``, draws from
    ``torch_generator()``); clipped with Laplace(λ) noise from ``rng`` (``"laplace"``); or as is
    (``"float"``)."""
    c = config
    if c.mechanism == "onebit":  # eq. 5
        return wire.encode_signs(encode_onebit(grad, c.clip, c.beta, torch_generator()))
    if c.mechanism == "laplace":
        clipped = grad.clamp(-c.clip, c.clip).cpu().numpy().astype(np.float64)
        noisy = clipped + rng.laplace(0.0, laplace_scale, size=clipped.shape)
        return wire.encode_dense(noisy.astype(np.float32))
    return wire.encode_dense(grad.cpu().numpy())


class HeldShares:
    """The encoded gradients a member holds during the gossip (its own and those that arrived),
    and their mean at the end (:meth:`mean`): eq. 6 for one-bit codes, δ(e^β+1)/(e^β−1) ·
    (1/k)·Σ_j b_j with k the number actually held; the plain mean of the k vectors otherwise.
    ``config``: a DGRECConfig.

    Without a defence only the running float64 sum Σ_j x_j and the origins are kept: a member of a
    neighbourhood of m users ends up holding m gradients of n_s elements, so keeping them all
    costs Σ m²·n_s floats a round (DLGNN on ciao: ≈ 10 GB on one host), the sum m·n_s. With a
    defence (``threat.defence``, adversaries/defences.py :func:`combine`) the mean is replaced by
    a robust combination of the k decoded vectors, so those are kept: of the ±1 codes for one-bit
    (then times eq. 6's δ(e^β+1)/(e^β−1); the coordinate median is then a majority vote, and
    ``norm-bound`` changes nothing, every code having the norm √n_s), of the float vectors
    otherwise."""

    def __init__(self, config, threat=None):
        self.onebit = config.mechanism == "onebit"
        self.scale = onebit_scale(config.clip, config.beta) if self.onebit else 1.0
        self.defence = threat.defence if threat is not None else ""
        self.defence_params = dict(threat.defence_params) if self.defence else {}
        self.origins: set[int] = set()
        self._sum: np.ndarray | None = None
        self._kept: dict[int, np.ndarray] = {}  # origin → decoded vector (with a defence only)

    def __contains__(self, origin: int) -> bool:
        return origin in self.origins

    def __len__(self) -> int:
        return len(self.origins)

    def add(self, origin: int, encoded: bytes) -> None:
        if origin in self.origins:
            raise ValueError(f"gradient of user {origin} held twice")
        x = wire.decode_signs(encoded) if self.onebit else wire.decode_dense(encoded)
        self.origins.add(origin)
        if self.defence:
            self._kept[origin] = x
        elif self._sum is None:
            self._sum = x.astype(np.float64)
        else:
            self._sum += x

    def mean(self) -> np.ndarray:
        """float32 [n_s]: eq. 6 (or the robust combination) over the k held gradients."""
        if not self.origins:
            raise ValueError("no gradient to decode")
        if self.defence:
            from adversaries.defences import combine

            vecs = np.stack([self._kept[o] for o in sorted(self._kept)])
            return (combine(vecs, self.defence, self.defence_params) * self.scale).astype(
                np.float32
            )
        return (self._sum / len(self.origins) * self.scale).astype(np.float32)


def decode_held(held: dict[int, bytes], config, threat=None) -> np.ndarray:
    """:meth:`HeldShares.mean` of the encoded gradients in ``held`` (origin → encoded)."""
    shares = HeldShares(config, threat)
    for origin in sorted(held):
        shares.add(origin, held[origin])
    return shares.mean()


def share_message_size(k: int, n_s: int, mechanism: str = "onebit") -> int:
    """Encoded bytes of one ``share`` message carrying k gradients of n_s elements."""
    one = wire.signs_size(n_s) if mechanism == "onebit" else wire.dense_size((n_s,))
    return wire.record_size([wire.ids_size(k), *([one] * k)])


# --- what a receiver accepts (cluster/validate.py) ----------------------------------------------
def shared_size(shared) -> int:
    """n_s, the length of a shared gradient: the model's shared parameters (public sizes only)."""

    def count(sh) -> int:
        from protocols.dgrec.factory import model_class, model_kwargs, split_parameters

        model = model_class(sh.config)(**model_kwargs(sh.config, sh.public))
        return sum(p.numel() for p in split_parameters(model)[0])

    return v.per_shared(shared, "dgrec.n_s", count)


def check_public_items(payload: bytes, shared) -> None:
    n = shared.public.n_items
    v.ids(payload, n, max_count=n, what="public items")


def check_status(payload: bytes, shared) -> None:
    """(L_u ≥ 0, cnt_u ≥ 0), finite."""
    x = v.dense(payload, (2,), what="status")
    if x.min() < 0:
        raise v.Invalid("range", f"status: negative value in {x.tolist()}")


def check_invite(payload: bytes, shared) -> None:
    """One hop h in 1..H."""
    hop = v.ids(payload, count=1, what="invite")
    if not 1 <= int(hop[0]) <= shared.config.hops:
        raise v.Invalid("range", f"invite: hop {int(hop[0])} outside 1..{shared.config.hops}")


def check_share(payload: bytes, shared) -> None:
    """Distinct origins among the users, one gradient each of n_s elements: one-bit signs
    (bounded by construction), or finite floats (Laplace and float variants; their magnitudes are
    left to a robust aggregation)."""
    n_users = shared.public.n_users
    fields = v.record(payload)
    if not fields:
        raise v.Invalid("malformed", "share: empty record")
    if len(fields) - 1 > n_users:
        raise v.Invalid("size", f"share: {len(fields) - 1} gradients for {n_users} users")
    origins = v.ids(fields[0], n_users, count=len(fields) - 1, what="share origins")
    if len(np.unique(origins)) != len(origins):
        raise v.Invalid("malformed", "share: an origin appears twice")
    n_s = shared_size(shared)
    onebit = shared.config.mechanism == "onebit"
    for f in fields[1:]:
        if onebit:
            v.signs(f, n_s, what="shared gradient")
        else:
            v.dense(f, (n_s,), what="shared gradient")
