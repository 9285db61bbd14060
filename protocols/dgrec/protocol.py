"""dgrec — DGREC (Zheng et al., CIKM 2023): decentralised GNN recommendation, users as peers.

There is no server: every participant is a user node, and every message goes user → user along
the inter-user graph of data/graphs.py (the dataset's social/trust links; for ml-100k users of the
same zip-code prefix and occupation, as the paper does for Book-Crossing). Every user holds its own
DGREC model (models/dgrec.py: item table, W1…W5, MLP); all copies start from one public
initialisation derived from the run's seed.

Stage 1 — graphs (round 0, before the first training round)

``publicize``  each user publicizes a fraction ρ (``public_ratio``) of its training interactions,
               drawn with its own RNG, and sends the item ids to its 1-hop neighbours
               (``public_items``). Its other interactions never leave it.
``setup``      each user builds its inner-item hypergraph: nodes = its own items ∪ the publicized
               items its neighbours sent, hyperedges = item tags (A_u, D_v, D_t in models/dgrec.py),
               and computes its initial loss L_u (eq. 3 on a pair sample) for eq. 4.

Stage 3 — neighbourhood training (one round = several neighbourhoods in parallel)

``status``     every user whose loss or sample count changed sends (L_u, cnt_u) to its neighbours
               (``status``, 2 floats): what eq. 4 needs, as a small message.
``seed``       each user becomes a seed with probability ``neighbourhoods`` / #users (own RNG) and
               invites min(n_u, #candidates) neighbours drawn without replacement with
               p_v ∝ L_v / (ln(cnt_v + 1) + 1) (eq. 4, Algorithm 1) (``invite``, carries the hop).
``hop/h``, h = 1..H:  a user that is not yet in a neighbourhood this round accepts its first invitation
               (lowest sender id among those arriving together), answers ``join`` to its parent,
               increments cnt_u and, if its hop < H, invites n_u of its other neighbours (eq. 4).
               Invitations to users already taken this round are ignored (no answer), so a user
               belongs to at most one neighbourhood per round and each neighbourhood is a tree of
               depth ≤ H and fan-out ≤ n_u, as in protocols/dgrec/sampling.py's Algorithm 1 (where
               a parent picks among non-members only; here it learns membership by the missing
               ``join``, and the slot stays empty).
``train``      the last joins arrive; every member computes its local gradient g_u of eq. 3 on
               ``pairs`` (positive, negative) pairs of its own items, clips it to [−δ, δ], encodes it
               to ±1 (eq. 5, privacy/onebit.py), bit-packs it (wire.encode_signs) and sends it to its
               tree neighbours: gossip step 1 (``share``).
``gossip/t``, t = 2..2H:  gossip step t (Algorithm 2): a member forwards every encoded gradient it
               obtained for the first time at the previous step to each tree neighbour that did not
               just send it that gradient; all gradients for one neighbour in one step travel in one
               ``share`` message: record(ids of their origins, one signs field per gradient).
``update``     the step-2H messages arrive; every member decodes the mean of all the encoded
               gradients it holds (its own included), ḡ = δ(e^β+1)/(e^β−1) · mean (eq. 6), and takes
               an SGD step θ_u ← θ_u − lr·ḡ on its own model.

On a tree of diameter ≤ 2H every member holds every encoded gradient of its neighbourhood after
2H steps (tests check it on the real messages). Forwarding an encoded gradient is post-processing,
so user u spends privacy only for its own shares: ε = β per element, n_s·β per shared vector
(basic composition), composed over the shares it made with privacy/accountant.py (dp_accounting).

Absent peers (run conditions: dropout, or a host lost to a fault). A user offline in a round runs
no handler and receives nothing: it is not sampled, does not train, share or forward. The others:

* ``status``: a user owes its current (L_u, cnt_u) to each neighbour and sends it to those it can
  reach (``self.online``); a neighbour that was offline gets it the next round both are online.
* eq. 4 / Algorithm 1: a user invites only neighbours it can reach this round; p_v is normalised
  over the reachable candidates (protocols/dgrec/sampling.py does the same with an ``online``
  mask). An invitee lost to a fault after the draw never answers ``join``: its slot stays empty.
* gossip (Algorithm 2) finishes with what arrives: after 2H steps each member decodes eq. 6 over the
  k gradients it actually holds (its own and those received), ḡ = δ(e^β+1)/(e^β−1) · (1/k)·Σ b_j,
  the unbiased estimate of the mean of those k clipped gradients (:func:`decode_held`); a
  gradient that did not arrive is neither waited for nor counted.
* stage 1 is enrolment: it happens once before the first training round, and every user takes
  part in it (a device enrols when it can). A user whose stage-1 state was lost to a fault (its
  host restored from a snapshot taken before stage 1) builds its hypergraph from what it holds
  (its own items and the publicized items it kept) the next time it acts.

With everyone online each of these does exactly what it does without run conditions.

Evaluation (``eval``): every user ranks all items not in its training set with its own model
(ŷ = MLP(e_u ‖ e_i)) and reports Recall/NDCG@K; no traffic.

Step size (not stated by the paper; measured on ml-100k). The decoded one-bit mean estimates the
mean of *clipped* gradients, so in expectation a step moves an element by at most lr·δ, while its
noise has standard deviation lr·δ·coth(β/2)/√k (k gradients; 0.216/√k at δ = 0.1, β = 1). The
item-embedding gradients of eq. 3 are ~6e-3 per element (BPR summed over ``pairs`` pairs), far
below δ, so lr must be large: at lr 0.05 with 4 neighbourhoods a round (a user trains in ~1/3 of
the rounds) the users' models barely left their initialisation in 100 rounds (Recall@20 0.0475).
Defaults here: lr 0.5, 64 pairs, 12 neighbourhoods a round (most users train every round);
δ, β, H, n_u keep the paper's values. ``DLGNNUserModel`` with ``model = "lightgcn"`` is the DLGNN
baseline (protocols/dlgnn.py).

Ablations (the paper's Table 3): ``use_hypergraph``, ``use_bipartite``, ``interest_attention``,
``pearson`` (models/dgrec.py), ``use_public`` (no neighbours' publicized items), and
``mechanism = "laplace"`` (clip + Laplace(λ) float gradients instead of one-bit; λ = 2δ/β by default,
the same per-element ε) or ``"float"`` (raw float gradients, no privacy).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from dp_accounting import dp_event
from torch.nn.utils import parameters_to_vector

from cluster import wire
from cluster.message import index_of, node_id
from data.graphs import user_graph
from data.types import RecDataset
from models.bpr import sample_pairs
from models.dgrec import DGRECUserModel, DLGNNUserModel, build_user_hypergraph
from models.dgrec_batched import (
    HypergraphBatch,
    encode_batch,
    loss_batch,
    score_batch,
    stacked_parameters,
)
from models.metrics import ranking_metrics, topk_excluding
from nodes.deployment import Deployment, NodeSpec, mean_report
from nodes.node import Node, NodeContext, expect_kinds, node_seed
from privacy.accountant import (
    PrivacyAccountant,
    laplace_vector_event,
    randomized_response_event,
    rdp_of_randomized_response,
)
from privacy.onebit import decode_onebit_mean, encode_onebit
from protocols.base import Protocol, ProtocolConfig, require
from protocols.dgrec.sampling import neighbour_probabilities, worst_case_bits

MECHANISMS = ("onebit", "laplace", "float")
MODELS = ("dgrec", "lightgcn")
PAPER_RDP = (1.5, 0.54)  # the paper's stated (α, ε) RDP guarantee


@dataclasses.dataclass
class DGRECConfig(ProtocolConfig):
    ALIASES: ClassVar[dict[str, str]] = {"delta": "clip", "sharing": "mechanism", "l2_weight": "l2"}

    # model (stage 2); "lightgcn" is the DLGNN baseline (models/dgrec.py DLGNNUserModel)
    model: str = "dgrec"
    layers: int = 2  # LightGCN layers (model = "lightgcn")
    dim: int = 16
    n_interests: int = 6
    hidden: int = 32
    scorer: str = "mlp"  # the paper's MLP(e_u ‖ e_i); "dot": e_u · e_i (a departure, for diagnosis)
    pearson_weight: float = 0.1
    l2: float = 1e-5  # L2 weight of the loss
    init_std: float = 0.1
    # stage 1
    public_ratio: float = 1.0  # ρ
    neighbours: int = 10  # k of data/graphs.py
    # stage 3
    hops: int = 4  # H
    n_u: int = 3
    neighbourhoods: float = 12.0  # expected seeds per round (most users train every round)
    pairs: int = 64
    loss_reduction: str = "sum"  # eq. 3 sums BPR over the user's pairs ("mean": average)
    lr: float = 0.5  # the decoded step is ≤ δ per element in expectation (see README note)
    clip: float = 0.1  # δ, clip bound
    beta: float = 1.0  # β, one-bit strength (ε per element)
    mechanism: str = "onebit"  # onebit | laplace | float (the shared gradients)
    laplace_scale: float = 0.0  # λ for mechanism="laplace"; 0 → 2δ/β (same per-element ε as β)
    # ablations (Table 3)
    use_hypergraph: bool = True
    use_bipartite: bool = False
    interest_attention: bool = True
    pearson: bool = True
    use_public: bool = True
    # accounting
    privacy_delta: float = 1e-5
    # runtime: a host computes its users' training and evaluation in one batched pass
    batch_users: bool = True

    def check(self) -> None:
        super().check()
        for name in ("dim", "n_interests", "hidden", "neighbours", "hops", "n_u", "pairs"):
            require(getattr(self, name) >= 1, name, "must be >= 1")
        require(0.0 <= self.public_ratio <= 1.0, "public_ratio", "must be in [0, 1]")
        require(self.neighbourhoods > 0, "neighbourhoods", "must be > 0")
        require(self.lr > 0, "lr", "must be > 0")
        require(math.isfinite(self.clip) and self.clip > 0, "clip", "must be > 0")
        require(math.isfinite(self.beta) and self.beta > 0, "beta", "must be > 0")
        require(self.mechanism in MECHANISMS, "mechanism", f"must be one of {MECHANISMS}")
        require(self.model in MODELS, "model", f"must be one of {MODELS}")
        require(self.layers >= 0, "layers", "must be >= 0")
        require(self.scorer in ("mlp", "dot"), "scorer", "must be mlp or dot")
        require(self.loss_reduction in ("sum", "mean"), "loss_reduction", "must be sum or mean")
        require(self.laplace_scale >= 0, "laplace_scale", "must be >= 0")
        require(self.pearson_weight >= 0, "pearson_weight", "must be >= 0")
        require(self.l2 >= 0, "l2", "must be >= 0")
        require(self.init_std > 0, "init_std", "must be > 0")
        require(0 < self.privacy_delta < 1, "privacy_delta", "must be in (0, 1)")

    def laplace_lambda(self) -> float:
        return self.laplace_scale if self.laplace_scale > 0 else 2 * self.clip / self.beta


# ------------------------------------------------------------------------------ wire formats
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


def decode_held(held: dict[int, bytes], s: dict) -> np.ndarray:
    """The mean of the encoded gradients a member holds at the end of the gossip (its own and those
    that arrived), float32 [n_s]: eq. 6 for one-bit codes, δ(e^β+1)/(e^β−1) · (1/k)·Σ_j b_j with k =
    ``len(held)``, the number actually held; the plain mean of the k vectors otherwise. Origins are
    read in increasing order."""
    if not held:
        raise ValueError("no gradient to decode")
    origins = sorted(held)
    if s["mechanism"] == "onebit":  # eq. 6
        bits = np.stack([wire.decode_signs(held[o]) for o in origins])
        return decode_onebit_mean(bits, s["clip"], s["beta"])
    return np.mean(
        np.stack([wire.decode_dense(held[o]) for o in origins]).astype(np.float64), axis=0
    ).astype(np.float32)


def share_message_size(k: int, n_s: int, mechanism: str = "onebit") -> int:
    """Encoded bytes of one ``share`` message carrying k gradients of n_s elements."""
    one = wire.signs_size(n_s) if mechanism == "onebit" else wire.dense_size((n_s,))
    return wire.record_size([wire.ids_size(k), *([one] * k)])


# ------------------------------------------------------------------------------ the model
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


def public_model(seed: int, s: dict) -> DGRECUserModel | DLGNNUserModel:
    """A fresh model holding the run's public initialisation (the same for every user; a DLGNN
    user then draws its private user embedding itself)."""
    kw = model_kwargs(s)
    cls = model_class(s)
    key = (cls.__name__, seed, tuple(sorted(kw.items())))
    model = cls(**kw)
    if key not in _INIT_CACHE:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(node_seed(seed, "dgrec-public-init"))
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


def _grad_vector(params: list) -> torch.Tensor:
    return parameters_to_vector(
        [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    ).detach()


def _hypergraphs(users: list[DGRECUser]) -> HypergraphBatch:
    s = users[0].shared
    return HypergraphBatch.collate(
        [(u.node_item_ids, u.incidence) for u in users], s["n_tags"], s["n_items"]
    )


# ------------------------------------------------------------------------------ the user
class DGRECUser(Node):
    role = "user"
    status_owed: frozenset | set = frozenset()  # (a user from a checkpoint that predates it)

    def __init__(self, nid: str, ctx: NodeContext, train_items, test_items, neighbours):
        super().__init__(nid, ctx)
        s = ctx.shared
        self.index = index_of(nid)
        self.train_items = np.asarray(train_items, dtype=np.int64)
        self.test_items = np.asarray(test_items, dtype=np.int64)
        self.neighbours = np.asarray(neighbours, dtype=np.int64)  # sorted global ids
        self.model = public_model(ctx.seed, s)
        self.shared_params, self.private_params = split_parameters(self.model)
        if self.private_params:  # DLGNN's user embedding: drawn by the user itself
            gen = self.torch_generator()
            with torch.no_grad():
                for p in self.private_params:
                    p.copy_(torch.randn(p.shape, generator=gen) * s["init_std"])
        self.private_grad: torch.Tensor | None = None
        self.public_items = np.zeros(0, dtype=np.int64)
        self.neighbour_public: dict[int, np.ndarray] = {}
        self.node_item_ids: np.ndarray | None = None
        self.incidence: sp.csr_matrix | None = None
        self.loss_value = 0.0  # L_u of eq. 4 (latest training loss)
        self.count = 0  # cnt_u of eq. 4 (times sampled)
        self.status_dirty = False
        self.status_owed: set[int] = set()  # neighbours that have not got the current status
        self.neighbour_status: dict[int, tuple[float, int]] = {}
        self._reset_round()
        self.last_round: dict = {}

    def _reset_round(self) -> None:
        self.in_tree = False
        self.hop = -1
        self.parent: int | None = None
        self.children: list[int] = []
        self.held: dict[int, bytes] = {}  # origin → its encoded gradient

    @property
    def tree_neighbours(self) -> list[int]:
        return sorted(([self.parent] if self.parent is not None else []) + self.children)

    # --- dispatch ------------------------------------------------------------------------------
    def handle(self, phase: str, inbox) -> None:
        handler = {  # "hop/h" (h = 1..H) and "gossip/t" (t = 2..2H) are numbered supersteps
            "publicize": self._publicize,
            "setup": self._setup,
            "status": self._status,
            "seed": self._seed,
            "hop": self._hop,
            "train": self._train,
            "gossip": self._gossip,
            "update": self._update,
            "eval": self._evaluate,
        }.get(phase.split("/", 1)[0])
        if handler is None:
            super().handle(phase, inbox)
        else:
            handler(inbox)

    @classmethod
    def handle_batch(cls, nodes, phase, inboxes) -> None:
        """DGREC's training and evaluation: all this host's users in one pass of
        models/dgrec_batched.py (each with its own parameters and its own random draws, so each
        gets what it would get alone); ``batch_users = False`` or DLGNN: one by one."""
        batched = (
            bool(nodes) and nodes[0].shared["model"] == "dgrec" and nodes[0].shared["batch_users"]
        )
        if batched and phase == "train":
            cls._train_batch(nodes, inboxes)
        elif batched and phase == "eval":
            cls._evaluate_batch(nodes, inboxes)
        else:
            super().handle_batch(nodes, phase, inboxes)

    # --- stage 1 -------------------------------------------------------------------------------
    def _publicize(self, inbox) -> None:
        expect_kinds(inbox, node=self.id)
        s = self.shared
        n_pub = int(round(s["public_ratio"] * len(self.train_items)))
        self.public_items = np.sort(self.rng.choice(self.train_items, size=n_pub, replace=False))
        if s["use_public"] and s["model"] == "dgrec" and n_pub:  # DLGNN does not use them
            payload = wire.encode_ids(self.public_items)
            for v in self.neighbours:
                self.send("public_items", node_id("user", int(v)), payload)

    def _setup(self, inbox) -> None:
        expect_kinds(inbox, "public_items", node=self.id)
        s = self.shared
        for m in inbox:
            src = index_of(m.src)
            if src not in set(self.neighbours.tolist()):
                raise ValueError(f"{self.id}: public items from {m.src}, not a neighbour")
            ids = wire.decode_ids(m.payload)
            if ids.size and ids.max() >= s["n_items"]:
                raise ValueError(f"{self.id}: item id {ids.max()} from {m.src} out of range")
            self.neighbour_public[src] = ids
        self._build_graph()

    def _build_graph(self) -> None:
        """The local graph from the user's items and the publicized items it holds, and L_u."""
        s = self.shared
        if s["model"] == "lightgcn":  # DLGNN: the ego graph u – I_u
            self.node_item_ids, self.incidence = self.train_items, None
        else:
            self.node_item_ids, self.incidence = build_user_hypergraph(
                self.train_items, list(self.neighbour_public.values()), s["item_tags"]
            )
        with torch.no_grad():
            loss, _ = self._loss()
        self.loss_value = float(loss)
        self.status_dirty = True

    def _ensure_graph(self) -> None:
        """Build the local graph if stage 1 never reached this user (its state was restored from a
        snapshot taken before stage 1, after a fault)."""
        if self.node_item_ids is None:
            self._build_graph()

    def _loss(self):
        s = self.shared
        pos, neg = sample_pairs(self.rng, s["n_items"], self.train_items, s["pairs"])
        return self.model.loss(
            pos, neg, self.node_item_ids, self.incidence, reduction=s["loss_reduction"]
        )

    # --- stage 3: sampling (Algorithm 1) --------------------------------------------------------
    def _status(self, inbox) -> None:
        """Send the current (L_u, cnt_u) to each neighbour that has not got it and is reachable."""
        expect_kinds(inbox, node=self.id)
        self._ensure_graph()
        if self.status_dirty:
            self.status_owed = set(self.neighbours.tolist())
            self.status_dirty = False
        if self.status_owed:
            payload = encode_status(self.loss_value, self.count)
            for v in self.neighbours.tolist():
                if v in self.status_owed and self.online(node_id("user", v)):
                    self.send("status", node_id("user", v), payload)
                    self.status_owed.discard(v)

    def _seed(self, inbox) -> None:
        expect_kinds(inbox, "status", node=self.id)
        for m in inbox:
            self.neighbour_status[index_of(m.src)] = decode_status(m.payload)
        self._reset_round()
        if self.rng.random() < self.shared["seed_probability"]:
            self._join(hop=0, parent=None)

    def _join(self, hop: int, parent: int | None) -> None:
        self.in_tree, self.hop, self.parent = True, hop, parent
        self.count += 1
        if parent is not None:
            self.send("join", node_id("user", parent), wire.encode_blob(b""))
        if hop < self.shared["hops"]:
            self._invite(hop + 1)

    def _invite(self, hop: int) -> None:
        """Eq. 4 over this user's neighbours other than its parent that it can reach this round;
        invitations carry the hop."""
        candidates = np.array(
            [
                v
                for v in self.neighbours.tolist()
                if v != self.parent and self.online(node_id("user", v))
            ],
            dtype=np.int64,
        )
        if candidates.size == 0:
            return
        status = [self.neighbour_status.get(int(v), (0.0, 0)) for v in candidates]
        p = neighbour_probabilities(
            np.array([st[0] for st in status]), np.array([st[1] for st in status])
        )
        k = min(self.shared["n_u"], int(np.count_nonzero(p)))
        picked = self.rng.choice(candidates, size=k, replace=False, p=p)
        payload = wire.encode_ids([hop], width=1)
        for v in sorted(int(x) for x in picked):
            self.send("invite", node_id("user", v), payload)

    def _take_joins(self, inbox) -> None:
        for m in inbox:
            if m.kind == "join":
                if not self.in_tree:
                    raise ValueError(f"{self.id}: join from {m.src} but not in a neighbourhood")
                wire.decode_blob(m.payload)
                self.children.append(index_of(m.src))

    def _hop(self, inbox) -> None:
        expect_kinds(inbox, "invite", "join", node=self.id)
        self._take_joins(inbox)
        invites = [m for m in inbox if m.kind == "invite"]  # sorted by sender
        if invites and not self.in_tree:
            hop = wire.decode_ids(invites[0].payload)
            if hop.shape != (1,) or not 1 <= hop[0] <= self.shared["hops"]:
                raise wire.WireError(f"invite from {invites[0].src}: bad hop {hop}")
            self._join(int(hop[0]), index_of(invites[0].src))

    # --- stage 3: local gradient, one-bit encoding, gossip (Algorithm 2) -----------------------
    def _train(self, inbox) -> None:
        expect_kinds(inbox, "join", node=self.id)
        self._take_joins(inbox)
        if not self.in_tree:
            return
        self.model.zero_grad(set_to_none=True)
        loss, parts = self._loss()
        loss.backward()
        if self.private_params:
            self.private_grad = _grad_vector(self.private_params)
        self._share(_grad_vector(self.shared_params), parts["total"])
        self.model.zero_grad(set_to_none=True)  # kept as vectors: the model holds no copy

    def _share(self, grad: torch.Tensor, loss: float) -> None:
        """Gossip step 1: encode the local gradient (eq. 5) and send it to the tree neighbours."""
        self.children.sort()
        encoded = self._encode(grad)
        self.held = {self.index: encoded}
        self.loss_value = loss
        self.status_dirty = True
        self.report("loss", loss)
        self.report("shared_by", float(self.index))
        if self.parent is None:
            self.report("seed", 1.0)
        payload = encode_share([self.index], [encoded])
        for v in self.tree_neighbours:
            self.send("share", node_id("user", v), payload)

    def _encode(self, grad: torch.Tensor) -> bytes:
        s = self.shared
        if s["mechanism"] == "onebit":  # eq. 5
            return wire.encode_signs(
                encode_onebit(grad, s["clip"], s["beta"], self.torch_generator())
            )
        if s["mechanism"] == "laplace":
            clipped = grad.clamp(-s["clip"], s["clip"]).numpy().astype(np.float64)
            noisy = clipped + self.rng.laplace(0.0, s["laplace_lambda"], size=clipped.shape)
            return wire.encode_dense(noisy.astype(np.float32))
        return wire.encode_dense(grad.numpy())

    def _receive_shares(self, inbox) -> dict[int, set[int]]:
        """Store first-seen gradients; returns origin → senders for the ones new at this step."""
        expect_kinds(inbox, "share", node=self.id)
        fresh: dict[int, set[int]] = {}
        tree = set(self.tree_neighbours)
        for m in inbox:
            src = index_of(m.src)
            if not self.in_tree or src not in tree:
                raise ValueError(f"{self.id}: share from {m.src}, not a tree neighbour")
            for origin, enc in decode_share(m.payload):
                if origin in fresh:
                    fresh[origin].add(src)
                elif origin not in self.held:
                    self.held[origin] = enc
                    fresh[origin] = {src}
        return fresh

    def _gossip(self, inbox) -> None:
        fresh = self._receive_shares(inbox)
        for v in self.tree_neighbours:
            origins = sorted(o for o, senders in fresh.items() if v not in senders)
            if origins:
                self.send(
                    "share",
                    node_id("user", v),
                    encode_share(origins, [self.held[o] for o in origins]),
                )

    def _update(self, inbox) -> None:
        self._receive_shares(inbox)
        if not self.in_tree:
            return
        s = self.shared
        origins = sorted(self.held)
        mean = decode_held(self.held, s)  # over the gradients that arrived (module docstring)
        with torch.no_grad():
            theta = parameters_to_vector(self.shared_params)
            load_vector(theta - s["lr"] * torch.from_numpy(mean), self.shared_params)
            if self.private_params:  # DLGNN: the private user embedding, from its own gradient
                own = parameters_to_vector(self.private_params) - s["lr"] * self.private_grad
                load_vector(own, self.private_params)
        self.report("held", float(len(origins)))
        self.last_round = {
            "round": self.round,
            "hop": self.hop,
            "parent": self.parent,
            "children": list(self.children),
            "held": origins,
        }
        self.held = {}  # the round's gradients are spent: not kept in memory or checkpoints
        self.private_grad = None

    # --- evaluation ------------------------------------------------------------------------------
    def _evaluate(self, inbox) -> None:
        expect_kinds(inbox, node=self.id)
        if not len(self.test_items):
            return
        self._ensure_graph()
        k = self.shared["eval_k"]
        with torch.no_grad():
            e_u = self.model(self.node_item_ids, self.incidence)
            scores = self.model.score(e_u, np.arange(self.shared["n_items"]))[None]
        top = topk_excluding(scores, [self.train_items], k)
        for name, values in ranking_metrics(top, [self.test_items], ks=(k,)).items():
            self.report(name, float(values[0]))

    @staticmethod
    def _train_batch(nodes: list[DGRECUser], inboxes) -> None:
        for n, inbox in zip(nodes, inboxes, strict=True):
            expect_kinds(inbox, "join", node=n.id)
            n._take_joins(inbox)
        members = [n for n in nodes if n.in_tree]
        if not members:
            return
        s = members[0].shared
        pairs = [sample_pairs(n.rng, s["n_items"], n.train_items, s["pairs"]) for n in members]
        model = members[0].model
        params = stacked_parameters([n.model for n in members])
        total, parts = loss_batch(
            model,
            params,
            _hypergraphs(members),
            torch.as_tensor(np.stack([p for p, _ in pairs])),
            torch.as_tensor(np.stack([q for _, q in pairs])),
            reduction=s["loss_reduction"],
        )
        total.sum().backward()  # user b's loss touches only slice b: slice b of each grad is g_b
        names = [name for name, _ in model.named_parameters()]
        for b, n in enumerate(members):
            grad = torch.cat([params[name].grad[b].reshape(-1) for name in names])
            n._share(grad, float(parts["total"][b]))

    @staticmethod
    def _evaluate_batch(nodes: list[DGRECUser], inboxes, chunk: int = 128) -> None:
        for n, inbox in zip(nodes, inboxes, strict=True):
            expect_kinds(inbox, node=n.id)
        judged = [n for n in nodes if len(n.test_items)]
        if not judged:
            return
        for n in judged:
            n._ensure_graph()
        s, model = judged[0].shared, judged[0].model
        k = s["eval_k"]
        for start in range(0, len(judged), chunk):
            part = judged[start : start + chunk]
            with torch.no_grad():
                params = stacked_parameters([n.model for n in part])
                e_u = encode_batch(model, params, _hypergraphs(part)).e_u
                items = torch.arange(s["n_items"]).expand(len(part), -1)
                scores = score_batch(model, params, e_u, items)
            top = topk_excluding(scores, [n.train_items for n in part], k)
            metrics = ranking_metrics(top, [n.test_items for n in part], ks=(k,))
            for b, n in enumerate(part):
                for name, values in metrics.items():
                    n.report(name, float(values[b]))

    # --- inspection (tests) ------------------------------------------------------------------------
    def get_last_round(self) -> dict:
        return dict(self.last_round)

    def get_parameters(self) -> np.ndarray:
        return parameters_to_vector(self.model.parameters()).detach().numpy().copy()

    def get_public_items(self) -> np.ndarray:
        return self.public_items.copy()


