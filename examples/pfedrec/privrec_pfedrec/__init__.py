"""pfedrec — PFedRec (Zhang et al., IJCAI 2023) as a privrec protocol in a package of its own:
config.py (parameters and public values), messages.py (payloads), roles.py (the server and the
clients), protocol.py (the round, step by step). Installed, it registers itself in the
``privrec.protocols`` entry-point group (pyproject.toml): ``privrec --protocol pfedrec``."""
