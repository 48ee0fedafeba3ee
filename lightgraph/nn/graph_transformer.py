"""Kept for compatibility: the graph transformers moved.

``MultiheadGraphAttention`` lives in :mod:`lightgraph.nn.attention`, ``SequenceBatchNorm``
in :mod:`lightgraph.nn.norm`, ``GraphTransformerLayer``, ``Graphormer`` (with
``GRAPHORMER_PRESETS``) and ``GT`` in :mod:`lightgraph.nn.models`. This module only
re-exports their former public names.
"""

from lightgraph.nn.attention.multihead_graph_attention import MultiheadGraphAttention
from lightgraph.nn.models.graph_transformer_layer import GraphTransformerLayer
from lightgraph.nn.models.graphormer import GRAPHORMER_PRESETS, Graphormer
from lightgraph.nn.models.gt import GT
from lightgraph.nn.norm.sequence_batch_norm import SequenceBatchNorm

__all__ = [
    "GRAPHORMER_PRESETS",
    "GT",
    "Graphormer",
    "GraphTransformerLayer",
    "MultiheadGraphAttention",
    "SequenceBatchNorm",
]
