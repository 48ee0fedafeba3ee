"""Partition-aware graph neural network layers and models."""

from lightgraph.functional.fast_dropout import Dropout
from lightgraph.nn.aggregation_order import get_order, profile_layer_orders, set_order
from lightgraph.nn.attention import AttentionGraph, MultiheadGraphAttention, attend
from lightgraph.nn.conv.gcn_propagation import GCNPropagation
from lightgraph.nn.conv.partition_aware import PartitionAware
from lightgraph.nn.destination import (
    conv_to_destinations,
    destination_forward,
    profile_destination_orders,
)
from lightgraph.nn.early_exit import (
    EarlyExitEncoder,
    degree_groups,
    early_exit_loss,
    exit_layers,
)
from lightgraph.nn.history import HistoricalEmbeddings
from lightgraph.nn.lm_encoder import LMEncoder
from lightgraph.nn.models.basic_gnn import BasicGNN
from lightgraph.nn.models.dagnn import DAGNN
from lightgraph.nn.models.gat import GAT
from lightgraph.nn.models.gcn import GCN
from lightgraph.nn.models.gcnii import GCNII
from lightgraph.nn.models.graph_sage import GraphSAGE
from lightgraph.nn.models.graph_transformer_layer import GraphTransformerLayer
from lightgraph.nn.models.graphormer import Graphormer
from lightgraph.nn.models.gt import GT
from lightgraph.nn.models.jknet import JKNet
from lightgraph.nn.models.mlp import MLP
from lightgraph.nn.models.pipeline_stages import reset_dropout, split_stages
from lightgraph.nn.models.rev_gnn import ResGEN, RevGAT, RevGCN, deep_gnn_preset
from lightgraph.nn.models.sgc import SGC
from lightgraph.nn.norm.sequence_batch_norm import SequenceBatchNorm
from lightgraph.nn.partitioned_graph import PartitionedGraph

__all__ = [
    "Dropout",
    "AttentionGraph",
    "GT",
    "Graphormer",
    "GraphTransformerLayer",
    "MultiheadGraphAttention",
    "SequenceBatchNorm",
    "attend",
    "BasicGNN",
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
    "ResGEN",
    "RevGAT",
    "RevGCN",
    "deep_gnn_preset",
    "reset_dropout",
    "split_stages",
    "EarlyExitEncoder",
    "LMEncoder",
    "degree_groups",
    "early_exit_loss",
    "exit_layers",
    "HistoricalEmbeddings",
    "conv_to_destinations",
    "destination_forward",
    "get_order",
    "profile_destination_orders",
    "profile_layer_orders",
    "set_order",
]
