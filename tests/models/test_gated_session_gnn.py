"""The noisy gated GNN: shapes, gradients, where noise appears, row norms, and that it learns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from data.sequences import pad_behaviour_graphs, training_prefixes
from models.gated_session_gnn import DIPSGNN, batch_tensors

N_ITEMS = 12
PREFIXES = [np.array([1, 4, 1, 7]), np.array([3]), np.array([5, 6, 2, 6, 0])]


def _inputs() -> dict[str, torch.Tensor]:
    return batch_tensors(pad_behaviour_graphs(PREFIXES))


def _model(**kw) -> DIPSGNN:
    torch.manual_seed(0)
    kw = {"hidden_dim": 16, "user_dim": 4, "steps": 2, **kw}
    return DIPSGNN(N_ITEMS, **kw)


@pytest.mark.parametrize("variant", ["features", "user_id", "srgnn"])
def test_scores_shape_and_gradients_reach_every_parameter(variant: str) -> None:
    extra: dict[str, torch.Tensor] = {}
    if variant == "features":
        model = _model(n_user_features=7, sigma=0.3)
        extra["user_features"] = torch.randn(3, 7)
    elif variant == "user_id":
        model = _model(use_features=False, n_users=5, sigma=0.3)
        extra["users"] = torch.tensor([0, 4, 2])
    else:
        model = _model(use_features=False, n_users=0, sigma=0.3)
    scores = model(**_inputs(), **extra)
    assert scores.shape == (3, N_ITEMS)
    model.loss(scores, torch.tensor([2, 5, 11])).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_noise_only_when_training_with_positive_sigma() -> None:
    model = _model(n_user_features=3, sigma=0.5)
    x = {**_inputs(), "user_features": torch.randn(3, 3)}
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    model.train()
    assert not torch.allclose(model(**x, generator=g1), model(**x, generator=g2))
    assert torch.equal(
        model(**x, generator=torch.Generator().manual_seed(3)),
        model(**x, generator=torch.Generator().manual_seed(3)),
    )
    model.eval()
    assert torch.equal(model(**x, generator=g1), model(**x, generator=g2))
    model.train()
    model.sigma = 0.0
    assert torch.equal(model(**x, generator=g1), model(**x, generator=g2))


def test_noise_is_gaussian_with_std_sigma() -> None:
    model = _model(n_user_features=3, sigma=0.7)
    h_bar = torch.randn(8, 20, 20)
    zero_adjacency = torch.zeros(8, 20, 20)
    model.train()
    noise = model.noisy_aggregate(zero_adjacency, h_bar, torch.Generator().manual_seed(0))
    assert abs(noise.mean().item()) < 5 * 0.7 / noise.numel() ** 0.5
    assert noise.std().item() == pytest.approx(0.7, rel=5 * (2 / noise.numel()) ** 0.5)
    model.eval()
    assert not model.noisy_aggregate(zero_adjacency, h_bar, None).any()
    with pytest.raises(ValueError, match="sigma"):
        model.sigma = -1.0


def test_rows_are_normalized_to_clip_norm() -> None:
    model = _model(n_user_features=3, clip_norm=0.37)
    states = torch.randn(2, 5, 16) * 10
    user = torch.randn(2, 4)
    h_bar = model.normalized_rows(states, user)
    assert h_bar.shape == (2, 5, 20)
    torch.testing.assert_close(h_bar.norm(dim=-1), torch.full((2, 5), 0.37))
    joint = torch.cat([states, user[:, None, :].expand(-1, 5, -1)], dim=-1)
    torch.testing.assert_close(h_bar, 0.37 * joint / joint.norm(dim=-1, keepdim=True))


def test_bad_shapes_and_missing_user_input_raise() -> None:
    model = _model(n_user_features=3)
    x = _inputs()
    with pytest.raises(ValueError, match="user_features"):
        model(**x)
    with pytest.raises(ValueError, match="shapes"):
        model(**{**x, "a_in": x["a_in"][:, :2, :2]}, user_features=torch.zeros(3, 3))
    with pytest.raises(ValueError, match="n_user_features"):
        DIPSGNN(N_ITEMS, 0, use_features=True)


def _synthetic_sequences(rng: np.random.Generator, n_users: int, length: int) -> list[np.ndarray]:
    """Next item = successor[current] for a fixed random permutation (a deterministic rule)."""
    successor = rng.permutation(N_ITEMS)
    seqs = []
    for _ in range(n_users):
        seq = [int(rng.integers(N_ITEMS))]
        for _ in range(length - 1):
            seq.append(int(successor[seq[-1]]))
        seqs.append(np.array(seq))
    return seqs


@pytest.mark.parametrize("sigma", [0.0, 0.05])
def test_learns_a_deterministic_next_item_rule(sigma: float) -> None:
    rng = np.random.default_rng(0)
    seqs = _synthetic_sequences(rng, n_users=60, length=10)
    train, test = training_prefixes(seqs)
    torch.manual_seed(0)
    model = DIPSGNN(N_ITEMS, use_features=False, n_users=60, hidden_dim=32, user_dim=8, sigma=sigma)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(0)
    targets = torch.as_tensor(train.target)
    for _ in range(15):
        model.train()
        for idx in np.array_split(rng.permutation(len(train)), 6):
            x = batch_tensors(pad_behaviour_graphs([train.prefixes[i] for i in idx]))
            loss = model.loss(
                model(**x, users=torch.as_tensor(train.user[idx]), generator=gen), targets[idx]
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        x = batch_tensors(pad_behaviour_graphs(test.prefixes))
        top1 = model(**x, users=torch.as_tensor(test.user)).argmax(dim=1).numpy()
    accuracy = float(np.mean(top1 == test.target))
    print(f"sigma={sigma} accuracy={accuracy:.3f}")
    assert accuracy > 0.8  # random guessing: 1/12


def test_without_graph_messages_the_adjacency_is_ignored() -> None:
    model = _model(n_user_features=3, sigma=0.5, graph_messages=False)
    x = {**_inputs(), "user_features": torch.randn(3, 3)}
    model.train()
    out = model(**x, generator=torch.Generator().manual_seed(1))
    x["a_in"] = torch.rand_like(x["a_in"])
    x["a_out"] = torch.rand_like(x["a_out"])
    assert torch.equal(out, model(**x, generator=torch.Generator().manual_seed(2)))  # no noise
    model.graph_messages = True
    assert not torch.equal(out, model(**x, generator=torch.Generator().manual_seed(2)))
