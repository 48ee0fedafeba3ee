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
granularity of ``torch.rand`` (``2^-53`` for float64).

**Parameters travel as bfloat16** (2 + 2 bytes per row; bfloat16 keeps float32's exponent
range, so tiny gradients do not underflow as they would in float16). Rounding an exact
``min``/``scale`` to bfloat16 *after* quantizing would shift every dequantized value and
could push the row maximum past the top code. The parameters are therefore chosen first,
in bfloat16, and the row is quantized against them:

* ``zero = min`` rounded toward ``-inf`` to bfloat16, so ``zero <= min``;
* ``scale = (max - zero) / (2^b - 1)`` rounded toward ``+inf`` to bfloat16; while either
  ``(max - zero) / scale`` evaluated in the compute dtype exceeds ``2^b - 1`` or
  ``zero + scale * (2^b - 1) < max`` holds exactly (checked with an error-free
  difference), ``scale`` is raised by one bfloat16 ulp (vectorised over rows; in practice
  at most one step).

Every ``v = (x - zero) / scale`` then lies in ``[0, 2^b - 1]`` in floating point, no code
is ever clipped, and quantization stays unbiased against the parameters actually sent.
A constant row (``max == min``) whose value is representable in bfloat16 gets
``scale = 0`` and all codes ``0``, which dequantizes exactly; the division uses a scale
of 1 for such rows, so no NaN appears. Values must lie within bfloat16's finite range
(``|x| <= 3.39e38``).

**Compute dtype.** Arithmetic runs in float32 (float64 for float64 input); bfloat16 and
float16 input is upcast exactly.

**Bit packing.** Codes are packed little-endian within each byte: code ``j`` of a group of
``8 / b`` consecutive codes occupies bits ``[j b, (j + 1) b)`` of its byte; the last byte
is zero-padded. :func:`pack_rows` lays out one message with mixed widths as

``[codes of 1-bit rows][2-bit rows][4-bit rows][8-bit rows][scales][zero points]``

where rows are grouped by width (ascending) keeping their original relative order, each
code block is the packed row-major codes of its group, and the ``N`` scales and ``N``
zero points are raw bfloat16 bytes in the same grouped order (native byte order). Its
size, :func:`packed_nbytes`, follows from ``row_bits`` and ``dim`` alone.

**Fast path.** ``compiled=True`` runs the two element-wise kernels, the quantization
core (``x -> codes``) and dequantization (``codes -> rows``), through
``torch.compile(dynamic=True)``, which fuses their passes into one; given the same random
numbers the results are bit-identical to eager (both versions perform the same IEEE
operations in the same order). The row statistics, the bfloat16 parameter search, the
random numbers (drawn from ``generator`` exactly as in eager mode) and the bit packing
stay eager: shift-and-or packing is a cheap pass over uint8 data, and fusing it into the
compiled quantization kernel made inductor's CPU code about four times slower. Calls with
fewer than ``2**14`` elements always run eagerly (compiling them gains nothing and would
specialise on tiny shapes). The eager kernels work in place to limit temporaries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from lightgraph.utilities.checks import BITS

__all__ = [
    "BITS",
    "PARAM_BYTES_PER_ROW",
    "PARAM_DTYPE",
    "QuantizedRows",
    "dequantize",
    "pack_codes",
    "pack_rows",
    "packed_nbytes",
    "quantize",
    "unpack_codes",
    "unpack_rows",
]

PARAM_DTYPE = torch.bfloat16
"""dtype of the per-row scale and zero point on the wire."""
PARAM_BYTES_PER_ROW: int = 2 * torch.finfo(PARAM_DTYPE).bits // 8
"""Bytes of side information per row: one scale and one zero point (4)."""

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_MAX_SCALE_BUMPS = 64
_COMPILE_MIN_NUMEL = 1 << 14


class QuantizedRows(NamedTuple):
    """Quantized rows: unpacked integer codes and their per-row bfloat16 parameters.

    Shapes:
        - codes: ``[N, D]`` uint8, values in ``[0, 2^bits - 1]``.
        - scale: ``[N]`` :data:`PARAM_DTYPE`.
        - zero_point: ``[N]`` :data:`PARAM_DTYPE`.
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


# ------------------------------------------------------------------ parameters (eager)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _to_param(v: Tensor, toward: float) -> Tensor:
    """Round ``v`` to :data:`PARAM_DTYPE` toward ``-inf`` (``toward < 0``) or ``+inf``."""
    r = v.to(PARAM_DTYPE)
    back = r.to(v.dtype)
    off = back > v if toward < 0 else back < v
    return torch.where(off, torch.nextafter(r, torch.full_like(r, toward)), r)


def _two_diff(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Error-free ``a - b = hi + err`` (Knuth's TwoSum), valid when ``hi`` is finite."""
    hi = a - b
    bv = a - hi
    av = hi + bv
    err = (a - av) - (bv - b)
    return hi, err


