"""Graphs, partitioners, partition plans and data modules."""

from lightgraph.data.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partitioner import PARTITION_METHODS, partition_graph

__all__ = [
    "PARTITION_METHODS",
    "GraphDataset",
    "PartitionPlan",
    "build_partition_plans",
    "partition_graph",
    "validate_graph",
]
