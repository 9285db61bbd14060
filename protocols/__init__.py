"""Protocols by name. Each module is imported only when its protocol is asked for."""

from __future__ import annotations

import importlib

PROTOCOLS: dict[str, str] = {
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
DEFAULT_PROTOCOL = "fedmf"


def get_protocol(name: str):
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r} (known: {', '.join(sorted(PROTOCOLS))})")
    module, attr = PROTOCOLS[name].split(":")
    return getattr(importlib.import_module(module), attr)
