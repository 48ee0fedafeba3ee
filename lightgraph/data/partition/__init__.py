"""Partitioning: METIS, random and GAP partitioners, hub selection, partition plans,
affinity microbatches, node sequences and the bounded-memory CSC build."""

from lightgraph.data.partition.affinity import (
    AFFINITY_REORDERS,
    AffinityMicrobatches,
    affinity_microbatches,
    default_num_microbatches,
)
from lightgraph.data.partition.gap import gap_partition
from lightgraph.data.partition.hubs import hub_scores, select_hubs, select_hubs_on_disk
from lightgraph.data.partition.out_of_core import on_disk_csc
from lightgraph.data.partition.partition_plan import PartitionPlan, build_partition_plans
from lightgraph.data.partition.partitioner import (
    PARTITION_METHODS,
    partition_graph,
    partition_on_disk,
)

__all__ = [
    "AFFINITY_REORDERS",
    "PARTITION_METHODS",
    "AffinityMicrobatches",
    "PartitionPlan",
    "affinity_microbatches",
    "build_partition_plans",
    "default_num_microbatches",
    "gap_partition",
    "hub_scores",
    "on_disk_csc",
    "partition_graph",
    "partition_on_disk",
    "select_hubs",
    "select_hubs_on_disk",
]
