"""Per-row stochastic integer quantization of boundary-node messages (Sylvie, ICDE'24, Eq. 3-4).

Each row ``h`` (one boundary node's embedding, or its embedding gradient) is sent as
``b``-bit integer codes plus two per-row parameters, a zero point and a scale:

.. math::

    \\hat h_i = \\left\\lfloor \\frac{h_i - z}{s} + u_i \\right\\rfloor,
    \\quad u_i \\sim U[0, 1), \\qquad
    \\tilde h_i = s \\, \\hat h_i + z,
    \\qquad z \\approx \\min(h), \\; s \\approx \\frac{\\max(h) - \\min(h)}{2^b - 1}.

Stochastic rounding makes the round trip unbiased, :math:`E[\\tilde h_i] = h_i`, with
per-element variance :math:`f_i (1 - f_i) s^2 \\le s^2 / 4` where
:math:`f_i = \\operatorname{frac}((h_i - z) / s)`; for fractions spread uniformly over
``[0, 1)`` a row of ``D`` elements has total variance :math:`D s^2 / 6` in expectation.
``floor(v + u)`` is evaluated as ``floor(v) + (u < frac(v))`` (``frac(v) = v - floor(v)``
is exact in floating point), which is the same rule without the rounding error of
``v + u``: the code is ``floor(v) + 1`` with probability ``frac(v)`` up to the ``2^-24``
granularity of ``u``.

**Parameters are chosen first**, in the precision they are sent in, and the row is
quantized against exactly those values. Rounding exact parameters *after* quantizing
would shift every dequantized value and could push the row maximum past the top code.

* The scale travels as bfloat16 (2 bytes; bfloat16 keeps float32's exponent range, so
  tiny gradients do not underflow as they would in float16): for a zero point ``z``,
  ``scale = (max - z) / (2^b - 1)`` rounded toward ``+inf`` to bfloat16; while either
  ``(max - z) / scale`` evaluated in the compute dtype exceeds ``2^b - 1`` or
  ``z + scale * (2^b - 1) < max`` holds exactly (checked with an error-free
  difference), ``scale`` is raised by one bfloat16 ulp (in practice at most one step).
  The scale is then at most one bfloat16 ulp (``2^-7`` relative) above
  ``(max - z) / (2^b - 1)``.
* The zero point of an *ordinary* row is ``z16 = min`` rounded toward ``-inf`` to
  bfloat16 (2 bytes), with its scale ``s16``. A row far from zero relative to its range
  (e.g. ``[999.99, 1000.01]``) would get a much coarser step that way: ``min - z16``
  can be ``2^-8 |min|``, far more than ``max - min``. So every row also gets
  ``z32 = min`` as float32 (exact for float32, float16 and bfloat16 input; rounded
  toward ``-inf`` for float64 input) with its scale ``s32``. A row is **wide-offset**
  iff ``s16 > s32``; it is sent with ``z32`` (2 extra bytes), every other row with
  ``z16``. As ``z16 <= z32``, ``s16 >= s32`` always: every row's step is ``s32``, at
  most one bfloat16 ulp (0.79 %) above the ideal ``(max - min) / (2^b - 1)`` whatever
  the row's offset, while that ideal step is a normal bfloat16 number (``>= 2^-126``;
  float32 input: for float64 input ``min - z32`` adds less than one float32 ulp of
  ``min``).
  :attr:`QuantizedRows.zero_point` is float32 and holds exactly the value used; a row
  is wide-offset iff its zero point is not a bfloat16 value (``z32`` is a bfloat16
  value only when it equals ``z16``).

Every ``v = (x - zero) / scale`` then lies in ``[0, 2^b - 1]`` in floating point, no code
is ever clipped, and quantization stays unbiased against the parameters actually sent.
A constant row (``max == min``) gets ``scale = 0`` and all codes ``0`` and dequantizes
exactly (a constant that is not a bfloat16 value is a wide-offset row); the division uses
a scale of 1 for such rows, so no NaN appears. A zero point of ``-0.0`` is sent as
``+0.0``. Values must lie within bfloat16's finite range (``|x| <= 3.39e38``).

**Compute dtype.** Arithmetic runs in float32 (float64 for float64 input); bfloat16 and
float16 input is upcast exactly.

**Random stream.** Without an explicit ``noise`` tensor, ``u`` comes from a counter-based
stream (:func:`counter_noise`): a 32-bit integer hash of ``(seed, row, column)``,
computed where it is used (inside the fused kernel), never materialised. One ``seed`` is
drawn per call of :func:`quantize` / :func:`pack_rows`,
``seed = torch.randint(0, 2**31 - 1, (1,), generator=generator)`` (on the generator's
device; ``generator=None`` draws from torch's default CPU generator), so the generator
advances by exactly one draw per call. ``row`` is the row's position in the *message*:
its index in ``x`` for :func:`quantize`, its position in the width-grouped order for
:func:`pack_rows` (see below). With ``(a, b)`` derived from the seed,

.. math::

    h = \\operatorname{mix}(\\operatorname{mix}(\\text{row} \\cdot \\phi_r + a) \\oplus
    \\operatorname{mix}(\\text{col} \\cdot \\phi_c + b)),
    \\qquad u = \\lfloor h / 2^8 \\rfloor \\cdot 2^{-24}

(arithmetic modulo ``2^32``, ``mix`` the "lowbias32" finaliser, a bijection of 32-bit
integers), so ``u`` takes the same ``2^24`` equally likely float32 values as
``torch.rand``. Equal seeds give equal codes on every path and device.

**Bit packing.** Codes are packed little-endian within each byte: code ``j`` of a group of
``8 / b`` consecutive codes occupies bits ``[j b, (j + 1) b)`` of its byte; the last byte
is zero-padded. :func:`pack_rows` lays out one message with mixed widths as

``[codes of 1-bit rows][2-bit rows][4-bit rows][8-bit rows][scales][zero points][trailer]``

where rows are grouped by width (ascending) keeping their original relative order, each
code block is the packed row-major codes of its group (rows may straddle bytes when
``D b`` is not a multiple of 8), and the ``N`` scales and ``N`` zero points are raw
bfloat16 bytes in the same grouped order (native byte order, little-endian on every
supported platform). A wide-offset row sets the sign bit of its scale (scales are
``>= 0``, so the bit is free), puts the high 16 bits of its float32 zero point (a
bfloat16 number: the top half of a float32) in its zero-point slot, and the low 16
bits in the trailer: one 2-byte entry per wide-offset row, in grouped order. Size:

.. math::

    \\text{nbytes} = \\underbrace{\\sum_{b} \\lceil n_b D b / 8 \\rceil + 4 N}
    _{\\text{packed\\_nbytes(row\\_bits, D)}} + 2 W

with ``W`` the number of wide-offset rows; a receiver finds ``W`` by counting the flags
of the scale section, whose offset follows from ``row_bits`` and ``D``
(:func:`wide_rows`, :func:`message_nbytes`).

**Execution paths** (all produce the same bytes for the same seed):

* CPU, the default: fused numba kernels (``lightgraph/functional/_quantize_kernels.py``):
  quantize+pack reads each row once for its min/max, then once more from L1 for the
  in-kernel noise, the codes and the bit packing, writing its bytes straight into the
  message; unpack+dequantize reads each row's bytes and writes the row, in one pass.
  Messages of at least ``2^16`` elements are split into parts (contiguous row ranges;
  every part writes its own whole bytes) that ``torch.get_num_threads()`` threads (this
  one and helpers) take one at a time, the kernels releasing the GIL; no numba threading
  layer (whose OpenMP pool would compete with torch's) is used. The kernels are compiled on
  first use and cached on disk; :func:`warmup` compiles every signature up front.
  ``compiled=True`` is accepted and ignored on this path.
* CUDA tensors: the element-wise core with the in-graph counter hash runs through
  ``torch.compile`` (Inductor generates one Triton kernel for hash + quantize); row
  statistics, the parameter search and bit packing are eager torch. Untested: written
  without a GPU at hand (the CUDA tests skip there); if compilation fails it warns
  once and falls back to the eager reference.
* The eager torch reference (no numba): materialises :func:`counter_noise` block by
  block; ``compiled=True`` there compiles the counter core with Inductor instead. An
  explicit ``noise`` tensor (``quantize(..., noise=u)``) always takes the reference
  element-wise core, eager or compiled.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from lightgraph.utilities.checks import BITS

__all__ = [
    "BITS",
    "PARAM_BYTES_PER_ROW",
    "PARAM_DTYPE",
    "SEED_HIGH",
    "WIDE_BYTES_PER_ROW",
    "QuantizedRows",
    "counter_noise",
    "dequantize",
    "message_nbytes",
    "pack_codes",
    "pack_rows",
    "packed_nbytes",
    "quantize",
    "unpack_codes",
    "unpack_rows",
    "warmup",
    "wide_rows",
]

PARAM_DTYPE = torch.bfloat16
"""dtype of the per-row scale and (ordinary rows') zero point on the wire."""
PARAM_BYTES_PER_ROW: int = 2 * torch.finfo(PARAM_DTYPE).bits // 8
"""Bytes of side information per ordinary row: one scale and one zero point (4)."""
WIDE_BYTES_PER_ROW: int = 2
"""Extra trailer bytes per wide-offset row (the low half of its float32 zero point)."""
SEED_HIGH: int = 2**31 - 1
"""Seeds of the counter stream are drawn from ``[0, SEED_HIGH)``."""

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_MAX_SCALE_BUMPS = 64
_COMPILE_MIN_NUMEL = 1 << 14
# Messages of at least _PARALLEL_MIN_NUMEL elements are split into _PARTS_PER_THREAD
# parts per thread for torch.get_num_threads() threads (at most _MAX_THREADS); the numba
# kernels release the GIL.
_PARALLEL_MIN_NUMEL = 1 << 16
_MAX_THREADS = 8
_PARTS_PER_THREAD = 4

# counter-hash constants (mirrored in _quantize_kernels.py)
_M32 = 0xFFFFFFFF
_MIX1, _MIX2 = 0x7FEB352D, 0x846CA68B
_ROW_MUL, _COL_MUL = 0x9E3779B9, 0x85EBCA77
_SEED_B_XOR = 0x5BD1E995


class QuantizedRows(NamedTuple):
    """Quantized rows: unpacked integer codes and their per-row parameters.

    ``zero_point`` is float32 and holds exactly the value used: a bfloat16 value for
    ordinary rows, a float32 value for wide-offset rows (see the module docstring).

    Shapes:
        - codes: ``[N, D]`` uint8, values in ``[0, 2^bits - 1]``.
        - scale: ``[N]`` :data:`PARAM_DTYPE`.
        - zero_point: ``[N]`` float32.
    """

    codes: Tensor
    scale: Tensor
    zero_point: Tensor
    bits: int


# --------------------------------------------------------------------------- checks


def _check_bits(fn: str, bits: object) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in BITS:
        raise ValueError(f"{fn}: expected `bits` to be one of {BITS} but got {bits!r}.")
    return int(bits)


def _check_rows(fn: str, x: object, name: str = "x") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}: expected `{name}` to be a torch.Tensor but got {type(x).__name__}.")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{fn}: expected `{name}` dtype to be one of {_FLOAT_DTYPES} but got {x.dtype}."
        )
    if x.dim() != 2:
        raise ValueError(
            f"{fn}: expected `{name}` to be 2-D [N, D] but got shape {tuple(x.shape)}."
        )
    return x


