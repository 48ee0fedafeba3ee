"""The quantiser's entry points: each call takes a fused path or the torch reference.

**Execution paths** (``path=``; all produce the same bytes for the same seed):

* ``"numba"``: the fused numba CPU kernels (:mod:`~lightgraph.functional.quantize.fused`),
  the default for CPU tensors. ``compiled=True`` is accepted and ignored on this path.
* ``"triton"``: the fused Triton kernels
  (:mod:`~lightgraph.functional.quantize.fused_triton`), the default for CUDA tensors
  with float32, float16 or bfloat16 rows: one kernel per width present for quantize +
  pack and for unpack + dequantize, parameters and noise computed inside. On CPU
  tensors the same kernels run under Triton's interpreter (slow; for tests). Needs the
  ``triton`` package (``pip install 'lightgraph[triton]'``).
* ``"torch"``: the torch reference (:mod:`~lightgraph.functional.quantize.reference`):
  eager, materialising :func:`~lightgraph.functional.quantize.counter_noise` block by
  block; ``compiled=True`` (or a CUDA tensor) runs the element-wise core with the
  in-graph counter hash through ``torch.compile`` instead. The default where the fused
  path of the device is missing (no numba, no triton, float64 rows on CUDA) or has
  failed (it then warns once). An explicit ``noise`` tensor
  (``quantize(..., noise=u)``) always takes it.

``path="auto"`` (the default) picks as above. Blocks with no rows or no columns take the
reference on every path (nothing to fuse; same bytes). Where a kernel rejects a row
(NaN, infinity, a range a bfloat16 scale cannot cover), the call re-runs on the torch
reference, which raises the error that names the row.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from lightgraph.functional.quantize import backend, fused_triton
from lightgraph.functional.quantize.checks import (
    _check_bits,
    _check_buf,
    _check_dim,
    _check_out,
    _check_out_dtype,
    _check_rows,
    _tensor_bits_counts,
)
from lightgraph.functional.quantize.fused import _pack_fast, _quantize_fast, _unpack_fast
from lightgraph.functional.quantize.noise import _draw_seed
from lightgraph.functional.quantize.reference import (
    QuantizedRows,
    _compute_dtype,
    _core,
    _core_params,
    _counter_codes,
    _noise,
    _row_params,
)
from lightgraph.functional.quantize.wire import (
    PARAM_BYTES_PER_ROW,
    WIDE_BYTES_PER_ROW,
    _count_wide,
    _group_order,
    _nbytes,
    _pack_flat,
    _param_sections,
    _read_params,
    _unpack_flat,
)
from lightgraph.utilities.checks import BITS

PATHS = ("auto", "numba", "triton", "torch")
"""Values of the ``path`` argument of the entry points."""

_TRITON_FAILED = False
_T = TypeVar("_T")


def resolve_path(fn: str, path: str, device: torch.device, dtype: torch.dtype | None) -> str:
    """The path (``"numba"``, ``"triton"`` or ``"torch"``) a call with ``path`` takes for
    tensors on ``device`` whose rows have ``dtype`` (``None``: no float rows, i.e.
    unpacking). Raises for a path that cannot run here, naming the argument."""
    if path not in PATHS:
        raise ValueError(f"{fn}: expected `path` to be one of {PATHS} but got {path!r}.")
    triton_dtype = dtype is None or dtype in fused_triton.INPUT_DTYPES
    if path == "auto":
        if device.type == "cpu":
            return "numba" if backend._kernels() is not None else "torch"
        if (
            device.type == "cuda"
            and triton_dtype
            and not _TRITON_FAILED
            and fused_triton.triton_unavailable() is None
        ):
            return "triton"
        return "torch"
    if path == "numba":
        if device.type != "cpu":
            raise ValueError(
                f"{fn}: path='numba' runs on CPU tensors but got tensors on {device}; use "
                "path='auto', 'triton' or 'torch'."
            )
        if backend._kernels() is None:
            raise RuntimeError(f"{fn}: path='numba' needs numba, which could not be imported.")
    if path == "triton":
        reason = fused_triton.triton_unavailable()
        if reason is not None:
            raise RuntimeError(f"{fn}: path='triton' needs triton: {reason}.")
        if device.type not in ("cuda", "cpu"):
            raise ValueError(
                f"{fn}: path='triton' runs on CUDA tensors (or CPU tensors under Triton's "
                f"interpreter) but got tensors on {device}."
            )
        if not triton_dtype:
            raise ValueError(
                f"{fn}: path='triton' takes rows of "
                f"{[str(d) for d in fused_triton.INPUT_DTYPES]} but got {dtype}; use "
                "path='auto' or 'torch'."
            )
    return path


def _triton(path: str, call: Callable[..., _T | None], *args: Any) -> _T | None:
    """Run a Triton driver. Chosen by ``path="auto"``, a failure of Triton itself (it
    cannot compile for this GPU, say) warns once and returns ``None``, so that the
    caller takes the torch reference (same bytes) from now on; asked for explicitly,
    it raises."""
    global _TRITON_FAILED
    try:
        return call(*args)
    except Exception as err:
        if path != "auto":
            raise
        _TRITON_FAILED = True
        warnings.warn(
            f"lightgraph.functional.quantize: the Triton kernels failed ({err!r}); using the "
            "torch reference on CUDA from now on (same results, slower).",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def quantize(
    x: Tensor,
    bits: int,
    generator: torch.Generator | None = None,
    noise: Tensor | None = None,
    *,
    compiled: bool = False,
    path: str = "auto",
) -> QuantizedRows:
    """Stochastic per-row ``bits``-bit quantization (bfloat16 scale, exact zero point).

    .. math::

        \\hat x_{ij} = \\lfloor (x_{ij} - z_i) / s_i + u_{ij} \\rfloor,
        \\quad z_i \\in \\{\\operatorname{bf16}_{\\downarrow}(\\min_j x_{ij}),\\,
        \\operatorname{f32}_{\\downarrow}(\\min_j x_{ij})\\},
        \\quad s_i \\ge \\operatorname{bf16}_{\\uparrow}\\Big(\\frac{\\max_j x_{ij} - z_i}{2^b - 1}\\Big)

    (see :mod:`~lightgraph.functional.quantize.reference` for how ``s_i`` is chosen and when
    the float32 zero point is used).

    Args:
        x: float rows (float16, bfloat16, float32 or float64; computed in float32, or
            float64 for float64 input). Must be finite.
        bits: code width, one of :data:`BITS`.
        generator: source of the one seed drawn for the counter noise
            ``u = counter_noise(seed, N, D)``; ``None``: torch's default generator.
        noise: optional ``u`` supplied by the caller (same shape as ``x``, values in
            ``[0, 1)``); excludes ``generator`` and draws no seed.
        compiled: with ``noise``, run the element-wise core through ``torch.compile``
            (bit-identical codes); without, selects the compiled counter core on the
            torch path (ignored on the fused paths).
        path: ``"auto"``, ``"numba"``, ``"triton"`` or ``"torch"`` (module docstring);
            ignored with ``noise``.

    Returns:
        :class:`QuantizedRows` with unpacked codes.

    Shapes:
        - x: ``[N, D]``; noise: ``[N, D]``.
        - output: codes ``[N, D]`` uint8, scale ``[N]`` bfloat16, zero_point ``[N]`` float32.
    """
    fn = "quantize"
    bits = _check_bits(fn, bits)
    _check_rows(fn, x)
    ct = _compute_dtype(x.dtype)
    if noise is not None:
        u = _noise(fn, x, ct, generator, noise)
        zero, scale = _row_params(fn, x, bits)
        zero_c, scale_c = _core_params(zero, scale, ct)
        codes = _core("codes", compiled, x.numel())(x, zero_c, scale_c, u)
        return QuantizedRows(codes, scale, zero, bits)
    route = resolve_path(fn, path, x.device, x.dtype)
    seed = _draw_seed(generator)
    if x.shape[0] and x.shape[1]:
        q = None
        if route == "numba":
            q = backend._guarded(_quantize_fast, backend._kernels(), x, bits, seed)
        elif route == "triton":
            q = _triton(path, fused_triton.quantize, x, bits, seed)
        if q is not None:
            return q
    zero, scale = _row_params(fn, x, bits)  # raises for the rows the kernel rejected
    zero_c, scale_c = _core_params(zero, scale, ct)
    codes = _counter_codes(x, zero_c, scale_c, seed, 0, compiled)
    return QuantizedRows(codes, scale, zero, bits)


def dequantize(
    q: QuantizedRows | Tensor,
    scale: Tensor | None = None,
    zero_point: Tensor | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    compiled: bool = False,
) -> Tensor:
    """Dequantize codes: ``code * scale + zero_point`` per row (Sylvie Eq. 4).

    .. math::

        \\tilde x_{ij} = s_i \\, \\hat x_{ij} + z_i

    computed in float32 (float64 when ``dtype`` is float64) and cast to ``dtype``.

    Args:
        q: a :class:`QuantizedRows`, or the uint8 codes themselves.
        scale: per-row scales; required with raw codes, must be omitted with
            :class:`QuantizedRows`.
        zero_point: per-row zero points; same rule as ``scale``.
        dtype: output dtype (float16, bfloat16, float32 or float64).
        compiled: use the ``torch.compile`` kernel (bit-identical to eager).

    Shapes:
        - codes: ``[N, D]``; scale, zero_point: ``[N]``.
        - output: ``[N, D]``.
    """
    fn = "dequantize"
    if isinstance(q, QuantizedRows):
        if scale is not None or zero_point is not None:
            raise ValueError(
                f"{fn}: expected `scale` and `zero_point` to be None when `q` is a "
                "QuantizedRows (it carries them) but got tensors."
            )
        codes, scale, zero_point = q.codes, q.scale, q.zero_point
    else:
        codes = q
        if scale is None or zero_point is None:
            raise ValueError(
                f"{fn}: expected `scale` and `zero_point` tensors with raw codes but got "
                f"scale={type(scale).__name__}, zero_point={type(zero_point).__name__}."
            )
    if not isinstance(codes, Tensor) or codes.dtype != torch.uint8 or codes.dim() != 2:
        got = f"{codes.dtype} {tuple(codes.shape)}" if isinstance(codes, Tensor) else type(codes)
        raise ValueError(f"{fn}: expected codes to be a 2-D uint8 tensor [N, D] but got {got}.")
    n = codes.shape[0]
    for name, t in (("scale", scale), ("zero_point", zero_point)):
        if not isinstance(t, Tensor) or t.shape != (n,):
            shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{fn}: expected `{name}` of shape ({n},) but got {shape}.")
    dtype = _check_out_dtype(fn, dtype)
    return _core("dequant", compiled, codes.numel())(codes, scale, zero_point, dtype)


def _pack_reference(
    fn: str,
    x: Tensor,
    rb: Tensor,
    counts: Sequence[int],
    seed: int,
    compiled: bool,
) -> Tensor:
    """The torch reference of :func:`pack_rows` (eager, or compiled counter core)."""
    n, d = x.shape
    ct = _compute_dtype(x.dtype)
    order = _group_order(rb.to(x.device), counts)
    xs = x if order is None else x.index_select(0, order)
    chunks: list[Tensor] = []
    scales: list[Tensor] = []
    zeros: list[Tensor] = []
    start = 0
    for b, nb in zip(BITS, counts, strict=True):
        if nb == 0:
            continue
        xb = xs[start : start + nb]
        zero, scale = _row_params(fn, xb, b)
        zero_c, scale_c = _core_params(zero, scale, ct)
        codes = _counter_codes(xb, zero_c, scale_c, seed, start, compiled)
        chunks.append(_pack_flat(codes.reshape(-1), b))
        scales.append(scale)
        zeros.append(zero)
        start += nb
    if n:
        chunks.extend(_param_sections(torch.cat(scales), torch.cat(zeros)))
    if not chunks:
        return torch.empty(0, dtype=torch.uint8, device=x.device)
    return torch.cat(chunks)


def pack_rows(
    x: Tensor,
    row_bits: Tensor,
    generator: torch.Generator | None = None,
    *,
    compiled: bool = False,
    path: str = "auto",
) -> Tensor:
    """Quantize rows with per-row widths and pack them into one byte buffer (one message).

    .. math::

        \\text{buf} = [\\,P_1 \\,|\\, P_2 \\,|\\, P_4 \\,|\\, P_8 \\,|\\, s \\,|\\, z \\,|\\, t\\,],
        \\quad P_b = \\operatorname{pack}(\\operatorname{quantize}(x[\\text{rows}_b], b))

    Rows are grouped by width in ascending order, keeping their relative order. One seed
    is drawn from ``generator``; group ``b`` (message rows ``start_b ..``) is quantized
    with ``counter_noise(seed, n_b, D, row_offset=start_b)``, i.e. the row index of the
    noise is the row's position in the grouped message. ``t`` is the trailer of the
    wide-offset rows (:mod:`~lightgraph.functional.quantize.wire`).

    Args:
        x: float rows (see :func:`quantize`).
        row_bits: integer width of each row, each one of :data:`BITS` (no 0).
        generator: source of the seed; ``None``: torch's default generator.
        compiled: accepted for compatibility; ignored on the fused paths (the
            defaults), selects the ``torch.compile`` counter core on the torch path
            (same bytes either way).
        path: ``"auto"``, ``"numba"``, ``"triton"`` or ``"torch"`` (module docstring).

    Returns:
        uint8 buffer of :func:`message_nbytes` ``(row_bits, D, W)`` =
        ``packed_nbytes(row_bits, D) + 2 W`` bytes.

    Shapes:
        - x: ``[N, D]``; row_bits: ``[N]``.
        - output: ``[packed_nbytes(row_bits, D) + 2 W]`` uint8.
    """
    fn = "pack_rows"
    _check_rows(fn, x)
    rb, counts = _tensor_bits_counts(fn, row_bits)
    n = x.shape[0]
    if rb.numel() != n:
        raise ValueError(
            f"{fn}: expected `row_bits` to have one entry per row of `x` ({n}) but got {rb.numel()}."
        )
    route = resolve_path(fn, path, x.device, x.dtype)
    seed = _draw_seed(generator)
    if n and x.shape[1]:
        buf = None
        if route == "numba":
            buf = backend._guarded(_pack_fast, backend._kernels(), x, rb.cpu(), counts, seed)
        elif route == "triton":
            buf = _triton(path, fused_triton.pack, x, rb, counts, seed)
        if buf is not None:
            return buf
    return _pack_reference(fn, x, rb, counts, seed, compiled)  # raises for invalid rows


def unpack_rows(
    buf: Tensor,
    row_bits: Tensor,
    dim: int,
    dtype: torch.dtype = torch.float32,
    *,
    compiled: bool = False,
    out: Tensor | None = None,
    path: str = "auto",
) -> Tensor:
    """Invert :func:`pack_rows`: dequantize every row and restore the original order.

    .. math::

        \\tilde x_{ij} = s_i \\, \\hat x_{ij} + z_i

    Args:
        buf: the uint8 buffer from :func:`pack_rows`, exactly
            ``packed_nbytes(row_bits, dim) + 2 W`` bytes (``W`` wide-offset rows, found
            from the flags in the buffer).
        row_bits: the widths ``buf`` was packed with.
        dim: row length ``D``.
        dtype: output dtype (float16, bfloat16, float32 or float64).
        compiled: accepted for compatibility; ignored on the fused paths, selects the
            ``torch.compile`` dequantization core on the torch path (same values).
        out: optional contiguous ``[N, D]`` tensor of ``dtype`` on ``buf``'s device to
            write the rows to (e.g. a slice of a larger receive buffer); returned.
        path: ``"auto"``, ``"numba"``, ``"triton"`` or ``"torch"`` (module docstring).

    Shapes:
        - buf: ``[packed_nbytes(row_bits, D) + 2 W]`` uint8; row_bits: ``[N]``.
        - output: ``[N, D]``.
    """
    fn = "unpack_rows"
    dim = _check_dim(fn, dim)
    dtype = _check_out_dtype(fn, dtype)
    rb, counts = _tensor_bits_counts(fn, row_bits)
    _check_buf(fn, buf)
    route = resolve_path(fn, path, buf.device, None)
    nbytes = _nbytes(counts, dim)
    n = rb.numel()
    if out is not None:
        _check_out(fn, out, (n, dim), dtype, buf.device)
    if buf.numel() < nbytes:
        raise ValueError(
            f"{fn}: expected `buf` to hold packed_nbytes(row_bits, dim={dim}) = {nbytes} "
            f"bytes plus {WIDE_BYTES_PER_ROW} per wide-offset row but got {buf.numel()}."
        )
    num_wide = _count_wide(buf, n, nbytes)
    expected = nbytes + WIDE_BYTES_PER_ROW * num_wide
    if buf.numel() != expected:
        raise ValueError(
            f"{fn}: expected `buf` to hold packed_nbytes(row_bits, dim={dim}) + "
            f"{WIDE_BYTES_PER_ROW} * W = {nbytes} + {WIDE_BYTES_PER_ROW} * {num_wide} = "
            f"{expected} bytes (W = {num_wide} wide-offset rows flagged in its scale "
            f"section) but got {buf.numel()}."
        )
    if n == 0:
        return out if out is not None else torch.empty((0, dim), dtype=dtype, device=buf.device)
    params_at = nbytes - PARAM_BYTES_PER_ROW * n
    if dim > 0:
        rows = None
        if route == "numba":
            k = backend._kernels()
            rb_cpu = rb.cpu()
            rows = backend._guarded(_unpack_fast, k, buf, rb_cpu, counts, dim, dtype, None, out)
        elif route == "triton":
            rows = _triton(path, fused_triton.unpack, buf, rb, counts, dim, dtype, out)
        if rows is not None:
            return rows
    if out is not None:
        return out.copy_(unpack_rows(buf, row_bits, dim, dtype, compiled=compiled, path="torch"))
    scales, zeros = _read_params(buf, n, params_at, num_wide)
    order = _group_order(rb.to(buf.device), counts)
    out = None if order is None else torch.empty((n, dim), dtype=dtype, device=buf.device)
    offset = 0
    row = 0
    for b, nb in zip(BITS, counts, strict=True):
        if nb == 0:
            continue
        size = -(-nb * dim * b // 8)
        codes = _unpack_flat(buf[offset : offset + size], b, nb * dim).view(nb, dim)
        dequant = _core("dequant", compiled, nb * dim)
        rows = dequant(codes, scales[row : row + nb], zeros[row : row + nb], dtype)
        if order is None or out is None:  # one width: the rows are in their original order
            return rows
        out.index_copy_(0, order[row : row + nb], rows)
        offset += size
        row += nb
    assert out is not None
    return out
