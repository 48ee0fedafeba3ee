"""Storage below Lightning: the atomic on-disk cache (``store.cache``)."""