def _row_params(fn: str, x: Tensor, bits: int) -> tuple[Tensor, Tensor]:
    """bfloat16 ``(zero_point, scale)`` per row, chosen so every code is in range."""
    n, d = x.shape
    if n == 0 or d == 0:
        z = torch.zeros(n, dtype=PARAM_DTYPE, device=x.device)
        return z, z.clone()
    ct = _compute_dtype(x.dtype)
    qmax = (1 << bits) - 1
    mn, mx = torch.aminmax(x, dim=1)  # NaN propagates; any inf shows in mn or mx
    mn, mx = mn.to(ct), mx.to(ct)
    bad = ~(torch.isfinite(mn) & torch.isfinite(mx))
    if bool(bad.any()):
        raise ValueError(
            f"{fn}: `x` contains NaN or infinite values (in {int(bad.sum())} of {n} rows, "
            f"first at row {int(bad.nonzero()[0, 0])}); quantization needs finite rows."
        )
    zero = _to_param(mn, -float("inf"))
    zero_c = zero.to(ct)
    if not bool(torch.isfinite(zero_c).all()):
        i = int((~torch.isfinite(zero_c)).nonzero()[0, 0])
        raise ValueError(
            f"{fn}: expected the values of `x` to lie within bfloat16's finite range "
            f"(|x| <= {torch.finfo(PARAM_DTYPE).max:.4g}) but row {i} has min {float(mn[i]):.6g}."
        )
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
    return zero, scale


def _noise(
    fn: str, x: Tensor, ct: torch.dtype, generator: torch.Generator | None, noise: Tensor | None
) -> Tensor:
    if noise is None:
        return torch.rand(x.shape, generator=generator, dtype=ct, device=x.device)
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
}
_COMPILED: dict[str, Callable[..., Tensor]] = {}


def _core(name: str, compiled: bool, numel: int) -> Callable[..., Tensor]:
    """The eager core ``name``, or its compiled kernel when asked for and worthwhile."""
    if not compiled or numel < _COMPILE_MIN_NUMEL:
        return _EAGER[name]
    fn = _COMPILED.get(name)
    if fn is None:
        fn = torch.compile(_FUNCTIONAL[name], dynamic=True)
        _COMPILED[name] = fn
    return fn


# ----------------------------------------------------------------------- public API


def quantize(
    x: Tensor,
    bits: int,
    generator: torch.Generator | None = None,
    noise: Tensor | None = None,
    *,
    compiled: bool = False,
) -> QuantizedRows:
    """Stochastic per-row ``bits``-bit quantization with bfloat16 zero point and scale.

    .. math::

        \\hat x_{ij} = \\lfloor (x_{ij} - z_i) / s_i + u_{ij} \\rfloor,
        \\quad z_i = \\operatorname{bf16}_{\\downarrow}(\\min_j x_{ij}),
        \\quad s_i \\ge \\operatorname{bf16}_{\\uparrow}\\Big(\\frac{\\max_j x_{ij} - z_i}{2^b - 1}\\Big)

    (see the module docstring for how ``s_i`` is raised until it covers the row).

    Args:
        x: float rows (float16, bfloat16, float32 or float64; computed in float32, or
            float64 for float64 input). Must be finite.
        bits: code width, one of :data:`BITS`.
        generator: random generator for the rounding noise ``u ~ U[0, 1)``.
        noise: optional ``u`` supplied by the caller (same shape as ``x``, values in
            ``[0, 1)``); excludes ``generator``.
        compiled: run the element-wise core through ``torch.compile`` (bit-identical
            codes for the same noise; the noise is drawn from ``generator`` as in eager).

    Returns:
        :class:`QuantizedRows` with unpacked codes.

    Shapes:
        - x: ``[N, D]``; noise: ``[N, D]``.
        - output: codes ``[N, D]`` uint8, scale ``[N]``, zero_point ``[N]``.
    """
    bits = _check_bits("quantize", bits)
    _check_rows("quantize", x)
    ct = _compute_dtype(x.dtype)
    zero, scale = _row_params("quantize", x, bits)
    u = _noise("quantize", x, ct, generator, noise)
    zero_c, scale_c = _core_params(zero, scale, ct)
    codes = _core("codes", compiled, x.numel())(x, zero_c, scale_c, u)
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
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{fn}: expected `{name}` of shape ({n},) but got {got}.")
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
    """Exact size in bytes of the :func:`pack_rows` buffer for these widths.

    .. math::

        \\text{nbytes} = \\sum_{b \\in \\{1, 2, 4, 8\\}} \\lceil n_b \\, D \\, b / 8 \\rceil + 4 N

    where ``n_b`` is the number of rows of width ``b`` and ``4 N`` the bfloat16 scale and
    zero point of each row. Sender and receiver both compute it from ``row_bits`` alone.

    Args:
        row_bits: per-row code width, each one of :data:`BITS`.
        dim: row length ``D``.

    Shapes:
        - row_bits: ``[N]``.
    """
    fn = "packed_nbytes"
    dim = _check_dim(fn, dim)
    return _nbytes(_bits_counts(fn, row_bits), dim)


