"""What every protocol gives the runner: its parameters, its nodes, and its round choreography.

A protocol is a plain class: ``node_specs()`` says which participants exist and with what private
data, ``shared()`` the typed records every host receives (the Config and the protocol's public
values), ``run_round`` drives one round as supersteps of a :class:`nodes.deployment.Deployment`
and returns training figures, ``evaluate`` returns accuracy figures, and ``privacy`` the privacy
spent so far as a :class:`PrivacyReport`.

Beside that behaviour a protocol *declares* what the engine, comparisons and reports need to know
of it, so that the engine never names a protocol: its main metric (:meth:`Protocol.main_metric`),
its central non-private baseline (:meth:`Protocol.central_baseline` and
``BASELINE_SHARES``), its settings for the main job (``QUICK``), the parameter a label suffix
sets (``LABEL_PARAM``: ``central:lightgcn``) and its papers' figures (``PAPER``). A protocol
outside this repository is the same kind of class (see docs/writing-a-protocol.md).
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec
from nodes.node import Shared


class ConfigError(ValueError):
    """An impossible or unknown configuration value; the message names the parameter."""


class UnsuitableDataError(ValueError):
    """The dataset lacks a signal the protocol needs (ratings, links, timestamps, ...)."""


class RenamedParameterWarning(FutureWarning):
    """A protocol parameter was given under its old name (see ``ProtocolConfig.ALIASES``); a
    FutureWarning, so that the command line shows it."""


@dataclasses.dataclass
class ProtocolConfig:
    """Base of every protocol's parameters. Subclasses add fields with defaults and ranges in
    ``check()``; any field can be set from ``--config FILE.toml``.

    One vocabulary across protocols: ``clip`` (clipping bound), ``privacy_delta`` (δ of the DP
    guarantee), ``mechanism`` (the privacy mechanism switch), ``l2`` (L2 regularization weight),
    ``key_server`` (the key-server role). ``ALIASES`` maps a subclass's old parameter names to
    the new ones: :func:`build_config` still takes them, with a :class:`RenamedParameterWarning`.
    ``RESUMABLE`` names the fields :func:`engine.resume` may change from the next round on."""

    ALIASES: ClassVar[dict[str, str]] = {}  # old parameter name -> field name
    # parameters a resumed run may change (``--resume RUN --rounds N --eval-every 5``): they set
    # the step size or the reporting of the rounds to come, never the shape of the nodes' state
    RESUMABLE: ClassVar[tuple[str, ...]] = ("eval_every",)

    eval_every: int = 0  # evaluate every N rounds (0: only at the end)
    eval_k: int = 20  # K of the ranking metrics (Recall@K, NDCG@K, ...)

    def check(self) -> None:
        require(self.eval_every >= 0, "eval_every", "must be >= 0")
        require(self.eval_k >= 1, "eval_k", "must be >= 1")


def require(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise ConfigError(f"{name}: {why}")


def sample_participants(rng: np.random.Generator, users: np.ndarray, per_round: int) -> np.ndarray:
    """The round's participants: ``per_round`` of the registered ``users`` drawn without replacement
    (sorted), or all of them when ``per_round`` is 0 or not smaller than their number."""
    if 0 < per_round < len(users):
        return np.sort(rng.choice(users, size=per_round, replace=False))
    return users


def resolve_aliases(cls: type[ProtocolConfig], overrides: dict[str, Any]) -> dict[str, Any]:
    """``overrides`` with every old parameter name of ``cls.ALIASES`` replaced by its new name,
    warning once per old name; a parameter given under both names is a ConfigError."""
    out = dict(overrides)
    for old, new in cls.ALIASES.items():
        if old not in out:
            continue
        if new in overrides:
            raise ConfigError(f"{new}: given twice, as {new!r} and under its old name {old!r}")
        warnings.warn(
            f"{cls.__name__}: parameter {old!r} is now {new!r}", RenamedParameterWarning, 2
        )
        out[new] = out.pop(old)
    return out


def build_config(cls: type[ProtocolConfig], overrides: dict[str, Any]) -> ProtocolConfig:
    """Make ``cls`` from defaults and ``overrides``, checking names, types and ranges; old
    parameter names (``cls.ALIASES``) are taken with a warning."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in resolve_aliases(cls, overrides).items():
        if key not in fields:
            raise ConfigError(
                f"{key}: unknown parameter for {cls.__name__} (known: {', '.join(sorted(fields))})"
            )
        values[key] = coerce(key, value, hints[key])
    cfg = cls(**values)
    cfg.check()
    return cfg


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def coerce(key: str, value: Any, hint: Any) -> Any:
    """``value`` as the field's type ``hint``, or a ConfigError naming ``key``: the one place where
    a parameter is typed, whether it comes from a flag (text), a TOML table or Python."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        hint = args[0]
    if hint is bool:
        if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
            return value.lower() in _TRUE
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if hint is int:
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value


@dataclasses.dataclass(frozen=True)
class MainMetric:
    """The figure a run is judged by: a metric's name as ``evaluate`` reports it and which way is
    better (``"higher"`` for Recall@K, ``"lower"`` for RMSE)."""

    name: str
    better: str = "higher"

    def __post_init__(self):
        if self.better not in ("higher", "lower"):
            raise ValueError(f"better must be 'higher' or 'lower', got {self.better!r}")


@dataclasses.dataclass(frozen=True)
class PaperClaim:
    """The privacy figure a protocol's paper states, reported beside the rigorous one.

    ``kind`` says what ``value`` is: ``"epsilon"`` (an ε, e.g. per coordinate or per epoch),
    ``"delta"`` (a δ per release at ε = 0; ``composed`` is that δ over the releases made).
    ``what`` is the paper's wording ("RDP ε at order 1.5")."""

    value: float
    what: str
    kind: str = "epsilon"
    composed: float | None = None


