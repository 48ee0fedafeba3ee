"""GT, the graph transformer of Dwivedi & Bresson (2021), over TorchGT's attention kinds.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lightgraph.functional.attention import DEFAULT_DENSE_EVERY
from lightgraph.nn.models.graph_transformer_base import _GraphTransformer
from lightgraph.nn.models.graph_transformer_layer import NORMS, GraphTransformerLayer
from lightgraph.utilities.checks import check_choice, check_int, check_rate

if TYPE_CHECKING:
    from lightgraph.data.loader.token_batch import TokenBatch

__all__ = ["GT"]


class GT(_GraphTransformer):
    """GT, the graph transformer of Dwivedi & Bresson (2021), over TorchGT's attention kinds.

    .. math::
        \\mathbf{h}_i^{(0)} = \\mathbf{A}\\mathbf{x}_i + \\mathbf{C}\\boldsymbol{\\lambda}_i,
        \\qquad
        \\hat{\\mathbf{h}}_i = \\operatorname{N}\\big(\\mathbf{h}_i + \\mathbf{O}
        \\Vert_h \\textstyle\\sum_{j \\in \\mathcal{N}(i)} w^h_{ij} \\mathbf{V}^h
        \\mathbf{h}_j\\big), \\qquad
        \\mathbf{h}'_i = \\operatorname{N}\\big(\\hat{\\mathbf{h}}_i +
        \\operatorname{FFN}(\\hat{\\mathbf{h}}_i)\\big)

    with :math:`\\boldsymbol{\\lambda}_i` the ``pe_dim`` Laplacian eigenvectors of the
    token (:attr:`requires_laplacian_pe`: build the data with the same ``pe_dim``, e.g.
    ``NodeSequenceDataModule(pe_dim=8)``, which adds ``lap_pe``), their signs flipped at
    random in training (one draw per eigenvector and step from a generator seeded by
    ``seed`` and the step counter :attr:`flips`, so every graph-parallel rank flips alike;
    the counter is a persistent buffer, so a resumed run draws the signs an uninterrupted
    one would), :math:`w^h_{ij}` the softmax of scaled dot products over the attention
    pattern (``"sparse"``: the graph neighbours, as in GT), post-norm layers with
    BatchNorm (default, the paper's best setting; synchronised over graph-parallel ranks)
    or LayerNorm, a ``2 x hidden`` FFN and an MLP head. TorchGT evaluates GT with 4 layers, 128 hidden channels and 8 heads
    (thesis Table 4.4), the defaults here.

    Args:
        in_channels: token feature size.
        out_channels: outputs per token (node task) or per graph (graph task).
        hidden_channels, num_layers, heads: model size.
        pe_dim: Laplacian eigenvectors per token.
        kind: attention kind.
        task: ``"node"`` or ``"graph"``.
        dropout, attention_dropout: dropout rates.
        norm: ``"batch"`` or ``"layer"``.
        ffn_channels: FFN hidden size (default ``2 * hidden_channels``).
        max_distance: must match the data module's (bucket layout).
        spatial_bias: also learn a per-bucket bias (off in the original GT).
        dense_every, threshold, block_size, num_clusters: attention options (see
            :class:`MultiheadGraphAttention`; ``dense_every`` defaults to
            :data:`~lightgraph.functional.attention.DEFAULT_DENSE_EVERY`, 11).
        seed: seed of the eigenvector sign flips.
        sparse_kind: what ``kind="dual"`` runs between its dense steps: ``"sparse"``,
            ``"cluster_sparse"`` or ``"auto"``.

    Shapes:
        - **input:** a :class:`~lightgraph.data.loader.token_batch.TokenBatch` with ``lap_pe``
        - **output:** ``[S_r, out_channels]`` (node) or ``[num_graphs, out_channels]`` (graph)
    """

    requires_laplacian_pe = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        hidden_channels: int = 128,
        num_layers: int = 4,
        heads: int = 8,
        pe_dim: int = 8,
        kind: str = "sparse",
        task: Literal["node", "graph"] = "node",
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        norm: Literal["batch", "layer"] = "batch",
        ffn_channels: int | None = None,
        max_distance: int = 5,
        spatial_bias: bool = False,
        dense_every: int = DEFAULT_DENSE_EVERY,
        threshold: float = 0.0,
        block_size: int = 16,
        num_clusters: int | None = None,
        seed: int = 0,
        sparse_kind: str = "sparse",
    ) -> None:
        super().__init__()
        owner = "GT"
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
        check_int(owner, "pe_dim", pe_dim)
        check_choice(owner, "norm", norm, NORMS)
        self.pe_dim = pe_dim
        self.dropout = check_rate(owner, "dropout", dropout)
        self.seed = seed
        # Training forward passes so far: seeds the sign flips. A persistent buffer, so a
        # checkpoint carries it and a resumed run continues the same sequence of flips.
        self.flips: Tensor
        self.register_buffer("flips", torch.zeros((), dtype=torch.long))
        self.input = nn.Linear(in_channels, hidden_channels)
        self.pe = nn.Linear(pe_dim, hidden_channels)
        self.layers = nn.ModuleList(
            GraphTransformerLayer(
                hidden_channels,
                heads,
                2 * hidden_channels if ffn_channels is None else ffn_channels,
                dropout=dropout,
                attention_dropout=attention_dropout,
                norm=norm,
                norm_first=False,
                activation="relu",
                kind=kind,
                dense_every=dense_every,
                num_buckets=self.num_buckets,
                block_size=block_size,
                num_clusters=num_clusters,
                threshold=threshold,
                sparse_kind=sparse_kind,
                learn_bias=spatial_bias,
            )
            for _ in range(num_layers)
        )
        for i, layer in enumerate(self.layers):
            layer.attn.name = f"layers.{i}.attn"
        if spatial_bias:
            for layer in self.layers[1:]:
                layer.attn.bias_table = self.layers[0].attn.bias_table
        half = max(hidden_channels // 2, 1)
        self.head = nn.Sequential(
            nn.Linear(hidden_channels, half), nn.ReLU(), nn.Linear(half, out_channels)
        )

    def forward(self, batch: TokenBatch, stage: str = "train") -> Tensor:
        """Outputs per token (node task) or per graph (graph task) of ``batch``."""
        graph = self._check_batch(batch)
        pe = batch.lap_pe
        if pe is None or pe.dim() != 2 or pe.size(1) != self.pe_dim:
            shape = None if pe is None else tuple(pe.shape)
            raise ValueError(
                f"GT: expected `batch.lap_pe` of shape [tokens, pe_dim={self.pe_dim}] but got "
                f"{shape}; build the data with the model's `pe_dim`: "
                f"`NodeSequenceDataModule(pe_dim={self.pe_dim})` or "
                f"`GraphSetDataModule(pe_dim={self.pe_dim})` (CLI: "
                f"`--data.init_args.pe_dim={self.pe_dim}`)."
            )
        pe = pe.to(self.pe.weight.dtype)
        if self.training:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + int(self.flips))
            sign = torch.randint(0, 2, (self.pe_dim,), generator=gen) * 2 - 1
            pe = pe * sign.to(device=pe.device, dtype=pe.dtype)
            self.flips.add_(1)
        h = self.input(batch.x.to(self.input.weight.dtype)) + self.pe(pe)
        h = F.dropout(self._embed_global(h, batch), self.dropout, self.training)
        for layer in self.layers:
            h = layer(h, graph, stage)
        return self.head(self._readout(h, batch))
