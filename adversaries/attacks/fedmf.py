"""The attacks in fedmf: classes playing :class:`protocols.fedmf.roles.FedMFUser` (see _family.py
and common.py). The upload is changed in ``tamper_upload``, which ``FedMFUser._train`` calls just
before ``messages.encode_item_grads``; fedmf adds no noise, so there is none to skip."""

from adversaries.attacks._family import attack_classes
from protocols.fedmf.roles import FedMFUser

globals().update(attack_classes(FedMFUser, __name__))
