"""The bfloat16 scale search decides ties exactly (lightgraph.functional.quantize).

Whether a scale ``s`` covers a row is the exact test ``zero + s (2^b - 1) >= max``. The
search evaluates ``max - zero`` in the compute dtype, so where ``s (2^b - 1)`` equals the
rounded range ``fl(max - zero)`` while the exact range differs, only the sign of the
rounding error decides the test. Such rows are rare (about one random row in 10^5 per
width), so they are built here on purpose, and a few found by a random search are kept
as fixed cases. The reference is exact rational arithmetic (:class:`fractions.Fraction`)
of the documented rule:

* ``z16`` = min rounded down to bfloat16, ``z32`` = min rounded down to float32;
* ``s(z)`` = the smallest bfloat16 value with ``z + s(z) (2^b - 1) >= max``;
* the row is wide-offset iff ``s(z16) > s(z32)``; its scale is ``s(z32)`` and its zero
  point ``z32`` if wide, else ``z16``; a message is ``2`` bytes longer per wide row.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pytest
import torch

from lightgraph.functional.quantize import (
    BITS,
    PARAM_DTYPE,
    backend,
    fused_triton,
    pack_rows,
    quantize,
    wide_rows,
)

HAS_NUMBA = backend._kernels() is not None
NO_TRITON = fused_triton.triton_unavailable()

# Float32 rows found by a random search (1e6 normal rows per width, scaled by 10^[-6, 3)),
# as bit patterns (min, max), one per width and kind of tie:
# "clip": fl(max - min) == s (2^b - 1) for the bfloat16 value s just below the answer,
#         the exact range is larger (a wrong sign accepts s: the maximum is clipped);
# "big":  fl(max - min) == s (2^b - 1) for the answer s, the exact range is smaller
#         (a wrong sign rejects s: the scale comes out one bfloat16 ulp too large);
# "ord":  the tie falls on the bfloat16 zero point with s(z32), which covers exactly: an
#         ordinary row (a wrong sign makes it wide, 2 bytes too many);
# "wide": as "ord" but s(z32) does not cover from z16: a wide row (a wrong sign sends z16
#         with s(z32), clipping the maximum, 2 bytes too few).
FIXED_ROWS: dict[int, list[tuple[int, int]]] = {
    1: [(0xBA949711, 0x39734779), (0xC301135B, 0x42C5D949), (0xB7B0CA85, 0x37A2FFFF),
        (0xC2BFC953, 0x42A40001)],
    2: [(0xB9357ABB, 0x3A5AA152), (0xBB08C4B6, 0x3BC51DA4), (0xC2DF4BF5, 0x4268FFFE),
        (0xB5DAAAB4, 0xB4BFFFFF)],
    4: [(0xB39E3111, 0x35E16CEF), (0x408247E9, 0x41BFF1FA), (0xBF70F240, 0x3D8DFFF9),
        (0xB5C13BE3, 0x35234002)],
    8: [(0xB5E49BB6, 0x3491692A), (0xBAAA0117, 0xB98E205D), (0xBC125AE0, 0x3B9047FF),
        (0xC1933925, 0x40991401)],
}  # fmt: skip
KINDS = ("clip", "big", "ord", "wide")


# ------------------------------------------------------------- exact reference


def _round(v: Fraction, digits: int, up: bool) -> Fraction:
    """``v`` rounded up or down to a binary float of ``digits`` significant bits with
    float32's exponent range below (smallest normal ``2^-126``, subnormals under it)."""
    if v == 0:
        return v
    if v < 0:
        return -_round(-v, digits, not up)
    e = v.numerator.bit_length() - v.denominator.bit_length()
    if Fraction(2) ** e > v:
        e -= 1  # now 2^e <= v < 2^(e + 1)
    ulp = Fraction(2) ** (max(e, -126) - digits + 1)
    k = v / ulp
    return (math.ceil(k) if up else math.floor(k)) * ulp


def _bf16_up(v: Fraction) -> Fraction:
    return _round(v, 8, up=True)


