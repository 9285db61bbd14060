"""The attacks PFedRec's clients can play (``PFedRec.ATTACKS``): compromised clients that train
honestly and change the update they upload, Ẽ_u − E, before it is encoded like an honest one.
Each class mixes one of privrec's protocol-free behaviours (``adversaries.attacks.poisoning``)
into the client role and is played by the clients the run's ``--adversaries`` compromises; the
server defends with the run's ``--defence`` (``roles.defended_mean``)."""

from adversaries.attacks import poisoning
from privrec_pfedrec.roles import PFedRecUser


class ByzantineScaled(poisoning.ByzantineScaled, PFedRecUser):
    """``byzantine-scaled``: a compromised client uploads E + scale·(Ẽ_u − E)."""


class ByzantineSignFlip(poisoning.ByzantineSignFlip, PFedRecUser):
    """``byzantine-signflip``: a compromised client uploads E − scale·(Ẽ_u − E)."""


class ByzantineRandom(poisoning.ByzantineRandom, PFedRecUser):
    """``byzantine-random``: Gaussian rows with the norms of its update's rows times scale."""
