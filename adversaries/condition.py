"""The adversaries of a run: a typed condition, who the adversaries are, and which items they push.

    Adversaries(fraction=0.05, attack="fedrecattack", n_targets=1, defence="median")

**Who.** ``fraction`` is the number of adversaries per honest (real) user. An attack that joins as
*fake* users (data and model poisoning: ``random``, ``bandwagon``, ``fedrecattack``,
``pipattack``) adds ``round(fraction × N)`` users (at least one) with the ids ``N, N + 1, …``
after the N real users, so every honest user keeps its id, its data and its RNG stream (which
derives from (seed, node id)). An attack that *compromises* users (``byzantine-*``) takes over the
``round(fraction × N)`` real users whose hash of (seed, node id) is smallest. Both are functions of
the seed and the node ids alone, so the placement never changes them. ``mode`` overrides the
attack's own way of joining. Adversaries never report evaluation figures: every metric is the
honest users'.

**Targets.** The items the attack promotes: ``targets`` as given, else the ``n_targets`` least
popular items of the training data (ties broken by a hash of (seed, item)). They are measured
whenever the condition is given, with or without an attack, so a run without attack (fraction 0)
reports the targets' exposure to compare with: ``target_er@K`` (K = ``er_k``), the share of honest
users who have not interacted with every target whose top K holds one they have not interacted
with, and ``target_hr@K``, the share of such (user, target) pairs with the target in the top K.

**Defence.** ``defence`` (``adversaries/defences.py``) is an option of the aggregating role; it
applies with or without an attack (to measure its accuracy cost).

:class:`Threat` is what the nodes read (``Shared.threat``: targets, K, defence); the protocol's
driver reads the :class:`AdversaryPlan` (which ids are fake or compromised, the attack class and
what the attacker knows) to build its node specs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class AdversaryError(ValueError):
    """An impossible adversary condition; the message names the parameter."""


def unit(*parts) -> float:
    """A uniform number in [0, 1) determined by ``parts`` only."""
    digest = hashlib.sha256(":".join(map(str, ("privrec-adversaries", *parts))).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2.0**64


def _pairs(values) -> tuple[tuple[str, Any], ...]:
    if isinstance(values, Mapping):
        values = values.items()
    return tuple(sorted((str(k), v) for k, v in values))


@dataclass(frozen=True)
class Adversaries:
    """The adversary condition of a run (flags ``--adversaries``, ``--attack``, ``--attack-param``,
    ``--targets``, ``--defence``, ``--defence-param``; or an ``[adversaries]`` TOML table)."""

    fraction: float = 0.0  # adversaries per honest user (0: none; targets still measured)
    attack: str = ""  # a name of adversaries.attacks.ATTACKS ("" with fraction 0)
    mode: str = ""  # "fake" (extra users) or "compromised" (real users); "": the attack's own
    n_targets: int = 1  # the least popular items pushed, unless targets names them
    targets: tuple[int, ...] = ()  # the items pushed (item ids), overrides n_targets
    er_k: int = 10  # K of target_er@K / target_hr@K
    params: tuple[tuple[str, Any], ...] = ()  # the attack's parameters (name, value)
    defence: str = ""  # a name of adversaries.defences.DEFENCES ("": plain mean)
    defence_params: tuple[tuple[str, Any], ...] = ()  # the defence's parameters (name, value)

    def __post_init__(self):
        from adversaries.attacks import ATTACKS, typed_params
        from adversaries.defences import DEFENCES, defence_params

        object.__setattr__(self, "targets", tuple(int(t) for t in self.targets))
        object.__setattr__(self, "params", _pairs(self.params))
        object.__setattr__(self, "defence_params", _pairs(self.defence_params))
        if not 0.0 <= self.fraction < 1.0:
            raise AdversaryError(f"fraction: must be in [0, 1), got {self.fraction}")
        if self.attack and self.attack not in ATTACKS:
            raise AdversaryError(
                f"attack: unknown attack {self.attack!r} (known: {', '.join(ATTACKS)})"
            )
        if self.fraction > 0 and not self.attack:
            raise AdversaryError("attack: adversaries need an attack (--attack NAME)")
        if self.attack and self.fraction <= 0:
            raise AdversaryError(f"fraction: attack {self.attack!r} needs --adversaries > 0")
        if self.mode not in ("", "fake", "compromised"):
            raise AdversaryError(f"mode: 'fake' or 'compromised', got {self.mode!r}")
        if self.n_targets < 1 and not self.targets:
            raise AdversaryError(f"n_targets: must be >= 1, got {self.n_targets}")
        if self.er_k < 1:
            raise AdversaryError(f"er_k: must be >= 1, got {self.er_k}")
        if any(t < 0 for t in self.targets):
            raise AdversaryError(f"targets: item ids are >= 0, got {list(self.targets)}")
        if self.params and not self.attack:
            raise AdversaryError("params: attack parameters without an attack")
        if self.attack:
            object.__setattr__(self, "params", _pairs(typed_params(self.attack, self.params)))
        if self.defence and self.defence not in DEFENCES:
            raise AdversaryError(
                f"defence: unknown defence {self.defence!r} (known: {', '.join(DEFENCES)})"
            )
        if self.defence_params and not self.defence:
            raise AdversaryError("defence_params: defence parameters without a defence")
        if self.defence:
            typed = defence_params(self.defence, dict(self.defence_params))
            object.__setattr__(self, "defence_params", _pairs(typed))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Adversaries:
        """One validation path for the ``[adversaries]`` TOML table, the flags and Python."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise AdversaryError(
                f"{', '.join(unknown)}: unknown adversary setting (known: {', '.join(sorted(names))})"
            )
        hints = typing.get_type_hints(cls)
        out = {}
        for key, value in values.items():
            hint = hints[key]
            try:
                if hint is float:
                    value = float(value)
                elif hint is int:
                    value = int(value)
                elif key == "targets":
                    if isinstance(value, str):
                        value = [x for x in value.split(",") if x.strip()]
                    value = tuple(int(x) for x in value)
            except (TypeError, ValueError):
                raise AdversaryError(f"{key}: expected {hint}, got {value!r}") from None
            out[key] = value
        return cls(**out)

    @property
    def attacking(self) -> bool:
        return self.fraction > 0 and bool(self.attack)

    def param(self, name: str) -> Any:
        return dict(self.params)[name]