def _check_out_dtype(fn: str, dtype: object) -> torch.dtype:
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{fn}: expected `dtype` to be one of {_FLOAT_DTYPES} but got {dtype}.")
    return dtype  # type: ignore[return-value]


def _check_dim(fn: str, dim: object) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
        raise ValueError(f"{fn}: expected `dim` to be a non-negative int but got {dim!r}.")
    return int(dim)


def _check_count(fn: str, name: str, value: object, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{fn}: expected `{name}` to be a non-negative int but got {value!r}.")
    if high is not None and value > high:
        raise ValueError(f"{fn}: expected `{name}` to be at most {high} but got {value}.")
    return int(value)


def _check_buf(fn: str, buf: object) -> Tensor:
    if not isinstance(buf, Tensor) or buf.dtype != torch.uint8 or buf.dim() != 1:
        got = f"{buf.dtype} {tuple(buf.shape)}" if isinstance(buf, Tensor) else type(buf).__name__
        raise ValueError(f"{fn}: expected `buf` to be a 1-D uint8 tensor but got {got}.")
    return buf


def _bits_counts(fn: str, row_bits: Tensor | Sequence[int]) -> list[int]:
    """Validate ``row_bits`` and count the rows of each width in :data:`BITS`."""
    if isinstance(row_bits, Tensor):
        return _tensor_bits_counts(fn, row_bits)[1]
    counts = [0] * len(BITS)
    for i, b in enumerate(row_bits):
        if isinstance(b, bool) or not isinstance(b, int) or b not in BITS:
            raise ValueError(
                f"{fn}: expected every entry of `row_bits` to be one of {BITS} but got "
                f"{b!r} (at row {i})."
            )
        counts[BITS.index(b)] += 1
    return counts


def _tensor_bits_counts(fn: str, row_bits: object) -> tuple[Tensor, list[int]]:
    """Validate a ``row_bits`` tensor; return it as int64 and the row count per width."""
    if not isinstance(row_bits, Tensor):
        raise TypeError(
            f"{fn}: expected `row_bits` to be an integer tensor but got {type(row_bits).__name__}."
        )
    if row_bits.dim() != 1:
        raise ValueError(
            f"{fn}: expected `row_bits` to be 1-D [N] but got shape {tuple(row_bits.shape)}."
        )
    if (
        row_bits.dtype.is_floating_point
        or row_bits.dtype.is_complex
        or row_bits.dtype == torch.bool
    ):
        raise TypeError(
            f"{fn}: expected `row_bits` to have an integer dtype but got {row_bits.dtype}."
        )
    rb = row_bits.long()
    if rb.numel() == 0:
        return rb, [0] * len(BITS)
    k = _KERNELS  # count with the kernel when loaded: one serial pass, no thread team
    if k is not None and rb.device.type == "cpu":
        counts_np = np.zeros(len(BITS), np.int64)
        i = int(k.count_bits(rb.numpy(), counts_np))
        if i < 0:
            return rb, counts_np.tolist()
        raise ValueError(
            f"{fn}: expected every entry of `row_bits` to be one of {BITS} but got "
            f"{int(rb[i])} (at row {i})."
        )
    hist = torch.bincount(rb.clamp(0, BITS[-1] + 1), minlength=BITS[-1] + 2).tolist()
    counts = [int(hist[b]) for b in BITS]
    if sum(counts) != rb.numel():
        bad = ~torch.isin(rb, torch.tensor(BITS, device=rb.device))
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{fn}: expected every entry of `row_bits` to be one of {BITS} but got "
            f"{int(rb[i])} (at row {i})."
        )
    return rb, counts


