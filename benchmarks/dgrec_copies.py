"""How far apart DGREC's per-user copies are, and whether their mean ranks better: a diagnostic
of a DGREC run's checkpoint, offline (no Ray, no traffic; the operator reading the nodes' state).

    python -m benchmarks.dgrec_copies RUN_DIR --name dgrec-ciao-copies

Every DGREC user holds its own copy θ_u of the shared parameters and updates it with the decoded
mean of its neighbourhood's one-bit gradients (eq. 6), so copies drift apart by the noise they
received. For each parameter tensor it reports the root mean square of a copy, of the mean copy
θ̄ = mean_u θ_u (the consensus) and of the deviations θ_u − θ̄; then Recall@K of every user ranked
with its own copy (what the run reports) and with θ̄. A consensus that ranks far better would
mean the copies' noise, not the model, holds the run down. Last, the size of the local gradients
against the clip δ (``--gradient-users`` users, one draw of their pairs each): the one-bit code
carries clip(g, δ) with noise of standard deviation ≈ δ·coth(β/2) per element whatever g is, so
elements far below δ are sent at a signal-to-noise ratio of |g| / (δ·coth(β/2)).
"""

from __future__ import annotations

import argparse
import copy
import pickle
import types
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import WRITE_HELP, claim_result, write_result
from engine.checkpoint import load_checkpoint
from models.dgrec_factory import grad_vector
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


def gradient_sizes(users, clip: float) -> dict:
    """|g| per element of the users' local gradients of the shared parameters, against ``clip``."""
    grads = []
    for u in users:
        u._ensure_graph()
        u.model.zero_grad(set_to_none=True)
        loss, _ = u._loss()
        loss.backward()
        grads.append(grad_vector(u.shared_params).abs())
        u.model.zero_grad(set_to_none=True)
    g = torch.stack(grads)
    nonzero = g[g > 0]
    return {
        "users": len(users),
        "elements": g.shape[1],
        "share_zero": float((g == 0).float().mean()),
        "share_clipped": float((g > clip).float().mean()),
        "median_nonzero": float(nonzero.median()),
        "p90_nonzero": float(nonzero.quantile(0.9)),
        "clip": clip,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--name", required=True, help="benchmarks/out/<name>.json")
    ap.add_argument("--gradient-users", type=int, default=200)
    ap.add_argument("--write", action="store_true", help=WRITE_HELP)
    args = ap.parse_args()
    claim_result(args.name, write=args.write)
    state, users = users_of(args.run_dir)
    if not users or not hasattr(users[0], "shared_params"):
        raise SystemExit(f"dgrec_copies: {args.run_dir} is not a DGREC run's checkpoint")
    k = state["protocol"].config.eval_k
    consensus = copy.deepcopy(users[0].model)
    spread = {}
    per_user = [dict(u.model.named_parameters()) for u in users]
    with torch.no_grad():
        for name, param in consensus.named_parameters():
            copies = torch.stack([p[name] for p in per_user])
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
            "gradients": gradient_sizes(
                users[: args.gradient_users], state["protocol"].config.clip
            ),
        },
        write=args.write,
    )


if __name__ == "__main__":
    main()
