"""What every protocol gives the runner: its parameters, its nodes, and its round choreography.

A protocol is a plain class: ``node_specs()`` says which participants exist and with what private
data, ``shared()`` the typed records every host receives (the Config and the protocol's public values), ``run_round`` drives one round
as supersteps of a :class:`nodes.deployment.Deployment` and returns training figures,
``evaluate`` returns accuracy figures, and ``privacy`` the privacy spent so far.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
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


class Protocol:
    name: ClassVar[str]
    Config: ClassVar[type[ProtocolConfig]] = ProtocolConfig

    def __init__(self, dataset: RecDataset, config: ProtocolConfig, seed: int):
        self.dataset = dataset
        self.config = config
        self.seed = seed

    def node_specs(self) -> list[NodeSpec]:
        raise NotImplementedError

    def shared(self) -> Shared:
        """What every host receives: the typed Config and the protocol's record of public values
        (a frozen dataclass in the protocol's config.py); nodes read ``self.config`` and
        ``self.public``."""
        return Shared(self.config)

    def run_round(self, dep: Deployment, round_: int) -> dict[str, float]:
        raise NotImplementedError

    def evaluate(self, dep: Deployment, round_: int) -> dict[str, float]:
        raise NotImplementedError

    def privacy(self) -> dict:
        return {}


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
