"""central — the non-private centralized baselines as a protocol: config.py (parameters, model
defaults, the check that a model fits the dataset), roles.py (the curator), protocol.py (the
round). The trainers are models/'s (models/central.py picks one by model name)."""
