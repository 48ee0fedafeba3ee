"""Pure functions and autograd functions: halo exchange, quantisation, byte accounting."""

from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.halo_exchange import (
    TRANSPORTS,
    PendingExchange,
    exchange_rows,
    halo_exchange,
    start_exchange_rows,
)
from lightgraph.functional.quantize import (
    BITS,
    PARAM_BYTES_PER_ROW,
    PARAM_DTYPE,
    QuantizedRows,
    dequantize,
    pack_codes,
    pack_rows,
    packed_nbytes,
    quantize,
    unpack_codes,
    unpack_rows,
)

__all__ = [
    "BITS",
    "PARAM_BYTES_PER_ROW",
    "PARAM_DTYPE",
    "TRANSPORTS",
    "ExchangeStats",
    "PendingExchange",
    "QuantizedRows",
    "dequantize",
    "exchange_rows",
    "halo_exchange",
    "pack_codes",
    "pack_rows",
    "packed_nbytes",
    "quantize",
    "start_exchange_rows",
    "unpack_codes",
    "unpack_rows",
]
