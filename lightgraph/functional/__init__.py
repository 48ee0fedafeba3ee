"""Pure functions and autograd functions: halo exchange, sequence parallelism, quantisation, dropout, byte accounting."""

from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.fast_dropout import dropout
from lightgraph.functional.halo_exchange import (
    TRANSPORTS,
    PendingExchange,
    exchange_rows,
    halo_exchange,
    start_exchange_rows,
)
from lightgraph.functional.halo_plan import HaloPlan
from lightgraph.functional.neighbor_sampling import NeighborSample, sample_neighbors, to_csc
from lightgraph.functional.quantize import (
    BITS,
    PARAM_BYTES_PER_ROW,
    PARAM_DTYPE,
    WIDE_BYTES_PER_ROW,
    QuantizedRows,
    counter_noise,
    dequantize,
    message_nbytes,
    pack_codes,
    pack_rows,
    packed_nbytes,
    quantize,
    unpack_codes,
    unpack_rows,
    wide_rows,
)
from lightgraph.functional.sequence_parallel import shard_range, shard_sizes
from lightgraph.functional.sync_interval import SyncIntervalSchedule

__all__ = [
    "BITS",
    "PARAM_BYTES_PER_ROW",
    "PARAM_DTYPE",
    "TRANSPORTS",
    "WIDE_BYTES_PER_ROW",
    "ExchangeStats",
    "HaloPlan",
    "NeighborSample",
    "PendingExchange",
    "QuantizedRows",
    "SyncIntervalSchedule",
    "counter_noise",
    "dequantize",
    "dropout",
    "exchange_rows",
    "halo_exchange",
    "message_nbytes",
    "pack_codes",
    "pack_rows",
    "packed_nbytes",
    "quantize",
    "sample_neighbors",
    "shard_range",
    "shard_sizes",
    "start_exchange_rows",
    "to_csc",
    "unpack_codes",
    "unpack_rows",
    "wide_rows",
]
