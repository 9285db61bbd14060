"""DGREC's defence over one-bit codes: a member's defended combination of the codes it holds is a
coordinate vote within the code, and a norm bound changes nothing (every code has the same norm).
The checks every protocol with attacks shares are in tests/integration/test_adversaries.py."""

from __future__ import annotations

import numpy as np

from adversaries.condition import Threat


def test_dgrec_onebit_defence_is_a_vote_within_the_code():
    from cluster import wire
    from privacy.onebit import onebit_scale
    from protocols.dgrec.config import DGRECConfig
    from protocols.dgrec.messages import decode_held

    c = DGRECConfig()
    codes = [[1, 1, -1], [1, -1, -1], [-1, -1, -1]]
    held = {o: wire.encode_signs(np.array(b, np.int8)) for o, b in enumerate(codes)}
    plain = decode_held(held, c)
    assert np.allclose(plain, np.mean(codes, 0) * onebit_scale(c.clip, c.beta))
    voted = decode_held(held, c, Threat(defence="median"))
    assert np.allclose(voted, np.array([1, -1, -1]) * onebit_scale(c.clip, c.beta))
    # every one-bit code has the norm sqrt(n_s): bounding norms changes nothing
    bounded = decode_held(held, c, Threat(defence="norm-bound", defence_params=(("bound", 0),)))
    assert np.allclose(bounded, plain)
