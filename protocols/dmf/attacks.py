"""The attacks in dmf: classes playing :class:`protocols.dmf.roles.DMFUser` (behaviours in
adversaries/attacks/poisoning.py and common.py). What a peer gossips is changed in
``tamper_upload``, which ``DMFUser._train`` calls after its own local step and just before
``messages.encode_item_grads``: the crafted item
gradients travel, are relayed and are applied like any peer's. Fake peers join the user graph
with links to real users (adversaries/graph.py); every adversary relays the others' gradients
honestly.

FedRecAttack is dmf's own: dmf scores p_u·q_i + b_i with the item bias as Q's last column
against a constant 1 in p_u, so the approximated users' factors end in that 1 (the mean of their
public items' rows, last entry 1: ``common.promotion_rows(..., bias_column=True)``), and the
promotion gradient lifts the targets' biases too."""

import numpy as np

from adversaries.attacks import common, malformed, poisoning
from protocols.dmf.roles import DMFUser


class RandomFake(poisoning.RandomFake, DMFUser):
    """``random``: a fake peer, targets plus random fillers (poisoning.RandomFake)."""


class BandwagonFake(poisoning.BandwagonFake, DMFUser):
    """``bandwagon``: a fake peer, targets plus popular fillers (poisoning.BandwagonFake)."""


class PipAttack(poisoning.PipAttack, DMFUser):
    """``pipattack``: target rows pulled towards the popular items' centroid."""


class ByzantineScaled(poisoning.ByzantineScaled, DMFUser):
    """``byzantine-scaled``: a compromised peer's honest gradient times ``scale``."""


class ByzantineSignFlip(poisoning.ByzantineSignFlip, DMFUser):
    """``byzantine-signflip``: a compromised peer's honest gradient times −``scale``."""


class ByzantineRandom(poisoning.ByzantineRandom, DMFUser):
    """``byzantine-random``: Gaussian rows with the honest rows' norms times ``scale``."""


class FedRecAttack(common.TargetRowsAdversary, DMFUser):
    """Model poisoning, FedRecAttack (Rong et al., ICDE 2022), in dmf: a fake peer gossips, for
    the targets, the gradient of a loss that lifts them into the top K of the users approximated
    from the public interactions (``common.promotion_rows`` with the bias column), at the norm of
    its own honest rows; the rest of what it gossips is honest, on a random fake profile."""

    def target_rows(self, table):
        return common.promotion_rows(table, self.knowledge, self.threat.er_k, bias_column=True)

    def tamper_upload(self, ids, rows, table):
        """The target rows at the norm of its whole honest gradient (not of one row): a dmf peer
        applies every row it receives, so the crafted share spends the length of an honest share
        on the targets; the other rows stay honest."""
        out_ids, out = super().tamper_upload(ids, rows, table)
        norm = float(np.linalg.norm(np.asarray(rows, dtype=np.float64)))
        for t in self.knowledge.targets:
            at = np.flatnonzero(out_ids == t)[:1]
            r = out[at].astype(np.float64)
            if len(at) and np.linalg.norm(r) > 0:
                out[at] = (r * norm / np.linalg.norm(r)).astype(np.float32)
        return out_ids, out


class Malformed(malformed.Malformed, DMFUser):
    """A compromised user that adds hostile messages to its honest gossip (malformed.py)."""