@dataclass(frozen=True)
class Threat:
    """What every node of a run reads of the adversary condition (``self.threat``): the target
    items and K of the exposure measure, and the aggregating role's defence."""

    targets: tuple[int, ...] = ()
    er_k: int = 10
    defence: str = ""
    defence_params: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Knowledge:
    """What an attacker knows besides the protocol's messages (given to every adversary node):
    the targets, the attack's parameters, the items' training popularity (public side
    information: bandwagon and PipAttack assume it), a ``public_fraction`` sample of the training
    interactions (FedRecAttack's public interactions; per user, users with none left out) and the
    mean profile length of honest users (the size of a fake profile)."""

    targets: np.ndarray
    params: Mapping[str, Any]
    popularity: np.ndarray
    public_items: list[np.ndarray] = field(default_factory=list)
    profile_size: int = 0


@dataclass
class AdversaryPlan:
    """The adversaries of a run as the driver builds node specs from them."""

    condition: Adversaries
    targets: tuple[int, ...]
    fake: tuple[int, ...] = ()  # user indices of fake users, after the real ones
    compromised: frozenset[int] = frozenset()  # user indices of compromised real users
    attack_cls: type | None = None
    knowledge: Knowledge | None = None

    @property
    def threat(self) -> Threat:
        c = self.condition
        return Threat(self.targets, c.er_k, c.defence, c.defence_params)

    def role(self, user: int, honest: type, private: dict, *, fake: bool = False):
        """Who plays participant ``user`` (a user index; VerFedGNN: a party index), and with what.

        Args:
            user: the participant's index.
            honest: the protocol's honest role class.
            private: the participant's constructor arguments.
            fake: ``user`` is one of the fake users (after the real ones).

        Returns:
            ``(attack class, private + the adversary's knowledge)`` when ``user`` is fake or
            compromised, else ``(honest, private)``.
        """
        if fake or user in self.compromised:
            return self.attack_cls, {**private, **self.kwargs()}
        return honest, private

    def kwargs(self) -> dict:
        """The adversary-only constructor arguments of an attack node."""
        return {"knowledge": self.knowledge}

    def summary(self) -> dict:
        """The record of summary.json / config.json."""
        c = self.condition
        return {
            "attack": c.attack or None,
            "fraction": c.fraction,
            "fake_users": len(self.fake),
            "compromised_users": len(self.compromised),
            "targets": list(self.targets),
            "defence": c.defence or None,
            "defence_params": dict(c.defence_params),
            "params": dict(c.params),
        }


