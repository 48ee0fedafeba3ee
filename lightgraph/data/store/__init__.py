"""Storage below Lightning: the atomic on-disk cache (:mod:`.cache`) and HANOI's partition
store (:mod:`.partition_store`). Nothing here imports Lightning."""

from lightgraph.data.store.cache import CacheReader, CacheWriter, CorruptCacheError, build_cache
from lightgraph.data.store.partition_store import (
    IOStats,
    MacroBatch,
    PartitionStore,
    StaleStoreError,
    build_partition_store,
    write_partition_store,
)

__all__ = [
    "CacheReader",
    "CacheWriter",
    "CorruptCacheError",
    "IOStats",
    "MacroBatch",
    "PartitionStore",
    "StaleStoreError",
    "build_cache",
    "build_partition_store",
    "write_partition_store",
]
