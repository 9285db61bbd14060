"""fedmf — federated BPR matrix factorisation: config.py (parameters and public values),
messages.py (payloads), roles.py (the server and the users), protocol.py (the round, step by
step)."""
