"""Graphs, partitioners, partition plans and data modules."""

from lightgraph.data.affinity import (
    AFFINITY_REORDERS,
    AffinityMicrobatches,
    affinity_microbatches,
    default_num_microbatches,
)
from lightgraph.data.cached_data_module import CachedDataModule
from lightgraph.data.full_graph_batch import FullGraphBatch
from lightgraph.data.gap import gap_partition
from lightgraph.data.graph_dataset import GraphDataset, validate_graph
from lightgraph.data.graph_set import GraphSetDataModule, SyntheticGraphSet
from lightgraph.data.hubs import hub_scores, select_hubs, select_hubs_on_disk
from lightgraph.data.macro_batch import MacroBatchLoader
from lightgraph.data.minibatch import NeighborSamplingLoader, sample_minibatch
from lightgraph.data.multistage_data_module import MultistageDataModule
from lightgraph.data.neighbor_sampler import UniformNeighborSampler, neighbor_loader
from lightgraph.data.node_sequence import NodeSequenceDataModule
from lightgraph.data.npy_graph import NpyGraph
from lightgraph.data.npy_graph_writer import NpyGraphWriter, from_pyg
from lightgraph.data.on_disk import OnDiskGraph
from lightgraph.data.out_of_core import on_disk_csc
from lightgraph.data.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partition_store import (
    IOStats,
    MacroBatch,
    PartitionStore,
    StaleStoreError,
    build_partition_store,
    write_partition_store,
)
from lightgraph.data.partitioned_data_module import PartitionedGraphDataModule
from lightgraph.data.partitioner import PARTITION_METHODS, partition_graph, partition_on_disk
from lightgraph.data.real_dataset import REAL_DATASETS, RealDataset
from lightgraph.data.store.cache import CacheReader, CacheWriter, CorruptCacheError, build_cache
from lightgraph.data.store_data_module import (
    MacroBatchDataModule,
    NeighborSamplingDataModule,
    PartitionStoreDataModule,
    build_store,
)
from lightgraph.data.synthetic_graph import SyntheticGraph, generate_synthetic_graph
from lightgraph.data.text_graph import (
    SPECIAL_TOKENS,
    SyntheticTextGraph,
    TextGraphDataModule,
    build_tokenizer,
    load_tokenizer,
)
from lightgraph.data.token_batch import TokenBatch, TokenShard

__all__ = [
    "AFFINITY_REORDERS",
    "AffinityMicrobatches",
    "affinity_microbatches",
    "default_num_microbatches",
    "FullGraphBatch",
    "IOStats",
    "MacroBatch",
    "MacroBatchDataModule",
    "MacroBatchLoader",
    "MultistageDataModule",
    "NeighborSamplingDataModule",
    "NeighborSamplingLoader",
    "PartitionStore",
    "PartitionStoreDataModule",
    "StaleStoreError",
    "UniformNeighborSampler",
    "build_cache",
    "build_partition_store",
    "build_store",
    "gap_partition",
    "hub_scores",
    "neighbor_loader",
    "sample_minibatch",
    "select_hubs",
    "select_hubs_on_disk",
    "write_partition_store",
    "CacheReader",
    "CacheWriter",
    "CachedDataModule",
    "CorruptCacheError",
    "GraphSetDataModule",
    "NodeSequenceDataModule",
    "NpyGraph",
    "NpyGraphWriter",
    "from_pyg",
    "OnDiskGraph",
    "on_disk_csc",
    "SyntheticGraphSet",
    "TokenBatch",
    "SPECIAL_TOKENS",
    "SyntheticTextGraph",
    "TextGraphDataModule",
    "build_tokenizer",
    "load_tokenizer",
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
    "partition_on_disk",
    "validate_graph",
]
