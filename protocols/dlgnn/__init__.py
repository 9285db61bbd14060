"""DLGNN, the decentralised LightGCN baseline of DGREC's paper: the algorithm is in
protocols/dlgnn/protocol.py, its parameters in config.py; it reuses DGREC's messages and roles."""