@dataclasses.dataclass(frozen=True)
class PrivacyReport(Mapping):
    """The privacy a run has spent so far, as :meth:`Protocol.privacy` returns it.

    ``mechanism``: what protects the data ("none" for a non-private protocol, "" when the protocol
    applies no DP mechanism but is not a centralised baseline either). ``epsilon``: the rigorous ε
    at ``delta`` proved by the accountant for the rounds run (``inf``: no finite guarantee; None:
    not a DP protocol), per privacy ``unit`` (whose data a guarantee protects: "user", "party",
    "edge", ...; the worst unit's figure). ``per_element``: the ε of one released element (a
    coordinate, a bit) where the mechanism has one. ``delta_spent``: for mechanisms that spend δ
    at ε = 0, the rigorous δ so far. ``budget``: the ε the run was calibrated to, if any. ``paper``: the figure
    the paper states (:class:`PaperClaim`). ``attacks``: attack results measured on the run
    (name → figure). ``details``: the protocol's own figures (per element, per vector,
    sensitivities, the accountant's tables), written to summary.json as they are.

    A PrivacyReport reads as the flat mapping summary.json holds (``report["epsilon"]``,
    ``report["privacy_delta"]``, the details' keys), so a reader of summary.json and a reader of
    the object see the same names."""

    mechanism: str = ""
    epsilon: float | None = None
    delta: float | None = None
    unit: str = ""
    per_element: float | None = None
    delta_spent: float | None = None
    budget: float | None = None
    paper: PaperClaim | None = None
    attacks: Mapping[str, float] = dataclasses.field(default_factory=dict)
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def private(self) -> bool:
        """Whether the protocol applies a privacy mechanism at all."""
        return self.mechanism != "none"

    def as_dict(self) -> dict[str, Any]:
        """The flat record of summary.json: the details, then the typed figures."""
        out: dict[str, Any] = dict(self.details)
        if self.mechanism:
            out["mechanism"] = self.mechanism
        if self.epsilon is not None:
            out["epsilon"] = self.epsilon
        if self.delta is not None:
            out["privacy_delta"] = self.delta
        if self.unit:
            out["privacy_unit"] = self.unit
        if self.per_element is not None:
            out["epsilon_per_element"] = self.per_element
        if self.delta_spent is not None:
            out["privacy_delta_spent"] = self.delta_spent
        if self.budget is not None:
            out["epsilon_budget"] = self.budget
        if self.paper is not None:
            out["paper_claim"] = dataclasses.asdict(self.paper)
        if self.attacks:
            out["attacks"] = dict(sorted(self.attacks.items()))
        return out

    def figures(self) -> dict[str, Any]:
        """The typed figures of one metrics.jsonl row (what the plots and the comparison read):
        ``epsilon``, ``epsilon_per_element``, ``epsilon_budget``, ``delta_spent``, and the
        paper's claim as
        ``paper_value`` / ``paper_kind`` / ``paper_what`` / ``paper_composed``."""
        p = self.paper
        return {
            "epsilon": self.epsilon,
            "epsilon_per_element": self.per_element,
            "epsilon_budget": self.budget,
            "delta_spent": self.delta_spent,
            "paper_value": p.value if p else None,
            "paper_kind": p.kind if p else None,
            "paper_what": p.what if p else None,
            "paper_composed": p.composed if p else None,
        }

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


