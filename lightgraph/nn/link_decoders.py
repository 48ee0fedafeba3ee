"""Decoders of link prediction: a score for a pair of node embeddings.

Every decoder maps ``(h_src [..., D], h_dst [..., D])`` to scores ``[...]`` (logits),
broadcasting over the leading dimensions, so ``[B, 1, D]`` sources against ``[B, k, D]``
negatives give ``[B, k]`` scores in one call.

* :class:`DotDecoder`: ``<h_u, h_v>``.
* :class:`MLPDecoder`: an MLP over the pair's element-wise product ``h_u * h_v``
  (symmetric in ``u`` and ``v``, as the OGB link-prediction baselines use).
* :class:`DistMultDecoder`: ``<h_u, r, h_v>`` with a learnt diagonal ``r`` per relation
  type, for graphs whose edges carry one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lightgraph.utilities.checks import check_int


class LinkDecoder(nn.Module):
    """Base of the decoders: ``forward(h_src, h_dst, rel=None) -> scores``."""

    #: whether the decoder needs each pair's relation type
    needs_relation: bool = False

    def forward(self, h_src: Tensor, h_dst: Tensor, rel: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def pair_bytes(self, channels: int) -> int:
        """Bytes of intermediate tensors per scored pair (beyond the two embeddings and the
        score) when one source is scored against many destinations: what evaluation's
        memory budget must leave room for."""
        return 0


class DotDecoder(LinkDecoder):
    """``score(u, v) = <h_u, h_v>``."""

    def forward(self, h_src: Tensor, h_dst: Tensor, rel: Tensor | None = None) -> Tensor:
        # A contraction: no [..., K, D] product tensor is materialised for [..., 1, D]
        # sources against [..., K, D] destinations.
        return torch.einsum("...d,...d->...", h_src, h_dst)


class MLPDecoder(LinkDecoder):
    """``score(u, v) = MLP(h_u * h_v)``: ``num_layers`` linear layers with ReLU between them.

    Args:
        in_channels: ``D``, the embedding size.
        hidden_channels: width of the hidden layers.
        num_layers: linear layers (>= 1; 1 is a weighted dot product).
        dropout: dropout before every hidden linear layer.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 256,
        num_layers: int = 2,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        owner = "MLPDecoder"
        in_channels = check_int(owner, "in_channels", in_channels, low=1)
        hidden_channels = check_int(owner, "hidden_channels", hidden_channels, low=1)
        num_layers = check_int(owner, "num_layers", num_layers, low=1)
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [1]
        layers: list[nn.Module] = []
        for i in range(num_layers):
            if i:
                layers += [nn.ReLU(), nn.Dropout(dropout)]
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        self.mlp = nn.Sequential(*layers)
        self._hidden = [hidden_channels] * (num_layers - 1)

    def forward(self, h_src: Tensor, h_dst: Tensor, rel: Tensor | None = None) -> Tensor:
        return self.mlp(h_src * h_dst).squeeze(-1)

    def pair_bytes(self, channels: int) -> int:
        # The product, and per hidden layer its output, ReLU and dropout copies.
        return 4 * (channels + 3 * sum(self._hidden))


class DistMultDecoder(LinkDecoder):
    """``score(u, r, v) = sum_d h_u[d] * R[r, d] * h_v[d]`` (DistMult), one learnt diagonal
    ``R[r]`` per relation type.

    Args:
        in_channels: ``D``.
        num_relations: relation types; each pair's ``rel`` lies in ``[0, num_relations)``.
    """

    needs_relation = True

    def __init__(self, in_channels: int, num_relations: int) -> None:
        super().__init__()
        owner = "DistMultDecoder"
        self.num_relations = check_int(owner, "num_relations", num_relations, low=1)
        self.relation = nn.Parameter(torch.empty(num_relations, in_channels))
        nn.init.xavier_uniform_(self.relation)

    def forward(self, h_src: Tensor, h_dst: Tensor, rel: Tensor | None = None) -> Tensor:
        if rel is None:
            raise ValueError(
                "DistMultDecoder: expected `rel`, the relation type of every pair, but got None."
            )
        if rel.numel() and (int(rel.min()) < 0 or int(rel.max()) >= self.num_relations):
            raise ValueError(
                f"DistMultDecoder: expected relation types in [0, {self.num_relations - 1}] but "
                f"got values in [{int(rel.min())}, {int(rel.max())}]."
            )
        r = self.relation[rel]
        while r.dim() < h_src.dim():
            r = r.unsqueeze(-2)
        return torch.einsum("...d,...d->...", h_src * r, h_dst)

    def pair_bytes(self, channels: int) -> int:
        return 4 * channels  # h_src * r, when the sources are as many as the pairs
