"""The resumable loader base every sampled system's training loader is built on."""

from lightgraph.data.loader.base import (
    HANDOVERS,
    Emit,
    LoaderStats,
    Moved,
    Prefetcher,
    ResumableLoader,
)

__all__ = ["HANDOVERS", "Emit", "LoaderStats", "Moved", "Prefetcher", "ResumableLoader"]
