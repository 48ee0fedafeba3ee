"""The LightningDataModules, on one base (:class:`CachedDataModule`: rank and world size,
caching and ``loader(split)`` in one place), and what each declares to the model
(:class:`~lightgraph.data.contract.DataContract`)."""

from lightgraph.data.lightning.cached_data_module import CachedDataModule
from lightgraph.data.lightning.graph_set import GraphSetDataModule
from lightgraph.data.lightning.link_data_module import LinkNeighborSamplingDataModule
from lightgraph.data.lightning.link_macro_batch_data_module import LinkMacroBatchDataModule
from lightgraph.data.lightning.macro_batch_data_module import MacroBatchDataModule
from lightgraph.data.lightning.multistage_data_module import MultistageDataModule
from lightgraph.data.lightning.neighbor_sampling_data_module import NeighborSamplingDataModule
from lightgraph.data.lightning.node_sequence import NodeSequenceDataModule
from lightgraph.data.lightning.partition_store_data_module import (
    PartitionStoreDataModule,
    build_store,
)
from lightgraph.data.lightning.partitioned_data_module import PartitionedGraphDataModule
from lightgraph.data.lightning.partitioned_link_data_module import PartitionedLinkDataModule
from lightgraph.data.lightning.text_graph import TextGraphDataModule

__all__ = [
    "CachedDataModule",
    "GraphSetDataModule",
    "LinkMacroBatchDataModule",
    "LinkNeighborSamplingDataModule",
    "MacroBatchDataModule",
    "MultistageDataModule",
    "NeighborSamplingDataModule",
    "NodeSequenceDataModule",
    "PartitionStoreDataModule",
    "PartitionedGraphDataModule",
    "PartitionedLinkDataModule",
    "TextGraphDataModule",
    "build_store",
]