def role_of(plan: AdversaryPlan | None, user: int, honest: type, private: dict, *, fake=False):
    """:meth:`AdversaryPlan.role` of ``plan``; ``(honest, private)`` in an honest run (None)."""
    if plan is None:
        return honest, private
    return plan.role(user, honest, private, fake=fake)


def least_popular(counts: np.ndarray, n: int, seed: int) -> tuple[int, ...]:
    """The ``n`` items with the fewest training interactions, ties broken by a hash of (seed,
    item): deterministic from the seed."""
    tie = np.array([unit(seed, "target", i) for i in range(len(counts))])
    order = np.lexsort((tie, counts))
    return tuple(int(i) for i in np.sort(order[:n]))


def compromised_users(seed: int, users: list[int], n: int, role: str = "user") -> frozenset[int]:
    """The ``n`` users (participants of ``role``: VerFedGNN's parties) whose hash of (seed, node
    id) is smallest."""
    from cluster.message import node_id

    ranked = sorted(users, key=lambda u: unit(seed, "compromised", node_id(role, u)))
    return frozenset(int(u) for u in ranked[:n])


def plan_adversaries(protocol, condition: Adversaries, real_users: list[int]) -> AdversaryPlan:
    """The plan of ``condition`` for ``protocol`` (its dataset, seed and ``ATTACKS``), whose
    participating real users are ``real_users``."""
    from adversaries.attacks import ATTACKS, attack_class

    d, seed = protocol.dataset, protocol.seed
    counts = np.bincount(d.train.item, minlength=d.n_items).astype(np.int64)
    if condition.targets:
        bad = [t for t in condition.targets if t >= d.n_items]
        if bad:
            raise AdversaryError(f"targets: no item {bad[0]} (the dataset has {d.n_items} items)")
        targets = tuple(sorted(set(condition.targets)))
    else:
        if condition.n_targets >= d.n_items:
            raise AdversaryError(f"n_targets: must be < the {d.n_items} items")
        targets = least_popular(counts, condition.n_targets, seed)
    if condition.er_k > d.n_items:
        raise AdversaryError(f"er_k: must be <= the {d.n_items} items")
    plan = AdversaryPlan(condition, targets)
    if not condition.attacking:
        return plan
    attack = ATTACKS[condition.attack]
    plan.attack_cls = attack_class(condition.attack, protocol)
    n = max(1, round(condition.fraction * len(real_users)))
    if (condition.mode or attack.joins) == "fake":
        plan.fake = tuple(range(d.n_users, d.n_users + n))
    else:
        role = getattr(protocol, "ADVERSARY_ROLE", "user")  # who is compromised: users, parties
        plan.compromised = compromised_users(seed, list(real_users), n, role)
    params = dict(condition.params)
    by_user = d.train.items_by_user(d.n_users)
    public = []
    share = float(params.get("public_fraction", 0.0))
    if share > 0:  # a share of every user's interactions is public (FedRecAttack's ξ)
        rng = np.random.default_rng([seed, 0x5EED, 26])
        for items in by_user:
            kept = items[rng.random(len(items)) < share]
            if len(kept):
                public.append(kept)
    sizes = [len(by_user[u]) for u in real_users]
    plan.knowledge = Knowledge(
        targets=np.array(targets, dtype=np.int64),
        params=params,
        popularity=counts,
        public_items=public,
        profile_size=max(len(targets) + 1, int(round(np.mean(sizes))) if sizes else 1),
    )
    return plan
