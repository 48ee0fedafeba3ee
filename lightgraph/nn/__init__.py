"""Partition-aware graph neural network layers and models."""

from lightgraph.nn.attention import AttentionGraph, attend
from lightgraph.nn.dagnn import DAGNN
from lightgraph.nn.gat import GAT
from lightgraph.nn.gcn import GCN
from lightgraph.nn.gcn_propagation import GCNPropagation
from lightgraph.nn.gcnii import GCNII
from lightgraph.nn.graph_sage import GraphSAGE
from lightgraph.nn.graph_transformer import (
    GT,
    Graphormer,
    GraphTransformerLayer,
    MultiheadGraphAttention,
)
from lightgraph.nn.jknet import JKNet
from lightgraph.nn.mlp import MLP
from lightgraph.nn.partition_aware import PartitionAware
from lightgraph.nn.partitioned_graph import PartitionedGraph
from lightgraph.nn.sgc import SGC

__all__ = [
    "AttentionGraph",
    "GT",
    "Graphormer",
    "GraphTransformerLayer",
    "MultiheadGraphAttention",
    "attend",
    "DAGNN",
    "GAT",
    "GCN",
    "GCNII",
    "GCNPropagation",
    "GraphSAGE",
    "JKNet",
    "MLP",
    "PartitionAware",
    "PartitionedGraph",
    "SGC",
]
