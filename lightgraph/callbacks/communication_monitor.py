"""Log the boundary-exchange volume of every training epoch, data and overhead apart."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from typing_extensions import override

from lightgraph.distributed.context import parallel_context


class CommunicationMonitor(Callback):
    """Bytes sent by all ranks per training epoch, split as in Sylvie's Table XII.

    Logs (summed over ranks, per epoch):

    * ``comm/data_bytes``: message payload (FP32 rows, or the packed quantisation codes:
      ``ceil(n_b * D * b / 8)`` bytes per width group of a message);
    * ``comm/params_bytes``: quantisation side information: the bfloat16 scale and zero
      point of every quantised row (4 bytes) plus the trailer entry of every wide-offset
      row (2 more bytes; see :mod:`lightgraph.functional.quantize.wire`);
    * ``comm/forward_bytes`` / ``comm/backward_bytes``: embeddings vs. embedding gradients;
    * ``comm/params_share``: ``params / (data + params)``;
    * ``comm/quant_seconds``: time spent quantising and dequantising messages in the
      epoch (the slowest rank).

    ``data + params`` is exactly the length of the messages sent. Not counted: the
    per-peer size announcement that precedes every quantised exchange (one ``int64`` per
    peer), and what a rank receives (its sender counts it).

    Needs a strategy with a halo exchanger (``BoundaryExchangeStrategy``); on a single
    process it logs nothing.
    """

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        exchanger = parallel_context(pl_module).halo_exchanger
        if exchanger is None or trainer.world_size == 1:
            return
        stats = exchanger.stats
        values = {
            "comm/data_bytes": stats.total("train", kind="data"),
            "comm/params_bytes": stats.total("train", kind="params"),
            "comm/forward_bytes": stats.total("train", direction="forward"),
            "comm/backward_bytes": stats.total("train", direction="backward"),
        }
        reduced = {}
        for key, value in values.items():
            tensor = torch.tensor(float(value), dtype=torch.float64, device=pl_module.device)
            reduced[key] = trainer.strategy.reduce(tensor, reduce_op="sum")
            pl_module.log(key, reduced[key], sync_dist=True, reduce_fx="max")  # equal on all ranks
        seconds = torch.tensor(stats.seconds("train"), dtype=torch.float64, device=pl_module.device)
        pl_module.log("comm/quant_seconds", seconds, sync_dist=True, reduce_fx="max")
        total = reduced["comm/data_bytes"] + reduced["comm/params_bytes"]
        share = reduced["comm/params_bytes"] / total if float(total) > 0 else total
        pl_module.log("comm/params_share", share, sync_dist=True, reduce_fx="max")
