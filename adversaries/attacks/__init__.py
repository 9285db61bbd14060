"""The catalogue of attacks: name → what it does, how its adversaries join, its paper and its
parameters. ``--help`` lists them.

A protocol declares which attacks its roles can play, and with which classes, in its ``ATTACKS``
(attack name → ``"module:Class"``, as it declares ``PAPER`` and ``QUICK``); the classes live in the
protocol's own package (``protocols/fedmf/attacks.py``, a plugin's ``attacks.py``). An attack class
subclasses the protocol's participant role and overrides the step that produces the upload
(fedmf, dmf, FedPerGNN/FedLightGCN: ``tamper_upload``; DGREC: ``encode_own``; VerFedGNN's
compromised parties: ``tamper_aggregates``/``tamper_gradient``), so its upload goes through the
protocol's own encoder; it reports no evaluation figures. The protocol-free behaviours they mix in
are here: :mod:`adversaries.attacks.poisoning` (data and model poisoning of row-sparse uploads),
:mod:`adversaries.attacks.common` (their building blocks) and :mod:`adversaries.attacks.malformed`
(hostile messages). Nothing in this package imports a protocol.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Attack:
    summary: str
    joins: str  # "fake": extra users; "compromised": real users taken over
    paper: str
    params: Mapping[str, tuple[type, Any, str]] = field(default_factory=dict)


POPULAR = {"popular_share": (float, 0.1, "share of items, most popular first, called popular")}
ATTACKS: dict[str, Attack] = {
    "random": Attack(
        "fake users whose profile is the targets and random filler items; then honest",
        "fake",
        "random attack, Lam & Riedl (WWW 2004)",
        {},
    ),
    "bandwagon": Attack(
        "fake users whose profile is the targets and popular filler items; then honest",
        "fake",
        "bandwagon attack, Mobasher et al. (ACM TOIT 2007)",
        POPULAR,
    ),
    "fedrecattack": Attack(
        "fake users upload target-row gradients that lift the targets into the top K of users "
        "approximated from public interactions, at the norm of their own honest rows",
        "fake",
        "FedRecAttack, Rong et al. (ICDE 2022)",
        {"public_fraction": (float, 0.1, "share of every user's interactions that is public")},
    ),
    "pipattack": Attack(
        "fake users upload target-row gradients that pull the targets towards the popular "
        "items' embeddings, at the norm of their own honest rows",
        "fake",
        "PipAttack, Zhang et al. (WSDM 2022)",
        POPULAR,
    ),
    "byzantine-scaled": Attack(
        "compromised users upload their honest update times scale",
        "compromised",
        "Byzantine updates, Blanchard et al. (NeurIPS 2017)",
        {"scale": (float, 10.0, "multiplier of the honest update")},
    ),
    "byzantine-signflip": Attack(
        "compromised users upload their honest update times -scale",
        "compromised",
        "sign flipping, Damaskinos et al. (ICML 2018)",
        {"scale": (float, 1.0, "multiplier of the flipped update")},
    ),
    "byzantine-random": Attack(
        "compromised users upload Gaussian rows with their honest rows' norms times scale",
        "compromised",
        "random Byzantine updates, Blanchard et al. (NeurIPS 2017)",
        {"scale": (float, 1.0, "multiplier of the honest rows' norms")},
    ),
    "malformed": Attack(
        "compromised participants add hostile messages to their honest ones: forged senders, "
        "writes to nodes they may not address, inflated declared lengths, truncated payloads, "
        "out-of-range RSA values, unordered tokens (a security review's checklist)",
        "compromised",
        "malformed inputs (adversaries/attacks/malformed.py)",
        {
            "share": (
                float,
                1.0,
                "share of (round, adversary) pairs that send hostile messages (0: a control "
                "run whose adversaries are honest but not evaluated)",
            )
        },
    ),
}

# the name of the class that plays each attack in a protocol's attack module, by convention (the
# names of adversaries/attacks/poisoning.py and malformed.py, which those classes mix in)
CLASS_NAMES = {
    "random": "RandomFake",
    "bandwagon": "BandwagonFake",
    "fedrecattack": "FedRecAttack",
    "pipattack": "PipAttack",
    "byzantine-scaled": "ByzantineScaled",
    "byzantine-signflip": "ByzantineSignFlip",
    "byzantine-random": "ByzantineRandom",
    "malformed": "Malformed",
}


def declared_in(module: str, *names: str) -> dict[str, str]:
    """A protocol's ``ATTACKS`` when ``module`` defines, for each attack it plays, the class named
    in :data:`CLASS_NAMES` (every attack of the catalogue unless ``names`` picks some).

    Args:
        module: the protocol's attack module, e.g. ``"protocols.fedmf.attacks"``.
        *names: the attacks it plays (default: every one of :data:`CLASS_NAMES`).

    Returns:
        attack name → ``"module:Class"``.
    """
    return {n: f"{module}:{CLASS_NAMES[n]}" for n in (names or CLASS_NAMES)}


def typed_params(name: str, values) -> dict[str, Any]:
    """Attack ``name``'s parameters from ``values`` (a mapping or (name, value) pairs), typed and
    with defaults filled in; an unknown name is an AdversaryError."""
    from adversaries.condition import AdversaryError

    values = dict(values)
    spec = ATTACKS[name].params
    unknown = sorted(set(values) - set(spec))
    if unknown:
        known = ", ".join(spec) or "none"
        raise AdversaryError(f"params: attack {name} has no {unknown[0]!r} (known: {known})")
    out = {}
    for key, (kind, default, _) in spec.items():
        try:
            out[key] = kind(values.get(key, default))
        except (TypeError, ValueError):
            raise AdversaryError(f"params: {key}: expected {kind.__name__}") from None
        if out[key] < 0:
            raise AdversaryError(f"params: {key}: must be >= 0, got {out[key]}")
    if "public_fraction" in out and not 0 < out["public_fraction"] <= 1:
        raise AdversaryError("params: public_fraction: must be in (0, 1]")
    if "share" in out and not 0 <= out["share"] <= 1:
        raise AdversaryError("params: share: must be in [0, 1]")
    if "popular_share" in out and not 0 < out["popular_share"] <= 1:
        raise AdversaryError("params: popular_share: must be in (0, 1]")
    return out


def attack_class(name: str, protocol) -> type:
    """The class that plays attack ``name`` in ``protocol``.

    Args:
        name: an attack of :data:`ATTACKS`.
        protocol: a protocol (class or instance) whose ``ATTACKS`` maps attack names to
            ``"module:Class"``.

    Returns:
        The attack class, imported.

    Raises:
        AdversaryError: the protocol declares no class for ``name``.
    """
    from adversaries.condition import AdversaryError

    target = getattr(protocol, "ATTACKS", {}).get(name)
    if target is None:
        played = ", ".join(getattr(protocol, "ATTACKS", {})) or "none"
        raise AdversaryError(
            f"attack: {name} has no adversary role in protocol {protocol.name} yet (its attacks: "
            f"{played})"
        )
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def describe() -> str:
    """One line per attack, for --help."""
    lines = []
    for name, a in ATTACKS.items():
        ps = ", ".join(f"{k}={v[1]:g}" for k, v in a.params.items())
        lines.append(f"  {name:<18} [{a.joins}] {a.summary} ({a.paper}){'; ' + ps if ps else ''}")
    return "\n".join(lines)
