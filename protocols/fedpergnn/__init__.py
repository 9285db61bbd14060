"""FedPerGNN and FedLightGCN: config.py (parameters), messages.py (payloads), roles.py and gat.py
(the nodes), protocol.py (the driver, as the papers' algorithm)."""
