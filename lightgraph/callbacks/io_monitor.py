"""Per-epoch storage I/O of sampled training: bytes, read calls, pages, working set."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from lightgraph.utilities.checks import check_bool


def process_io() -> dict[str, int]:
    """This process's I/O counters from ``/proc/self/io`` (empty where it does not exist).

    ``read_bytes`` is what the storage device actually delivered (page-cache misses,
    memory-mapped page faults and read-ahead included); ``rchar``/``syscr`` count bytes
    and calls of ``read``-like system calls whether or not the page cache served them.
    """
    try:
        with open("/proc/self/io") as f:
            return {k: int(v) for k, v in (line.split(":") for line in f if ":" in line)}
    except OSError:
        return {}


class IOMonitor(pl.Callback):
    """Logs what every training epoch read from storage, for the sampled data modules.

    Reads the data module's cumulative ``io_stats()`` (see
    :class:`~lightgraph.data.MacroBatchDataModule` and
    :class:`~lightgraph.data.NeighborSamplingDataModule`) and logs per-epoch differences:

    * ``io/bytes_read``, ``io/read_calls``: explicit reads of the partition store;
    * ``io/pages_touched``: distinct 4 KiB pages of the stored files the epoch accessed
      (store reads, or the feature rows and neighbour lists sampling touched in a
      memory-mapped graph);
    * ``io/device_read_bytes``: bytes the storage device delivered to this process
      (``/proc/self/io``: page-cache misses and read-ahead included; Linux only);
    * ``io/targets``, ``io/mini_batches``: the seeds and the mini-batches that went to
      training this epoch (counted by the loader when a batch is handed to the model, so
      exactly the batches trained, a batch fetched ahead of the epoch's end included in
      the epoch that trains it);
    * ``io/nodes_loaded``: the nodes brought into memory for the targets (macro-batch
      nodes, or sampled nodes for one-stage sampling);
    * ``io/normalized_working_set``: ``nodes_loaded / targets`` -- the normalised working
      set ``C_S(B) / |B|`` of the storage-facing sampler (Eq. 3.3 of T. Huang,
      *Efficient Systems for Large-Scale Graph Representation Learning*, PhD thesis, MIT
      2025), in nodes;
    * ``io/bytes_per_target``: storage bytes per target (``bytes_read``, or
      ``pages_touched * 4096`` for a memory-mapped graph, over ``targets``);
    * ``io/wait_seconds``: time training waited for macro-batches (HANOI, JOESTAR);
    * ``io/h2d_bytes``: bytes of training data handed to the compute device (every tensor
      of a one-stage mini-batch; JOESTAR's macro-batches, history rows and AoT samples);
      host-to-device copies on a GPU, the same tensors handed over in place on the CPU;
    * ``io/nodes_moved``: JOESTAR: macro-batch nodes whose rows moved to the device (fewer
      than ``nodes_loaded`` with ahead-of-time filtering); ``io/stage1_seconds``: host time
      of first-stage sampling (in the background thread).

    Under data parallelism (or any multi-process strategy) every value is global, the
    same on every rank: counters (bytes, calls, pages, targets, nodes, batches) are summed
    over the processes, times (``*_seconds``) take their maximum (the slowest rank), and the
    ratios are those of the summed numerator and denominator (not a mean of per-rank
    ratios); ``io/dropped_targets`` (training targets no rank trains this epoch, so that
    every rank takes the same number of steps; see the sampled data modules) is counted
    for the whole job on every rank and logged once. ``io/pages_touched`` sums each process's distinct pages: a page two ranks touch
    counts twice. :attr:`history` holds the same global values.

    Args:
        prog_bar: also show ``io/bytes_read`` in the progress bar.
    """

    #: Cumulative counters (per-epoch values are differences).
    _KEYS = (
        "bytes_read",
        "read_calls",
        "bytes_requested",
        "targets",
        "mini_batches",
        "nodes_loaded",
        "wait_seconds",
        "read_seconds",
        "macro_batches",
        "passes",
        "h2d_bytes",
        "nodes_moved",
        "stage1_seconds",
        "dropped_targets",
    )
    #: Per-epoch values that are not differences of cumulative counters.
    _EPOCH_KEYS = ("pages_touched", "device_read_bytes")
    #: Counters every rank reports for the whole job (the same number): maxed, not summed.
    _GLOBAL_KEYS = ("dropped_targets",)

    def __init__(self, prog_bar: bool = False) -> None:
        self.prog_bar = check_bool("IOMonitor", "prog_bar", prog_bar)
        self._start: dict[str, float] = {}
        self._proc_start: dict[str, int] = {}
        self.history: list[dict[str, float]] = []

    @staticmethod
    def _stats(trainer: pl.Trainer) -> dict[str, float]:
        module = trainer.datamodule
        fn = getattr(module, "io_stats", None)
        return dict(fn()) if callable(fn) else {}

    # Epochs are delimited by their ends: a loader may start reading (prefetching its
    # first macro-batch, or Lightning fetching the first batch of a loader without a
    # length) before ``on_train_start``/``on_train_epoch_start`` run, never after the
    # epoch ends. The first epoch counts from ``on_fit_start``, before any loader exists.
    @staticmethod
    def _new_epoch(trainer: pl.Trainer) -> None:
        start = getattr(trainer.datamodule, "start_io_epoch", None)
        if callable(start):
            start()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._new_epoch(trainer)
        self._start = self._stats(trainer)
        self._proc_start = process_io()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = self._stats(trainer)
        proc = process_io()
        delta = {k: now.get(k, 0.0) - self._start.get(k, 0.0) for k in self._KEYS if k in now}
        if "pages_touched" in now:  # distinct pages since the epoch began, not cumulative
            delta["pages_touched"] = now["pages_touched"]
        if proc and self._proc_start:
            delta["device_read_bytes"] = float(
                proc.get("read_bytes", 0) - self._proc_start.get("read_bytes", 0)
            )
        self._start, self._proc_start = now, proc
        self._new_epoch(trainer)
        delta = self._reduce(trainer, pl_module, delta)
        targets = delta.get("targets", 0.0)
        if targets > 0:
            if "nodes_loaded" in delta:
                delta["normalized_working_set"] = delta["nodes_loaded"] / targets
            storage = delta.get("bytes_read", 0.0) or 4096.0 * delta.get("pages_touched", 0.0)
            delta["bytes_per_target"] = storage / targets
        self.history.append(delta)
        for key, value in delta.items():
            # The values are already global and equal on every rank: Lightning's own epoch-end
            # reduction (max) keeps them as they are, and knows they are synchronised. That
            # reduction runs on the logged tensor's device: the compute device.
            pl_module.log(
                f"io/{key}",
                torch.tensor(float(value), dtype=torch.float64, device=pl_module.device),
                prog_bar=self.prog_bar and key == "bytes_read",
                on_epoch=True,
                sync_dist=True,
                reduce_fx="max",
            )

    @classmethod
    def _reduce(
        cls, trainer: pl.Trainer, pl_module: pl.LightningModule, delta: dict[str, float]
    ) -> dict[str, float]:
        """The epoch's values over every process: times maxed, everything else summed.

        A key any process reports is reported (its missing values count as 0), so every
        rank logs the same keys. Two collectives; one process gets ``delta`` back unchanged.
        """
        if trainer.world_size == 1:
            return delta
        keys = cls._KEYS + cls._EPOCH_KEYS
        values = torch.tensor(
            [float(delta.get(k, 0.0)) for k in keys], dtype=torch.float64, device=pl_module.device
        )
        present = torch.tensor(
            [float(k in delta) for k in keys], dtype=torch.float64, device=pl_module.device
        )
        # `reduce` may work in place: each call gets a tensor of its own.
        summed = trainer.strategy.reduce(torch.cat([values, present]), reduce_op="sum")
        maxed = trainer.strategy.reduce(values.clone(), reduce_op="max")
        summed, maxed = summed.tolist(), maxed.tolist()
        n = len(keys)
        return {
            k: maxed[i] if k.endswith("_seconds") or k in cls._GLOBAL_KEYS else summed[i]
            for i, k in enumerate(keys)
            if summed[n + i] > 0
        }
