"""dmf — decentralised BPR matrix factorisation over a user graph."""
