"""The attacks in FedPerGNN/FedLightGCN: classes playing :class:`protocols.fedpergnn.roles.User`
(behaviours in adversaries/attacks/poisoning.py and malformed.py). Fake users take part in
everything honest users do (item tokens with the key server, graph expansion at the matcher), with
their made-up profile. The upload is changed in ``tamper_upload``, which the LightGCN backbone
calls after the protocol's clipping, pseudo items and Laplace noise and before
``messages.encode_item_grads``: the target rows of the model-poisoning attacks and every row of a
Byzantine upload skip the noise (an adversary need not perturb; the server cannot tell). With the
GAT backbone only the data-poisoning attacks change anything (its rating uploads have no tamper
step)."""

from adversaries.attacks import malformed, poisoning
from protocols.fedpergnn.roles import User


class RandomFake(poisoning.RandomFake, User):
    """``random``: a fake user, targets plus random fillers (poisoning.RandomFake)."""


class BandwagonFake(poisoning.BandwagonFake, User):
    """``bandwagon``: a fake user, targets plus popular fillers (poisoning.BandwagonFake)."""


class FedRecAttack(poisoning.FedRecAttack, User):
    """``fedrecattack``: target rows that lift the targets into approximated users' top K."""


class PipAttack(poisoning.PipAttack, User):
    """``pipattack``: target rows pulled towards the popular items' centroid."""


class ByzantineScaled(poisoning.ByzantineScaled, User):
    """``byzantine-scaled``: a compromised user's honest upload times ``scale``."""


class ByzantineSignFlip(poisoning.ByzantineSignFlip, User):
    """``byzantine-signflip``: a compromised user's honest upload times −``scale``."""


class ByzantineRandom(poisoning.ByzantineRandom, User):
    """``byzantine-random``: Gaussian rows with the honest rows' norms times ``scale``."""


class Malformed(malformed.Malformed, User):
    """``malformed``: a compromised user that adds hostile messages to its honest ones."""
