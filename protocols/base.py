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
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from data.types import RecDataset
from nodes.deployment import Deployment, NodeSpec
from nodes.node import Shared


class ConfigError(ValueError):
    """An impossible or unknown configuration value.

    The message starts with the parameter's name (``"eval_k: must be >= 1"``), so that the command
    line can show it as it stands.
    """


class UnsuitableDataError(ValueError):
    """The dataset lacks a signal the protocol needs (ratings, links, timestamps, ...).

    :func:`engine.run` raises it, before Ray starts, with the message of the ``ValueError`` that
    :meth:`Protocol.check_data` or the protocol's constructor raised.
    """


@dataclasses.dataclass
class ProtocolConfig:
    """Base of every protocol's parameters.

    Subclasses are dataclasses that add fields with defaults (the comment that ends a field's line
    is its documentation, see :func:`field_docs`) and check their ranges in :meth:`check`. Any
    field can be set from ``--config FILE.toml``, a ``--field-name`` flag or Python, all through
    :func:`build_config`.

    One vocabulary across protocols: ``clip`` (clipping bound), ``privacy_delta`` (δ of the DP
    guarantee), ``mechanism`` (the privacy mechanism switch), ``l2`` (L2 regularization weight),
    ``key_servers`` (the key-server replicas).

    Attributes:
        RESUMABLE: The fields that :func:`engine.resume` may change from the next round on.
        eval_every: Evaluate every N rounds (0: only at the end).
        eval_k: K of the ranking metrics (Recall@K, NDCG@K, ...).
    """

    # parameters a resumed run may change (``--resume RUN --rounds N --eval-every 5``): they set
    # the step size or the reporting of the rounds to come, never the shape of the nodes' state
    RESUMABLE: ClassVar[tuple[str, ...]] = ("eval_every",)

    eval_every: int = 0  # evaluate every N rounds (0: only at the end)
    eval_k: int = 20  # K of the ranking metrics (Recall@K, NDCG@K, ...)

    def check(self) -> None:
        """Refuse out-of-range values; a subclass extends it and calls ``super().check()``.

        Raises:
            ConfigError: A value is out of range; the message names the parameter.
        """
        require(self.eval_every >= 0, "eval_every", "must be >= 0")
        require(self.eval_k >= 1, "eval_k", "must be >= 1")


def require(ok: bool, name: str, why: str) -> None:
    """Refuse a parameter whose check failed: the one-line helper of :meth:`ProtocolConfig.check`.

    Args:
        ok: Whether the value passed the check.
        name: The parameter's name, which starts the message.
        why: What the value must be (``"must be >= 1"``).

    Raises:
        ConfigError: ``ok`` is false; its message is ``"{name}: {why}"``.
    """
    if not ok:
        raise ConfigError(f"{name}: {why}")


def sample_participants(rng: np.random.Generator, users: np.ndarray, per_round: int) -> np.ndarray:
    """The round's participants, drawn without replacement.

    Args:
        rng: The generator the draw advances (the protocol's or a server node's).
        users: The registered users, sorted.
        per_round: How many take part; 0 or at least ``len(users)``: all of them.

    Returns:
        ``per_round`` of ``users``, sorted, or ``users`` itself when all take part.
    """
    if 0 < per_round < len(users):
        return np.sort(rng.choice(users, size=per_round, replace=False))
    return users


