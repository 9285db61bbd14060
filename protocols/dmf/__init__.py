"""dmf — decentralised BPR matrix factorisation over a user graph: config.py (parameters and
public values), messages.py (payloads), roles.py (the user), protocol.py (the round, step by
step)."""
