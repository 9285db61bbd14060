"""Sequences, next-item examples and the behaviour graph (eq. 4) against hand-built answers."""

from __future__ import annotations

import numpy as np
import pytest

from data.sequences import (
    behaviour_graph,
    max_edge_weight,
    pad_behaviour_graphs,
    train_length,
    training_prefixes,
    transition_counts,
    user_sequences,
)
from data.types import Interactions


def test_user_sequences_are_chronological_with_item_tiebreak_and_max_len() -> None:
    inter = Interactions(
        user=np.array([1, 0, 1, 1, 0, 1, 1]),
        item=np.array([9, 4, 3, 7, 2, 5, 1]),
        timestamp=np.array([30, 5, 10, 10, 1, 20, 40]),
    )
    seqs = user_sequences(inter, n_users=3)
    assert seqs[0].tolist() == [2, 4]
    assert seqs[1].tolist() == [3, 7, 5, 9, 1]  # items 3 and 7 tie at t=10: lower id first
    assert seqs[2].tolist() == []
    assert user_sequences(inter, n_users=3, max_len=2)[1].tolist() == [9, 1]  # most recent kept
    with pytest.raises(ValueError, match="timestamps"):
        user_sequences(Interactions(user=inter.user, item=inter.item), n_users=3)
    with pytest.raises(ValueError, match="user ids"):
        user_sequences(inter, n_users=1)


def test_training_prefixes_split_rule() -> None:
    seq = np.array([5, 3, 8, 3, 9, 1, 2, 4, 6, 7])  # L = 10, n_tr = 8
    assert train_length(10) == 8 and train_length(5) == 4 and train_length(1) == 0
    train, test = training_prefixes([seq, np.array([11])])
    assert len(train) == 7
    assert [p.tolist() for p in train.prefixes[:2]] == [[5], [5, 3]]
    assert train.target.tolist() == [3, 8, 3, 9, 1, 2, 4]
    assert train.prefixes[-1].tolist() == [5, 3, 8, 3, 9, 1, 2]
    assert test.target.tolist() == [6, 7]
    assert [len(p) for p in test.prefixes] == [8, 9]
    assert set(train.user.tolist()) == {0} and set(test.user.tolist()) == {0}
    _, test_only = training_prefixes([seq], test_context="test_only")
    assert [p.tolist() for p in test_only.prefixes] == [[6]]
    assert test_only.target.tolist() == [7]
    with pytest.raises(ValueError, match="test_context"):
        training_prefixes([seq], test_context="all")


SEQ = np.array([2, 5, 2, 7, 5, 2, 5])  # transitions 2→5 ×2, 5→2 ×2, 2→7, 7→5


def test_behaviour_graph_counts_match_hand_built_matrices() -> None:
    items, a_in, a_out = behaviour_graph(SEQ)
    assert items.tolist() == [2, 5, 7]
    expected_out = np.array([[0, 2, 1], [2, 0, 0], [0, 1, 0]], dtype=np.float32)
    expected_in = np.array([[0, 2, 0], [2, 0, 1], [1, 0, 0]], dtype=np.float32)
    np.testing.assert_array_equal(a_out, expected_out)
    np.testing.assert_array_equal(a_in, expected_in)
    assert a_in.dtype == np.float32
    assert max_edge_weight([SEQ, np.array([1, 2])]) == 2
    pairs, counts = transition_counts(SEQ)
    assert dict(zip(map(tuple, pairs.tolist()), counts.tolist(), strict=True)) == {
        (2, 5): 2,
        (2, 7): 1,
        (5, 2): 2,
        (7, 5): 1,
    }


def test_behaviour_graph_normalized_and_capped() -> None:
    _, a_in, a_out = behaviour_graph(SEQ, normalize=True)
    np.testing.assert_allclose(a_out, [[0, 2 / 3, 1 / 3], [1, 0, 0], [0, 1, 0]], rtol=1e-6)
    np.testing.assert_allclose(a_in, [[0, 1, 0], [2 / 3, 0, 1 / 3], [1, 0, 0]], rtol=1e-6)
    _, _, capped = behaviour_graph(SEQ, max_weight=1)
    assert capped.max() == 1.0
    items, a_in, a_out = behaviour_graph(np.array([4, 4, 4]))  # self loop, weight 2
    assert items.tolist() == [4] and a_out.tolist() == [[2.0]] and a_in.tolist() == [[2.0]]
    items, a_in, _ = behaviour_graph(np.array([3]))
    assert items.tolist() == [3] and a_in.tolist() == [[0.0]]
    with pytest.raises(ValueError, match="non-empty"):
        behaviour_graph(np.array([], dtype=np.int64))


def test_padded_batch_keeps_each_graph_and_alias() -> None:
    prefixes = [SEQ, np.array([9, 1]), np.array([6])]
    batch = pad_behaviour_graphs(prefixes)
    assert batch.items.shape == (3, 3) and batch.a_in.shape == (3, 3, 3)
    assert batch.alias.shape == (3, 7) and batch.lengths.tolist() == [7, 2, 1]
    for b, prefix in enumerate(prefixes):
        length = len(prefix)
        assert batch.items[b, batch.alias[b, :length]].tolist() == prefix.tolist()
        items, a_in, a_out = behaviour_graph(prefix)
        k = len(items)
        np.testing.assert_array_equal(batch.a_out[b, :k, :k], a_out)
        np.testing.assert_array_equal(batch.a_in[b, :k, :k], a_in)
        assert batch.node_mask[b].sum() == k
        assert not batch.a_out[b, k:].any() and not batch.a_out[b, :, k:].any()
    assert batch.items[1].tolist() == [1, 9, 0]
