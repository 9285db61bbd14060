"""DIPSGNN (Hu & Fang): differentially private sequential recommendation with a noisy gated GNN,
in the trusted-curator model; the algorithm is in protocols/dipsgnn/protocol.py."""
