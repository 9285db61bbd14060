"""fedmf — federated BPR matrix factorisation."""

from protocols.fedmf.protocol import evaluate_users

__all__ = ["evaluate_users"]
