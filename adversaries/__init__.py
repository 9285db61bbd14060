"""Adversaries as a run condition: fake or compromised participants that play
a protocol's role with their own behaviour, the defences of the aggregating role, and the
exposure of the target items among honest users.

- ``condition.py``: the typed condition (:class:`Adversaries`), who is an adversary (from
  (seed, node id), so placement never changes it), the target items, and the plan a protocol
  builds its node specs from (:class:`AdversaryPlan`) and the record its nodes read
  (:class:`Threat`, ``Shared.threat``);
- ``defences.py``: robust aggregation rules (norm bounding, coordinate-wise median, trimmed mean,
  (Multi-)Krum) as pure functions, and their application to row-sparse uploads;
- ``attacks/``: the catalogue of attacks (:data:`attacks.ATTACKS`) and the protocol-free
  behaviours that a protocol's attack classes mix in (poisoning, malformed messages);
- ``graph.py``: fake peers joined to a decentralized protocol's user graph.

No Ray here, and no protocol: a protocol opts in by declaring ``ATTACKS`` (attack name → its class
in the protocol's own package) and building its specs from ``self.adversary_plan``.
"""

from adversaries.condition import (
    Adversaries,
    AdversaryError,
    AdversaryPlan,
    Threat,
    plan_adversaries,
)

__all__ = ["AdversaryError", "Adversaries", "AdversaryPlan", "Threat", "plan_adversaries"]
