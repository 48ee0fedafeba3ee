"""The fused CPU path of the quantiser: drivers of the numba kernels.

Quantize+pack reads each row once for its min/max, then once more from L1 for the
in-kernel noise, the codes and the bit packing, writing its bytes straight into the
message; unpack+dequantize reads each row's bytes and writes the row, in one pass (the
kernels are in :mod:`lightgraph.functional._quantize_kernels`). Messages of at least
``2^16`` elements are split into parts (contiguous row ranges; every part writes its own
whole bytes) that ``torch.get_num_threads()`` threads (this one and helpers) take one at
a time, the kernels releasing the GIL; no numba threading layer (whose OpenMP pool would
compete with torch's) is used. The kernels are compiled on first use and cached on disk;
:func:`warmup` compiles every signature up front. They give the bytes of the torch
reference (:mod:`~lightgraph.functional.quantize.reference`,
:mod:`~lightgraph.functional.quantize.wire`) bit for bit.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lightgraph.functional.quantize import backend
from lightgraph.functional.quantize.checks import _tensor_bits_counts
from lightgraph.functional.quantize.noise import _seed_keys
from lightgraph.functional.quantize.reference import PARAM_DTYPE, QuantizedRows, _compute_dtype
from lightgraph.functional.quantize.wire import (
    PARAM_BYTES_PER_ROW,
    WIDE_BYTES_PER_ROW,
    _count_wide,
    _nbytes,
)
from lightgraph.utilities.checks import BITS

# Messages of at least _PARALLEL_MIN_NUMEL elements are split into _PARTS_PER_THREAD
# parts per thread for torch.get_num_threads() threads (at most _MAX_THREADS); the numba
# kernels release the GIL.
_PARALLEL_MIN_NUMEL = 1 << 16
_MAX_THREADS = 8
_PARTS_PER_THREAD = 4

_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_PID = 0
_EXECUTOR_LOCK = threading.Lock()


def _numpy_rows(x: Tensor) -> np.ndarray:
    """``x`` as a C-contiguous float32/float64 numpy array (bfloat16/float16 upcast)."""
    x = x.detach()
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    return x.contiguous().numpy()


def _executor(workers: int) -> ThreadPoolExecutor:
    """The helper threads of the kernels (re-created after a fork or to grow)."""
    global _EXECUTOR, _EXECUTOR_PID
    with _EXECUTOR_LOCK:
        ex = _EXECUTOR
        if ex is None or _EXECUTOR_PID != os.getpid() or ex._max_workers < workers:
            if ex is not None and _EXECUTOR_PID == os.getpid():
                ex.shutdown(wait=False)
            ex = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lightgraph-quantize")
            _EXECUTOR, _EXECUTOR_PID = ex, os.getpid()
        return ex


class _Parts:
    """Parts ``0 .. total - 1`` of one kernel call, handed out one at a time to whichever
    thread asks first. A helper thread that starts late (e.g. while torch's OpenMP
    workers still spin after a parallel op) finds the work done and leaves, so a call is
    never much slower than on the calling thread alone."""

    def __init__(self, kernel: Callable[..., None], args: tuple[Any, ...], total: int) -> None:
        self.kernel, self.args, self.total = kernel, args, total
        self.next = itertools.count()  # next() is atomic under the GIL
        self.done = 0
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        while (k := next(self.next)) < self.total:
            try:
                self.kernel(*self.args, k, self.total)
            except BaseException as err:  # pragma: no cover - kernels report via status
                self.error = err
            with self.lock:
                self.done += 1
                if self.done == self.total:
                    self.finished.set()

    def wait(self) -> None:
        self.finished.wait()
        if self.error is not None:  # pragma: no cover
            raise self.error


def _parts_runner(numel: int, threads: int | None = None) -> Callable[..., None]:
    """``run(kernel, args)``: ``kernel(*args, part, parts)`` for every part of a message.

    One part on the calling thread below _PARALLEL_MIN_NUMEL elements; otherwise
    ``_PARTS_PER_THREAD`` parts per thread for ``torch.get_num_threads()`` threads (the
    calling one and helpers), scheduled dynamically (:class:`_Parts`).
    """
    if threads is None:
        threads = torch.get_num_threads() if numel >= _PARALLEL_MIN_NUMEL else 1
    threads = max(1, min(threads, _MAX_THREADS))

    def run(kernel: Callable[..., None], args: tuple[Any, ...]) -> None:
        if threads == 1:
            kernel(*args, 0, 1)
            return
        parts = _Parts(kernel, args, threads * _PARTS_PER_THREAD)
        executor = _executor(threads - 1)
        for _ in range(threads - 1):
            executor.submit(parts.work)
        parts.work()
        parts.wait()

    return run


def _message_order(
    k: ModuleType, rb: Tensor, counts: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """``(src, pos)``: original row of each message position and its inverse."""
    return k.message_order(rb.cpu().numpy(), list(counts))


def warmup() -> float:
    """Compile every numba kernel signature now (float32/float64 rows, packed and unpacked
    codes, every width, rows that fill whole bytes and rows that straddle bytes, and the
    threaded drivers when enabled) instead of in the first exchange.

    Kernels are cached on disk (``numba``'s ``cache=True``), so after the first process
    this mostly loads them. A no-op without numba. Returns the seconds spent.
    """
    tic = time.perf_counter()
    k = backend._kernels()
    if k is None:
        return 0.0
    rows = 3 * k.CHUNK_ROWS // 2  # more than one chunk per group
    counts = [rows] * len(BITS)
    row_bits = torch.tensor(BITS).repeat_interleave(rows)
    g = torch.Generator().manual_seed(0)
    for dim in (5, 8):  # straddling and whole-byte rows
        base = torch.randn(4 * rows, dim, generator=g)
        base[::2] += 1000.0  # wide-offset rows
        for dtype in (torch.float32, torch.float64):
            x = base.to(dtype)
            buf = _pack_fast(k, x, row_bits, counts, 0, threads=2)
            assert buf is not None
            _unpack_fast(k, buf, row_bits, counts, dim, dtype, threads=2)
            _quantize_fast(k, x, 4, 0)
    _tensor_bits_counts("warmup", row_bits)
    _count_wide(torch.zeros(_nbytes(counts, 1), dtype=torch.uint8), 4 * rows, _nbytes(counts, 1))
    return time.perf_counter() - tic


def _pack_fast(
    k: ModuleType,
    x: Tensor,
    rb: Tensor,
    counts: Sequence[int],
    seed: int,
    threads: int | None = None,
) -> Tensor | None:
    """Fused quantize+pack; ``None`` if a row is invalid (the reference then raises)."""
    n, d = x.shape
    xn = _numpy_rows(x)
    nbytes = _nbytes(counts, d)
    params_at = nbytes - PARAM_BYTES_PER_ROW * n
    buf = torch.empty(nbytes + WIDE_BYTES_PER_ROW * n, dtype=torch.uint8)
    bn = buf.numpy()
    sbits = np.empty(n, np.uint16)
    zeros = np.empty(n, np.float32)
    wide = np.empty(n, np.bool_)
    a, b = _seed_keys(seed)
    order = _message_order(k, rb, counts)
    run = _parts_runner(n * d, threads)
    args = (xn, rb.cpu().numpy(), order, list(counts), a, b, True, bn, sbits, zeros, wide, run)
    status = k.quantize_rows(*args)
    if status:
        return None
    w = k.write_params(bn, params_at, sbits, zeros, wide)
    return buf[: nbytes + WIDE_BYTES_PER_ROW * w]


def _unpack_fast(
    k: ModuleType,
    buf: Tensor,
    rb: Tensor,
    counts: Sequence[int],
    dim: int,
    dtype: torch.dtype,
    threads: int | None = None,
    into: Tensor | None = None,
) -> Tensor:
    """Fused unpack+dequantize of a validated CPU message (``rb`` int64, ``dim >= 1``).

    ``into``: a contiguous ``[N, dim]`` tensor of ``dtype`` to write the rows to.
    """
    n = rb.numel()
    ct = _compute_dtype(dtype)
    direct = into is not None and into.dtype == ct
    out = into if direct else torch.empty((n, dim), dtype=ct)
    params_at = _nbytes(counts, dim) - PARAM_BYTES_PER_ROW * n
    order = _message_order(k, rb, counts)
    run = _parts_runner(n * dim, threads)
    bn = buf.contiguous().numpy()
    k.dequantize_rows(bn, rb.cpu().numpy(), order, list(counts), params_at, out.numpy(), run)
    if into is not None and not direct:
        return into.copy_(out)
    return out if ct == dtype else out.to(dtype)


def _quantize_fast(
    k: ModuleType, x: Tensor, bits: int, seed: int, threads: int | None = None
) -> QuantizedRows | None:
    """Fused quantize to unpacked codes; ``None`` if a row is invalid."""
    n, d = x.shape
    codes = torch.empty((n, d), dtype=torch.uint8)
    sbits = np.empty(n, np.uint16)
    zeros = np.empty(n, np.float32)
    wide = np.empty(n, np.bool_)
    counts = [n if b == bits else 0 for b in BITS]
    rows = np.arange(n, dtype=np.int64)
    a, b = _seed_keys(seed)
    run = _parts_runner(n * d, threads)
    flat = codes.numpy().reshape(-1)
    rb = np.full(n, bits, np.int64)
    args = (_numpy_rows(x), rb, (rows, rows), counts, a, b, False, flat, sbits, zeros, wide, run)
    status = k.quantize_rows(*args)
    if status:
        return None
    scale = torch.from_numpy(sbits.view(np.int16)).view(PARAM_DTYPE)
    return QuantizedRows(codes, scale, torch.from_numpy(zeros), bits)
