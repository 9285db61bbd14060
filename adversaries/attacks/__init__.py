"""The attacks: name → what it does, how its adversaries join, its parameters, and the class that
plays it in each protocol family (a protocol's ``ATTACK_FAMILY``). ``--help`` lists them.

An attack class subclasses the protocol's user role and overrides the step that produces the
upload (fedmf: ``upload_item_grads``; FedPerGNN/FedLightGCN: ``perturb_upload``), so its upload
goes through the protocol's own encoder; it reports no evaluation figures. In VerFedGNN the
adversaries are compromised *parties* (verfedgnn.py: crafted aggregates and gradients, within the
ternary code); in DIPSGNN fake users whose uploads are outputs of the LDP mechanism (dipsgnn.py).
In dmf and DGREC/DLGNN the step is the one that produces what a peer gossips (dmf.py:
``tamper_upload``, before ``encode_item_grads``; dgrec.py: ``encode_own``, the share's eq.-5 code),
and fake peers befriend real users in the user graph (adversaries/graph.py).
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
    impls: Mapping[str, str] = field(default_factory=dict)  # ATTACK_FAMILY -> "module:Class"


def _impls(cls: str) -> dict[str, str]:
    return {
        "fedmf": f"adversaries.attacks.fedmf:{cls}",
        "fedpergnn": f"adversaries.attacks.fedpergnn:{cls}",
        "dmf": f"adversaries.attacks.dmf:{cls}",
        **({"dgrec": f"adversaries.attacks.dgrec:{cls}"} if cls in _DGREC else {}),
    }


# DGREC/DLGNN's attacks (adversaries/attacks/dgrec.py); FedRecAttack's promotion loss assumes
# dot-product scores, which DGREC's MLP scorer does not have: not there yet
_DGREC = {
    "RandomFake",
    "BandwagonFake",
    "PipAttack",
    "ByzantineScaled",
    "ByzantineSignFlip",
    "ByzantineRandom",
}


POPULAR = {"popular_share": (float, 0.1, "share of items, most popular first, called popular")}
ATTACKS: dict[str, Attack] = {
    "random": Attack(
        "fake users whose profile is the targets and random filler items; then honest",
        "fake",
        "random attack, Lam & Riedl (WWW 2004)",
        {},
        _impls("RandomFake"),
    ),
    "bandwagon": Attack(
        "fake users whose profile is the targets and popular filler items; then honest",
        "fake",
        "bandwagon attack, Mobasher et al. (ACM TOIT 2007)",
        POPULAR,
        _impls("BandwagonFake"),
    ),
    "fedrecattack": Attack(
        "fake users upload target-row gradients that lift the targets into the top K of users "
        "approximated from public interactions, at the norm of their own honest rows",
        "fake",
        "FedRecAttack, Rong et al. (ICDE 2022)",
        {"public_fraction": (float, 0.1, "share of every user's interactions that is public")},
        _impls("FedRecAttack"),
    ),
    "pipattack": Attack(
        "fake users upload target-row gradients that pull the targets towards the popular "
        "items' embeddings, at the norm of their own honest rows",
        "fake",
        "PipAttack, Zhang et al. (WSDM 2022)",
        POPULAR,
        _impls("PipAttack"),
    ),
    "byzantine-scaled": Attack(
        "compromised users upload their honest update times scale",
        "compromised",
        "Byzantine updates, Blanchard et al. (NeurIPS 2017)",
        {"scale": (float, 10.0, "multiplier of the honest update")},
        _impls("ByzantineScaled"),
    ),
    "byzantine-signflip": Attack(
        "compromised users upload their honest update times -scale",
        "compromised",
        "sign flipping, Damaskinos et al. (ICML 2018)",
        {"scale": (float, 1.0, "multiplier of the flipped update")},
        _impls("ByzantineSignFlip"),
    ),
    "byzantine-random": Attack(
        "compromised users upload Gaussian rows with their honest rows' norms times scale",
        "compromised",
        "random Byzantine updates, Blanchard et al. (NeurIPS 2017)",
        {"scale": (float, 1.0, "multiplier of the honest rows' norms")},
        _impls("ByzantineRandom"),
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
        {
            family: f"adversaries.attacks.{family}:Malformed"
            for family in ("fedmf", "fedpergnn", "dmf", "dgrec", "verfedgnn", "dipsgnn")
        },
    ),
}

# the protocols whose adversaries are not row-sparse uploaders: VerFedGNN's compromised parties
# (attacks/verfedgnn.py: crafted aggregates and ternary gradients) and DIPSGNN's fake users
# (attacks/dipsgnn.py: crafted sequences, features drawn through the LDP mechanism)
for _family, _classes in (
    (
        "verfedgnn",
        {
            "byzantine-scaled": "ByzantineScaled",
            "byzantine-signflip": "ByzantineSignFlip",
            "byzantine-random": "ByzantineRandom",
        },
    ),
    ("dipsgnn", {"random": "RandomFake", "bandwagon": "BandwagonFake"}),
):
    for _name, _cls in _classes.items():
        ATTACKS[_name].impls[_family] = f"adversaries.attacks.{_family}:{_cls}"


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


def families() -> list[str]:
    return sorted({f for a in ATTACKS.values() for f in a.impls})


def attack_class(name: str, protocol) -> type:
    """The class that plays attack ``name`` in ``protocol`` (by its ``ATTACK_FAMILY``)."""
    from adversaries.condition import AdversaryError

    family = getattr(protocol, "ATTACK_FAMILY", None)
    target = ATTACKS[name].impls.get(family) if family else None
    if target is None:
        raise AdversaryError(
            f"attack: {name} has no adversary role in protocol {protocol.name} yet (attack "
            f"families: {', '.join(families())})"
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
