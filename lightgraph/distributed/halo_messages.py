"""What the halo exchanger sends and keeps: per-layer messages (rows, counts, bit widths),
their decoding, transfers in flight and the buffers a resumed run restores."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lightgraph.functional.exchange_stats import ExchangeStats
from lightgraph.functional.halo_exchange import (
    PendingBytes,
    Ready,
)
from lightgraph.functional.quantize import (
    unpack_rows,
)


@dataclass
class HaloMessages:
    """Which rows travel between this rank and its peers in one training epoch."""

    send_index: Tensor  # local ids of inner rows to send, grouped per peer
    send_counts: list[int]
    recv_index: (
        Tensor | None
    )  # positions of received rows among the halo rows (None: all, in order)
    recv_counts: list[int]
    send_bits: Tensor | None  # bit-width per sent row (None: FP32)
    recv_bits: Tensor | None  # bit-width per received row
    num_halo: int

    def place(self, received: Tensor) -> Tensor:
        """Received rows -> ``[num_halo, F]`` halo rows (zeros for rows not sent)."""
        if self.recv_index is None:
            return received
        halo = received.new_zeros((self.num_halo,) + tuple(received.shape[1:]))
        halo[self.recv_index] = received
        return halo

    def pick(self, halo_grad: Tensor) -> Tensor:
        """``[num_halo, F]`` halo gradients -> the rows that travel back."""
        return halo_grad if self.recv_index is None else halo_grad[self.recv_index]

    def to(self, device: torch.device) -> HaloMessages:
        """The same layout with its tensors on ``device``."""

        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device)

        return dataclasses.replace(
            self,
            send_index=self.send_index.to(device),
            recv_index=move(self.recv_index),
            send_bits=move(self.send_bits),
            recv_bits=move(self.recv_bits),
        )

    def state(self) -> dict[str, Any]:
        """The layout as checkpoint data: CPU tensors, ints, lists and ``None`` only."""

        def cpu(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.detach().cpu()

        return {
            "send_index": cpu(self.send_index),
            "send_counts": [int(c) for c in self.send_counts],
            "recv_index": cpu(self.recv_index),
            "recv_counts": [int(c) for c in self.recv_counts],
            "send_bits": cpu(self.send_bits),
            "recv_bits": cpu(self.recv_bits),
            "num_halo": int(self.num_halo),
        }


class Decoding:
    """A pending quantised transfer; :meth:`wait` returns dequantised rows.

    The received bytes are split per peer by the sizes the peers announced
    (:func:`~lightgraph.functional.halo_exchange.start_exchange_bytes`), not by
    :func:`~lightgraph.functional.quantize.packed_nbytes`: a packed buffer may carry more
    than the formula's bytes. On CUDA the wait and the dequantisation run on the
    exchanger's side stream (``stream``) and the caller's stream is ordered after them.
    The rows are decoded once; later calls return them again.
    """

    def __init__(
        self,
        pending: PendingBytes,
        bits: Tensor,
        counts: list[int],
        dim: int,
        dtype: torch.dtype,
        stats: ExchangeStats,
        compiled: bool = False,
        stream: Any = None,
    ) -> None:
        self.pending, self.bits, self.counts, self.dim = pending, bits, counts, dim
        self.dtype, self.stats, self.compiled, self.stream = dtype, stats, compiled, stream
        self._rows: Tensor | None = None

    def wait(self) -> Tensor:
        if self._rows is not None:
            return self._rows
        consumer = None if self.stream is None else torch.cuda.current_stream(self.stream.device)
        with nullcontext() if self.stream is None else torch.cuda.stream(self.stream):
            buf = self.pending.wait()
            tic = time.perf_counter()
            try:
                rows = self._decode(buf, self.pending.recv_counts)
            finally:
                self.stats.record_time("train", "dequantize", time.perf_counter() - tic)
        if consumer is not None:
            consumer.wait_stream(self.stream)
            rows.record_stream(consumer)
        self._rows = rows
        self.pending = None  # type: ignore[assignment]  # free the received bytes
        return rows

    def _decode(self, buf: Tensor, sizes: list[int] | None) -> Tensor:
        if sizes is None or len(sizes) != len(self.counts) or sum(sizes) != buf.numel():
            raise RuntimeError(
                f"HaloExchanger: expected the peers' message sizes to add up to the "
                f"{buf.numel()} bytes received, one per peer ({len(self.counts)}), but got {sizes}."
            )
        # Every peer's rows are dequantised straight into their slice of one buffer.
        rows = torch.empty((sum(self.counts), self.dim), dtype=self.dtype, device=buf.device)
        start, row = 0, 0
        for count, size in zip(self.counts, sizes, strict=True):
            if count:
                unpack_rows(
                    buf[start : start + size],
                    self.bits[row : row + count],
                    self.dim,
                    self.dtype,
                    compiled=self.compiled,
                    out=rows[row : row + count],
                )
            elif size:
                raise RuntimeError(
                    f"HaloExchanger: a peer sent {size} bytes where no rows were expected; the "
                    f"ranks disagree on the message layout."
                )
            start += size
            row += count
        return rows


@dataclass
class Inflight:
    pending: Any
    msgs: HaloMessages
    layer: str


class RestoredRows(Ready):
    """Rows carried into the first epoch of a resumed run (:meth:`HaloExchanger.set_rng_state`).

    Saved as CPU tensors; :meth:`HaloExchanger.transfer` moves them, and their layout, to
    the exchange's device when an asynchronous epoch uses them.
    """


_BUFFER_KEYS: tuple[str, ...] = (
    "layer",
    "direction",
    "rows",
    "send_index",
    "send_counts",
    "recv_index",
    "recv_counts",
    "send_bits",
    "recv_bits",
    "num_halo",
)


def restore_buffers(owner: str, entries: Any) -> dict[tuple[str, str], tuple[Any, HaloMessages]]:
    """The exchanger's buffers from the ``"buffers"`` of :meth:`HaloExchanger.rng_state`."""
    if not isinstance(entries, list | tuple):
        raise TypeError(
            f"{owner}: expected state['buffers'] to be a list of carried exchanges (from "
            f"HaloExchanger.rng_state()) but got {type(entries).__name__}."
        )
    buffers: dict[tuple[str, str], tuple[Any, HaloMessages]] = {}
    for i, entry in enumerate(entries):
        where = f"state['buffers'][{i}]"
        if not isinstance(entry, Mapping) or set(entry) != set(_BUFFER_KEYS):
            got = sorted(entry) if isinstance(entry, Mapping) else type(entry).__name__
            raise TypeError(
                f"{owner}: expected {where} to be a mapping with the keys {sorted(_BUFFER_KEYS)} "
                f"but got {got}."
            )
        layer, direction = entry["layer"], entry["direction"]
        if not isinstance(layer, str) or direction not in ("forward", "backward"):
            raise ValueError(
                f"{owner}: expected {where} to name a layer (str) and a direction ('forward' or "
                f"'backward') but got {layer!r} and {direction!r}."
            )
        for name in ("rows", "send_index", "recv_index", "send_bits", "recv_bits"):
            optional = name not in ("rows", "send_index")
            value = entry[name]
            if not (isinstance(value, Tensor) or (optional and value is None)):
                raise TypeError(
                    f"{owner}: expected {where}[{name!r}] to be a tensor"
                    f"{' or None' if optional else ''} but got {type(value).__name__}."
                )
        for name in ("send_counts", "recv_counts"):
            if not isinstance(entry[name], list | tuple):
                raise TypeError(
                    f"{owner}: expected {where}[{name!r}] to be a list of ints but got "
                    f"{type(entry[name]).__name__}."
                )
        msgs = HaloMessages(
            send_index=entry["send_index"],
            send_counts=[int(c) for c in entry["send_counts"]],
            recv_index=entry["recv_index"],
            recv_counts=[int(c) for c in entry["recv_counts"]],
            send_bits=entry["send_bits"],
            recv_bits=entry["recv_bits"],
            num_halo=int(entry["num_halo"]),
        )
        buffers[(layer, direction)] = (RestoredRows(entry["rows"]), msgs)
    return buffers
