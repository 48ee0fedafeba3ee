"""Graphs, partitioners, partition plans and data modules."""

from lightgraph.data.cached_data_module import (
    CachedDataModule,
    CacheReader,
    CacheWriter,
    CorruptCacheError,
)
from lightgraph.data.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.graph_set import GraphSetDataModule, SyntheticGraphSet
from lightgraph.data.node_sequence import NodeSequenceDataModule
from lightgraph.data.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partitioned_data_module import PartitionedGraphDataModule
from lightgraph.data.partitioner import PARTITION_METHODS, partition_graph
from lightgraph.data.real_dataset import REAL_DATASETS, RealDataset
from lightgraph.data.synthetic_graph import SyntheticGraph, generate_synthetic_graph
from lightgraph.data.token_batch import TokenBatch, TokenShard

__all__ = [
    "CacheReader",
    "CacheWriter",
    "CachedDataModule",
    "CorruptCacheError",
    "GraphSetDataModule",
    "NodeSequenceDataModule",
    "SyntheticGraphSet",
    "TokenBatch",
    "TokenShard",
    "PARTITION_METHODS",
    "GraphDataset",
    "PartitionPlan",
    "PartitionedGraphDataModule",
    "REAL_DATASETS",
    "RealDataset",
    "SyntheticGraph",
    "build_partition_plans",
    "generate_synthetic_graph",
    "partition_graph",
    "validate_graph",
]
