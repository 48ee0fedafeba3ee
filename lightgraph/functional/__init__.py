"""Pure functions and autograd functions: halo exchange, sequence parallelism, quantisation, byte accounting."""

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
from lightgraph.functional.sequence_parallel import SequenceParallel, shard_range, shard_sizes

__all__ = [
    "BITS",
    "PARAM_BYTES_PER_ROW",
    "PARAM_DTYPE",
    "TRANSPORTS",
    "ExchangeStats",
    "PendingExchange",
    "QuantizedRows",
    "SequenceParallel",
    "dequantize",
    "exchange_rows",
    "halo_exchange",
    "pack_codes",
    "pack_rows",
    "packed_nbytes",
    "quantize",
    "shard_range",
    "shard_sizes",
    "start_exchange_rows",
    "unpack_codes",
    "unpack_rows",
]
