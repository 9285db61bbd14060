"""dlgnn — the DLGNN baseline of DGREC's paper: decentralised LightGCN, users as peers.

The same choreography as protocols/dgrec/protocol.py (eq.-4 neighbourhood sampling by messages,
gossip of every member's gradient for 2H steps along the sampled tree, each member applying the
mean), with two differences:

* the local model is LightGCN on the user's ego graph u – I_u (protocols/dgrec/model.py DLGNNUserModel):
  a private user embedding that never leaves the user, and a copy of the item table whose
  gradients are the shared vector (n_s = n_items · d); no publicized items are used or sent;
* the shared gradients are raw float32 vectors (``mechanism = "float"``, no privacy), or clipped to
  [−δ, δ] (δ = ``clip``) with Laplace(λ) noise added (``mechanism = "laplace"``, λ = 2δ/β by
  default: ε = β per element, as DGREC's one-bit encoder) — "DLGNN with Laplace noise".

Absent peers are handled as in DGREC (protocols/dgrec/protocol.py): only reachable neighbours are
sampled, and each member averages the gradients that reached it.

    python launch.py --protocol dlgnn --dataset ml-100k --rounds 100 [--mechanism laplace]
"""

from __future__ import annotations

from protocols.dgrec.protocol import DGREC
from protocols.dlgnn.config import DLGNNConfig


class DLGNN(DGREC):
    """DGREC's driver, roles and messages (protocols/dgrec/) with DLGNN's defaults."""

    name = "dlgnn"
    Config = DLGNNConfig
    QUICK = {}  # not in the main job
    PAPER = None  # a baseline of DGREC's paper, not a paper of its own
