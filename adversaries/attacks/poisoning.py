"""The poisoning attacks of row-sparse uploaders, as mixins a protocol's attack classes put before
its user role (``class RandomFake(poisoning.RandomFake, FedMFUser)``, in the protocol's own
``attacks.py``). Each overrides the step that produces the upload, :meth:`Adversary.tamper_upload`,
which the role calls just before the protocol's encoder, so a crafted upload is encoded like an
honest one. Nothing here knows a protocol."""

from __future__ import annotations

from adversaries.attacks import common


class RandomFake(common.Adversary):
    """Data poisoning, random attack (Lam & Riedl, WWW 2004): a fake user whose profile is the
    targets plus random filler items, trained and uploaded honestly."""


class BandwagonFake(common.Adversary):
    """Data poisoning, bandwagon attack (Mobasher et al., ACM TOIT 2007): the targets plus popular
    filler items (the training popularity is the attacker's side information), so the targets are
    pulled towards what many honest users like."""

    POPULAR_PROFILE = True


class FedRecAttack(common.TargetRowsAdversary):
    """Model poisoning, FedRecAttack (Rong et al., ICDE 2022): the attacker knows a share
    (``public_fraction``) of the interactions, approximates those users' embeddings from the item
    table it downloads, and uploads for the targets the gradient of a loss that lifts them into
    those users' top K, at the norm of its own honest rows (the rest of the upload is honest, on a
    random fake profile)."""

    def target_rows(self, table):
        return common.promotion_rows(table, self.knowledge, self.threat.er_k)


class PipAttack(common.TargetRowsAdversary):
    """Model poisoning, PipAttack (Zhang et al., WSDM 2022), popularity term: the targets' rows are
    pushed towards the centroid of the popular items' rows (the attacker knows which items are
    popular), so that they are ranked like popular items."""

    def target_rows(self, table):
        return common.popularity_rows(table, self.knowledge)


class ByzantineScaled(common.ByzantineAdversary):
    """A compromised user uploads its honest update times ``scale`` (Blanchard et al., NeurIPS
    2017)."""

    def byzantine(self, rows, scale):
        return common.scaled(rows, scale)


class ByzantineSignFlip(common.ByzantineAdversary):
    """A compromised user uploads its honest update times −``scale`` (Damaskinos et al., ICML
    2018)."""

    def byzantine(self, rows, scale):
        return common.scaled(rows, -scale)


class ByzantineRandom(common.ByzantineAdversary):
    """A compromised user uploads Gaussian rows with its honest rows' norms times ``scale``
    (Blanchard et al., NeurIPS 2017)."""

    def byzantine(self, rows, scale):
        return common.gaussian_like(self.rng, rows, scale)
