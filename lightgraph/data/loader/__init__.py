"""Loaders: the one resumable loader base (:mod:`.base`) and the samplers built on it --
neighbour sampling (NS), JOESTAR's multistage loader and its two first stages (LBS, PBS), HANOI's macro-batches -- plus
batching, data-parallel sharding and the token batches of the graph transformers."""

from lightgraph.data.loader.base import (
    HANDOVERS,
    Emit,
    LoaderStats,
    Moved,
    Prefetcher,
    ResumableLoader,
)
from lightgraph.data.loader.data_parallel import DataParallelShard
from lightgraph.data.loader.first_stage import (
    FirstStageSampler,
    LargeBatchSampler,
    PartitionBatchSampler,
)
from lightgraph.data.loader.fixed_batches import FixedBatchLoader
from lightgraph.data.loader.group_batch_sampler import GroupBatchSampler
from lightgraph.data.loader.link_macro_batch import LinkMacroBatchLoader
from lightgraph.data.loader.link_multistage import LinkMacroBatch
from lightgraph.data.loader.link_neighbor import LinkNeighborSamplingLoader, sample_link_minibatch
from lightgraph.data.loader.macro_batch import MacroBatchLoader
from lightgraph.data.loader.minibatch import NeighborSamplingLoader, sample_minibatch
from lightgraph.data.loader.multistage import MultistageLoader
from lightgraph.data.loader.negative_sampling import KnownEdges, NegativeSampler
from lightgraph.data.loader.neighbor_sampler import UniformNeighborSampler, neighbor_loader
from lightgraph.data.loader.token_batch import TokenBatch, TokenShard

__all__ = [
    "HANDOVERS",
    "DataParallelShard",
    "Emit",
    "FirstStageSampler",
    "FixedBatchLoader",
    "GroupBatchSampler",
    "KnownEdges",
    "LargeBatchSampler",
    "LinkMacroBatch",
    "LinkMacroBatchLoader",
    "LinkNeighborSamplingLoader",
    "LoaderStats",
    "MacroBatchLoader",
    "Moved",
    "MultistageLoader",
    "NegativeSampler",
    "NeighborSamplingLoader",
    "PartitionBatchSampler",
    "Prefetcher",
    "ResumableLoader",
    "TokenBatch",
    "TokenShard",
    "UniformNeighborSampler",
    "neighbor_loader",
    "sample_link_minibatch",
    "sample_minibatch",
]