NOT_PRIVATE = PrivacyReport()  # a protocol without a privacy mechanism (the default)


@dataclasses.dataclass(frozen=True)
class PaperFigure:
    """A figure of a protocol's paper: what the method reaches (``method``: metric → value as
    printed) on the paper's dataset (``on``), and the figure of the baseline that stands where our
    central baseline stands (``baselines``: our label → (the paper's name, metric → value)).
    ``percent``: the paper prints ranking figures in percent (9.68 for 0.0968)."""

    on: str
    method: Mapping[str, float] = dataclasses.field(default_factory=dict)
    baselines: Mapping[str, tuple[str, Mapping[str, float]]] = dataclasses.field(
        default_factory=dict
    )
    percent: bool = False
    source: str = ""


class Protocol:
    """A protocol's behaviour (``node_specs``, ``shared``, ``run_round``, ``evaluate``,
    ``privacy``) and its declarations (the class attributes and classmethods below)."""

    name: ClassVar[str]
    Config: ClassVar[type[ProtocolConfig]] = ProtocolConfig

    # --- declarations ---------------------------------------------------------------------------
    # the rounds and parameters of the main job (`python launch.py`, `compare --quick`): small
    # enough for the whole comparison to take a couple of minutes on a 2-core machine
    QUICK: ClassVar[dict[str, Any]] = {}
    # for a central baseline added to a comparison: this protocol's parameters it takes over
    # (this protocol's name -> the baseline's name), so that both have the same shape
    BASELINE_SHARES: ClassVar[dict[str, str]] = {}
    # the parameter that a label's suffix sets: "NAME:VALUE" runs NAME with LABEL_PARAM = VALUE
    LABEL_PARAM: ClassVar[str | None] = None
    # the figures of the protocol's paper that `benchmarks.reproduce` sets beside ours
    PAPER: ClassVar[PaperFigure | None] = None
    # the family of attack classes that play this protocol's roles (adversaries/attacks/:
    # "fedmf", "fedpergnn"); None: the protocol takes no adversaries yet
    ATTACK_FAMILY: ClassVar[str | None] = None
    # the run's adversaries (adversaries.condition.AdversaryPlan), set by set_adversaries before
    # node_specs(); None: an honest run
    adversary_plan: Any = None

    @classmethod
    def central_baseline(cls, params: Mapping[str, Any]) -> str | None:
        """The label of the non-private centralized baseline this protocol is measured against
        (``"central:lightgcn"``), given its parameters; None when it has none."""
        return None

    @classmethod
    def quick_settings(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """The main job's rounds and parameters for this protocol with ``params`` (a label's
        parameter included): ``QUICK`` unless the protocol says otherwise."""
        return dict(cls.QUICK)

    def __init__(self, dataset: RecDataset, config: ProtocolConfig, seed: int):
        self.dataset = dataset
        self.config = config
        self.seed = seed

    def node_specs(self) -> list[NodeSpec]:
        raise NotImplementedError

    def adversary_users(self) -> list[int]:
        """The real users an adversary condition counts and may compromise (the users that take
        part); a protocol with ``ATTACK_FAMILY`` says which."""
        return list(range(self.dataset.n_users))

    def set_adversaries(self, condition) -> None:
        """Plan the run's adversaries (:class:`adversaries.condition.Adversaries`) before
        ``node_specs()``: which users are fake or compromised, the target items, the defence
        (``adversary_plan``; its ``threat`` reaches every node as ``Shared.threat``). Refuses
        (AdversaryError) a protocol without ``ATTACK_FAMILY``."""
        from adversaries.condition import AdversaryError, plan_adversaries

        if condition is None:
            self.adversary_plan = None
            return
        if self.ATTACK_FAMILY is None:
            raise AdversaryError(
                f"adversaries: protocol {self.name} has no adversary roles or defences yet "
                "(see --help for the attacks and the protocols they run on)"
            )
        self.adversary_plan = plan_adversaries(self, condition, self.adversary_users())

    # What the protocol's server sums of its users' uploads (nodes.secure_sum.SecureSum, the same
    # object its server and user classes declare); None: it cannot run --secure-aggregation
    SECURE_SUM: ClassVar[Any] = None

    def check_secure_aggregation(self, setting) -> None:
        """Refuse (ConfigError) the run condition ``secure_aggregation`` where the protocol has no
        server that sums its users' uploads, or where the run's defence needs each upload."""
        if setting is None:
            return
        if self.SECURE_SUM is None:
            raise ConfigError(
                f"--secure-aggregation: {self.name} has no server that sums user uploads "
                "(it runs with fedmf, fedpergnn, fedlightgcn and protocols that declare SECURE_SUM)"
            )
        plan = getattr(self, "adversary_plan", None)
        defence = plan.threat.defence if plan is not None and plan.threat is not None else ""
        if defence:
            raise ConfigError(
                f"--secure-aggregation: the defence {defence!r} needs each upload, and the server "
                "sees only their sum (leave --defence out)"
            )

    def shared(self) -> Shared:
        """What every host receives: the typed Config and the protocol's record of public values
        (a frozen dataclass in the protocol's config.py); nodes read ``self.config`` and
        ``self.public``."""
        return Shared(self.config)

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        raise NotImplementedError

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        raise NotImplementedError

    def privacy(self) -> PrivacyReport:
        return NOT_PRIVATE

    def audits(self) -> list:
        """The privacy audits of this run's mechanism(s) (:class:`privacy.audit.Audit`: its own
        code on the worst-case neighbours of its privacy unit, with this run's parameters, the
        accountant's figure of one release and the paper's claim) that ``--audit`` runs after
        the run (engine/audit.py). None by default: no mechanism to audit."""
        return []

    def main_metric(self) -> MainMetric:
        """The figure this run is judged by: Recall@K (K = ``eval_k``) by default; a rating
        protocol says RMSE."""
        return MainMetric(f"recall@{self.config.eval_k}", "higher")

    def needs_negatives(self) -> bool:
        """Whether training samples negatives: every training user needs an item it has not
        interacted with (BPR and its kin). False by default."""
        return False

    def check_rounds(self, rounds: int) -> None:
        """Refuse ``rounds`` rounds (in all, a resumed run's too) that this configuration cannot
        run, before Ray starts, with a ConfigError naming the parameter. Any number by default."""

    def check_data(self) -> None:
        """Refuse data this protocol cannot run on, before Ray starts, with a ValueError of one
        line (the engine calls it after the constructor, whose own refusals come first): a
        ranking metric at K needs K ≤ the items; negative sampling needs, for every training
        user, an item outside its training set."""
        d = self.dataset
        if self.main_metric().name.startswith("recall@") and self.config.eval_k > d.n_items:
            raise ValueError(
                f"eval_k {self.config.eval_k}: the dataset has {d.n_items} items, and ranking at K "
                f"needs K <= the items (give --eval-k {d.n_items} or less)"
            )
        if self.needs_negatives() and len(d.train):
            per_user = np.bincount(
                np.unique(np.stack([d.train.user, d.train.item]), axis=1)[0],
                minlength=d.n_users,
            )
            full = np.flatnonzero(per_user >= d.n_items)
            if len(full):
                who = (
                    f"user {int(full[0])} has"
                    if len(full) == 1
                    else (f"{len(full)} users (user {int(full[0])} first) have")
                )
                raise ValueError(
                    f"{who} interacted with every one of the {d.n_items} items in training: "
                    "no negative item to sample"
                )


def field_docs(cls: type) -> dict[str, str]:
    """Each dataclass field's one line of meaning: the comment at the end of the line that
    declares it in its class's source (a subclass's comment wins over its base's). ``--help``
    and the tutorial show these lines; a test holds every built-in protocol's fields documented."""
    import inspect
    import io
    import tokenize

    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        names = set(klass.__dict__.get("__annotations__", {}))
        opened: dict[int, str] = {}  # source line -> field declared on it
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        for tok, nxt in zip(tokens, tokens[1:]):
            if tok.type == tokenize.NAME and tok.string in names and nxt.string == ":":
                opened[tok.start[0]] = tok.string
            elif tok.type == tokenize.COMMENT and tok.line[: tok.start[1]].strip():
                # a trailing comment: it documents the field declared on its line, or on one of
                # the lines just above when a long default wraps
                row = tok.start[0]
                owner = next((opened[r] for r in range(row, row - 4, -1) if r in opened), None)
                if owner is not None:
                    docs[owner] = tok.string.lstrip("#").strip()
    return docs
