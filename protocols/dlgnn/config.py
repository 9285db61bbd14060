"""DLGNN's parameters: DGREC's (protocols/dgrec/config.py, also its public-values record
``DGRECPublic``) with the defaults of the baseline — the LightGCN user model, raw float
gradients, no publicized items."""

from __future__ import annotations

import dataclasses

from protocols.dgrec.config import DGRECConfig


@dataclasses.dataclass
class DLGNNConfig(DGRECConfig):
    model: str = "lightgcn"
    mechanism: str = "float"
    use_public: bool = False
