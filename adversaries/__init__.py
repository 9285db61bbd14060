"""Adversaries as a run condition (issue 26, items 3–5): fake or compromised participants that play
a protocol's role with their own behaviour, the defences of the aggregating role, and the
exposure of the target items among honest users.

- ``condition.py``: the typed condition (:class:`Adversaries`), who is an adversary (from
  (seed, node id), so placement never changes it), the target items, and the plan a protocol
  builds its node specs from (:class:`AdversaryPlan`) and the record its nodes read
  (:class:`Threat`, ``Shared.threat``);
- ``defences.py``: robust aggregation rules (norm bounding, coordinate-wise median, trimmed mean,
  (Multi-)Krum) as pure functions, and their application to row-sparse uploads;
- ``attacks/``: the attack classes per protocol family, listed in :data:`attacks.ATTACKS`.

No Ray here; protocols opt in by declaring ``ATTACK_FAMILY`` and building their specs from
``self.adversary_plan``.
"""

from adversaries.condition import (
    Adversaries,
    AdversaryError,
    AdversaryPlan,
    Threat,
    plan_adversaries,
)

__all__ = ["AdversaryError", "Adversaries", "AdversaryPlan", "Threat", "plan_adversaries"]
