"""Protocols by name: the built-in ones, those installed packages register, and any protocol class
named by its import path.

    get_protocol("fedmf")                        # built in
    get_protocol("pfedrec")                      # an installed package's, by entry point
    get_protocol("my_package.protocol:MyProto")  # any importable Protocol subclass

An installed package registers its protocols in the ``privrec.protocols`` entry-point group
(``[project.entry-points."privrec.protocols"] myproto = "my_package.protocol:MyProto"``); they
then appear wherever the built-in ones do (``--help``, ``compare``, the main job's list when
asked for). A module is imported only when its protocol is asked for.
"""

from __future__ import annotations

import importlib
from importlib import metadata

ENTRY_POINT_GROUP = "privrec.protocols"

BUILTIN: dict[str, str] = {
    "fedmf": "protocols.fedmf.protocol:FedMF",
    "dmf": "protocols.dmf.protocol:DMF",
    "dgrec": "protocols.dgrec.protocol:DGREC",
    "dlgnn": "protocols.dlgnn.protocol:DLGNN",
    "ping": "protocols.ping:Ping",
    "echo": "protocols.echo:Echo",
    "fedpergnn": "protocols.fedpergnn.protocol:FedPerGNN",
    "fedlightgcn": "protocols.fedpergnn.protocol:FedLightGCN",
    "dipsgnn": "protocols.dipsgnn.protocol:DIPSGNNProtocol",
    "verfedgnn": "protocols.verfedgnn.protocol:VerFedGNN",
    "central": "protocols.central.protocol:Central",
}
# every registered protocol, name -> "module:Class": the built-in ones and, once
# :func:`protocol_names` or :func:`get_protocol` has looked, the installed packages' ones
PROTOCOLS: dict[str, str] = dict(BUILTIN)
DEFAULT_PROTOCOL = "fedmf"
# the protocols the main job compares (`python launch.py`); their central baselines are added
DEFAULT_COMPARISON: tuple[str, ...] = ("fedmf", "fedlightgcn", "dgrec", "verfedgnn", "dipsgnn")

_scanned = False


class UnknownProtocolError(ValueError):
    """A protocol name that is neither registered nor an importable ``module:Class``.

    Also raised for a registered or given ``module:Class`` that cannot be imported or is not a
    :class:`protocols.base.Protocol` subclass; the message names the protocol.
    """


def _scan_entry_points() -> None:
    """Add the installed packages' ``privrec.protocols`` entry points to :data:`PROTOCOLS`, once.

    A name already registered (a built-in one, or an earlier entry point's) keeps its class.
    Nothing is imported: an entry point is kept as its ``module:Class`` text.
    """
    global _scanned
    if _scanned:
        return
    _scanned = True
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        PROTOCOLS.setdefault(ep.name, ep.value)


def protocol_names() -> list[str]:
    """Every protocol that runs by name: built in and registered by installed packages.

    Returns:
        The names, sorted. Looking them up reads the installed packages' entry points (once per
        process) but imports no protocol module.
    """
    _scan_entry_points()
    return sorted(PROTOCOLS)


def is_import_path(name: str) -> bool:
    """Whether ``name`` is a class's import path rather than a registered name.

    Args:
        name: A protocol name as given (``--protocol``, ``compare --protocols``).

    Returns:
        True for ``package.module:Class``: a dotted module, a colon, an identifier.
    """
    module, colon, attr = name.partition(":")
    return bool(colon) and "." in module and attr.isidentifier()


def get_protocol(name: str):
    """The Protocol class called ``name``, imported on first use.

    Args:
        name: A registered name (built in, or an installed package's entry point) or an import
            path ``package.module:Class``.

    Returns:
        The :class:`protocols.base.Protocol` subclass.

    Raises:
        UnknownProtocolError: ``name`` is neither registered nor an import path (the message
            lists the known names), its module or class cannot be imported, or the class is not
            a :class:`protocols.base.Protocol` subclass.
    """
    from protocols.base import Protocol

    if is_import_path(name):
        target = name
    else:
        _scan_entry_points()
        if name not in PROTOCOLS:
            raise UnknownProtocolError(
                f"unknown protocol {name!r} (known: {', '.join(sorted(PROTOCOLS))}; "
                "or give a class as package.module:Class)"
            )
        target = PROTOCOLS[name]
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise UnknownProtocolError(f"protocol {name!r}: cannot import {target} ({e})") from None
    if not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise UnknownProtocolError(f"protocol {name!r}: {target} is not a protocols.base.Protocol")
    return cls
