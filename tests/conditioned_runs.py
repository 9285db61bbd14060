"""Runs of a bare deployment under run conditions, for the protocol-specific dropout tests
(support code, not a test file)."""

from __future__ import annotations

import json

from engine import deploy
from engine.loop import rounds


def drive(proto, conditions, n_rounds: int, placement="packed", hosts=1, tap=False) -> dict:
    """The runner's loop on a bare deployment: per round the train figures, who was dropped and
    the bytes by kind; then one evaluation after the last round."""
    dep = deploy(proto, placement, hosts, tap=tap, conditions=conditions)
    try:
        rows, metrics = [], None
        for res in rounds(proto, dep, n_rounds, eval_every=0):  # evaluated after the last
            rows.append(
                {
                    "train": res.train,
                    "dropped": res.stats.dropped,
                    "bytes_by_kind": dep.ledger.by_kind(round_=res.round),
                }
            )
            metrics = res.metrics
        assert not dep.has_pending()
        return {"protocol": proto, "rows": rows, "metrics": metrics, "tapped": dep.tapped}
    finally:
        dep.close()


def same(a, b) -> bool:
    """Equal, NaN included (a round without a loss report has loss NaN)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
