"""The reference quantiser: per-row parameters and the element-wise quantisation cores.

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
granularity of ``u`` (:mod:`~lightgraph.functional.quantize.noise`).

**Parameters are chosen first**, in the precision they are sent in, and the row is
quantized against exactly those values. Rounding exact parameters *after* quantizing
would shift every dequantized value and could push the row maximum past the top code.

* The scale travels as bfloat16 (2 bytes; bfloat16 keeps float32's exponent range, so
  tiny gradients do not underflow as they would in float16). For a zero point ``z`` the
  scale ``s(z)`` is the smallest bfloat16 value with ``z + s(z) (2^b - 1) >= max``
  exactly. The search starts from ``(max - z) / (2^b - 1)`` evaluated in the compute
  dtype and rounded toward ``+inf`` to bfloat16 (never above ``s(z)``, as rounding is
  monotone) and raises the scale by one bfloat16 ulp while
  ``z + scale (2^b - 1) < max``; in practice it takes at most one step. The test is
  exact: ``max - z = d + e`` with ``d`` the difference in the compute dtype and ``e``
  its rounding error (an error-free difference), and ``scale (2^b - 1)`` is exact
  (8 significant bits times an integer below ``2^8``), so the test is
  ``scale (2^b - 1) > d``, or ``= d`` with ``e <= 0``. A covering scale also keeps
  ``(max - z) / scale`` in the compute dtype at most ``2^b - 1`` (checked too). The
  scale is at most one bfloat16 ulp (``2^-7`` relative) above ``(max - z) / (2^b - 1)``.
* The zero point of an *ordinary* row is ``z16 = min`` rounded toward ``-inf`` to
  bfloat16 (2 bytes), with its scale ``s16 = s(z16)``. A row far from zero relative to
  its range (e.g. ``[999.99, 1000.01]``) would get a much coarser step that way:
  ``min - z16`` can be ``2^-8 |min|``, far more than ``max - min``. So every row also
  gets ``z32 = min`` as float32 (exact for float32, float16 and bfloat16 input; rounded
  toward ``-inf`` for float64 input) with its scale ``s32 = s(z32)``. A row is
  **wide-offset** iff ``s16 > s32``; it is sent with ``z32`` (2 extra bytes), every
  other row with ``z16``. As ``z16 <= z32``, ``s16 >= s32`` always: every row's step is
  ``s32``, at most one bfloat16 ulp (0.79 %) above the ideal ``(max - min) / (2^b - 1)``
  whatever the row's offset, while that ideal step is a normal bfloat16 number
  (``>= 2^-126``; float32 input: for float64 input ``min - z32`` adds less than one
  float32 ulp of ``min``).
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

This module is the torch reference: the parameter search in eager torch, and each
element-wise core twice with the same floating-point operations in the same order, an
eager version that works in place (fewer 100 MB temporaries) and a functional version
for ``torch.compile``, so compiled kernels reproduce the eager bits (tested). The fused
numba kernels (:mod:`~lightgraph.functional.quantize.fused`) perform the same operations
and give the same bits.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from lightgraph.functional.quantize.noise import _keys_tensor, _noise_eager, _noise_from_keys

PARAM_DTYPE = torch.bfloat16
"""dtype of the per-row scale and (ordinary rows') zero point on the wire."""

_MAX_SCALE_BUMPS = 64
_COMPILE_MIN_NUMEL = 1 << 14


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


def _div_int(a: Tensor, k: int) -> Tensor:
    """``a / k``, correctly rounded on every device.

    CUDA divides a tensor by a Python number as ``a * (1 / k)``: two roundings, which
    for ``k = 15`` put ``570 * 2^-14 / 15`` one float32 ulp above ``38 * 2^-14`` and
    the bfloat16 scale one step higher than the CPU's (found by the GPU check). A
    tensor divisor takes the correctly rounded division everywhere.
    """
    return a / torch.full_like(a, k)


def _two_diff(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Error-free difference: ``a - b = hi + err`` exactly, ``hi = fl(a - b)`` (Knuth's
    TwoSum of ``a`` and ``-b``), valid when ``hi`` is finite.

    ``bv = a - hi`` and ``av = hi + bv`` are the parts of ``b`` and ``a`` that ``hi``
    represents; ``a - av`` and ``bv - b`` are exact and sum to ``(a - b) - hi``.
    """
    hi = a - b
    bv = a - hi
    av = hi + bv
    err = (a - av) + (bv - b)
    return hi, err


def _covers(span: Tensor, d_hi: Tensor, d_err: Tensor) -> Tensor:
    """``span >= d_hi + d_err`` exactly, for ``span`` exact and ``d_hi + d_err`` the exact
    difference of :func:`_two_diff` (rounding is monotone, so ``span > d_hi`` implies it)."""
    return (span > d_hi) | ((span == d_hi) & (d_err <= 0))


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
    scale = _to_param(_div_int(d_hi.abs(), qmax), float("inf"))
    for _ in range(_MAX_SCALE_BUMPS):
        scale_c = scale.to(ct)
        span = scale_c * qmax  # exact: 8-bit mantissa times an integer < 2^8
        # 0 / 0 is NaN -> False: a constant row needs no step
        need = (d_hi / scale_c > qmax) | ~_covers(span, d_hi, d_err)
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
    start16 = _to_param(_div_int(d16.abs(), qmax), float("inf"))
    ordinary = (
        torch.isfinite(d16)
        & (start16.float() <= scale.float())
        & _covers(span, d16, e16)
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
