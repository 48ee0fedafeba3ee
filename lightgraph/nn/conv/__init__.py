"""Partition-aware message-passing layers (cf. :mod:`torch_geometric.nn.conv`)."""

from lightgraph.nn.conv.gcn_propagation import GCNPropagation
from lightgraph.nn.conv.partition_aware import PartitionAware

__all__ = ["GCNPropagation", "PartitionAware"]
