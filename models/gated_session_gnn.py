"""DIPSGNN's noisy gated graph neural network (Hu & Fang, §4; backbone SR-GNN / A-PGNN).

For one behaviour graph (eq. 4) with item embeddings e_i ∈ R^d of its n nodes and the user's
perturbed feature vector x_u (Algorithm 3):

    e_u = E_U x_u                                   ∈ R^{d'}   user embedding, linear, no bias (eq. 5)
    H   = [e_1 ‖ e_u; … ; e_n ‖ e_u]                ∈ R^{n×(d+d')}
    H̄_i = C · H_i / ‖H_i‖₂                          every row has norm exactly C           (eq. 6)
    M_in  = A_in  H̄ + N(0, σ² I),  M_out = A_out H̄ + N(0, σ² I)    σ is a std; only when
                                                    training and σ > 0                     (eq. 7)
    a_i = [W_in M_in,i + b_in ‖ W_out M_out,i + b_out]  ∈ R^{2d}                          (eq. 8)
    h_i ← GRU(a_i, h̄_i),  h̄_i = item part of H̄_i (first d entries)                         (eq. 9)

repeated for T steps (each step re-normalizes [h_i ‖ e_u] and adds fresh noise). Readout over
the prefix s_1..s_L (h_j the final state of s_j's node):

    s_l = h_L;   α_j = qᵀ σ(W_1 s_l + W_2 h_j + c);   s_g = Σ_j α_j h_j                 (eq. 10)
    s_h = W_3 [s_g ‖ s_l ‖ e_u]                                                          (eq. 11)
    ŷ = softmax(s_hᵀ V),  V = all item embeddings                                        (eq. 12)
    L = - Σ log ŷ_target   (cross-entropy)                                               (eq. 13)

Variants: ``use_features=False`` with ``n_users > 0`` replaces E_U x_u by a learned user-id
embedding (A-PGNN); with ``n_users == 0`` there is no user part at all (d' = 0, SR-GNN style).
``sigma=0`` is the non-private network; ``graph_messages=False`` sets M_in = M_out = 0 (the
ablation without the graph: the GRU sees only the biases, the readout still sees the sequence).
Sessions are batched as padded dense graphs (SR-GNN); the layer is written out rather than taken
from PyG because the noise must be added to the two directed aggregates A·H̄ before their linear
maps, which PyG's GatedGraphConv does not expose.
Defaults d = 100, d' = 50, T = 1, C = 0.5 follow the released code.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from privacy.noise import normal_tensor

KS = (5, 10, 20)  # the K of the Recall@K and MRR@K the network is judged by

if TYPE_CHECKING:
    from data.sequences import SessionGraphBatch


class DIPSGNN(nn.Module):
    """Noisy gated GNN for next-item recommendation; ``forward`` returns scores over all items."""

    def __init__(
        self,
        n_items: int,
        n_user_features: int = 0,
        *,
        use_features: bool = True,
        n_users: int = 0,
        hidden_dim: int = 100,
        user_dim: int = 50,
        steps: int = 1,
        clip_norm: float = 0.5,
        sigma: float = 0.0,
        graph_messages: bool = True,
    ) -> None:
        super().__init__()
        if n_items < 1:
            raise ValueError(f"n_items must be >= 1, got {n_items}")
        if hidden_dim < 1 or steps < 1:
            raise ValueError(f"hidden_dim and steps must be >= 1, got {hidden_dim}, {steps}")
        if not clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {clip_norm}")
        if use_features and n_user_features < 1:
            raise ValueError("use_features=True needs n_user_features >= 1")
        if not use_features and n_users < 0:
            raise ValueError(f"n_users must be >= 0, got {n_users}")
        self.n_items = n_items
        self.hidden_dim = hidden_dim
        self.steps = steps
        self.clip_norm = float(clip_norm)
        self.sigma = sigma
        self.use_features = use_features
        self.graph_messages = graph_messages  # False: M_in = M_out = 0 (ablation, no graph)
        self.item_embedding = nn.Embedding(n_items, hidden_dim)
        self.user_map: nn.Module | None
        if use_features:
            self.user_map = nn.Linear(n_user_features, user_dim, bias=False)  # E_U (eq. 5)
        elif n_users > 0:
            self.user_map = nn.Embedding(n_users, user_dim)  # A-PGNN user-id embedding
        else:
            self.user_map = None  # SR-GNN: no user part
        self.user_dim = user_dim if self.user_map is not None else 0
        joint = hidden_dim + self.user_dim
        self.linear_in = nn.Linear(joint, hidden_dim)  # W_in, b_in (eq. 8)
        self.linear_out = nn.Linear(joint, hidden_dim)  # W_out, b_out (eq. 8)
        self.gru = nn.GRUCell(2 * hidden_dim, hidden_dim)  # eq. 9
        self.attn_last = nn.Linear(hidden_dim, hidden_dim)  # W_1, c (eq. 10)
        self.attn_item = nn.Linear(hidden_dim, hidden_dim, bias=False)  # W_2
        self.attn_q = nn.Linear(hidden_dim, 1, bias=False)  # q
        self.readout = nn.Linear(2 * hidden_dim + self.user_dim, hidden_dim)  # W_3 (eq. 11)
        self.reset_parameters()

    @property
    def sigma(self) -> float:
        return self._sigma

    @sigma.setter
    def sigma(self, value: float) -> None:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"sigma must be a finite non-negative std, got {value!r}")
        self._sigma = float(value)

    def reset_parameters(self) -> None:
        """SR-GNN initialisation: every parameter ~ U(-1/√d, 1/√d)."""
        bound = 1.0 / math.sqrt(self.hidden_dim)
        for weight in self.parameters():
            nn.init.uniform_(weight, -bound, bound)

    def user_embedding(self, user_features: Tensor | None, users: Tensor | None) -> Tensor | None:
        """e_u [B, d'] from the perturbed features (eq. 5) or the user id; None for SR-GNN."""
        if self.user_map is None:
            return None
        if self.use_features:
            if user_features is None:
                raise ValueError("this model uses features: pass user_features [B, F]")
            return self.user_map(user_features.float())
        if users is None:
            raise ValueError("this model embeds user ids: pass users [B]")
        return self.user_map(users.long())

    def normalized_rows(self, item_states: Tensor, user_emb: Tensor | None) -> Tensor:
        """H̄ = C · H / ‖H‖ row-wise, H = [item state ‖ e_u] (eq. 6); [B, N, d + d']."""
        h = item_states
        if user_emb is not None:
            h = torch.cat([h, user_emb[:, None, :].expand(-1, h.shape[1], -1)], dim=-1)
        return F.normalize(h, dim=-1) * self.clip_norm

    def noisy_aggregate(
        self,
        adjacency: Tensor,
        h_bar: Tensor,
        generator: torch.Generator | np.random.Generator | None,
    ) -> Tensor:
        """A · H̄ plus N(0, σ²) noise when training with σ > 0 (eq. 7). A numpy ``generator``
        (the secure one of ``--secure-rng``, privacy/noise.py) draws the normals on the CPU."""
        agg = torch.bmm(adjacency, h_bar)
        if self.training and self._sigma > 0:
            if isinstance(generator, np.random.Generator):
                noise = normal_tensor(generator, agg.shape, agg.dtype, agg.device)
            else:
                noise = torch.randn(
                    agg.shape, generator=generator, device=agg.device, dtype=agg.dtype
                )
            agg = agg + self._sigma * noise
        return agg

    def gru_step(self, a: Tensor, h: Tensor) -> Tensor:
        """GRU update of eq. 9 written out with ``self.gru``'s parameters (same values as
        ``nn.GRUCell``; plain ops so that ``torch.func.vmap`` batches it without a slow fallback):
        r = σ(W_r a + U_r h), z = σ(W_z a + U_z h), n = tanh(W_n a + r ⊙ U_n h),
        h' = (1 − z) ⊙ n + z ⊙ h."""
        gi = F.linear(a, self.gru.weight_ih, self.gru.bias_ih)
        gh = F.linear(h, self.gru.weight_hh, self.gru.bias_hh)
        i_r, i_z, i_n = gi.chunk(3, dim=-1)
        h_r, h_z, h_n = gh.chunk(3, dim=-1)
        reset = torch.sigmoid(i_r + h_r)
        update = torch.sigmoid(i_z + h_z)
        candidate = torch.tanh(i_n + reset * h_n)
        return (1.0 - update) * candidate + update * h

    def propagate(
        self,
        items: Tensor,
        a_in: Tensor,
        a_out: Tensor,
        user_emb: Tensor | None,
        generator: torch.Generator | np.random.Generator | None = None,
    ) -> Tensor:
        """T noisy gated steps over padded graphs; node states [B, N, d]."""
        states = self.item_embedding(items)
        d = states.shape[-1]
        for _ in range(self.steps):
            h_bar = self.normalized_rows(states, user_emb)
            if self.graph_messages:
                m_in = self.noisy_aggregate(a_in, h_bar, generator)
                m_out = self.noisy_aggregate(a_out, h_bar, generator)
            else:
                m_in = m_out = torch.zeros_like(h_bar)
            message = torch.cat([self.linear_in(m_in), self.linear_out(m_out)], dim=-1)
            previous = h_bar[..., :d]  # item part of H̄, as in the released code
            states = self.gru_step(message, previous)
        return states

    def forward(
        self,
        items: Tensor,
        a_in: Tensor,
        a_out: Tensor,
        alias: Tensor,
        seq_mask: Tensor,
        user_features: Tensor | None = None,
        users: Tensor | None = None,
        generator: torch.Generator | np.random.Generator | None = None,
        validate: bool = True,
    ) -> Tensor:
        """Scores [B, n_items] (logits of eq. 12) for a padded batch (see ``batch_tensors``).
        ``validate=False`` skips the data-dependent input checks (needed under ``torch.func.vmap``,
        which cannot branch on tensor values)."""
        if items.dim() != 2 or a_in.shape != a_out.shape or a_in.shape[:2] != items.shape:
            raise ValueError(
                f"shapes do not fit: items {tuple(items.shape)}, a_in {tuple(a_in.shape)}, "
                f"a_out {tuple(a_out.shape)} (want [B, N] and [B, N, N])"
            )
        if alias.shape != seq_mask.shape or alias.shape[0] != items.shape[0]:
            raise ValueError("alias and seq_mask must both be [B, L] with the batch size of items")
        lengths = seq_mask.long().sum(dim=1)
        if validate and (lengths < 1).any():
            raise ValueError("every prefix needs at least one item")
        user_emb = self.user_embedding(user_features, users)
        states = self.propagate(items, a_in.float(), a_out.float(), user_emb, generator)
        seq_states = torch.gather(
            states, 1, alias.long()[..., None].expand(-1, -1, states.shape[-1])
        )  # [B, L, d]
        rows = torch.arange(items.shape[0], device=items.device)
        last = seq_states[rows, lengths - 1]  # s_l
        alpha = self.attn_q(
            torch.sigmoid(self.attn_last(last)[:, None, :] + self.attn_item(seq_states))
        )  # eq. 10
        mask = seq_mask[..., None].to(seq_states.dtype)
        global_pref = (alpha * seq_states * mask).sum(dim=1)  # s_g
        parts = [global_pref, last] + ([user_emb] if user_emb is not None else [])
        hybrid = self.readout(torch.cat(parts, dim=-1))  # eq. 11
        return hybrid @ self.item_embedding.weight.t()  # eq. 12

    @staticmethod
    def loss(scores: Tensor, targets: Tensor) -> Tensor:
        """Cross-entropy of eq. 13 (mean over the batch)."""
        return F.cross_entropy(scores, targets.long())


def batch_tensors(
    batch: SessionGraphBatch, device: torch.device | str = "cpu"
) -> dict[str, Tensor]:
    """Tensors for ``DIPSGNN.forward`` from a ``data.sequences.SessionGraphBatch``."""
    return {
        "items": torch.as_tensor(np.asarray(batch.items), dtype=torch.long, device=device),
        "a_in": torch.as_tensor(np.asarray(batch.a_in), dtype=torch.float32, device=device),
        "a_out": torch.as_tensor(np.asarray(batch.a_out), dtype=torch.float32, device=device),
        "alias": torch.as_tensor(np.asarray(batch.alias), dtype=torch.long, device=device),
        "seq_mask": torch.as_tensor(np.asarray(batch.seq_mask), dtype=torch.bool, device=device),
    }
