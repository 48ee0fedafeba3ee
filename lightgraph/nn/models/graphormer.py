"""Graphormer (Ying et al., 2021) over TorchGT's attention kinds.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.functional.attention import DEFAULT_DENSE_EVERY
from lightgraph.nn.models.graph_transformer_base import _GraphTransformer
from lightgraph.nn.models.graph_transformer_layer import GraphTransformerLayer
from lightgraph.utilities.checks import check_int, check_rate

if TYPE_CHECKING:
    from lightgraph.data.loader.token_batch import TokenBatch

__all__ = ["GRAPHORMER_PRESETS", "Graphormer"]

#: Graphormer configurations of TorchGT's evaluation (thesis Table 4.4):
#: ``(num_layers, hidden_channels, heads)``.
GRAPHORMER_PRESETS: dict[str, tuple[int, int, int]] = {"slim": (4, 64, 8), "large": (12, 768, 32)}


class Graphormer(_GraphTransformer):
    """Graphormer (Ying et al., 2021) over TorchGT's attention kinds (thesis Eq. 2.4-2.5).

    .. math::
        \\mathbf{h}_i^{(0)} = \\mathbf{W}\\mathbf{x}_i + \\mathbf{z}^-_{\\deg^-(i)}
        + \\mathbf{z}^+_{\\deg^+(i)}, \\qquad
        \\mathbf{A}^h_{ij} = \\frac{(\\mathbf{h}_i \\mathbf{W}^h_Q)(\\mathbf{h}_j
        \\mathbf{W}^h_K)^\\top}{\\sqrt{d}} + b^h_{\\phi(i, j)}

    Centrality encoding from in/out-degrees (clipped to ``max_degree``), a spatial bias
    :math:`b_\\phi` per bucket (shortest-path distance, edge, self, global token; one table
    shared by all layers), a learned embedding for global tokens, pre-LN transformer
    layers and a final LayerNorm. ``task="node"`` returns per-token outputs,
    ``task="graph"`` the output of every graph's global token (mean of its tokens
    without one).

    ``preset`` picks a configuration of thesis Table 4.4 (``"slim"``: 4 layers, 64 hidden,
    8 heads; ``"large"``: 12 layers, 768 hidden, 32 heads); explicit sizes must then agree
    or be left ``None``. Without preset the sizes default to the slim configuration.

    Args:
        in_channels: token feature size.
        out_channels: outputs per token (node task) or per graph (graph task).
        hidden_channels, num_layers, heads: model size (``None``: from the preset).
        kind: attention kind, one of :data:`~lightgraph.functional.attention.KINDS`.
        max_degree: largest degree with its own centrality embedding.
        max_distance: largest shortest-path distance with its own bias bucket; must match
            the data module's.
        task: ``"node"`` or ``"graph"``.
        dropout: dropout on embeddings, attention outputs and FFN.
        attention_dropout: dropout on attention probabilities.
        ffn_channels: FFN hidden size (default ``hidden_channels``, as in Graphormer).
        dense_every, threshold, block_size, num_clusters: attention options (see
            :class:`MultiheadGraphAttention`; ``dense_every`` defaults to
            :data:`~lightgraph.functional.attention.DEFAULT_DENSE_EVERY`, 11).
        preset: ``"slim"``, ``"large"`` or ``None``.
        sparse_kind: what ``kind="dual"`` runs between its dense steps: ``"sparse"``,
            ``"cluster_sparse"`` or ``"auto"``.

    Shapes:
        - **input:** a :class:`~lightgraph.data.loader.token_batch.TokenBatch` with ``S_r`` tokens
        - **output:** ``[S_r, out_channels]`` (node) or ``[num_graphs, out_channels]`` (graph)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int | None = None,
        num_layers: int | None = None,
        heads: int | None = None,
        kind: str = "sparse",
        max_degree: int = 64,
        max_distance: int = 5,
        task: Literal["node", "graph"] = "node",
        dropout: float = 0.1,
        attention_dropout: float = 0.1,
        ffn_channels: int | None = None,
        dense_every: int = DEFAULT_DENSE_EVERY,
        threshold: float = 0.0,
        block_size: int = 16,
        num_clusters: int | None = None,
        preset: Literal["slim", "large"] | None = None,
        sparse_kind: str = "sparse",
    ) -> None:
        super().__init__()
        owner = "Graphormer"
        num_layers, hidden_channels, heads = _resolve_preset(
            owner, preset, num_layers, hidden_channels, heads
        )
        self._init_common(
            owner,
            in_channels,
            out_channels,
            hidden_channels,
            num_layers,
            heads,
            task,
            max_distance,
            kind,
            sparse_kind,
        )
        check_int(owner, "max_degree", max_degree)
        self.preset = preset
        self.max_degree = max_degree
        self.dropout = check_rate(owner, "dropout", dropout)
        self.input = nn.Linear(in_channels, hidden_channels)
        self.in_degree = nn.Embedding(max_degree + 1, hidden_channels)
        self.out_degree = nn.Embedding(max_degree + 1, hidden_channels)
        self.layers = nn.ModuleList(
            GraphTransformerLayer(
                hidden_channels,
                heads,
                ffn_channels,
                dropout=dropout,
                attention_dropout=attention_dropout,
                norm="layer",
                norm_first=True,
                kind=kind,
                dense_every=dense_every,
                num_buckets=self.num_buckets,
                block_size=block_size,
                num_clusters=num_clusters,
                threshold=threshold,
                sparse_kind=sparse_kind,
            )
            for _ in range(num_layers)
        )
        for i, layer in enumerate(self.layers):
            layer.attn.name = f"layers.{i}.attn"
        # The spatial bias is one learned scalar per bucket and head shared by all layers.
        for layer in self.layers[1:]:
            layer.attn.bias_table = self.layers[0].attn.bias_table
        self.final_norm = nn.LayerNorm(hidden_channels)
        self.head = nn.Linear(hidden_channels, out_channels)
        nn.init.normal_(self.in_degree.weight, std=0.02)
        nn.init.normal_(self.out_degree.weight, std=0.02)

    def forward(self, batch: TokenBatch, stage: str = "train") -> Tensor:
        """Outputs per token (node task) or per graph (graph task) of ``batch``."""
        graph = self._check_batch(batch)
        top = self.max_degree
        h = (
            self.input(batch.x.to(self.input.weight.dtype))
            + self.in_degree(batch.in_degree.clamp(max=top))
            + self.out_degree(batch.out_degree.clamp(max=top))
        )
        h = F.dropout(self._embed_global(h, batch), self.dropout, self.training)
        for layer in self.layers:
            h = layer(h, graph, stage)
        return self.head(self._readout(self.final_norm(h), batch))


def _resolve_preset(
    owner: str,
    preset: str | None,
    num_layers: int | None,
    hidden_channels: int | None,
    heads: int | None,
) -> tuple[int, int, int]:
    if preset is None:
        base = GRAPHORMER_PRESETS["slim"]
    elif preset in GRAPHORMER_PRESETS:
        base = GRAPHORMER_PRESETS[preset]
        for name, value, expected in zip(
            ("num_layers", "hidden_channels", "heads"),
            (num_layers, hidden_channels, heads),
            base,
            strict=True,
        ):
            if value is not None and value != expected:
                raise ValueError(
                    f"{owner}: preset {preset!r} sets `{name}`={expected} but got {name}={value}; "
                    f"leave it None or drop the preset."
                )
    else:
        raise ValueError(
            f"{owner}: expected `preset` to be one of {tuple(GRAPHORMER_PRESETS)} or None but got "
            f"{preset!r}."
        )
    return (
        base[0] if num_layers is None else num_layers,
        base[1] if hidden_channels is None else hidden_channels,
        base[2] if heads is None else heads,
    )
