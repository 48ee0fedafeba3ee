"""The fused GPU path of the quantiser: drivers of the Triton kernels.

On CUDA tensors, quantize+pack is one kernel launch per width present in the message
(:mod:`lightgraph.functional._quantize_triton`): each program reads its rows, finds
their parameters and writes their packed bytes and wire parameters; the trailer of
wide-offset rows is written by a few element-wise torch ops on the device. Unpack +
dequantize is one launch per width, writing each row straight to its original position.
Rows of a mixed-width message are reached through an index (the stable width order), not
through a grouped copy. The bytes equal those of the numba CPU path and of the torch
reference, bit for bit.

Host synchronisation: one small read per call, the number of wide-offset rows together
with the number of rows the kernels rejected (the message's length depends on the first;
a rejected row sends the call to the torch reference, which raises the error naming it).
:func:`~lightgraph.functional.quantize.unpack_rows` reads the wide-offset count to check
the buffer's length, as on every path.

The same kernels run on CPU tensors under Triton's interpreter (a second copy of the
kernel module loaded with ``triton.knobs.runtime.interpret`` set, whatever the
``TRITON_INTERPRET`` environment variable says); that is slow and meant for tests
(``path="triton"`` on CPU tensors). Rows of float64 take the other paths.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from types import ModuleType

import numpy as np
import torch
from torch import Tensor

from lightgraph.functional.quantize.noise import _seed_keys
from lightgraph.functional.quantize.reference import PARAM_DTYPE, QuantizedRows
from lightgraph.functional.quantize.wire import (
    PARAM_BYTES_PER_ROW,
    WIDE_BYTES_PER_ROW,
    _group_order,
    _nbytes,
)
from lightgraph.utilities.checks import BITS

INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Row dtypes the kernels take (float64 rows take the other paths)."""
_MAX_SCALE_BUMPS = 64
_ELEMENTS_PER_PROGRAM = 2048
_MAX_BLOCK_D = 256

_MODULES: dict[bool, ModuleType | None] = {}
_LOCK = threading.Lock()


def triton_unavailable() -> str | None:
    """Why the Triton path cannot run here (``None`` when it can)."""
    try:
        import triton  # noqa: F401
    except ImportError as err:
        return f"triton is not installed ({err}); pip install 'lightgraph[triton]'"
    return None


def kernels(interpret: bool) -> ModuleType | None:
    """The kernel module, compiled (``interpret=False``, CUDA tensors) or interpreted (CPU
    tensors); ``None`` without triton."""
    if interpret in _MODULES:
        return _MODULES[interpret]
    with _LOCK:
        if interpret not in _MODULES:
            _MODULES[interpret] = _load(interpret)
    return _MODULES[interpret]


