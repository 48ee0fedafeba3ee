"""Models built from partition-aware layers (cf. :mod:`torch_geometric.nn.models`)."""

from lightgraph.nn.models.basic_gnn import BasicGNN
from lightgraph.nn.models.dagnn import DAGNN
from lightgraph.nn.models.gat import GAT
from lightgraph.nn.models.gcn import GCN
from lightgraph.nn.models.gcnii import GCNII
from lightgraph.nn.models.graph_sage import GraphSAGE
from lightgraph.nn.models.graph_transformer_layer import GraphTransformerLayer
from lightgraph.nn.models.graphormer import GRAPHORMER_PRESETS, Graphormer
from lightgraph.nn.models.gt import GT
from lightgraph.nn.models.jknet import JKNet
from lightgraph.nn.models.mlp import MLP
from lightgraph.nn.models.pipeline_stages import reset_dropout, split_stages
from lightgraph.nn.models.rev_gnn import (
    DEEP_GNN_PRESETS,
    ResGEN,
    RevGAT,
    RevGCN,
    SharedDropout,
    deep_gnn_preset,
)
from lightgraph.nn.models.sgc import SGC

__all__ = [
    "GRAPHORMER_PRESETS",
    "GT",
    "BasicGNN",
    "DAGNN",
    "GAT",
    "GCN",
    "GCNII",
    "GraphSAGE",
    "GraphTransformerLayer",
    "Graphormer",
    "JKNet",
    "MLP",
    "SGC",
    "DEEP_GNN_PRESETS",
    "ResGEN",
    "RevGAT",
    "RevGCN",
    "SharedDropout",
    "deep_gnn_preset",
    "reset_dropout",
    "split_stages",
]
