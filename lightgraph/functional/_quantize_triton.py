"""Triton kernels of :mod:`lightgraph.functional.quantize`: fused quantize+pack, unpack+dequantize.

Private module, loaded by :mod:`lightgraph.functional.quantize.fused_triton` (twice when
needed: compiled for CUDA tensors, and once more under Triton's interpreter for CPU
tensors, which is how the suite checks these kernels on a machine without a GPU). Every
kernel performs the operations of the torch reference
(:mod:`~lightgraph.functional.quantize.reference`, :mod:`~lightgraph.functional.quantize.noise`,
:mod:`~lightgraph.functional.quantize.wire`) on the same IEEE float32 values, so codes,
parameters, message bytes and dequantized rows equal the reference bit for bit:

* divisions are ``div_rn`` (correctly rounded; a plain ``/`` may be approximate on the
  GPU), and launches pass ``enable_fp_fusion=False`` so that ``a * b + c`` is never
  contracted into one fused multiply-add (the reference rounds twice);
* bfloat16 rounding of the parameters is done on the float32 bit patterns (exact, no
  dependence on the device's conversion or on subnormal flushing);
* the counter hash is uint32 arithmetic, which wraps modulo ``2^32`` as the reference's
  masked int64 arithmetic does.

One program handles ``ROWS`` consecutive rows of the message (a multiple of 8, so its
packed bytes start on a byte boundary and no two programs share a byte). Phase 1 reads
its rows once for the minimum and maximum and searches each row's bfloat16 scale and
zero point (no host synchronisation; the search loop ends when every row of the block is
covered, in practice after at most one step); phase 2 reads the rows again (from the
cache) in byte order, computes the noise and the codes and writes whole packed bytes.
Rows are visited through ``src`` (the original row of each message position), so a
mixed-width block is quantized in place of a copy grouped by width: one launch per
width present, each over its own rows.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Only Triton builtins and the functions below are called: the jit-decorated helpers of
# ``triton.language`` (``tl.sum``, ``tl.max``, ``tl.zeros``...) are compiled-mode objects
# unless ``TRITON_INTERPRET=1`` was set before triton was imported, and the interpreted
# copy of this module must not depend on that. Reductions go through ``tl.reduce`` with
# triton's own combine functions where they exist: the interpreter recognises those and
# reduces with numpy (it never calls them); with this module's fallbacks it reduces
# element by element, correct but slow.


@triton.jit
def _min2(a, b):
    return tl.minimum(a, b)


@triton.jit
def _max2(a, b):
    return tl.maximum(a, b)


@triton.jit
def _add2(a, b):
    return a + b


_MIN = getattr(tl.standard, "_elementwise_min", _min2)
_MAX = getattr(tl.standard, "_elementwise_max", _max2)
_SUM = getattr(tl.standard, "_sum_combine", _add2)


@triton.jit
def _mix32(h):
    # the "lowbias32" finaliser on uint32 values (wraps modulo 2^32)
    h = h ^ (h >> 16)
    h = h * 0x7FEB352D
    h = h ^ (h >> 15)
    h = h * 0x846CA68B
    return h ^ (h >> 16)


@triton.jit
def _noise(row, col, key_a, key_b):
    """The counter noise u of (row, col) for the keys (a, b) of a seed (noise.py)."""
    rk = _mix32(row.to(tl.uint32) * 0x9E3779B9 + key_a)
    ck = _mix32(col.to(tl.uint32) * 0x85EBCA77 + key_b)
    h = _mix32(rk ^ ck)
    return (h >> 8).to(tl.float32) * 5.9604644775390625e-08  # 2^-24, exact


@triton.jit
def _finite(v):
    return (v.to(tl.uint32, bitcast=True) & 0x7F800000) != 0x7F800000


@triton.jit
def _bf16_down(v):
    """Largest bfloat16 value <= v (float32 v, NaN excluded), as float32."""
    bits = v.to(tl.uint32, bitcast=True)
    trunc = bits & 0xFFFF0000
    bump = ((bits >> 31) != 0) & ((bits & 0xFFFF) != 0)  # negative and not a bf16 value
    return tl.where(bump, trunc + 0x10000, trunc).to(tl.float32, bitcast=True)


@triton.jit
def _bf16_up(v):
    """Smallest bfloat16 value >= v (float32 v >= 0), as float32."""
    bits = v.to(tl.uint32, bitcast=True)
    trunc = bits & 0xFFFF0000
    return tl.where((bits & 0xFFFF) != 0, trunc + 0x10000, trunc).to(tl.float32, bitcast=True)


@triton.jit
def _two_diff(a, b):
    """a - b = hi + err exactly (TwoSum of a and -b)."""
    hi = a - b
    bv = a - hi
    av = hi + bv
    err = (a - av) + (bv - b)
    return hi, err


@triton.jit
def _covers(span, d_hi, d_err):
    return (span > d_hi) | ((span == d_hi) & (d_err <= 0.0))


@triton.jit
def _too_coarse(d, scale, QMAX: tl.constexpr):
    """``d / scale > qmax`` as the reference evaluates it (x / 0 is inf for x > 0, NaN for 0)."""
    pos = scale > 0.0
    q = tl.math.div_rn(d, tl.where(pos, scale, 1.0))
    return tl.where(pos, q > QMAX, d > 0.0)


@triton.jit
def _need(scale, d_hi, d_err, QMAX: tl.constexpr):
    return _too_coarse(d_hi, scale, QMAX) | ~_covers(scale * QMAX, d_hi, d_err)


@triton.jit
def _first_scale(d, QMAX: tl.constexpr):
    """Where the scale search starts: ``|d| / qmax`` rounded up to bfloat16."""
    return _bf16_up(tl.math.div_rn(tl.abs(d), tl.full(d.shape, QMAX, tl.float32)))


@triton.jit
def _row_params(mn, mx, live, QMAX: tl.constexpr, MAX_BUMPS: tl.constexpr):
    """(zero float32, scale float32 holding a bfloat16 value, bad) of rows with min ``mn``
    and max ``mx``; ``live`` masks the rows of the block that exist."""
    bad = ~(_finite(mn) & _finite(mx))
    z16 = _bf16_down(mn)
    bad = bad | ~_finite(z16)
    d_hi, d_err = _two_diff(mx, mn)  # z32 = min for float32 rows
    bad = bad | ~_finite(d_hi)
    scale = _first_scale(d_hi, QMAX)
    need = _need(scale, d_hi, d_err, QMAX) & live & ~bad
    steps = tl.full((), 0, tl.int32)
    while (tl.reduce(need.to(tl.int32), 0, _MAX) > 0) & (steps < MAX_BUMPS):
        bumped = (scale.to(tl.uint32, bitcast=True) + 0x10000).to(tl.float32, bitcast=True)
        scale = tl.where(need, bumped, scale)
        need = _need(scale, d_hi, d_err, QMAX) & live & ~bad
        steps += 1
    span = scale * QMAX
    bad = bad | need | ~_finite(span)
    d16, e16 = _two_diff(mx, z16)
    start16 = _first_scale(d16, QMAX)
    ordinary = (
        _finite(d16) & (start16 <= scale) & _covers(span, d16, e16) & ~_too_coarse(d16, scale, QMAX)
    )
    zero = tl.where(ordinary, z16, mn)
    zero = tl.where(zero == 0.0, 0.0, zero)  # -0.0 -> +0.0
    return zero, scale, bad & live


@triton.jit(do_not_specialize=["key_a", "key_b"])  # a key of 1 would become a constexpr
def quantize_kernel(
    x_ptr,
    x_stride,
    src_ptr,
    n_rows,
    dim,
    msg_row0,
    key_a,
    key_b,
    out_ptr,
    code_at,
    zero_ptr,
    scale_ptr,
    bad_ptr,
    params_at,
    n_total,
    HAS_SRC: tl.constexpr,
    PACKED: tl.constexpr,
    BITS: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_BYTES: tl.constexpr,
    MAX_BUMPS: tl.constexpr,
):
    """Quantize ``ROWS`` rows of one width group, message rows ``msg_row0 + i``.

    ``PACKED``: write packed codes to ``out_ptr + code_at`` (the group's code section) and
    the wire parameters to the message at ``params_at`` (``n_total`` rows in the
    message); else write one uint8 code per element to ``out_ptr`` (``[n_rows, dim]``).
    Per row, the float32 zero point and scale go to ``zero_ptr`` / ``scale_ptr`` and a
    flag for rows the reference rejects to ``bad_ptr`` (message positions).
    """
    QMAX: tl.constexpr = (1 << BITS) - 1
    PER: tl.constexpr = 8 // BITS if PACKED else 1
    SHIFT: tl.constexpr = BITS if PACKED else 8
    pid = tl.program_id(0)
    first = pid.to(tl.int64) * ROWS  # within the group
    key_a = key_a.to(tl.uint32)
    key_b = key_b.to(tl.uint32)

    # phase 1: per-row minimum and maximum, then the parameters
    r = first + tl.arange(0, ROWS)
    live = r < n_rows
    if HAS_SRC:
        src = tl.load(src_ptr + msg_row0 + r, mask=live, other=0)
    else:
        src = r
    base = src.to(tl.int64) * x_stride
    mn = tl.full((ROWS,), float("inf"), tl.float32)
    mx = tl.full((ROWS,), float("-inf"), tl.float32)
    nan = tl.full((ROWS,), 0, tl.int32)
    for c0 in range(0, dim, BLOCK_D):
        c = c0 + tl.arange(0, BLOCK_D)
        m = live[:, None] & (c < dim)[None, :]
        v = tl.load(x_ptr + base[:, None] + c[None, :], mask=m, other=0.0).to(tl.float32)
        mn = tl.minimum(mn, tl.reduce(tl.where(m, v, float("inf")), 1, _MIN))
        mx = tl.maximum(mx, tl.reduce(tl.where(m, v, float("-inf")), 1, _MAX))
        nan = nan | tl.reduce((v != v).to(tl.int32), 1, _MAX)
    zero, scale, bad = _row_params(mn, mx, live, QMAX, MAX_BUMPS)
    bad = bad | ((nan != 0) & live)
    msg = msg_row0 + r
    tl.store(zero_ptr + msg, zero, mask=live)
    tl.store(scale_ptr + msg, scale, mask=live)
    tl.store(bad_ptr + msg, bad.to(tl.int8), mask=live)
    if PACKED:
        zbits = zero.to(tl.uint32, bitcast=True)
        wide = (zbits & 0xFFFF) != 0
        sw = (scale.to(tl.uint32, bitcast=True) >> 16) | (wide.to(tl.uint32) << 15)
        zh = zbits >> 16
        s_at = params_at + 2 * msg
        z_at = params_at + 2 * n_total + 2 * msg
        tl.store(out_ptr + s_at, (sw & 0xFF).to(tl.uint8), mask=live)
        tl.store(out_ptr + s_at + 1, (sw >> 8).to(tl.uint8), mask=live)
        tl.store(out_ptr + z_at, (zh & 0xFF).to(tl.uint8), mask=live)
        tl.store(out_ptr + z_at + 1, (zh >> 8).to(tl.uint8), mask=live)
    tl.debug_barrier()  # phase 2 reads the parameters phase 1 stored

    # phase 2: codes in byte order, PER codes per byte
    rows_here = tl.minimum(n_rows - first, ROWS)
    numel = rows_here * dim
    nbytes = (numel * SHIFT + 7) // 8
    byte0 = (first * dim * SHIFT) // 8  # exact: first is a multiple of 8
    j = tl.arange(0, PER)
    for k0 in range(0, nbytes, BLOCK_BYTES):
        k = k0 + tl.arange(0, BLOCK_BYTES).to(tl.int64)
        e = k[:, None] * PER + j[None, :]
        ok = e < numel
        rr = e // dim
        cc = e - rr * dim
        row = first + rr
        if HAS_SRC:
            s = tl.load(src_ptr + msg_row0 + row, mask=ok, other=0).to(tl.int64)
        else:
            s = row
        x = tl.load(x_ptr + s * x_stride + cc, mask=ok, other=0.0).to(tl.float32)
        z = tl.load(zero_ptr + msg_row0 + row, mask=ok, other=0.0)
        sc = tl.load(scale_ptr + msg_row0 + row, mask=ok, other=1.0)
        sc = tl.where(sc == 0.0, 1.0, sc)
        v = tl.math.div_rn(x - z, sc)
        # floor(v) for 0 <= v <= 2^b - 1: truncation, exact (no libdevice floor, which
        # the compiler emits with subnormal flushing)
        low = v.to(tl.int32).to(tl.float32)
        u = _noise(msg_row0 + row, cc, key_a, key_b)
        code = low + (u < v - low).to(tl.float32)
        code = tl.where(ok, code, 0.0).to(tl.int32)
        byte = tl.reduce(code << (j[None, :] * SHIFT), 1, _SUM)
        tl.store(out_ptr + code_at + byte0 + k, byte.to(tl.uint8), mask=k < nbytes)


@triton.jit
def dequantize_kernel(
    buf_ptr,
    src_ptr,
    n_rows,
    dim,
    msg_row0,
    code_at,
    params_at,
    trailer_at,
    n_total,
    tidx_ptr,
    out_ptr,
    HAS_SRC: tl.constexpr,
    BITS: tl.constexpr,
    F64: tl.constexpr,
    BF16: tl.constexpr,
    ROWS: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Dequantize ``ROWS`` rows of one width group (message rows ``msg_row0 + i``) into
    their original rows of ``out_ptr`` (``[N, dim]``, contiguous). ``tidx_ptr`` holds,
    per message row, the number of wide-offset rows before it (its trailer entry)."""
    MASK: tl.constexpr = (1 << BITS) - 1
    pid = tl.program_id(0)
    first = pid.to(tl.int64) * ROWS
    r = first + tl.arange(0, ROWS)
    live = r < n_rows
    msg = msg_row0 + r
    s_at = params_at + 2 * msg
    z_at = params_at + 2 * n_total + 2 * msg
    s = tl.load(buf_ptr + s_at, mask=live, other=0).to(tl.uint32)
    s = s | (tl.load(buf_ptr + s_at + 1, mask=live, other=0).to(tl.uint32) << 8)
    zh = tl.load(buf_ptr + z_at, mask=live, other=0).to(tl.uint32)
    zh = zh | (tl.load(buf_ptr + z_at + 1, mask=live, other=0).to(tl.uint32) << 8)
    wide = live & (s >= 0x8000)
    t_at = trailer_at + 2 * tl.load(tidx_ptr + msg, mask=wide, other=0).to(tl.int64)
    lo = tl.load(buf_ptr + t_at, mask=wide, other=0).to(tl.uint32)
    lo = lo | (tl.load(buf_ptr + t_at + 1, mask=wide, other=0).to(tl.uint32) << 8)
    scale = ((s & 0x7FFF) << 16).to(tl.float32, bitcast=True)
    zero = ((zh << 16) | lo).to(tl.float32, bitcast=True)
    if F64:
        scale = scale.to(tl.float64)
        zero = zero.to(tl.float64)
    if HAS_SRC:
        dst = tl.load(src_ptr + msg, mask=live, other=0).to(tl.int64)
    else:
        dst = r
    for c0 in range(0, dim, BLOCK_D):
        c = c0 + tl.arange(0, BLOCK_D)
        m = live[:, None] & (c < dim)[None, :]
        bit = (r[:, None] * dim + c[None, :]) * BITS
        byte = tl.load(buf_ptr + code_at + (bit >> 3), mask=m, other=0).to(tl.int32)
        code = (byte >> (bit & 7).to(tl.int32)) & MASK
        if F64:
            val = code.to(tl.float64) * scale[:, None] + zero[:, None]
        else:
            val = code.to(tl.float32) * scale[:, None] + zero[:, None]
        ptr = out_ptr + dst[:, None] * dim + c[None, :]
        if BF16:  # round to nearest even on the bits (the interpreter's cast truncates)
            vb = val.to(tl.uint32, bitcast=True)
            vb = (vb + 0x7FFF + ((vb >> 16) & 1)) >> 16
            tl.store(ptr, vb.to(tl.uint16).to(tl.bfloat16, bitcast=True), mask=m)
        else:
            tl.store(ptr, val.to(out_ptr.dtype.element_ty), mask=m)
