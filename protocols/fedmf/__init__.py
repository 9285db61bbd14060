"""fedmf — federated BPR matrix factorisation: config.py (parameters and public values),
messages.py (payloads), roles.py (the server and the users), protocol.py (the round, step by
step)."""

# the on-device ranking evaluation lives in protocols/evaluation.py; protocols/fedpergnn/roles.py
# still imports it from here
from protocols.evaluation import evaluate_users

__all__ = ["evaluate_users"]