def _bf16_down(v: Fraction) -> Fraction:
    return _round(v, 8, up=False)


def _f32_down(v: Fraction) -> Fraction:
    return _round(v, 24, up=False)


def _expected(lo: Fraction, hi: Fraction, bits: int) -> tuple[Fraction, Fraction, bool]:
    """``(zero point, scale, wide)`` of a row by the documented rule, exactly."""
    qmax = (1 << bits) - 1
    z32, z16 = _f32_down(lo), _bf16_down(lo)
    s32, s16 = _bf16_up((hi - z32) / qmax), _bf16_up((hi - z16) / qmax)
    wide = s16 > s32
    return (z32 if wide else z16), s32, wide


def _tie_kind(lo: float, hi: float, bits: int, dtype: type) -> str | None:
    """Which tie the row ``[lo, hi]`` hits in compute dtype ``dtype``, if any (see
    :data:`FIXED_ROWS`); ``fl`` is numpy's correctly rounded subtraction."""
    qmax = (1 << bits) - 1
    flo, fhi = Fraction(lo), Fraction(hi)
    z32, z16 = _f32_down(flo), _bf16_down(flo)
    _, s32, wide = _expected(flo, fhi, bits)
    below = _bf16_down(s32 - Fraction(1, 2**160))  # the bfloat16 value below s32
    d32 = Fraction(float(dtype(hi) - dtype(float(z32))))
    d16 = Fraction(float(dtype(hi) - dtype(float(z16))))
    if d32 == below * qmax and fhi - z32 > d32:
        return "clip"
    if d32 == s32 * qmax and fhi - z32 < d32:
        return "big"
    if z16 != z32 and d16 == s32 * qmax and fhi - z16 != d16:
        return "wide" if wide else "ord"
    return None


# ------------------------------------------------------------- tie rows


