"""HANOI's on-disk partition store: a graph laid out in partition blocks for macro-batches.

HANOI (T. Huang, *Efficient Systems for Large-Scale Graph Representation Learning*, PhD
thesis, MIT, 2025, ch. 4, §4.2.1 and §4.2.3) trains out of core by reading a few graph
partitions at a time -- a *macro-batch* -- with bulk sequential I/O, augmenting them
with *hub* nodes pinned in memory, and sampling mini-batches inside the macro-batch in
memory. This package writes and reads the store that makes those reads contiguous:

* **nodes renumbered partition-major**: the *store id* of a node is its position when
  the nodes are sorted (stably) by partition, so every node array holds partition ``p``
  in rows ``part_ptr[p]:part_ptr[p + 1]`` -- one contiguous read per array;
* **edges bucketed** by ``(partition of source, partition of destination)``; a
  macro-batch of ``b`` partitions reads its ``b**2`` buckets (adjacent buckets are
  coalesced into one read);
* **hubs stored apart**: their features and labels in their own files (read into memory
  once, at :meth:`PartitionStore.open`); edges between a hub and a non-hub node bucketed
  by the non-hub node's partition (``b`` more buckets per macro-batch); hub-hub edges kept
  with the hubs (in memory). Every edge lives in exactly one bucket, so a macro-batch
  holds the induced subgraph on its partitions' nodes and the hubs, each edge once;
* **the whole-graph CSC** (by destination, in store ids) for whole-graph neighbour
  sampling from disk (HANOI's NS-Ext baseline) and layer-wise evaluation.

Modules, lowest first (each imports only those above it):

* :mod:`.layout` -- the files: names, dtypes, shapes (the table), the format tag;
* :mod:`.integrity` -- fingerprints, staleness (:class:`StaleStoreError`) and the checks
  of what a reader takes from disk (a damaged file is a
  :class:`~lightgraph.data.CorruptCacheError` naming it);
* :mod:`.io_stats` -- :class:`IOStats`, what the reads cost;
* :mod:`.macro_batch` -- :class:`MacroBatch`, what a read returns;
* :mod:`.reader` -- :class:`PartitionStore`;
* :mod:`.writer` -- :func:`write_partition_store` (streaming) and
  :func:`build_partition_store` (build or reuse, then open).
"""

from lightgraph.data.store.partition_store.induced_subgraph import MacroBatch
from lightgraph.data.store.partition_store.integrity import (
    StaleStoreError,
    default_store_fingerprint,
)
from lightgraph.data.store.partition_store.io_stats import PAGE_SIZE, IOStats
from lightgraph.data.store.partition_store.layout import (
    CSC_INDICES_FILE,
    CSC_INDPTR_FILE,
    EDGE_PTR_FILE,
    EDGES_FILE,
    HUB_EDGE_PTR_FILE,
    HUB_EDGES_FILE,
    HUB_HUB_EDGES_FILE,
    HUB_IDS_FILE,
    HUB_STORE_IDS_FILE,
    HUB_X_FILE,
    HUB_Y_FILE,
    MASKS_FILE,
    NODE_IDS_FILE,
    PART_PTR_FILE,
    STORE_FORMAT,
    STORE_VERSION,
    X_FILE,
    Y_FILE,
)
from lightgraph.data.store.partition_store.reader import PartitionStore
from lightgraph.data.store.partition_store.writer import (
    DEFAULT_CHUNK_SIZE,
    build_partition_store,
    write_partition_store,
)

__all__ = [
    "CSC_INDICES_FILE",
    "CSC_INDPTR_FILE",
    "DEFAULT_CHUNK_SIZE",
    "EDGES_FILE",
    "EDGE_PTR_FILE",
    "HUB_EDGES_FILE",
    "HUB_EDGE_PTR_FILE",
    "HUB_HUB_EDGES_FILE",
    "HUB_IDS_FILE",
    "HUB_STORE_IDS_FILE",
    "HUB_X_FILE",
    "HUB_Y_FILE",
    "IOStats",
    "MASKS_FILE",
    "MacroBatch",
    "NODE_IDS_FILE",
    "PAGE_SIZE",
    "PART_PTR_FILE",
    "PartitionStore",
    "STORE_FORMAT",
    "STORE_VERSION",
    "StaleStoreError",
    "X_FILE",
    "Y_FILE",
    "build_partition_store",
    "default_store_fingerprint",
    "write_partition_store",
]
