"""The attacks in FedPerGNN/FedLightGCN: classes playing :class:`protocols.fedpergnn.roles.User`
(see _family.py and common.py). Fake users take part in everything honest users do (item tokens
with the key server, graph expansion at the matcher), with their made-up profile. The upload is
changed in ``tamper_upload``, which the LightGCN backbone calls after the protocol's clipping,
pseudo items and Laplace noise and before ``messages.encode_item_grads``: the target rows of the
model-poisoning attacks and every row of a Byzantine upload skip the noise (an adversary need not
perturb; the server cannot tell). With the GAT backbone only the data-poisoning attacks change
anything (its rating uploads have no tamper step)."""

from adversaries.attacks._family import attack_classes
from protocols.fedpergnn.roles import User

globals().update(attack_classes(User, __name__))