# ------------------------------------------------------------------- counter noise


def _mul32(h: Tensor | int, c: int) -> Any:
    """``(h * c) mod 2^32`` for ``0 <= h < 2^32``, exact in int64 (no product >= 2^49)."""
    return (h * (c & 0xFFFF) + (((h * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix32(h: Tensor | int) -> Any:
    """The "lowbias32" finaliser on 32-bit values held in int64 (or Python ints)."""
    h = h ^ (h >> 16)
    h = _mul32(h, _MIX1)
    h = h ^ (h >> 15)
    h = _mul32(h, _MIX2)
    return h ^ (h >> 16)


def _seed_keys(seed: int) -> tuple[int, int]:
    """Row and column key offsets ``(a, b)`` of a seed."""
    a = _mix32(seed & _M32)
    return a, _mix32(a ^ _SEED_B_XOR)


def _noise_from_keys(
    num_rows: int, dim: int, keys: Tensor, device: torch.device | str | None
) -> Tensor:
    """:func:`counter_noise` with ``keys = [a, b, row_offset]`` (an int64 tensor)."""
    rows = torch.arange(num_rows, dtype=torch.int64, device=device) + keys[2]
    cols = torch.arange(dim, dtype=torch.int64, device=device)
    rk = _mix32((_mul32(rows, _ROW_MUL) + keys[0]) & _M32)
    ck = _mix32((_mul32(cols, _COL_MUL) + keys[1]) & _M32)
    h = _mix32(rk[:, None] ^ ck[None, :])
    return (h >> 8).to(torch.float32) * 2.0**-24


def _mix32_(h: Tensor) -> Tensor:
    """In-place :func:`_mix32` of an int64 tensor of 32-bit values."""
    h ^= h >> 16
    _mul32_(h, _MIX1)
    h ^= h >> 15
    _mul32_(h, _MIX2)
    h ^= h >> 16
    return h


def _mul32_(h: Tensor, c: int) -> None:
    t = h * (c >> 16)
    t &= 0xFFFF
    t <<= 16
    h *= c & 0xFFFF
    h += t
    h &= _M32


_NOISE_CHUNK = 1 << 16  # elements per block of the eager noise: int64 temporaries in L2


def _noise_eager(num_rows: int, dim: int, seed: int, row_offset: int, device: Any) -> Tensor:
    """:func:`counter_noise` computed in place, block by block (the eager reference)."""
    a, b = _seed_keys(seed)
    out = torch.empty((num_rows, dim), dtype=torch.float32, device=device)
    if out.numel() == 0:
        return out
    cols = torch.arange(dim, dtype=torch.int64, device=device)
    ck = _mix32_((_mul32(cols, _COL_MUL) + b) & _M32)
    step = max(1, _NOISE_CHUNK // dim)
    for r0 in range(0, num_rows, step):
        r1 = min(r0 + step, num_rows)
        rows = torch.arange(r0 + row_offset, r1 + row_offset, dtype=torch.int64, device=device)
        rk = _mix32_((_mul32(rows, _ROW_MUL) + a) & _M32)
        h = _mix32_(rk[:, None] ^ ck[None, :])
        h >>= 8
        torch.mul(h, 2.0**-24, out=out[r0:r1])  # exact: h < 2^24
    return out


def _keys_tensor(seed: int, row_offset: int, device: torch.device | str | None) -> Tensor:
    a, b = _seed_keys(seed)
    return torch.tensor([a, b, row_offset], dtype=torch.int64, device=device)


def counter_noise(
    seed: int,
    num_rows: int,
    dim: int,
    row_offset: int = 0,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """The counter-based rounding noise ``u`` of rows ``row_offset .. row_offset + num_rows - 1``.

    .. math::

        u_{rc} = \\lfloor h(\\text{seed}, r, c) / 2^8 \\rfloor \\cdot 2^{-24} \\in [0, 1)

    with ``h`` the 32-bit hash of the module docstring (pure torch, int64 arithmetic with
    masks, exact on every device). The fused kernels compute the same values in place:
    ``pack_rows(x, row_bits, g)`` quantizes width group ``b`` (message rows
    ``start_b .. start_b + n_b - 1``) with
    ``counter_noise(seed, n_b, D, row_offset=start_b)``, and ``quantize(x, bits, g)``
    with ``counter_noise(seed, N, D)``, where ``seed`` is the one draw
    ``torch.randint(0, SEED_HIGH, (1,), generator=g)``.

    Args:
        seed: integer in ``[0, 2^32)``.
        num_rows: number of rows ``N``.
        dim: row length ``D``.
        row_offset: index of the first row (``row_offset + num_rows <= 2^32``).
        device: device of the result.

    Shapes:
        - output: ``[num_rows, dim]`` float32.
    """
    fn = "counter_noise"
    seed = _check_count(fn, "seed", seed, _M32)
    num_rows = _check_count(fn, "num_rows", num_rows)
    dim = _check_count(fn, "dim", dim)
    row_offset = _check_count(fn, "row_offset", row_offset, _M32 + 1 - num_rows)
    return _noise_eager(num_rows, dim, seed, row_offset, device)


def _draw_seed(generator: torch.Generator | None) -> int:
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, SEED_HIGH, (1,), generator=generator, device=device))


# ------------------------------------------------------------------ parameters (eager)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _to_param(v: Tensor, toward: float) -> Tensor:
    """Round ``v`` to :data:`PARAM_DTYPE` toward ``-inf`` (``toward < 0``) or ``+inf``."""
    r = v.to(PARAM_DTYPE)
    back = r.to(v.dtype)
    off = back > v if toward < 0 else back < v
    return torch.where(off, torch.nextafter(r, torch.full_like(r, toward)), r)


def _round_down_f32(v: Tensor) -> Tensor:
    """float64 ``v`` rounded toward ``-inf`` to float32 (float32 input: unchanged)."""
    if v.dtype == torch.float32:
        return v
    f = v.to(torch.float32)
    return torch.where(f.double() > v, torch.nextafter(f, torch.full_like(f, -float("inf"))), f)


def _two_diff(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Error-free ``a - b = hi + err`` (Knuth's TwoSum), valid when ``hi`` is finite."""
    hi = a - b
    bv = a - hi
    av = hi + bv
    err = (a - av) - (bv - b)
    return hi, err


def _scale_search(fn: str, mn: Tensor, mx: Tensor, zero_c: Tensor, bits: int) -> Tensor:
    """Smallest bfloat16 scale per row covering ``[zero, max]`` with ``2^bits - 1`` steps.

    Rows whose range ``max - zero`` or top code ``zero + scale (2^b - 1)`` overflows the
    compute dtype raise.
    """
    ct = zero_c.dtype
    qmax = (1 << bits) - 1
    d_hi, d_err = _two_diff(mx, zero_c)
    if not bool(torch.isfinite(d_hi).all()):
        i = int((~torch.isfinite(d_hi)).nonzero()[0, 0])
        raise ValueError(
            f"{fn}: expected every row range max - min of `x` to be finite in {ct} but row {i} "
            f"spans [{float(mn[i]):.6g}, {float(mx[i]):.6g}]."
        )
    scale = _to_param(d_hi.abs() / qmax, float("inf"))
    for _ in range(_MAX_SCALE_BUMPS):
        scale_c = scale.to(ct)
        span = scale_c * qmax  # exact: 8-bit mantissa times an integer < 2^8
        covered = (span > d_hi) | ((span == d_hi) & (d_err <= 0))
        need = (d_hi / scale_c > qmax) | ~covered  # 0/0 is NaN -> False: constant row
        if not bool(need.any()):
            break
        scale = torch.where(
            need, torch.nextafter(scale, torch.full_like(scale, float("inf"))), scale
        )
    else:  # pragma: no cover - unreachable for finite input
        raise RuntimeError(f"{fn}: could not find a bfloat16 scale covering every row.")
    too_wide = ~torch.isfinite(scale.to(ct) * qmax)  # the top code must dequantize finitely
    if bool(too_wide.any()):
        i = int(too_wide.nonzero()[0, 0])
        raise ValueError(
            f"{fn}: expected every row range max - min of `x` to fit a bfloat16 scale for "
            f"bits={bits} (scale * {qmax} must stay finite in {ct}) but row {i} spans "
            f"[{float(mn[i]):.6g}, {float(mx[i]):.6g}]."
        )
    return scale


def _row_params(fn: str, x: Tensor, bits: int) -> tuple[Tensor, Tensor]:
    """Per-row ``(zero_point float32, scale bfloat16)``, chosen so every code is in range.

    Ordinary rows: bfloat16 zero point ``z16``; wide-offset rows (``s32 < s16``): the
    float32 zero point ``z32`` (module docstring).
    """
    n, d = x.shape
    if n == 0 or d == 0:
        return (
            torch.zeros(n, dtype=torch.float32, device=x.device),
            torch.zeros(n, dtype=PARAM_DTYPE, device=x.device),
        )
    ct = _compute_dtype(x.dtype)
    mn, mx = torch.aminmax(x, dim=1)  # NaN propagates; any inf shows in mn or mx
    mn, mx = mn.to(ct), mx.to(ct)
    bad = ~(torch.isfinite(mn) & torch.isfinite(mx))
    if bool(bad.any()):
        raise ValueError(
            f"{fn}: `x` contains NaN or infinite values (in {int(bad.sum())} of {n} rows, "
            f"first at row {int(bad.nonzero()[0, 0])}); quantization needs finite rows."
        )
    z16 = _to_param(mn, -float("inf"))
    z16_c = z16.to(ct)
    if not bool(torch.isfinite(z16_c).all()):
        i = int((~torch.isfinite(z16_c)).nonzero()[0, 0])
        raise ValueError(
            f"{fn}: expected the values of `x` to lie within bfloat16's finite range "
            f"(|x| <= {torch.finfo(PARAM_DTYPE).max:.4g}) but row {i} has min {float(mn[i]):.6g}."
        )
    z32 = _round_down_f32(mn)
    scale = _scale_search(fn, mn, mx, z32.to(ct), bits)
    # The search from z16 <= z32 starts no lower than the one from z32 and every scale it
    # accepts the search from z32 accepts too, so s16 >= s32: the row is ordinary iff the
    # search from z16 would stop at s32, i.e. iff it starts at or below s32 and s32
    # passes its tests. Then z16 is sent; else z32 (a wide-offset row). Either way the
    # scale is s32.
    qmax = (1 << bits) - 1
    d16, e16 = _two_diff(mx, z16_c)
    sc = scale.to(ct)
    span = sc * qmax
    start16 = _to_param(d16.abs() / qmax, float("inf"))
    ordinary = (
        torch.isfinite(d16)
        & (start16.float() <= scale.float())
        & ((span > d16) | ((span == d16) & (e16 <= 0)))
        & ~(d16 / sc > qmax)
    )
    zero = torch.where(ordinary, z16.float(), z32.float())
    zero = torch.where(zero == 0, torch.zeros_like(zero), zero)  # -0.0 -> +0.0
    return zero, scale


def _noise(
    fn: str, x: Tensor, ct: torch.dtype, generator: torch.Generator | None, noise: Tensor
) -> Tensor:
    if generator is not None:
        raise ValueError(f"{fn}: expected at most one of `generator` and `noise` but got both.")
    if not isinstance(noise, Tensor) or not noise.dtype.is_floating_point:
        got = noise.dtype if isinstance(noise, Tensor) else type(noise).__name__
        raise TypeError(f"{fn}: expected `noise` to be a floating-point tensor but got {got}.")
    if noise.shape != x.shape:
        raise ValueError(
            f"{fn}: expected `noise` to have the shape of `x` {tuple(x.shape)} but got "
            f"{tuple(noise.shape)}."
        )
    if noise.numel():
        lo, hi = torch.aminmax(noise)
        if not (float(lo) >= 0.0 and float(hi) < 1.0):
            raise ValueError(
                f"{fn}: expected `noise` values in [0, 1) but got range [{float(lo)}, {float(hi)}]."
            )
    return noise.to(device=x.device, dtype=ct)


def _core_params(zero: Tensor, scale: Tensor, ct: torch.dtype) -> tuple[Tensor, Tensor]:
    scale_c = scale.to(ct)
    return zero.to(ct), torch.where(scale_c == 0, torch.ones_like(scale_c), scale_c)


# ------------------------------------------------------------- element-wise cores
# Each core exists twice with the same floating-point operations in the same order: an
# eager version that works in place (fewer 100 MB temporaries) and a functional version
# for torch.compile. Hence compiled kernels reproduce the eager bits (tested).


def _codes_eager(x: Tensor, zero: Tensor, scale: Tensor, noise: Tensor) -> Tensor:
    v = torch.sub(x.to(zero.dtype), zero[:, None])
    v.div_(scale[:, None])
    low = torch.floor(v)
    v.sub_(low)  # frac(v), exact
    low.add_(torch.lt(noise, v))
    return low.to(torch.uint8)


def _codes_compiled(x: Tensor, zero: Tensor, scale: Tensor, noise: Tensor) -> Tensor:
    v = (x.to(zero.dtype) - zero[:, None]) / scale[:, None]
    low = torch.floor(v)
    return (low + (noise < v - low).to(v.dtype)).to(torch.uint8)


def _codes_counter(x: Tensor, zero: Tensor, scale: Tensor, keys: Tensor) -> Tensor:
    """:func:`_codes_compiled` with the counter noise computed in the same graph, so that
    Inductor fuses hash and quantization into one kernel (``keys = [a, b, row_offset]``)."""
    u = _noise_from_keys(x.shape[0], x.shape[1], keys, x.device)
    return _codes_compiled(x, zero, scale, u.to(zero.dtype))


def _dequant_eager(codes: Tensor, scale: Tensor, zero: Tensor, dtype: torch.dtype) -> Tensor:
    ct = _compute_dtype(dtype)
    out = codes.to(ct)
    out.mul_(scale.to(ct)[:, None]).add_(zero.to(ct)[:, None])
    return out.to(dtype)


def _dequant_compiled(codes: Tensor, scale: Tensor, zero: Tensor, dtype: torch.dtype) -> Tensor:
    ct = _compute_dtype(dtype)
    out = codes.to(ct) * scale.to(ct)[:, None] + zero.to(ct)[:, None]
    return out.to(dtype)


def _pack_flat(codes: Tensor, bits: int) -> Tensor:
    """Pack 1-D uint8 codes ``< 2^bits``; the result may alias ``codes`` for 8 bits."""
    if bits == 8:
        return codes
    per = 8 // bits
    pad = (-codes.numel()) % per
    if pad:
        codes = torch.cat([codes, codes.new_zeros(pad)])
    groups = codes.view(-1, per)
    out = groups[:, 0].clone()
    for j in range(1, per):
        out |= groups[:, j] << (bits * j)
    return out


def _unpack_flat(packed: Tensor, bits: int, numel: int) -> Tensor:
    """Unpack ``numel`` codes; the result may be a view of ``packed``."""
    if bits == 8:
        return packed[:numel]
    shifts = torch.arange(0, 8, bits, dtype=torch.uint8, device=packed.device)
    codes = (packed[:, None] >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:numel]


_EAGER: dict[str, Callable[..., Tensor]] = {"codes": _codes_eager, "dequant": _dequant_eager}
_FUNCTIONAL: dict[str, Callable[..., Tensor]] = {
    "codes": _codes_compiled,
    "dequant": _dequant_compiled,
    "counter": _codes_counter,
}
_COMPILED: dict[str, Callable[..., Tensor]] = {}


def _compiled(name: str) -> Callable[..., Tensor]:
    fn = _COMPILED.get(name)
    if fn is None:
        fn = torch.compile(_FUNCTIONAL[name], dynamic=True)
        _COMPILED[name] = fn
    return fn


def _core(name: str, compiled: bool, numel: int) -> Callable[..., Tensor]:
    """The eager core ``name``, or its compiled kernel when asked for and worthwhile."""
    if not compiled or numel < _COMPILE_MIN_NUMEL:
        return _EAGER[name]
    return _compiled(name)


_CUDA_COMPILE_FAILED = False


def _counter_codes(
    x: Tensor, zero: Tensor, scale: Tensor, seed: int, row_offset: int, compiled: bool
) -> Tensor:
    """Codes of ``x`` against ``(zero, scale)`` (compute dtype) with the counter noise.

    Eager: materialise :func:`counter_noise`. Compiled (``compiled=True``, or any CUDA
    tensor): the fused ``torch.compile`` counter core, bit-identical to eager.
    """
    global _CUDA_COMPILE_FAILED
    keys = _keys_tensor(seed, row_offset, x.device)
    use_compiled = (compiled or x.is_cuda) and x.numel() >= _COMPILE_MIN_NUMEL
    if use_compiled and not (x.is_cuda and _CUDA_COMPILE_FAILED):
        try:
            return _compiled("counter")(x, zero, scale, keys)
        except Exception as err:  # pragma: no cover - CUDA only
            # UNTESTED HERE (no GPU in the development environment): the Inductor/Triton
            # path on CUDA. If compilation fails (no Triton, unsupported GPU), fall back
            # to the eager reference, which gives the same codes.
            if not x.is_cuda:
                raise
            _CUDA_COMPILE_FAILED = True
            warnings.warn(
                f"quantize: torch.compile of the CUDA quantization kernel failed ({err!r}); "
                "using the eager torch path (same results, slower).",
                RuntimeWarning,
                stacklevel=3,
            )
    u = _noise_eager(x.shape[0], x.shape[1], seed, row_offset, x.device)
    return _codes_eager(x, zero, scale, u.to(zero.dtype))


# --------------------------------------------------------------- numba fast path

_KERNELS: ModuleType | None = None
_KERNELS_TRIED = False
_KERNELS_LOCK = threading.Lock()
_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_PID = 0
_EXECUTOR_LOCK = threading.Lock()


def _kernels() -> ModuleType | None:
    """The numba kernel module, imported on first use; ``None`` where numba is missing."""
    global _KERNELS, _KERNELS_TRIED
    if _KERNELS_TRIED:
        return _KERNELS
    with _KERNELS_LOCK:
        if not _KERNELS_TRIED:
            if sys.byteorder == "little":  # the kernels write little-endian parameters
                try:
                    from lightgraph.functional import _quantize_kernels
                except ImportError:  # no numba: the eager torch reference serves
                    _quantize_kernels = None  # type: ignore[assignment]
                _KERNELS = _quantize_kernels
            _KERNELS_TRIED = True
    return _KERNELS


def _check_out(
    fn: str, out: object, shape: tuple[int, int], dtype: torch.dtype, device: torch.device
) -> None:
    ok = (
        isinstance(out, Tensor)
        and tuple(out.shape) == shape
        and out.dtype == dtype
        and out.device == device
        and out.is_contiguous()
    )
    if not ok:
        got = (
            f"{out.dtype} {tuple(out.shape)} on {out.device} (contiguous={out.is_contiguous()})"
            if isinstance(out, Tensor)
            else type(out).__name__
        )
        raise ValueError(
            f"{fn}: expected `out` to be a contiguous {list(shape)} {dtype} tensor on {device} "
            f"but got {got}."
        )


def _guarded(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a numba path; should numba itself fail (e.g. it cannot compile the kernels
    in this environment), warn once, disable the kernels and return ``None`` so that the
    caller takes the torch reference (same results)."""
    global _KERNELS
    try:
        return fn(*args)
    except Exception as err:
        if _KERNELS is None:  # pragma: no cover - already disabled by another thread
            return None
        _KERNELS = None
        warnings.warn(
            f"lightgraph.functional.quantize: the numba kernels failed ({err!r}); using the "
            "torch reference from now on (same results, slower).",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def _fast(x: Tensor) -> ModuleType | None:
    """The kernel module when ``x`` can take the numba path (CPU, ``D >= 1``)."""
    if x.device.type != "cpu" or x.shape[0] == 0 or x.shape[1] == 0:
        return None
    return _kernels()


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
    k = _kernels()
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


# ----------------------------------------------------------------------- public API


def quantize(
    x: Tensor,
    bits: int,
    generator: torch.Generator | None = None,
    noise: Tensor | None = None,
    *,
    compiled: bool = False,
) -> QuantizedRows:
    """Stochastic per-row ``bits``-bit quantization (bfloat16 scale, exact zero point).

    .. math::

        \\hat x_{ij} = \\lfloor (x_{ij} - z_i) / s_i + u_{ij} \\rfloor,
        \\quad z_i \\in \\{\\operatorname{bf16}_{\\downarrow}(\\min_j x_{ij}),\\,
        \\operatorname{f32}_{\\downarrow}(\\min_j x_{ij})\\},
        \\quad s_i \\ge \\operatorname{bf16}_{\\uparrow}\\Big(\\frac{\\max_j x_{ij} - z_i}{2^b - 1}\\Big)

    (see the module docstring for how ``s_i`` is raised until it covers the row and when
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
            (bit-identical codes); without, selects the compiled counter core where the
            numba kernels are not used (ignored on the CPU fast path).

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
    seed = _draw_seed(generator)
    k = _fast(x)
    if k is not None:
        q = _guarded(_quantize_fast, k, x, bits, seed)
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


def pack_codes(codes: Tensor, bits: int) -> Tensor:
    """Bit-pack ``bits``-bit codes into bytes, ``8 / bits`` codes per byte.

    .. math::

        \\text{byte}_k = \\sum_{j=0}^{8/b - 1} c_{k \\cdot 8/b + j} \\ll (j\\, b)

    (the terms occupy disjoint bits; they are combined with shifts and bitwise or). The
    codes are taken in row-major order; the last byte is zero-padded.

    Args:
        codes: uint8 codes, any shape, values in ``[0, 2^bits - 1]``.
        bits: code width, one of :data:`BITS`.

    Shapes:
        - codes: any, ``numel`` elements.
        - output: ``[ceil(numel * bits / 8)]`` uint8.
    """
    fn = "pack_codes"
    bits = _check_bits(fn, bits)
    if not isinstance(codes, Tensor) or codes.dtype != torch.uint8:
        got = codes.dtype if isinstance(codes, Tensor) else type(codes).__name__
        raise TypeError(f"{fn}: expected `codes` to be a uint8 tensor but got {got}.")
    flat = codes.reshape(-1)
    if bits < 8 and flat.numel():
        top = int(flat.max())
        if top > (1 << bits) - 1:
            raise ValueError(
                f"{fn}: expected `codes` values in [0, {(1 << bits) - 1}] for bits={bits} "
                f"but got {top}."
            )
    out = _pack_flat(flat.contiguous(), bits)
    return out.clone() if bits == 8 else out  # 8-bit output would alias `codes`


def unpack_codes(packed: Tensor, bits: int, numel: int) -> Tensor:
    """Invert :func:`pack_codes`: extract ``numel`` codes of ``bits`` bits.

    .. math::

        c_{k \\cdot 8/b + j} = (\\text{byte}_k \\gg j\\, b) \\;\\&\\; (2^b - 1)

    Args:
        packed: uint8 bytes as produced by :func:`pack_codes`.
        bits: code width, one of :data:`BITS`.
        numel: number of codes packed (``len(packed)`` must be ``ceil(numel * bits / 8)``).

    Shapes:
        - packed: ``[ceil(numel * bits / 8)]`` uint8.
        - output: ``[numel]`` uint8.
    """
    fn = "unpack_codes"
    bits = _check_bits(fn, bits)
    if isinstance(numel, bool) or not isinstance(numel, int) or numel < 0:
        raise ValueError(f"{fn}: expected `numel` to be a non-negative int but got {numel!r}.")
    if not isinstance(packed, Tensor) or packed.dtype != torch.uint8 or packed.dim() != 1:
        got = (
            f"{packed.dtype} {tuple(packed.shape)}" if isinstance(packed, Tensor) else type(packed)
        )
        raise ValueError(f"{fn}: expected `packed` to be a 1-D uint8 tensor but got {got}.")
    expected = -(-numel * bits // 8)
    if packed.numel() != expected:
        raise ValueError(
            f"{fn}: expected `packed` to hold ceil(numel * bits / 8) = {expected} bytes for "
            f"numel={numel}, bits={bits} but got {packed.numel()}."
        )
    codes = _unpack_flat(packed, bits, numel)
    return codes.clone() if bits == 8 else codes  # 8-bit codes would alias `packed`


def packed_nbytes(row_bits: Tensor | Sequence[int], dim: int) -> int:
    """Size in bytes of a :func:`pack_rows` buffer without wide-offset rows.

    .. math::

        \\text{nbytes} = \\sum_{b \\in \\{1, 2, 4, 8\\}} \\lceil n_b \\, D \\, b / 8 \\rceil + 4 N

    where ``n_b`` is the number of rows of width ``b`` and ``4 N`` the bfloat16 scale and
    zero point of each row. Sender and receiver both compute it from ``row_bits`` alone.
    A message with ``W`` wide-offset rows is ``2 W`` bytes longer
    (:func:`message_nbytes`); the sections before the trailer sit at the same offsets.

    Args:
        row_bits: per-row code width, each one of :data:`BITS`.
        dim: row length ``D``.

    Shapes:
        - row_bits: ``[N]``.
    """
    fn = "packed_nbytes"
    dim = _check_dim(fn, dim)
    return _nbytes(_bits_counts(fn, row_bits), dim)


def message_nbytes(row_bits: Tensor | Sequence[int], dim: int, num_wide: int = 0) -> int:
    """Exact size of a :func:`pack_rows` message with ``num_wide`` wide-offset rows.

    .. math::

        \\text{nbytes} = \\text{packed\\_nbytes}(\\text{row\\_bits}, D) + 2 W

    Args:
        row_bits: per-row code width, each one of :data:`BITS`.
        dim: row length ``D``.
        num_wide: ``W``, e.g. from :func:`wide_rows` (``0 <= W <= N``).

    Shapes:
        - row_bits: ``[N]``.
    """
    fn = "message_nbytes"
    dim = _check_dim(fn, dim)
    counts = _bits_counts(fn, row_bits)
    num_wide = _check_count(fn, "num_wide", num_wide, sum(counts))
    return _nbytes(counts, dim) + WIDE_BYTES_PER_ROW * num_wide


def wide_rows(buf: Tensor, row_bits: Tensor | Sequence[int], dim: int) -> int:
    """Number ``W`` of wide-offset rows of the message at the start of ``buf``.

    Counts the flag bits (sign bits) of the scale section, which starts at
    ``packed_nbytes(row_bits, dim) - 4 N``; only that section is read, so ``buf`` may be
    longer than the message (e.g. several messages back to back: the first one then
    takes ``message_nbytes(row_bits, dim, W)`` bytes).

    Args:
        buf: uint8 bytes starting with a :func:`pack_rows` message.
        row_bits: the widths it was packed with.
        dim: row length ``D``.

    Shapes:
        - buf: ``[>= packed_nbytes(row_bits, dim)]`` uint8; row_bits: ``[N]``.
    """
    fn = "wide_rows"
    dim = _check_dim(fn, dim)
    counts = _bits_counts(fn, row_bits)
    _check_buf(fn, buf)
    nbytes = _nbytes(counts, dim)
    if buf.numel() < nbytes:
        raise ValueError(
            f"{fn}: expected `buf` to hold at least packed_nbytes(row_bits, dim={dim}) = "
            f"{nbytes} bytes but got {buf.numel()}."
        )
    return _count_wide(buf, sum(counts), nbytes)


def _count_wide(buf: Tensor, n: int, nbytes: int) -> int:
    if n == 0:
        return 0
    at = nbytes - PARAM_BYTES_PER_ROW * n
    k = _KERNELS
    if k is not None and buf.device.type == "cpu":
        return int(k.count_wide(buf.numpy(), at, n))
    # the high byte of each little-endian bfloat16 scale holds its sign bit
    return int((buf[at + 1 : at + 2 * n : 2] >= 0x80).sum())


def _nbytes(counts: Sequence[int], dim: int) -> int:
    return sum(
        -(-n * dim * b // 8) for n, b in zip(counts, BITS, strict=True)
    ) + PARAM_BYTES_PER_ROW * sum(counts)


def _group_order(rb: Tensor, counts: Sequence[int]) -> Tensor | None:
    """Row order grouped by width (ascending, stable); None when already grouped."""
    if max(counts, default=0) == rb.numel():
        return None
    return torch.argsort(rb, stable=True)


def _param_sections(scale: Tensor, zero: Tensor) -> list[Tensor]:
    """Wire bytes of the scales (flagged), zero points and trailer, in message order."""
    bits = zero.view(torch.int32)
    lo = bits & 0xFFFF
    wide = lo != 0  # a float32 zero point that is not a bfloat16 value
    s = scale.view(torch.int16).to(torch.int32)
    s = torch.where(wide, s - 0x8000, s).to(torch.int16)  # set the sign bit (two's complement)
    hi = (bits >> 16).to(torch.int16)  # arithmetic shift: in int16 range
    trailer = ((lo[wide] ^ 0x8000) - 0x8000).to(torch.int16)
    return [t.view(torch.uint8) for t in (s, hi, trailer)]


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
) -> Tensor:
    """Quantize rows with per-row widths and pack them into one byte buffer (one message).

    .. math::

        \\text{buf} = [\\,P_1 \\,|\\, P_2 \\,|\\, P_4 \\,|\\, P_8 \\,|\\, s \\,|\\, z \\,|\\, t\\,],
        \\quad P_b = \\operatorname{pack}(\\operatorname{quantize}(x[\\text{rows}_b], b))

    Rows are grouped by width in ascending order, keeping their relative order. One seed
    is drawn from ``generator``; group ``b`` (message rows ``start_b ..``) is quantized
    with ``counter_noise(seed, n_b, D, row_offset=start_b)``, i.e. the row index of the
    noise is the row's position in the grouped message. ``t`` is the trailer of the
    wide-offset rows (module docstring).

    Args:
        x: float rows (see :func:`quantize`).
        row_bits: integer width of each row, each one of :data:`BITS` (no 0).
        generator: source of the seed; ``None``: torch's default generator.
        compiled: accepted for compatibility; ignored on the CPU numba path (the
            default), selects the ``torch.compile`` counter core on the torch path
            (same bytes either way).

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
    seed = _draw_seed(generator)
    k = _fast(x)
    if k is not None:
        buf = _guarded(_pack_fast, k, x, rb.cpu(), counts, seed)
        if buf is not None:
            return buf
    return _pack_reference(fn, x, rb, counts, seed, compiled)  # raises for invalid rows


def _read_params(buf: Tensor, n: int, params_at: int, num_wide: int) -> tuple[Tensor, Tensor]:
    """(scale bfloat16, zero float32) in message order from the parameter sections."""
    half = 2 * n
    # clone: the parameter bytes may start at an odd offset, and a 16-bit view needs alignment
    s = buf[params_at : params_at + half].clone().view(torch.int16).to(torch.int32)
    hi = buf[params_at + half : params_at + 2 * half].clone().view(torch.int16).to(torch.int64)
    wide = s < 0
    scale = (s & 0x7FFF).to(torch.int16).view(PARAM_DTYPE)
    lo = torch.zeros(n, dtype=torch.int64, device=buf.device)
    if num_wide:
        at = params_at + 2 * half
        t = buf[at : at + WIDE_BYTES_PER_ROW * num_wide].clone().view(torch.int16)
        lo[wide] = t.to(torch.int64) & 0xFFFF
    bits = ((hi & 0xFFFF) << 16) | lo  # in [0, 2^32)
    bits = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)
    return scale, bits.view(torch.float32)


def unpack_rows(
    buf: Tensor,
    row_bits: Tensor,
    dim: int,
    dtype: torch.dtype = torch.float32,
    *,
    compiled: bool = False,
    out: Tensor | None = None,
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
        compiled: accepted for compatibility; ignored on the CPU numba path, selects the
            ``torch.compile`` dequantization core on the torch path (same values).
        out: optional contiguous ``[N, D]`` tensor of ``dtype`` on ``buf``'s device to
            write the rows to (e.g. a slice of a larger receive buffer); returned.

    Shapes:
        - buf: ``[packed_nbytes(row_bits, D) + 2 W]`` uint8; row_bits: ``[N]``.
        - output: ``[N, D]``.
    """
    fn = "unpack_rows"
    dim = _check_dim(fn, dim)
    dtype = _check_out_dtype(fn, dtype)
    rb, counts = _tensor_bits_counts(fn, row_bits)
    _check_buf(fn, buf)
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
    k = _kernels() if buf.device.type == "cpu" and dim > 0 else None
    if k is not None:
        rows = _guarded(_unpack_fast, k, buf, rb.cpu(), counts, dim, dtype, None, out)
        if rows is not None:
            return rows
    if out is not None:
        return out.copy_(unpack_rows(buf, row_bits, dim, dtype, compiled=compiled))
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
