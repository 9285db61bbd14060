"""How far apart DGREC's per-user copies are, and whether their mean ranks better: a diagnostic
of a DGREC run's checkpoint, offline (no Ray, no traffic; the operator reading the nodes' state).

    python -m benchmarks.dgrec_copies RUN_DIR --name dgrec-ciao-copies

Every DGREC user holds its own copy θ_u of the shared parameters and updates it with the decoded
mean of its neighbourhood's one-bit gradients (eq. 6), so copies drift apart by the noise they
received. For each parameter tensor it reports the root mean square of a copy, of the mean copy
θ̄ = mean_u θ_u (the consensus) and of the deviations θ_u − θ̄; then Recall@K of every user ranked
with its own copy (what the run reports) and with θ̄. A consensus that ranks far better would
mean the copies' noise, not the model, holds the run down.
"""

from __future__ import annotations

import argparse
import copy
import pickle
import types
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import write_result
from engine.checkpoint import load_checkpoint
from models.metrics import ranking_metrics, topk_excluding
from protocols.dgrec.ranking import scores


def users_of(run_dir: Path):
    """(checkpoint state, every DGREC user node of the checkpoint, ready to rank)."""
    state = load_checkpoint(run_dir)
    protocol = state["protocol"]
    ctx = types.SimpleNamespace(
        shared=protocol.shared(), device=torch.device("cpu"), seed=protocol.seed
    )
    users = []
    for blob in state["deployment"]["hosts"]:
        for nid, node in sorted(pickle.loads(blob)["nodes"].items()):
            if nid.startswith("user"):
                node.ctx = ctx
                users.append(node)
    return state, users


def recall(users, model_of, k: int, chunk: int = 128) -> float:
    """Mean Recall@k over users with test items, each ranked by ``model_of(user)``."""
    judged = [u for u in users if len(u.test_items)]
    values = []
    for start in range(0, len(judged), chunk):
        part = judged[start : start + chunk]
        for u in part:
            u._ensure_graph()
        exclude = [np.concatenate([u.train_items, u.valid_items]) for u in part]
        top = topk_excluding(scores(part, [model_of(u) for u in part]), exclude, k)
        values.append(
            np.asarray(ranking_metrics(top, [u.test_items for u in part], (k,))[f"recall@{k}"])
        )
    return float(np.concatenate(values).mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--name", required=True, help="benchmarks/out/<name>.json")
    args = ap.parse_args()
    state, users = users_of(args.run_dir)
    if not users or not hasattr(users[0], "shared_params"):
        raise SystemExit(f"dgrec_copies: {args.run_dir} is not a DGREC run's checkpoint")
    k = state["protocol"].config.eval_k
    consensus = copy.deepcopy(users[0].model)
    spread = {}
    with torch.no_grad():
        for name, param in consensus.named_parameters():
            copies = torch.stack([dict(u.model.named_parameters())[name] for u in users])
            mean = copies.mean(0)
            param.copy_(mean)
            spread[name] = {
                "elements": mean.numel(),
                "copy_rms": float(copies.square().mean().sqrt()),
                "consensus_rms": float(mean.square().mean().sqrt()),
                "deviation_rms": float((copies - mean).square().mean().sqrt()),
            }
    own = recall(users, lambda u: u.model if u.best_model is None else u.best_model, k)
    write_result(
        args.name,
        {
            "run_dir": str(args.run_dir),
            "round": state["next_round"],
            "users": len(users),
            "parameters": spread,
            f"recall@{k}_own_copies": own,
            f"recall@{k}_consensus": recall(users, lambda u: consensus, k),
        },
    )


if __name__ == "__main__":
    main()
