"""benchmarks/secagg.py at a tiny size: the round it measures unmasks the exact plain sum under
dropout, through sampled clients and light users alike, and its byte counts are the lengths of the
payloads nodes/secure_sum.py encodes."""

from __future__ import annotations

import numpy as np

from benchmarks import secagg as bench
from nodes import secure_sum as ss
from privacy import secagg

TINY = bench.Table("tiny", 40, 4)


def test_round_unmasks_the_exact_sum_and_counts_the_encoded_bytes():
    n, dropouts = 8, (0.0, 0.25)
    results = bench.secagg_round(n, TINY, dropouts, clients=4, seed=3, pairs=3)
    k = secagg.default_degree(n)  # 7 = n - 1: everyone is everyone's neighbour
    t = secagg.default_threshold(k)
    L = TINY.length
    key, share = bytes(secagg.KEY_BYTES), bytes(secagg.SHARE_BYTES)
    for res, p in zip(results, dropouts):
        rec = res.record
        n3 = n - round(p * n)
        assert (rec["k"], rec["t"], rec["dropped"]) == (k, t, n - n3)
        assert (rec["clients_sampled"], rec["clients_light"]) == (4, 4)
        assert rec["unmasked"] and rec["exact"] and rec["failure"] is None
        assert rec["rejected"] == 0
        # the server's unmasked sum is the plain sum of the survivors' encodings, bit for bit
        assert np.array_equal(res.secure_sum, res.plain_sum) and res.plain_sum.any()
        fx = rec["fixed_point"]
        assert fx["clipped"] == 0 and fx["max_abs_error_of_mean"] <= fx["resolution"] / 2
        up, down = rec["bytes"]["upload"], rec["bytes"]["download"]
        assert up["keys"] == len(ss.encode_keys(key, key))
        sealed = ss.encode_sealed(list(range(k)), [bytes(ss.SEALED_BYTES)] * k)
        assert up["shares"] == down["shares_for"] == len(sealed)
        assert up["masked"] == len(ss.encode_masked(np.zeros(L, dtype=np.uint32)))
        assert up["reveal"] == len(ss.encode_reveal(list(range(k)), [0] * k, [share] * k))
        assert down["neighbours"] == len(
            ss.encode_neighbours(n, list(range(k)), [key] * k, [key] * k)
        )
        assert down["survivors"] == len(ss.encode_survivors(n3, list(range(n3 - 1))))
        assert rec["bytes"]["upload_total"] == sum(up.values())
        assert rec["server_source"] == dict.fromkeys(bench.SERVER_STAGES, "measured")


def test_server_not_run_is_extrapolated_never_measured():
    cells = [r.record for r in bench.secagg_round(6, TINY, (0.0,), clients=2, pairs=2)]
    cells += [
        r.record for r in bench.secagg_round(12, TINY, (0.0,), clients=2, pairs=2, run_server=False)
    ]
    bench.extrapolate(cells)
    small, big = cells
    assert big["unmasked"] is None and big["exact"] is None
    assert big["server_source"]["unmask"] == big["server_source"]["sum"] == "extrapolated"
    assert big["server_source"]["graph"] == "measured"
    scale = big["mask_expansions"] / small["mask_expansions"]
    assert big["server_seconds"]["unmask"] == small["server_seconds"]["unmask"] * scale


def test_failure_probability_counts_users_below_threshold():
    # complete graph of 8: two drops leave every user 5 or 6 surviving neighbours
    assert bench.failure_probability(8, 7, 4, 0.25, trials=50) == 0.0
    assert bench.failure_probability(8, 7, 6, 0.25, trials=50) == 1.0
    assert bench.failure_probability(100, 20, 8, 0.0, trials=50) == 0.0
    assert 0.0 < bench.failure_probability(100, 10, 3, 0.3, trials=400) < 0.5