def _nbytes(counts: Sequence[int], dim: int) -> int:
    return sum(
        -(-n * dim * b // 8) for n, b in zip(counts, BITS, strict=True)
    ) + PARAM_BYTES_PER_ROW * sum(counts)


def _group_order(rb: Tensor, counts: Sequence[int]) -> Tensor | None:
    """Row order grouped by width (ascending, stable); None when already grouped."""
    if max(counts, default=0) == rb.numel():
        return None
    return torch.argsort(rb, stable=True)


def pack_rows(
    x: Tensor,
    row_bits: Tensor,
    generator: torch.Generator | None = None,
    *,
    compiled: bool = False,
) -> Tensor:
    """Quantize rows with per-row widths and pack them into one byte buffer (one message).

    .. math::

        \\text{buf} = [\\,P_1 \\,|\\, P_2 \\,|\\, P_4 \\,|\\, P_8 \\,|\\, s \\,|\\, z\\,],
        \\quad P_b = \\operatorname{pack}(\\operatorname{quantize}(x[\\text{rows}_b], b))

    Rows are grouped by width in ascending order, keeping their relative order; the
    noise is drawn from ``generator`` group by group (1-bit rows first), exactly as
    calling :func:`quantize` on each group in that order would.

    Args:
        x: float rows (see :func:`quantize`).
        row_bits: integer width of each row, each one of :data:`BITS` (no 0).
        generator: random generator for the rounding noise.
        compiled: run the quantization arithmetic through ``torch.compile`` (same
            bytes for the same ``generator`` state; packing stays eager).

    Returns:
        uint8 buffer of exactly :func:`packed_nbytes` ``(row_bits, D)`` bytes.

    Shapes:
        - x: ``[N, D]``; row_bits: ``[N]``.
        - output: ``[packed_nbytes(row_bits, D)]`` uint8.
    """
    fn = "pack_rows"
    _check_rows(fn, x)
    rb, counts = _tensor_bits_counts(fn, row_bits)
    n, d = x.shape
    if rb.numel() != n:
        raise ValueError(
            f"{fn}: expected `row_bits` to have one entry per row of `x` ({n}) but got {rb.numel()}."
        )
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
        start += nb
        zero, scale = _row_params(fn, xb, b)
        u = torch.rand(xb.shape, generator=generator, dtype=ct, device=x.device)
        zero_c, scale_c = _core_params(zero, scale, ct)
        codes = _core("codes", compiled, xb.numel())(xb, zero_c, scale_c, u)
        chunks.append(_pack_flat(codes.view(-1), b))
        scales.append(scale)
        zeros.append(zero)
    if n:
        chunks.append(torch.cat(scales).view(torch.uint8))
        chunks.append(torch.cat(zeros).view(torch.uint8))
    if not chunks:
        return torch.empty(0, dtype=torch.uint8, device=x.device)
    return torch.cat(chunks)


def unpack_rows(
    buf: Tensor,
    row_bits: Tensor,
    dim: int,
    dtype: torch.dtype = torch.float32,
    *,
    compiled: bool = False,
) -> Tensor:
    """Invert :func:`pack_rows`: dequantize every row and restore the original order.

    .. math::

        \\tilde x_{ij} = s_i \\, \\hat x_{ij} + z_i

    Args:
        buf: the uint8 buffer from :func:`pack_rows`.
        row_bits: the widths ``buf`` was packed with.
        dim: row length ``D``.
        dtype: output dtype (float16, bfloat16, float32 or float64).
        compiled: run dequantization through ``torch.compile`` (bit-identical values;
            unpacking stays eager).

    Shapes:
        - buf: ``[packed_nbytes(row_bits, D)]`` uint8; row_bits: ``[N]``.
        - output: ``[N, D]``.
    """
    fn = "unpack_rows"
    dim = _check_dim(fn, dim)
    dtype = _check_out_dtype(fn, dtype)
    rb, counts = _tensor_bits_counts(fn, row_bits)
    if not isinstance(buf, Tensor) or buf.dtype != torch.uint8 or buf.dim() != 1:
        got = f"{buf.dtype} {tuple(buf.shape)}" if isinstance(buf, Tensor) else type(buf).__name__
        raise ValueError(f"{fn}: expected `buf` to be a 1-D uint8 tensor but got {got}.")
    expected = _nbytes(counts, dim)
    if buf.numel() != expected:
        raise ValueError(
            f"{fn}: expected `buf` to hold packed_nbytes(row_bits, dim={dim}) = {expected} "
            f"bytes but got {buf.numel()}."
        )
    n = rb.numel()
    if n == 0:
        return torch.empty((0, dim), dtype=dtype, device=buf.device)
    params_at = expected - PARAM_BYTES_PER_ROW * n
    # clone: the parameter bytes may start at an odd offset, and a bf16 view needs alignment
    half = PARAM_BYTES_PER_ROW // 2 * n
    scales = buf[params_at : params_at + half].clone().view(PARAM_DTYPE)
    zeros = buf[params_at + half :].clone().view(PARAM_DTYPE)
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
        if out is None:  # a single width: the rows are already in their original order
            return rows
        out.index_copy_(0, order[row : row + nb], rows)
        offset += size
        row += nb
    return out
