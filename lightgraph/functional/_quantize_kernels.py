"""numba kernels of :mod:`lightgraph.functional.quantize`: fused quantize+pack, unpack+dequantize.

Private module, imported lazily by :mod:`lightgraph.functional.quantize.backend` on the
first call that takes the CPU fast path (importing it imports numba) and driven by
:mod:`lightgraph.functional.quantize.fused`. Every kernel performs the
operations of the torch reference in the same order and in the same IEEE dtype (float32,
or float64 for float64 rows), so its codes, parameters and dequantized values equal the
reference bit for bit; the tests check this. No ``fastmath``. Integer arithmetic carries
explicit widths, and every constant below carries its numba type: an untyped Python
``int`` or ``float`` literal would promote uint64 operands to float64, or float32
operands to float64.

Per row, one read of the row does the minimum and maximum (on the integer images of the
floats, ``bits ^ ((bits >> 31) & 0x7fffffff)``, whose signed order is the float order:
integer reductions vectorise without ``fastmath``; any NaN or infinity shows as an
all-ones exponent), the bfloat16 parameter search is scalar, and a second pass over the
row (now in L1) computes the counter noise and the codes, which are bit-packed straight
into the message. Dequantization reads each row's packed bytes once and writes the row.

The drivers process one *part* of a message (``part`` of ``parts``): a contiguous range
of rows whose bytes fill whole bytes, and a range of :data:`CHUNK_ROWS`-row chunks of
the width groups whose rows straddle bytes (``D * b`` not a multiple of 8; such a group
is processed in message order, its bits streamed). ``CHUNK_ROWS`` is a multiple of 8, so
every chunk starts on a byte boundary: parts never share a byte, and every byte of the
code section is written by exactly one part (no pre-zeroing, no races). The caller runs
the parts on threads; the kernels release the GIL (``nogil=True``). No numba threading
layer is involved.

Row order: the ``p``-th row of the message (its position in the width-grouped order) is
original row ``src[p]``, and original row ``i`` sits at message position ``pos[i]``
(a stable counting sort of ``row_bits``). Whole-byte rows are visited in their
original order, so the large side (the float rows) is read or written sequentially and
the scattered accesses fall on the small side (packed bytes, per-row parameters).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, types
from numba.extending import overload

CHUNK_ROWS = 64
MAX_SCALE_BUMPS = 64

# The hash, the parameter search and the layout mirror the torch reference in
# lightgraph/functional/quantize/ (noise.py, reference.py, wire.py); keep them in step.
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U8 = np.uint64(8)
_U16 = np.uint64(16)
_U31 = np.uint64(31)
_LO8 = np.uint64(0xFF)
_LO16 = np.uint64(0xFFFF)
_HI16 = np.uint64(0xFFFF0000)
_FLAG = np.uint64(0x8000)
_BF16_ULP = np.uint64(0x10000)
_SIGN32 = np.uint64(0x80000000)
_U32 = np.uint32
_H8, _H15, _H16 = np.uint32(8), np.uint32(15), np.uint32(16)
_MIX1, _MIX2 = np.uint32(0x7FEB352D), np.uint32(0x846CA68B)
_ROW_MUL, _COL_MUL = np.uint32(0x9E3779B9), np.uint32(0x85EBCA77)
_TWO_M24 = np.float32(2.0**-24)
_I32 = np.int32
_I64 = np.int64

# status codes of the quantization kernel (0: fine); the caller then runs the torch
# reference, which raises the matching error message
BAD_NONFINITE = 1
BAD_RANGE = 2

_JIT: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy"}
_INLINE: dict[str, Any] = {"inline": "always", "nogil": True, "error_model": "numpy"}


# ----------------------------------------------------------------------- the hash


@njit(**_INLINE)
def _mix32(h):  # type: ignore[no-untyped-def]
    """32-bit integer finaliser ("lowbias32"), a bijection of uint32."""
    h = _U32(h ^ (h >> _H16))
    h = _U32(h * _MIX1)
    h = _U32(h ^ (h >> _H15))
    h = _U32(h * _MIX2)
    return _U32(h ^ (h >> _H16))


@njit(**_INLINE)
def _row_key(seed_a, row):  # type: ignore[no-untyped-def]
    return _mix32(_U32(_U32(row) * _ROW_MUL + seed_a))


@njit(**_JIT)
def col_keys(seed_b, d):  # type: ignore[no-untyped-def]
    out = np.empty(d, np.uint32)
    for c in range(d):
        out[c] = _mix32(_U32(_U32(c) * _COL_MUL + seed_b))
    return out


# ------------------------------------------------------------- bfloat16 rounding


@njit(**_INLINE)
def _f32_bits(f):  # type: ignore[no-untyped-def]
    return np.uint64(np.float32(f).view(np.uint32))


@njit(**_INLINE)
def _bits_f32(b):  # type: ignore[no-untyped-def]
    return np.uint32(b).view(np.float32)


@njit(**_INLINE)
def _rd_f32(v):  # type: ignore[no-untyped-def]
    """``v`` (finite float32/float64) rounded toward -inf to float32 (identity on float32)."""
    f = np.float32(v)
    if f > v:  # only float64 input; f may be +inf for v just above float32's max
        b = _f32_bits(f)
        if f > 0:
            b = b - _U1
        elif f == 0:
            b = _SIGN32 | _U1
        else:
            b = b + _U1
        f = _bits_f32(b)
    return f


@njit(**_INLINE)
def _ru_f32(v):  # type: ignore[no-untyped-def]
    """``v`` (finite, >= 0) rounded toward +inf to float32."""
    f = np.float32(v)
    if f < v:
        b = _f32_bits(f)
        if f > 0:
            b = b + _U1
        else:  # +-0 below a tiny positive v
            b = _U1
        f = _bits_f32(b)
    return f


@njit(**_INLINE)
def _rd_bf16_bits(v):  # type: ignore[no-untyped-def]
    """float32 bit pattern of ``v`` rounded toward -inf to bfloat16 (low 16 bits zero)."""
    b = _f32_bits(_rd_f32(v))
    hi = b & _HI16
    if (b & _LO16) != _U0 and (b >> _U31) != _U0:  # negative: truncation rounded up
        hi = hi + _BF16_ULP
    return hi


@njit(**_INLINE)
def _ru_bf16_bits(v):  # type: ignore[no-untyped-def]
    """float32 bit pattern of ``v >= 0`` rounded toward +inf to bfloat16."""
    b = _f32_bits(_ru_f32(v))
    hi = b & _HI16
    if (b & _LO16) != _U0:
        hi = hi + _BF16_ULP
    return hi


@njit(**_INLINE)
def _two_diff(a, b):  # type: ignore[no-untyped-def]
    """Error-free difference ``a - b = hi + err`` (as the reference's ``_two_diff``)."""
    hi = a - b
    bv = a - hi
    av = hi + bv
    return hi, (a - av) + (bv - b)


@njit(**_INLINE)
def _span_covers(span, d_hi, d_err):  # type: ignore[no-untyped-def]
    """``span >= d_hi + d_err`` exactly (as the reference's ``_covers``)."""
    return (span > d_hi) or ((span == d_hi) and (d_err <= 0))


@njit(**_JIT)
def _scale_search(mx, zero, qm, one):  # type: ignore[no-untyped-def]
    """Smallest bfloat16 scale covering ``[zero, mx]`` with ``qm`` steps, as in the reference.

    ``mx``, ``zero``, ``qm``, ``one`` are in the compute dtype. Returns
    ``(float32 bit pattern of the bfloat16 scale, status)``.
    """
    d_hi, d_err = _two_diff(mx, zero)
    if not np.isfinite(d_hi):
        return _U0, BAD_RANGE
    sb = _ru_bf16_bits(abs(d_hi) / qm)
    for _ in range(MAX_SCALE_BUMPS):
        sc = one * _bits_f32(sb)
        span = sc * qm
        need = (d_hi / sc > qm) or not _span_covers(span, d_hi, d_err)  # 0 / 0 is NaN: False
        if not need:
            if not np.isfinite(span):
                return sb, BAD_RANGE
            return sb, 0
        sb = sb + _BF16_ULP
    return sb, BAD_RANGE


# --------------------------------------------------------------------- row minmax


def _row_minmax(xr):  # type: ignore[no-untyped-def]
    """``(min, max, bad)`` of a float row; ``bad``: it holds a NaN or an infinity."""
    raise NotImplementedError  # numba-only (the overload below)


@overload(_row_minmax, inline="always", jit_options={"nogil": True, "error_model": "numpy"})
def _row_minmax_impl(xr):  # type: ignore[no-untyped-def]
    if xr.dtype == types.float32:

        def impl32(xr):  # type: ignore[no-untyped-def]
            xi = xr.view(np.int32)
            lo = _I32(0x7FFFFFFF)
            hi = _I32(-0x80000000)
            ex = _I32(0)
            for c in range(xi.shape[0]):
                b = xi[c]
                k = _I32(b ^ ((b >> _I32(31)) & _I32(0x7FFFFFFF)))
                lo = k if k < lo else lo
                hi = k if k > hi else hi
                e = _I32(b & _I32(0x7F800000))
                ex = e if e > ex else ex
            lo = _I32(lo ^ ((lo >> _I32(31)) & _I32(0x7FFFFFFF)))
            hi = _I32(hi ^ ((hi >> _I32(31)) & _I32(0x7FFFFFFF)))
            return lo.view(np.float32), hi.view(np.float32), ex == _I32(0x7F800000)

        return impl32

    def impl64(xr):  # type: ignore[no-untyped-def]
        xi = xr.view(np.int64)
        lo = _I64(0x7FFFFFFFFFFFFFFF)
        hi = _I64(-0x8000000000000000)
        ex = _I64(0)
        for c in range(xi.shape[0]):
            b = xi[c]
            k = b ^ ((b >> _I64(63)) & _I64(0x7FFFFFFFFFFFFFFF))
            lo = k if k < lo else lo
            hi = k if k > hi else hi
            e = b & _I64(0x7FF0000000000000)
            ex = e if e > ex else ex
        lo = lo ^ ((lo >> _I64(63)) & _I64(0x7FFFFFFFFFFFFFFF))
        hi = hi ^ ((hi >> _I64(63)) & _I64(0x7FFFFFFFFFFFFFFF))
        return _I64(lo).view(np.float64), _I64(hi).view(np.float64), ex == _I64(0x7FF0000000000000)

    return impl64


@njit(**_JIT)
def _covers(mx, zero, sb, qm, one):  # type: ignore[no-untyped-def]
    """Whether ``zero`` with the bfloat16 scale ``sb`` passes the search's tests and the
    search from ``zero`` starts at or below ``sb``: then its result is ``sb`` itself."""
    d_hi, d_err = _two_diff(mx, zero)
    if not np.isfinite(d_hi) or _ru_bf16_bits(abs(d_hi) / qm) > sb:
        return False
    sc = one * _bits_f32(sb)
    span = sc * qm
    return _span_covers(span, d_hi, d_err) and not (d_hi / sc > qm)


@njit(**_JIT)
def row_params(xr, qm, one):  # type: ignore[no-untyped-def]
    """Parameters of a row: ``(scale bits, zero (float32), wide, status)``.

    The scale is always ``s32``, the one found from the float32 minimum ``z32``: the
    search from ``z16 <= z32`` (bfloat16 round-down) starts no lower and every scale it
    accepts the search from ``z32`` accepts too, so ``s16 >= s32``. The row is ordinary
    (zero ``z16``) iff ``s16 == s32``, i.e. iff the search from ``z16`` would stop at
    ``s32`` (:func:`_covers`); otherwise it is wide-offset (zero ``z32``).
    """
    mn, mx, bad = _row_minmax(xr)
    if bad:
        return _U0, np.float32(0), False, BAD_NONFINITE
    z16b = _rd_bf16_bits(mn)
    z16 = one * _bits_f32(z16b)
    if not np.isfinite(z16):
        return _U0, np.float32(0), False, BAD_RANGE
    z32 = _rd_f32(mn)
    s32, st = _scale_search(mx, one * z32, qm, one)
    if st != 0:
        return _U0, np.float32(0), False, st
    if not _covers(mx, z16, s32, qm, one):
        return s32, z32, True, 0
    if z16 == 0:
        z16b = _U0  # -0.0 -> +0.0
    return s32, _bits_f32(z16b), False, 0


# ---------------------------------------------------------------------- quantize


@njit(**_INLINE)
def _codes_row(xr, zc, sc, rk, ck, cb):  # type: ignore[no-untyped-def]
    """``cb[c] = floor(v) + (u < frac(v))``, ``v = (x - zero) / scale`` (vectorised)."""
    for c in range(xr.shape[0]):
        v = (xr[c] - zc) / sc
        low = np.floor(v)
        frac = v - low
        u = np.float32(_I32(_mix32(rk ^ ck[c]) >> _H8)) * _TWO_M24
        cb[c] = np.uint8(_I32(low) + _I32(u < frac))


@njit(**_INLINE)
def _pack_aligned(cb, dst, b):  # type: ignore[no-untyped-def]
    """Pack one row's codes into ``dst`` (``len(cb) * b / 8`` bytes, whole bytes)."""
    if b == 8:
        for c in range(dst.shape[0]):
            dst[c] = cb[c]
    elif b == 4:
        for k in range(dst.shape[0]):
            dst[k] = cb[2 * k] | (cb[2 * k + 1] << np.uint8(4))
    elif b == 2:
        for k in range(dst.shape[0]):
            j = 4 * k
            dst[k] = (
                cb[j]
                | (cb[j + 1] << np.uint8(2))
                | (cb[j + 2] << np.uint8(4))
                | (cb[j + 3] << np.uint8(6))
            )
    else:
        for k in range(dst.shape[0]):
            j = 8 * k
            dst[k] = (
                cb[j]
                | (cb[j + 1] << np.uint8(1))
                | (cb[j + 2] << np.uint8(2))
                | (cb[j + 3] << np.uint8(3))
                | (cb[j + 4] << np.uint8(4))
                | (cb[j + 5] << np.uint8(5))
                | (cb[j + 6] << np.uint8(6))
                | (cb[j + 7] << np.uint8(7))
            )


@njit(**_JIT)
def _quant_aligned(  # type: ignore[no-untyped-def]
    x, rb, pos, i0, i1, lay, ck, seed_a, qtab, one, codes, sbits, zeros, wide, status, cb
):
    """Original rows ``i0 .. i1 - 1`` of the groups whose rows fill whole bytes.

    Rows are read in their original order (sequential reads of the large input); each
    writes its own whole bytes at its message position.
    """
    d = x.shape[1]
    for i in range(i0, i1):
        b = rb[i]
        g = lay[4, b]
        pb = lay[3, g]
        if (d * pb) % 8 != 0:
            continue  # a straddling group: _quant_stream
        p = pos[i]
        # (this row body also appears in _quant_stream: hidden in a shared helper it
        # compiled to code about twice as slow)
        xr = x[i]
        sb, z, w, st = row_params(xr, qtab[b], one)
        sbits[p] = np.uint16(sb >> _U16)
        zeros[p] = z
        wide[p] = w
        if st != 0:
            status[0] = st
            cb[:] = 0
        else:
            sc = one * _bits_f32(sb)
            sc = sc if sc != 0 else one  # constant row: v = 0
            _codes_row(xr, one * z, sc, _row_key(seed_a, p), ck, cb)
        row_bytes = d * pb // 8
        at = lay[1, g] + (p - lay[0, g]) * row_bytes
        _pack_aligned(cb, codes[at : at + row_bytes], pb)


@njit(**_JIT)
def _quant_stream(  # type: ignore[no-untyped-def]
    x, src, g, p0, p1, lay, ck, seed_a, qtab, one, codes, sbits, zeros, wide, status, cb
):
    """Message positions ``p0 .. p1 - 1`` of group ``g`` whose rows straddle bytes."""
    d = x.shape[1]
    qm = qtab[lay[2, g]]
    ub = np.uint64(lay[3, g])
    out = lay[1, g] + (p0 - lay[0, g]) * d * lay[3, g] // 8  # chunks start on byte boundaries
    acc = _U0
    nacc = _U0
    for p in range(p0, p1):
        xr = x[src[p]]
        sb, z, w, st = row_params(xr, qm, one)
        sbits[p] = np.uint16(sb >> _U16)
        zeros[p] = z
        wide[p] = w
        if st != 0:
            status[0] = st
            cb[:] = 0
        else:
            sc = one * _bits_f32(sb)
            sc = sc if sc != 0 else one  # constant row: v = 0
            _codes_row(xr, one * z, sc, _row_key(seed_a, p), ck, cb)
        for c in range(d):  # stream the bits, little-endian within bytes
            acc |= np.uint64(cb[c]) << nacc
            nacc += ub
            if nacc == _U8:
                codes[out] = np.uint8(acc)
                out += 1
                acc = _U0
                nacc = _U0
    if nacc != _U0:  # the last chunk of a group: zero-padded final byte
        codes[out] = np.uint8(acc)


@njit(**_INLINE)
def _stream_chunks(lay, d):  # type: ignore[no-untyped-def]
    """Number of CHUNK_ROWS chunks over the groups whose rows straddle bytes."""
    total = 0
    for g in range(4):
        if (d * lay[3, g]) % 8 != 0:
            total += (lay[0, g + 1] - lay[0, g] + CHUNK_ROWS - 1) // CHUNK_ROWS
    return total


@njit(**_INLINE)
def _stream_chunk(lay, d, k):  # type: ignore[no-untyped-def]
    """Group and message positions ``[p0, p1)`` of straddling chunk ``k``."""
    for g in range(4):
        if (d * lay[3, g]) % 8 == 0:
            continue
        m = (lay[0, g + 1] - lay[0, g] + CHUNK_ROWS - 1) // CHUNK_ROWS
        if k < m:
            p0 = lay[0, g] + k * CHUNK_ROWS
            return g, p0, min(p0 + CHUNK_ROWS, lay[0, g + 1])
        k -= m
    return 0, 0, 0


@njit(**_JIT)
def _quant_part(  # type: ignore[no-untyped-def]
    x, rb, pos, src, lay, ck, seed_a, qtab, one, codes, sbits, zeros, wide, status, part, parts
):
    n, d = x.shape
    cb = np.empty(d, np.uint8)
    i0, i1 = n * part // parts, n * (part + 1) // parts
    _quant_aligned(
        x, rb, pos, i0, i1, lay, ck, seed_a, qtab, one, codes, sbits, zeros, wide, status, cb
    )
    m = _stream_chunks(lay, d)
    for k in range(m * part // parts, m * (part + 1) // parts):
        g, p0, p1 = _stream_chunk(lay, d, np.int64(k))
        _quant_stream(
            x, src, g, p0, p1, lay, ck, seed_a, qtab, one, codes, sbits, zeros, wide, status, cb
        )


@njit(**_JIT)
def _write_params(buf, at, sbits, zeros, wide):  # type: ignore[no-untyped-def]
    """Scales (sign bit = wide flag), zero points (top halves), then the wide trailer."""
    n = sbits.shape[0]
    zat = at + 2 * n
    tat = at + 4 * n
    w = 0
    for p in range(n):
        s = np.uint64(sbits[p])
        zb = _f32_bits(zeros[p])
        if wide[p]:
            s = s | _FLAG
            lo = zb & _LO16
            buf[tat + 2 * w] = np.uint8(lo & _LO8)
            buf[tat + 2 * w + 1] = np.uint8(lo >> _U8)
            w += 1
        hi = zb >> _U16
        buf[at + 2 * p] = np.uint8(s & _LO8)
        buf[at + 2 * p + 1] = np.uint8(s >> _U8)
        buf[zat + 2 * p] = np.uint8(hi & _LO8)
        buf[zat + 2 * p + 1] = np.uint8(hi >> _U8)
    return w


@njit(**_JIT)
def count_bits(row_bits, counts):  # type: ignore[no-untyped-def]
    """Rows per width into ``counts [4]``; the first row with another width, or -1."""
    counts[:] = 0
    for i in range(row_bits.shape[0]):
        b = row_bits[i]
        if b == 1:
            counts[0] += 1
        elif b == 2:
            counts[1] += 1
        elif b == 4:
            counts[2] += 1
        elif b == 8:
            counts[3] += 1
        else:
            return i
    return -1


@njit(**_JIT)
def _grouped_rows(row_bits, counts):  # type: ignore[no-untyped-def]
    """Stable counting sort by width: ``src[p]`` = original row at message position ``p``,
    ``pos[i]`` = message position of original row ``i``."""
    at = np.zeros(9, np.int64)
    at[2] = counts[0]
    at[4] = at[2] + counts[1]
    at[8] = at[4] + counts[2]
    n = row_bits.shape[0]
    src = np.empty(n, np.int64)
    pos = np.empty(n, np.int64)
    for i in range(n):
        b = row_bits[i]
        src[at[b]] = i
        pos[i] = at[b]
        at[b] += 1
    return src, pos


@njit(**_JIT)
def count_wide(buf, at, n):  # type: ignore[no-untyped-def]
    """Flag bits set among the ``n`` little-endian bfloat16 scales at ``buf[at:]``."""
    w = 0
    for p in range(n):
        w += buf[at + 2 * p + 1] >> np.uint8(7)
    return w


# --------------------------------------------------------------------- dequantize


@njit(**_JIT)
def _parse_params(buf, at, n, sc, zc, one):  # type: ignore[no-untyped-def]
    """Fill ``sc``/``zc`` (compute dtype, message order) from the parameter sections."""
    zat = at + 2 * n
    tat = at + 4 * n
    w = 0
    for p in range(n):
        s = np.uint64(buf[at + 2 * p]) | (np.uint64(buf[at + 2 * p + 1]) << _U8)
        hi = np.uint64(buf[zat + 2 * p]) | (np.uint64(buf[zat + 2 * p + 1]) << _U8)
        zb = hi << _U16
        if s & _FLAG:
            s = s & np.uint64(0x7FFF)
            zb |= np.uint64(buf[tat + 2 * w]) | (np.uint64(buf[tat + 2 * w + 1]) << _U8)
            w += 1
        sc[p] = one * _bits_f32(s << _U16)
        zc[p] = one * _bits_f32(zb)
    return w


@njit(**_INLINE)
def _dequant_row(src, orow, s, z, b, one):  # type: ignore[no-untyped-def]
    """``orow[c] = code_c * s + z`` from one row's whole packed bytes ``src``."""
    if b == 8:
        for c in range(orow.shape[0]):
            orow[c] = np.float32(_I32(src[c])) * s + z
    elif b == 4:
        for k in range(src.shape[0]):
            v = _I32(src[k])
            orow[2 * k] = np.float32(v & _I32(15)) * s + z
            orow[2 * k + 1] = np.float32(v >> _I32(4)) * s + z
    elif b == 2:
        for k in range(src.shape[0]):
            v = _I32(src[k])
            orow[4 * k] = np.float32(v & _I32(3)) * s + z
            orow[4 * k + 1] = np.float32((v >> _I32(2)) & _I32(3)) * s + z
            orow[4 * k + 2] = np.float32((v >> _I32(4)) & _I32(3)) * s + z
            orow[4 * k + 3] = np.float32(v >> _I32(6)) * s + z
    else:
        lo = (one - one) * s + z  # exactly code * s + z for codes 0 and 1
        hi = one * s + z
        for k in range(src.shape[0]):
            v = _I32(src[k])
            for j in range(8):
                orow[8 * k + j] = hi if (v >> _I32(j)) & _I32(1) else lo


@njit(**_JIT)
def _dequant_aligned(buf, rb, pos, i0, i1, lay, sc, zc, out, one):  # type: ignore[no-untyped-def]
    """Original rows ``i0 .. i1 - 1`` of the groups whose rows fill whole bytes, written in
    their original order (sequential writes of the large output)."""
    d = out.shape[1]
    for i in range(i0, i1):
        b = rb[i]
        if (d * b) % 8 != 0:
            continue  # a straddling group: _dequant_stream
        g = lay[4, b]
        p = pos[i]
        row_bytes = d * b // 8
        at = lay[1, g] + (p - lay[0, g]) * row_bytes
        _dequant_row(buf[at : at + row_bytes], out[i], sc[p], zc[p], b, one)


@njit(**_JIT)
def _dequant_stream(buf, src, g, p0, p1, lay, sc, zc, out):  # type: ignore[no-untyped-def]
    """Message positions ``p0 .. p1 - 1`` of group ``g`` whose rows straddle bytes."""
    d = out.shape[1]
    b = lay[2, g]
    mask = _I32((1 << b) - 1)
    base = lay[1, g]
    for p in range(p0, p1):
        orow = out[src[p]]
        s = sc[p]
        z = zc[p]
        bit0 = (p - lay[0, g]) * d * b
        for c in range(d):
            at = bit0 + c * b
            code = (_I32(buf[base + (at >> 3)]) >> _I32(at & 7)) & mask
            orow[c] = np.float32(code) * s + z


@njit(**_JIT)
def _dequant_part(buf, rb, pos, src, lay, sc, zc, out, one, part, parts):  # type: ignore[no-untyped-def]
    n, d = out.shape
    _dequant_aligned(
        buf, rb, pos, n * part // parts, n * (part + 1) // parts, lay, sc, zc, out, one
    )
    m = _stream_chunks(lay, d)
    for k in range(m * part // parts, m * (part + 1) // parts):
        g, p0, p1 = _stream_chunk(lay, d, np.int64(k))
        _dequant_stream(buf, src, g, p0, p1, lay, sc, zc, out)


# ------------------------------------------------------------ Python-side drivers


def layout(counts, d, pack):  # type: ignore[no-untyped-def]
    """The message layout table ``lay`` (int64 ``[5, 9]``) the kernels read.

    Per width group ``g`` (widths 1, 2, 4, 8): ``lay[0, g]`` its first message position
    (``lay[0, 4] = N``), ``lay[1, g]`` the byte offset of its codes, ``lay[2, g]`` its
    width, ``lay[3, g]`` the bits per stored code (the width, or 8 with ``pack=False``);
    ``lay[4, b]`` is the group of width ``b``.
    """
    lay = np.zeros((5, 9), np.int64)
    for g, b in enumerate((1, 2, 4, 8)):
        lay[0, g + 1] = lay[0, g] + counts[g]
        lay[2, g] = b
        lay[3, g] = b if pack else 8
        lay[4, b] = g
        if g:
            lay[1, g] = lay[1, g - 1] + -(-counts[g - 1] * d * int(lay[3, g - 1]) // 8)
    return lay


def message_order(row_bits, counts):  # type: ignore[no-untyped-def]
    """``(src, pos)``: original row of each message position and its inverse
    (``row_bits`` int64 numpy)."""
    n = row_bits.shape[0]
    if max(counts) == n:
        ident = np.arange(n, dtype=np.int64)
        return ident, ident
    return _grouped_rows(row_bits, np.asarray(counts, np.int64))


def quantize_rows(  # type: ignore[no-untyped-def]
    x, row_bits, order, counts, seed_a, seed_b, pack, codes, sbits, zeros, wide, run_parts
):
    """Quantize every row of ``x`` (numpy float32/float64 ``[N, D]``, ``D >= 1``) in one pass.

    ``row_bits``: int64 widths (original order); ``order``: :func:`message_order`. With
    ``pack`` the codes of each width group are bit-packed into ``codes`` from offset 0
    in the wire layout; otherwise they are stored one per byte, ``[N, D]`` row-major in
    message order. Parameters go to ``sbits`` (bfloat16 bit patterns, ``uint16 [N]``),
    ``zeros`` (float32) and ``wide`` (bool), in message order. ``run_parts(kernel,
    args)`` must call ``kernel(*args, part, parts)`` for ``part = 0 .. parts - 1`` (in
    any order or concurrently). Returns the status (0: fine).
    """
    lay = layout(counts, x.shape[1], pack)
    one = x.dtype.type(1)
    qtab = np.array([(1 << b) - 1 for b in range(9)], dtype=x.dtype)
    ck = col_keys(np.uint32(seed_b), x.shape[1])
    status = np.zeros(1, np.int64)
    src, pos = order
    seed = np.uint32(seed_a)
    args = (x, row_bits, pos, src, lay, ck, seed, qtab, one, codes, sbits, zeros, wide, status)
    run_parts(_quant_part, args)
    return int(status[0])


def write_params(buf, at, sbits, zeros, wide):  # type: ignore[no-untyped-def]
    """Write the parameter sections and the trailer at ``buf[at:]``; returns ``W``."""
    return int(_write_params(buf, at, sbits, zeros, wide))


def dequantize_rows(buf, row_bits, order, counts, params_at, out, run_parts):  # type: ignore[no-untyped-def]
    """Dequantize a message into ``out`` (numpy float32/float64 ``[N, D]``, original order);
    ``run_parts`` as for :func:`quantize_rows`."""
    n = out.shape[0]
    lay = layout(counts, out.shape[1], True)
    one = out.dtype.type(1)
    sc = np.empty(n, out.dtype)
    zc = np.empty(n, out.dtype)
    _parse_params(buf, params_at, n, sc, zc, one)
    src, pos = order
    run_parts(_dequant_part, (buf, row_bits, pos, src, lay, sc, zc, out, one))