# ------------------------------------------------------------------------------ the protocol
class DGREC(Protocol):
    name = "dgrec"
    Config = DGRECConfig

    def __init__(self, dataset: RecDataset, config: DGRECConfig, seed: int):
        super().__init__(dataset, config, seed)
        has_tags = dataset.item_tags is not None and dataset.item_tags.shape[1] > 0
        if config.model == "dgrec" and not has_tags:
            raise ValueError(f"dataset {dataset.name!r} has no item tags: DGREC's hyperedges")
        self.train_items = dataset.train.items_by_user(dataset.n_users)
        self.test_items = dataset.test.items_by_user(dataset.n_users)
        self.users = [u for u in range(dataset.n_users) if len(self.train_items[u])]
        active = np.zeros(dataset.n_users, dtype=bool)
        active[self.users] = True
        graph = user_graph(dataset, k=config.neighbours, seed=seed)
        self.graph = [np.asarray(g[active[g]], dtype=np.int64) for g in graph]
        self.item_tags = (
            sp.csr_matrix(dataset.item_tags, dtype=np.float32)
            if has_tags
            else sp.csr_matrix((dataset.n_items, 1), dtype=np.float32)
        )
        self.n_s = n_shared(self.shared())
        self.accountant = PrivacyAccountant(delta=config.privacy_delta)
        self._stage1_done = False
        self.history: list[dict] = []

    def shared(self) -> dict:
        c = self.config
        return {
            "n_users": self.dataset.n_users,
            "n_items": self.dataset.n_items,
            "n_tags": int(self.item_tags.shape[1]),
            "item_tags": self.item_tags,  # the public catalogue
            "seed_probability": min(1.0, c.neighbourhoods / max(1, len(self.users))),
            "laplace_lambda": c.laplace_lambda(),
            **dataclasses.asdict(c),
        }

    def node_specs(self) -> list[NodeSpec]:
        return [
            NodeSpec(
                DGRECUser,
                node_id("user", u),
                {
                    "train_items": self.train_items[u],
                    "test_items": self.test_items[u],
                    "neighbours": self.graph[u],
                },
                packable=True,
            )
            for u in self.users
        ]

    # --- one round ---------------------------------------------------------------------------
    def stage1(self, dep: Deployment, round_: int) -> None:
        """Stage 1, once: enrolment, before the participants go about their training rounds, so
        every user takes part whatever its availability in round ``round_`` (module docstring)."""
        dep.superstep(round_, "publicize", activate=["user"], availability=False)
        dep.superstep(round_, "setup", activate=["user"], availability=False)
        self._stage1_done = True

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        if not self._stage1_done:
            self.stage1(dep, round_)
        c = self.config
        dep.superstep(round_, "status", activate=["user"])
        dep.superstep(round_, "seed", activate=["user"])
        for h in range(1, c.hops + 1):
            dep.superstep(round_, f"hop/{h}")
        res = dep.superstep(round_, "train", activate=["user"])  # gossip step 1
        for t in range(2, 2 * c.hops + 1):
            dep.superstep(round_, f"gossip/{t}")
        upd = dep.superstep(round_, "update", activate=["user"])

        members = sorted(int(u) for u in res.reports.get("shared_by", []))
        self._spend(members)
        share_bytes = dep.ledger.by_kind(round_=round_).get("share", 0)
        n_members, n_seeds = len(members), len(res.reports.get("seed", []))
        row = {
            "loss": mean_report(res.reports, "loss"),
            "members": n_members,
            "neighbourhoods": n_seeds,
            "neighbourhood_size": n_members / n_seeds if n_seeds else 0.0,
            "held_mean": mean_report(upd.reports, "held"),
            "share_bytes_per_member": share_bytes / n_members if n_members else 0.0,
            "worst_case_bytes_per_user": worst_case_bits(c.hops, c.n_u, self.n_s) / 8,
            "float_bytes_per_member": (
                share_bytes / n_members * 32 if n_members and c.mechanism == "onebit" else 0.0
            ),
            "round_bytes": dep.ledger.total(round_=round_),
        }
        self.history.append(row)
        return row

    def _spend(self, members: list[int]) -> None:
        if not members:
            return
        c = self.config
        if c.mechanism == "onebit":  # n_s elements, each binary RR with ε = β
            event = dp_event.SelfComposedDpEvent(randomized_response_event(c.beta), self.n_s)
        elif c.mechanism == "laplace":
            event = laplace_vector_event(c.clip, c.laplace_lambda(), self.n_s)
        else:
            event = dp_event.NonPrivateDpEvent()
        self.accountant.spend(members, event, f"{c.mechanism}-share")

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        if not self._stage1_done:
            self.stage1(dep, round_)
        res = dep.superstep(round_, "eval", activate=["user"])
        return {name: mean_report(res.reports, name) for name in sorted(res.reports)}

    def privacy(self) -> dict:
        c = self.config
        out = {
            "mechanism": c.mechanism,
            "n_s": self.n_s,
            "privacy_delta": c.privacy_delta,
            "shares_max": 0,
            "users_sharing": self.accountant.n_units,
        }
        if self.accountant.n_units:
            summary = self.accountant.summary()
            label = summary["labels"][f"{c.mechanism}-share"]
            out["shares_max"] = label["max_count"]
            out["epsilon"] = summary[
                "worst_epsilon"
            ]  # composed over the shares, at `privacy_delta`
            out["epsilon_bound"] = summary["bound"]
        else:
            out["epsilon"] = 0.0
        if c.mechanism == "onebit":
            out["epsilon_per_element"] = c.beta
            out["epsilon_per_vector"] = self.n_s * c.beta
            out["rdp_per_element_order_1.5"] = rdp_of_randomized_response(c.beta, 1.5)
            out["paper_stated_rdp"] = {"order": PAPER_RDP[0], "epsilon": PAPER_RDP[1]}
        elif c.mechanism == "laplace":
            out["epsilon_per_element"] = 2 * c.clip / c.laplace_lambda()
            out["epsilon_per_vector"] = self.n_s * 2 * c.clip / c.laplace_lambda()
        return out