def build_config(cls: type[ProtocolConfig], overrides: dict[str, Any]) -> ProtocolConfig:
    """Make a protocol's config from its defaults and ``overrides``, checking names, types, ranges.

    Each value is typed by :func:`coerce` (text from a flag, a TOML value or a Python value), then
    the whole config is checked by its :meth:`ProtocolConfig.check`.

    Args:
        cls: The protocol's Config dataclass (``Protocol.Config``).
        overrides: Field name -> value; a field not named keeps its default.

    Returns:
        The checked instance of ``cls``.

    Raises:
        ConfigError: A name that is not a field of ``cls`` (the message lists the known ones), a
            value of the wrong type, or a value out of range.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in overrides.items():
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
    """Type one parameter value as its field declares.

    The one place where a parameter is typed, whether it comes from a flag (text), a TOML table or
    Python: ``"true"``/``"1"``/``"yes"`` and ``"false"``/``"0"``/``"no"`` for a bool, a number's
    text for an int or a float (an int is taken as a float, a bool never as a number), None for an
    optional field. A value of any other type hint is returned unchanged.

    Args:
        key: The parameter's name, for the message.
        value: The value as given.
        hint: The field's type hint (``int``, ``float | None``, ...).

    Returns:
        ``value`` as the hint's type.

    Raises:
        ConfigError: ``value`` cannot be read as a bool, int, float or str where the hint asks for
            one; the message names ``key``.
    """
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
    """The figure a run is judged by, as :meth:`Protocol.main_metric` returns it.

    Attributes:
        name: The metric's name as :meth:`Protocol.evaluate` reports it (``"recall@20"``).
        better: Which way is better: ``"higher"`` (Recall@K) or ``"lower"`` (RMSE).

    Raises:
        ValueError: ``better`` is neither ``"higher"`` nor ``"lower"``.
    """

    name: str
    better: str = "higher"

    def __post_init__(self):
        if self.better not in ("higher", "lower"):
            raise ValueError(f"better must be 'higher' or 'lower', got {self.better!r}")


@dataclasses.dataclass(frozen=True)
class PaperClaim:
    """The privacy figure a protocol's paper states, reported beside the rigorous one.

    Attributes:
        value: The paper's figure.
        what: The paper's wording ("RDP ε at order 1.5").
        kind: What ``value`` is: ``"epsilon"`` (an ε, e.g. per coordinate or per epoch) or
            ``"delta"`` (a δ per release at ε = 0).
        composed: For ``kind="delta"``, that δ over the releases made; else None.
    """

    value: float
    what: str
    kind: str = "epsilon"
    composed: float | None = None


@dataclasses.dataclass(frozen=True)
class PrivacyReport(Mapping):
    """The privacy a run has spent so far, as :meth:`Protocol.privacy` returns it.

    A PrivacyReport reads as the flat mapping summary.json holds (``report["epsilon"]``,
    ``report["privacy_delta"]``, the details' keys; see :meth:`as_dict`), so a reader of
    summary.json and a reader of the object see the same names.

    Attributes:
        mechanism: What protects the data: ``"none"`` for a non-private protocol, ``""`` when the
            protocol applies no DP mechanism but is not a centralised baseline either.
        epsilon: The rigorous ε at ``delta`` proved by the accountant for the rounds run, per
            privacy ``unit`` (the worst unit's figure); ``inf``: no finite guarantee; None: not a
            DP protocol.
        delta: The δ of ``epsilon``.
        unit: Whose data a guarantee protects: ``"user"``, ``"party"``, ``"edge"``, ...
        per_element: The ε of one released element (a coordinate, a bit) where the mechanism has
            one.
        delta_spent: For mechanisms that spend δ at ε = 0, the rigorous δ so far.
        budget: The ε the run was calibrated to, if any.
        paper: The figure the paper states (:class:`PaperClaim`).
        attacks: Attack results measured on the run (name -> figure).
        details: The protocol's own figures (per element, per vector, sensitivities, the
            accountant's tables), written to summary.json as they are.
    """

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
        """The flat record of summary.json.

        Returns:
            The details, then each typed figure that is set, under its summary.json name:
            ``mechanism``, ``epsilon``, ``privacy_delta``, ``privacy_unit``,
            ``epsilon_per_element``, ``privacy_delta_spent``, ``epsilon_budget``, ``paper_claim``
            (a dict) and ``attacks`` (sorted by name).
        """
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
        """The typed figures of one metrics.jsonl row (what the plots and the comparison read).

        Returns:
            ``epsilon``, ``epsilon_per_element``, ``epsilon_budget``, ``delta_spent``, and the
            paper's claim as ``paper_value`` / ``paper_kind`` / ``paper_what`` /
            ``paper_composed``; every key is present, None where the figure is not set.
        """
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
    """A figure of a protocol's paper, which ``benchmarks.reproduce`` sets beside ours.

    Attributes:
        on: The paper's dataset.
        method: What the method reaches there: metric -> value as printed.
        baselines: The figures of the baseline that stands where our central baseline stands: our
            label -> (the paper's name for it, metric -> value).
        percent: Whether the paper prints ranking figures in percent (9.68 for 0.0968).
        source: Where in the paper the figures stand ("main table").
    """

    on: str
    method: Mapping[str, float] = dataclasses.field(default_factory=dict)
    baselines: Mapping[str, tuple[str, Mapping[str, float]]] = dataclasses.field(
        default_factory=dict
    )
    percent: bool = False
    source: str = ""


class Protocol:
    """A protocol's behaviour and its declarations: what the engine knows of it.

    A protocol implements :meth:`node_specs` (its participants), :meth:`run_round` (one round as
    supersteps of a :class:`nodes.deployment.Deployment`) and :meth:`evaluate`; it overrides
    :meth:`shared`, :meth:`privacy`, :meth:`main_metric` and the ``check_*`` methods where the
    defaults do not fit. The engine calls, in order: the constructor, :meth:`check_data`,
    :meth:`set_adversaries`, :meth:`check_rounds`, :meth:`check_secure_aggregation` and
    :meth:`node_specs` (before Ray starts, so that a refusal costs nothing); :meth:`shared` as it
    deploys the nodes; then for each round :meth:`run_round`, :meth:`evaluate` when the round is
    evaluated, and :meth:`privacy`.

    Attributes:
        name: The name the protocol runs under (``--protocol NAME``).
        Config: Its parameters' dataclass, a :class:`ProtocolConfig` subclass.
        QUICK: The rounds and parameters of the main job (``python launch.py``,
            ``compare --quick``).
        BASELINE_SHARES: The parameters a central baseline added to a comparison takes over (this
            protocol's name -> the baseline's name).
        LABEL_PARAM: The parameter a label's suffix sets (``"NAME:VALUE"``); None: none.
        PAPER: The figures of the protocol's paper (:class:`PaperFigure`), or None.
        ATTACKS: The attacks its roles can play: attack name -> ``"module:Class"`` of the class
            that plays it; empty: it takes no adversaries.
        SECURE_SUM: What its server sums of its users' uploads
            (:class:`nodes.secure_sum.SecureSum`); None: it cannot run ``--secure-aggregation``.
        adversary_plan: The run's adversaries, set by :meth:`set_adversaries`; None: an honest
            run.
        dataset: The run's dataset (:class:`data.types.RecDataset`).
        config: The run's parameters (an instance of ``Config``).
        seed: The run's seed.
    """

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
    # the attacks this protocol's roles can play: attack name (adversaries.attacks.ATTACKS) ->
    # "module:Class" of the class that plays it, in the protocol's own package
    # (adversaries.attacks.declared_in builds it); empty: the protocol takes no adversaries
    ATTACKS: ClassVar[Mapping[str, str]] = {}
    # the run's adversaries (adversaries.condition.AdversaryPlan), set by set_adversaries before
    # node_specs(); None: an honest run
    adversary_plan: Any = None

    @classmethod
    def central_baseline(cls, params: Mapping[str, Any]) -> str | None:
        """The non-private centralized baseline this protocol is measured against.

        Args:
            params: The protocol's parameters as given (names -> values; not yet typed).

        Returns:
            The baseline's label (``"central:lightgcn"``), or None when the protocol has none
            (the default).
        """
        return None

    @classmethod
    def quick_settings(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """The main job's rounds and parameters for this protocol.

        Args:
            params: The protocol's parameters as given, a label's parameter included.

        Returns:
            A new dict of settings (``rounds`` and parameter names -> values): a copy of
            ``QUICK`` unless the protocol overrides this method.
        """
        return dict(cls.QUICK)

    def __init__(self, dataset: RecDataset, config: ProtocolConfig, seed: int):
        """Keep the run's data, parameters and seed; a subclass derives its public values here.

        Args:
            dataset: The run's dataset, split into train and test.
            config: The run's parameters, built and checked by :func:`build_config`.
            seed: The run's seed; every node's RNG derives from it.

        Raises:
            ConfigError: (a subclass) a parameter that does not fit the data.
            ValueError: (a subclass) data the protocol cannot run on; the engine raises it as
                :class:`UnsuitableDataError`.
        """
        self.dataset = dataset
        self.config = config
        self.seed = seed

    def node_specs(self) -> list[NodeSpec]:
        """The run's participants, one per node.

        Returns:
            One :class:`nodes.deployment.NodeSpec` per node: its :class:`nodes.node.Node`
            subclass, its id (``cluster.message.node_id(role, index)``), the keyword arguments
            its constructor takes (its private data) and whether hosts may pack it with others of
            its class.

        Raises:
            NotImplementedError: The protocol does not implement it.
        """
        raise NotImplementedError

    def adversary_users(self) -> list[int]:
        """The real users an adversary condition counts and may compromise.

        Returns:
            The indices of the users that take part: every user of the dataset unless a protocol
            with ``ATTACKS`` says otherwise.
        """
        return list(range(self.dataset.n_users))

    def set_adversaries(self, condition) -> None:
        """Plan the run's adversaries before :meth:`node_specs`.

        Sets ``adversary_plan``: which users are fake or compromised, the target items, the
        defence; its ``threat`` reaches every node as ``Shared.threat``.

        Args:
            condition: The run's :class:`adversaries.condition.Adversaries`, or None for an
                honest run (``adversary_plan`` becomes None).

        Raises:
            AdversaryError: The protocol declares no ``ATTACKS``, it declares no class for the
                condition's attack, or the condition does not fit the data (a target item out
                of range, as many targets as items, ``er_k`` above the items).
        """
        from adversaries.condition import AdversaryError, plan_adversaries

        if condition is None:
            self.adversary_plan = None
            return
        if not self.ATTACKS:
            raise AdversaryError(
                f"adversaries: protocol {self.name} has no adversary roles or defences yet "
                "(see --help for the attacks and the protocols they run on)"
            )
        self.adversary_plan = plan_adversaries(self, condition, self.adversary_users())

    # What the protocol's server sums of its users' uploads (nodes.secure_sum.SecureSum, the same
    # object its server and user classes declare); None: it cannot run --secure-aggregation
    SECURE_SUM: ClassVar[Any] = None

    def check_secure_aggregation(self, setting) -> None:
        """Refuse ``--secure-aggregation`` where this run cannot sum its uploads securely.

        Args:
            setting: The run condition ``secure_aggregation``; None: not asked for (nothing to
                check).

        Raises:
            ConfigError: The protocol declares no ``SECURE_SUM`` (no server that sums its users'
                uploads), or the run's defence needs each upload.
        """
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
        """What every host receives, and every node reads as ``self.config`` and ``self.public``.

        Returns:
            A :class:`nodes.node.Shared` of the typed Config and the protocol's record of public
            values (a frozen dataclass in the protocol's config.py); by default the Config alone.
            The engine adds the run's ``threat``.
        """
        return Shared(self.config)

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        """Train one round: the round's supersteps (``dep.superstep(round_, phase, ...)``).

        The engine has already begun the round (:meth:`Deployment.begin_round
        <nodes.deployment.Deployment.begin_round>`: who is offline, snapshots).

        Args:
            dep: The running deployment of the nodes of :meth:`node_specs`.
            round_: The round's number, from 0.

        Returns:
            The round's training figures (name -> value), the ``train`` of its metrics.jsonl row.

        Raises:
            NotImplementedError: The protocol does not implement it.
        """
        raise NotImplementedError

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        """Measure the model after ``round_``: every ``eval_every`` rounds and after the last.

        Args:
            dep: The running deployment.
            round_: The round just trained, from 0.

        Returns:
            The metrics (name -> value), :meth:`main_metric`'s among them.

        Raises:
            NotImplementedError: The protocol does not implement it.
        """
        raise NotImplementedError

    def privacy(self) -> PrivacyReport:
        """The privacy the run has spent so far, asked after each round.

        Returns:
            A :class:`PrivacyReport`; :data:`NOT_PRIVATE` (no privacy mechanism) by default.
        """
        return NOT_PRIVATE

    def audits(self) -> list:
        """The privacy audits of this run's mechanism(s), which ``--audit`` runs after the run.

        Returns:
            One :class:`privacy.audit.Audit` per mechanism (its own code on the worst-case
            neighbours of its privacy unit, with this run's parameters, the accountant's figure
            of one release and the paper's claim; engine/audit.py runs them); an empty list by
            default: no mechanism to audit.
        """
        return []

    def main_metric(self) -> MainMetric:
        """The figure this run is judged by.

        Returns:
            A :class:`MainMetric`: Recall@K (K = ``eval_k``, higher is better) by default; a
            rating protocol returns RMSE (lower is better).
        """
        return MainMetric(f"recall@{self.config.eval_k}", "higher")

    def needs_negatives(self) -> bool:
        """Whether training samples negatives (BPR and its kin).

        Returns:
            True where every training user needs an item it has not interacted with, which
            :meth:`check_data` then checks; False by default.
        """
        return False

    def check_rounds(self, rounds: int) -> None:
        """Refuse a number of rounds this configuration cannot run, before Ray starts.

        The default accepts any number.

        Args:
            rounds: The rounds in all (a resumed run's too).

        Raises:
            ConfigError: (an override) too many rounds for the configuration; the message names
                the parameter.
        """

    def check_data(self) -> None:
        """Refuse data this protocol cannot run on, before Ray starts.

        The engine calls it after the constructor, whose own refusals come first, and raises its
        ValueError as :class:`UnsuitableDataError`. A protocol may extend it.

        Raises:
            ValueError: One line: the main metric ranks at K (``recall@``) and K is above the
                dataset's items, or :meth:`needs_negatives` and a training user has interacted
                with every item.
        """
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
    """Each dataclass field's one line of meaning, read from its class's source.

    A field's line of meaning is the comment that ends the line declaring it (or one of the three
    lines below, when a long default wraps); a subclass's comment wins over its base's.
    ``--help`` and the tutorial show these lines; a test holds every built-in protocol's fields
    documented.

    Args:
        cls: A dataclass (a protocol's Config), with its bases.

    Returns:
        Field name -> its comment without the ``#``; a field without one, or of a class whose
        source cannot be read, is left out.
    """
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