def _load(interpret: bool) -> ModuleType | None:
    if triton_unavailable() is not None:
        return None
    import triton

    base = "lightgraph.functional._quantize_triton"
    spec = importlib.util.find_spec(base)
    assert spec is not None and spec.origin is not None
    name = base + ("_interpreted" if interpret else "_compiled")
    spec = importlib.util.spec_from_file_location(name, spec.origin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():  # jit decorators read the flag when they run
        triton.knobs.runtime.interpret = interpret
        sys.modules[name] = module  # triton resolves the kernels' globals through it
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


def _kernels_for(t: Tensor) -> ModuleType | None:
    if t.device.type == "cuda":
        return kernels(False)
    if t.device.type == "cpu":
        return kernels(True)
    return None


def _blocks(dim: int) -> tuple[int, int]:
    """(rows per program, a multiple of 8; columns per tile)."""
    import triton

    block_d = min(triton.next_power_of_2(dim), _MAX_BLOCK_D)
    rows = max(8, min(64, _ELEMENTS_PER_PROGRAM // block_d))
    return rows, block_d


def _launch(k: ModuleType, kernel: str, grid: tuple[int], *args: object, **meta: object) -> None:
    """Launch ``k.<kernel>[grid](*args, **meta)``, never contracting ``a * b + c`` into a
    fused multiply-add (the reference rounds the product first). Under the interpreter,
    numpy's warnings about the padding lanes of a block (e.g. ``inf - inf`` in rows past
    the end, whose results are never stored) are silenced."""
    quiet = np.errstate(all="ignore") if k.__name__.endswith("_interpreted") else nullcontext()
    with quiet:
        getattr(k, kernel)[grid](*args, **meta, num_warps=4, enable_fp_fusion=False)


def _quantize_groups(
    k: ModuleType,
    x: Tensor,
    src: Tensor | None,
    counts: Sequence[int],
    seed: int,
    out: Tensor,
    packed: bool,
) -> tuple[Tensor, Tensor, Tensor, int]:
    """Launch the quantize kernel for every width present; (zero, scale, bad, nbytes)."""
    n, d = x.shape
    dev = x.device
    zero = torch.empty(n, dtype=torch.float32, device=dev)
    scale = torch.empty(n, dtype=torch.float32, device=dev)
    bad = torch.empty(n, dtype=torch.int8, device=dev)
    nbytes = _nbytes(counts, d) if packed else 0
    params_at = nbytes - PARAM_BYTES_PER_ROW * n
    rows, block_d = _blocks(d)
    key_a, key_b = _seed_keys(seed)
    src_arg = src if src is not None else bad
    code_at = 0
    row0 = 0
    for bits, nb in zip(BITS, counts, strict=True):
        if nb == 0:
            continue
        per = 8 // bits if packed else 1
        block_bytes = max(1, _ELEMENTS_PER_PROGRAM // per)
        grid = (-(-nb // rows),)
        _launch(
            k, "quantize_kernel", grid, x, x.stride(0), src_arg, nb, d, row0, key_a, key_b,
            out, code_at, zero, scale, bad, params_at, n,
            HAS_SRC=src is not None, PACKED=packed, BITS=bits, ROWS=rows,
            BLOCK_D=block_d, BLOCK_BYTES=block_bytes, MAX_BUMPS=_MAX_SCALE_BUMPS,
        )  # fmt: skip
        if packed:
            code_at += -(-nb * d * bits // 8)
        row0 += nb
    return zero, scale, bad, nbytes


def pack(x: Tensor, rb: Tensor, counts: Sequence[int], seed: int) -> Tensor | None:
    """Fused quantize+pack of ``x`` (``[N, D]``, ``N, D >= 1``) with widths ``rb``; ``None``
    if a row is invalid (the reference then raises)."""
    k = _kernels_for(x)
    assert k is not None
    n, d = x.shape
    x = x.detach().contiguous()
    nbytes = _nbytes(counts, d)
    # the message, room for a trailer entry per row, and one spare entry the rows that
    # are not wide-offset write to (no boolean indexing, so no host synchronisation)
    buf = torch.empty(nbytes + WIDE_BYTES_PER_ROW * (n + 1), dtype=torch.uint8, device=x.device)
    src = _group_order(rb.to(x.device), counts)
    zero, _, bad, _ = _quantize_groups(k, x, src, counts, seed, buf, packed=True)
    lo = zero.view(torch.int32) & 0xFFFF
    wide = lo != 0
    at = nbytes + WIDE_BYTES_PER_ROW * (torch.cumsum(wide, 0) - 1)
    at = torch.where(wide, at, nbytes + WIDE_BYTES_PER_ROW * n)
    buf[at] = (lo & 0xFF).to(torch.uint8)
    buf[at + 1] = (lo >> 8).to(torch.uint8)
    num_wide, num_bad = torch.stack([wide.sum(), bad.sum()]).tolist()  # the one sync
    if num_bad:
        return None
    return buf[: nbytes + WIDE_BYTES_PER_ROW * num_wide]


def quantize(x: Tensor, bits: int, seed: int) -> QuantizedRows | None:
    """Fused quantization to unpacked codes; ``None`` if a row is invalid."""
    k = _kernels_for(x)
    assert k is not None
    n, d = x.shape
    x = x.detach().contiguous()
    codes = torch.empty((n, d), dtype=torch.uint8, device=x.device)
    counts = [n if b == bits else 0 for b in BITS]
    zero, scale, bad, _ = _quantize_groups(k, x, None, counts, seed, codes, packed=False)
    if int(bad.sum()):
        return None
    return QuantizedRows(codes, scale.to(PARAM_DTYPE), zero, bits)


def unpack(
    buf: Tensor,
    rb: Tensor,
    counts: Sequence[int],
    dim: int,
    dtype: torch.dtype,
    out: Tensor | None = None,
) -> Tensor:
    """Fused unpack+dequantize of a validated message (``N, dim >= 1``) into ``out`` (a
    contiguous ``[N, dim]`` tensor of ``dtype`` on ``buf``'s device) or a new tensor."""
    k = _kernels_for(buf)
    assert k is not None
    n = rb.numel()
    dev = buf.device
    buf = buf.contiguous()
    if out is None:
        out = torch.empty((n, dim), dtype=dtype, device=dev)
    nbytes = _nbytes(counts, dim)
    params_at = nbytes - PARAM_BYTES_PER_ROW * n
    flags = (buf[params_at + 1 : params_at + 2 * n : 2] >= 0x80).to(torch.int32)
    tidx = torch.cumsum(flags, 0, dtype=torch.int32) - flags  # wide rows before each row
    src = _group_order(rb.to(dev), counts)
    src_arg = src if src is not None else tidx
    rows, block_d = _blocks(dim)
    code_at = 0
    row0 = 0
    for bits, nb in zip(BITS, counts, strict=True):
        if nb == 0:
            continue
        grid = (-(-nb // rows),)
        _launch(
            k, "dequantize_kernel", grid, buf, src_arg, nb, dim, row0, code_at, params_at, nbytes, n, tidx, out,
            HAS_SRC=src is not None, BITS=bits, F64=dtype == torch.float64,
            BF16=dtype == torch.bfloat16, ROWS=rows, BLOCK_D=block_d,
        )  # fmt: skip
        code_at += -(-nb * dim * bits // 8)
        row0 += nb
    return out
