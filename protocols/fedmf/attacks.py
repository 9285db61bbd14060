"""The attacks in fedmf: classes playing :class:`protocols.fedmf.roles.FedMFUser` (behaviours in
adversaries/attacks/poisoning.py and malformed.py). The upload is changed in ``tamper_upload``,
which ``FedMFUser._train`` calls just before ``messages.encode_item_grads``; fedmf adds no noise,
so there is none to skip."""

from adversaries.attacks import malformed, poisoning
from protocols.fedmf.roles import FedMFUser


class RandomFake(poisoning.RandomFake, FedMFUser):
    """``random``: a fake user, targets plus random fillers (poisoning.RandomFake)."""


class BandwagonFake(poisoning.BandwagonFake, FedMFUser):
    """``bandwagon``: a fake user, targets plus popular fillers (poisoning.BandwagonFake)."""


class FedRecAttack(poisoning.FedRecAttack, FedMFUser):
    """``fedrecattack``: target rows that lift the targets into approximated users' top K."""


class PipAttack(poisoning.PipAttack, FedMFUser):
    """``pipattack``: target rows pulled towards the popular items' centroid."""


class ByzantineScaled(poisoning.ByzantineScaled, FedMFUser):
    """``byzantine-scaled``: a compromised user's honest upload times ``scale``."""


class ByzantineSignFlip(poisoning.ByzantineSignFlip, FedMFUser):
    """``byzantine-signflip``: a compromised user's honest upload times −``scale``."""


class ByzantineRandom(poisoning.ByzantineRandom, FedMFUser):
    """``byzantine-random``: Gaussian rows with the honest rows' norms times ``scale``."""


class Malformed(malformed.Malformed, FedMFUser):
    """``malformed``: a compromised user that adds hostile messages to its honest ones."""