def _bf16_value(v: float) -> float:
    """``v`` truncated toward zero to a bfloat16 value."""
    b = np.array([v], np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return float(b.view(np.float32)[0])


def _built_rows(bits: int, dtype: type, count: int, seed: int) -> list[tuple[float, float, str]]:
    """Rows ``(min, max, kind)`` built to hit a tie: a bfloat16 scale ``B`` with
    ``span = B (2^b - 1)``, a negative zero ``z`` (the float32 minimum, or a bfloat16 value
    just below it) and a maximum ``m`` a few ulps around ``span + z`` with
    ``fl(m - z) == span`` but ``m - z != span``."""
    qmax = (1 << bits) - 1
    rng = np.random.default_rng(seed)
    out: list[tuple[float, float, str]] = []
    while len(out) < count:
        b = _bf16_value(float(2.0 ** rng.uniform(-20, 10)))
        span = b * qmax  # exact in float32
        at_z16 = bool(rng.integers(2))
        z = float(np.float32(-span * rng.uniform(0.2, 0.8)))  # full float32 mantissa
        zero = _bf16_value(z) if at_z16 else z
        m0 = dtype(span) + dtype(zero)
        sign = 1 if rng.integers(2) else -1  # look above or below span + zero first
        for k in (0, sign, 2 * sign, 3 * sign, -sign, -2 * sign, -3 * sign):
            m = m0
            for _ in range(abs(k)):
                m = np.nextafter(m, dtype(math.copysign(np.inf, k)))
            lo = z
            if at_z16:  # the minimum: 4 float32 ulps above the bfloat16 zero point
                lo = float(zero)
                for _ in range(4):
                    lo = float(np.nextafter(np.float32(lo), np.float32(0)))
            kind = _tie_kind(lo, float(m), bits, dtype)
            if kind is not None:
                out.append((lo, float(m), kind))
                break
    return out


def _fixed_rows(bits: int) -> list[tuple[float, float, str]]:
    rows = []
    for pair in FIXED_ROWS[bits]:
        lo, hi = np.array(pair, np.uint32).view(np.float32).astype(float)
        rows.append((lo, hi, _tie_kind(lo, hi, bits, np.float32)))
    return rows


def _tie_rows(bits: int, dtype: torch.dtype) -> list[tuple[float, float, str]]:
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    rows = _built_rows(bits, np_dtype, 24, seed=bits)
    if dtype == torch.float32:
        rows += _fixed_rows(bits)
    return rows


@pytest.mark.parametrize("bits", BITS)
def test_the_rows_hit_every_kind_of_tie(bits: int) -> None:
    # guards the tests below against rows that tie nowhere
    assert [kind for _, _, kind in _fixed_rows(bits)] == list(KINDS)
    for dtype in (torch.float32, torch.float64):
        kinds = {kind for _, _, kind in _tie_rows(bits, dtype)}
        assert {"clip", "big"} <= kinds and {"ord", "wide"} & kinds, (dtype, kinds)


# ------------------------------------------------------------- the two paths


@pytest.fixture(params=["eager", "fused", "triton"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The ``path=`` argument to test: ``eager`` the torch reference (kernels disabled),
    ``fused`` the numba kernels, ``triton`` the Triton kernels under the interpreter."""
    if request.param == "fused" and not HAS_NUMBA:
        pytest.skip("needs numba")
    if request.param == "triton" and NO_TRITON:
        pytest.skip(NO_TRITON)
    if request.param == "eager":
        monkeypatch.setattr(backend, "_KERNELS", None)
    yield {"eager": "torch", "fused": "auto"}.get(request.param, request.param)


def _skip_triton_float64(path: str, dtype: torch.dtype) -> None:
    if path == "triton" and dtype == torch.float64:
        pytest.skip("the Triton kernels take float32, float16 and bfloat16 rows")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bits", BITS)
def test_tie_rows_get_the_documented_parameters(path: str, dtype: torch.dtype, bits: int) -> None:
    _skip_triton_float64(path, dtype)
    rows = _tie_rows(bits, dtype)
    x = torch.tensor([[lo, hi] for lo, hi, _ in rows], dtype=dtype)
    q = quantize(x, bits, torch.Generator().manual_seed(0), path=path)
    qmax = (1 << bits) - 1
    for i, (lo, hi, kind) in enumerate(rows):
        flo, fhi = Fraction(lo), Fraction(hi)
        zero, scale, wide = _expected(flo, fhi, bits)
        z, s = Fraction(float(q.zero_point[i])), Fraction(float(q.scale[i]))
        assert z <= flo and z + s * qmax >= fhi, (kind, lo, hi)  # no clipping, exactly
        assert s == scale, (kind, lo, hi)  # the smallest covering bfloat16 scale
        assert z == zero, (kind, lo, hi)
        zp = q.zero_point[i : i + 1]
        assert bool(zp.to(PARAM_DTYPE).float() != zp) == wide, (kind, lo, hi)
    assert int(q.codes.max()) <= qmax


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tie_rows_give_messages_of_the_documented_size(path: str, dtype: torch.dtype) -> None:
    # every width in one message, rows shuffled: nbytes = codes + 4 N + 2 W, W counted
    # by the exact rule s16 > s32
    _skip_triton_float64(path, dtype)
    rows, widths = [], []
    for bits in BITS:
        tie = _tie_rows(bits, dtype)
        rows += tie
        widths += [bits] * len(tie)
    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(1)).tolist()
    rows, widths = [rows[i] for i in perm], [widths[i] for i in perm]
    x = torch.tensor([[lo, hi] for lo, hi, _ in rows], dtype=dtype)
    row_bits = torch.tensor(widths)
    buf = pack_rows(x, row_bits, torch.Generator().manual_seed(2), path=path)
    w = sum(
        _expected(Fraction(lo), Fraction(hi), b)[2]
        for (lo, hi, _), b in zip(rows, widths, strict=True)
    )
    codes = sum(-(-widths.count(b) * 2 * b // 8) for b in BITS)
    assert 0 < w < len(rows)
    assert wide_rows(buf, row_bits, 2) == w
    assert buf.numel() == codes + 4 * len(rows) + 2 * w
