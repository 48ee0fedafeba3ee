"""Pure functions and autograd functions: halo exchange and its byte accounting."""

from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.halo_exchange import (
    TRANSPORTS,
    PendingExchange,
    exchange_rows,
    halo_exchange,
    start_exchange_rows,
)

__all__ = [
    "TRANSPORTS",
    "ExchangeStats",
    "PendingExchange",
    "exchange_rows",
    "halo_exchange",
    "start_exchange_rows",
]
