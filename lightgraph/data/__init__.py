"""Graphs and the data modules that feed them to a model.

What a user constructs is exported here: graph sources, data modules, the writers, the
partition plan and store, and the contract a data module declares to the model. The
parts live in subpackages, lowest layer first:

* :mod:`lightgraph.data.datasets` -- graph sources (synthetic, real, ``.npy``, text, sets);
* :mod:`lightgraph.data.partition` -- partitioners, hubs, plans, affinity, the bounded CSC;
* :mod:`lightgraph.data.store` -- the on-disk cache and partition store (no Lightning);
* :mod:`lightgraph.data.loader` -- the one resumable loader base and its samplers;
* :mod:`lightgraph.data.batch` -- the full-graph batch type;
* :mod:`lightgraph.data.lightning` -- the LightningDataModules, on one base;
* :mod:`lightgraph.data.contract` -- what a data module declares to the model.
"""

from lightgraph.data.batch import FullGraphBatch
from lightgraph.data.contract import DataContract
from lightgraph.data.datasets import (
    GraphDataset,
    NpyGraph,
    NpyGraphWriter,
    OnDiskGraph,
    RealDataset,
    RealLinkDataset,
    SyntheticGraph,
    SyntheticGraphSet,
    SyntheticTextGraph,
    from_pyg,
)
from lightgraph.data.lightning import (
    CachedDataModule,
    GraphSetDataModule,
    LinkMacroBatchDataModule,
    LinkNeighborSamplingDataModule,
    MacroBatchDataModule,
    MultistageDataModule,
    NeighborSamplingDataModule,
    NodeSequenceDataModule,
    PartitionedGraphDataModule,
    PartitionedLinkDataModule,
    PartitionStoreDataModule,
    TextGraphDataModule,
)
from lightgraph.data.loader import TokenBatch
from lightgraph.data.partition import PartitionPlan, partition_graph
from lightgraph.data.store import (
    CorruptCacheError,
    PartitionStore,
    StaleStoreError,
    write_partition_store,
)

__all__ = [
    "CachedDataModule",
    "CorruptCacheError",
    "DataContract",
    "FullGraphBatch",
    "GraphDataset",
    "GraphSetDataModule",
    "LinkMacroBatchDataModule",
    "LinkNeighborSamplingDataModule",
    "MacroBatchDataModule",
    "MultistageDataModule",
    "NeighborSamplingDataModule",
    "NodeSequenceDataModule",
    "NpyGraph",
    "NpyGraphWriter",
    "OnDiskGraph",
    "PartitionPlan",
    "PartitionStore",
    "PartitionStoreDataModule",
    "PartitionedGraphDataModule",
    "PartitionedLinkDataModule",
    "RealDataset",
    "RealLinkDataset",
    "StaleStoreError",
    "SyntheticGraph",
    "SyntheticGraphSet",
    "SyntheticTextGraph",
    "TextGraphDataModule",
    "TokenBatch",
    "from_pyg",
    "partition_graph",
    "write_partition_store",
]
