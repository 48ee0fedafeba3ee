"""Wide-offset rows: rows far from zero relative to their range keep the ideal step.

A bfloat16 zero point ``z16 <= min`` can sit ``2^-8 |min|`` below the row, far more
than its range; such rows are sent with the float32 zero point (2 extra bytes) whenever
that gives a smaller bfloat16 scale. See lightgraph.functional.quantize.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
import torch

from lightgraph.functional.quantize import (
    BITS,
    PARAM_DTYPE,
    QuantizedRows,
    dequantize,
    message_nbytes,
    pack_rows,
    packed_nbytes,
    quantize,
    unpack_rows,
    wide_rows,
)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _offset_rows(d: int = 64) -> torch.Tensor:
    """float32 rows with large offsets and small ranges, and a few ordinary rows."""
    g = _gen(0)
    t = torch.rand(12, d, generator=g, dtype=torch.float64)
    t[:, 0], t[:, 1] = 0.0, 1.0  # pin min and max
    offsets_ranges = [
        (999.99, 0.02),
        (1e6, 0.5),  # float32 spacing 0.0625 at 1e6: a few dozen distinct values
        (-1e6 - 0.5, 0.5),
        (-1000.01, 0.02),
        (3.0e38, 1e34),
        (1e-20, 1e-26),
        (-7.25, 1e-3),
        (12345.678, 3.0),
        (0.1, 1e-5),
        (0.0, 1.0),  # ordinary: min 0 is a bfloat16 value
        (-1.0, 2.0),  # ordinary
        (1.0, 1e-6),  # min 1.0 is a bfloat16 value: ordinary although narrow
    ]
    rows = [o + r * t[i] for i, (o, r) in enumerate(offsets_ranges)]
    return torch.stack(rows).float()


def _bf16_up(v: Fraction) -> Fraction:
    """Smallest bfloat16 value >= v (v >= 0), by search from the nearest one."""
    s = torch.tensor(float(v), dtype=torch.float64).to(PARAM_DTYPE)
    inf = torch.tensor(float("inf"), dtype=PARAM_DTYPE)
    while Fraction(float(s)) < v:
        s = torch.nextafter(s, inf)
    while float(s) > 0 and Fraction(float(torch.nextafter(s, -inf))) >= v:
        s = torch.nextafter(s, -inf)
    return Fraction(float(s))


def _bf16_down(v: Fraction) -> Fraction:
    """Largest bfloat16 value <= v."""
    s = torch.tensor(float(v), dtype=torch.float64).to(PARAM_DTYPE)
    inf = torch.tensor(float("inf"), dtype=PARAM_DTYPE)
    while Fraction(float(s)) > v:
        s = torch.nextafter(s, -inf)
    while Fraction(float(torch.nextafter(s, inf))) <= v:
        s = torch.nextafter(s, inf)
    return Fraction(float(s))


@pytest.mark.parametrize("bits", BITS)
def test_offset_rows_keep_the_ideal_step(bits: int) -> None:
    qmax = (1 << bits) - 1
    x = _offset_rows()
    q = quantize(x, bits, _gen(bits))
    for i in range(x.shape[0]):
        lo, hi = Fraction(float(x[i].min())), Fraction(float(x[i].max()))
        ideal = (hi - lo) / qmax
        assert ideal >= Fraction(2) ** -126  # bfloat16 normal range: 2^-7 relative ulps
        s, z = Fraction(float(q.scale[i])), Fraction(float(q.zero_point[i]))
        assert ideal <= s <= ideal * Fraction(101, 100), (i, float(s / ideal))
        assert z <= lo and z + s * qmax >= hi
    # the 8-bit row spanning 999.99..1000.01 of the issue: ideal step, not ~200x it
    if bits == 8:
        assert float(q.scale[0]) < 0.02 / 255 * 1.01


@pytest.mark.parametrize("bits", BITS)
def test_parameters_follow_the_documented_rule(bits: int) -> None:
    # z16 = bf16 round-down of min with the smallest covering bf16 scale s16; z32 = min
    # (float32 input) with s32; wide iff s32 < s16. Checked with exact rationals.
    qmax = (1 << bits) - 1
    g = _gen(bits)
    x = torch.cat([_offset_rows(16), torch.randn(40, 16, generator=g) * 3 + 1])
    q = quantize(x, bits, _gen(1))
    for i in range(x.shape[0]):
        lo, hi = Fraction(float(x[i].min())), Fraction(float(x[i].max()))
        z16 = _bf16_down(lo)
        s16 = _bf16_up((hi - z16) / qmax)
        s32 = _bf16_up((hi - lo) / qmax)
        wide = s32 < s16
        assert Fraction(float(q.zero_point[i])) == (lo if wide else z16), i
        assert Fraction(float(q.scale[i])) == min(s16, s32), i
        # a row is wide iff its zero point is not a bfloat16 value
        zp = q.zero_point[i : i + 1]
        assert wide == bool(zp.to(PARAM_DTYPE).float() != zp)


def test_float64_offset_rows() -> None:
    # float64 input: z32 = min rounded down to float32, so the step also absorbs that
    # rounding (at most one float32 ulp of min)
    x = _offset_rows().double()
    x += x.abs() * 1e-10 * torch.rand(x.shape, generator=_gen(5), dtype=torch.float64)
    q = quantize(x, 8, _gen(2))
    wide = 0
    for i in range(x.shape[0]):
        lo, hi = Fraction(float(x[i].min())), Fraction(float(x[i].max()))
        f = torch.tensor(float(lo)).float().abs()
        ulp32 = 2 * Fraction(float(torch.nextafter(f, torch.tensor(float("inf"))) - f))
        s, z = Fraction(float(q.scale[i])), Fraction(float(q.zero_point[i]))
        assert z <= lo and z + s * 255 >= hi
        if float(q.zero_point[i : i + 1].to(PARAM_DTYPE)) != float(z):  # wide-offset row
            wide += 1
            assert lo - z <= ulp32
        assert s <= (hi - lo + ulp32) / 255 * (1 + Fraction(1, 128)), i
    assert wide >= 6
    y = dequantize(q, dtype=torch.float64)
    assert torch.all((y - x).abs() <= q.scale.double()[:, None])


@pytest.mark.parametrize("bits", BITS)
def test_offset_rows_unbiased_on_grid_with_the_modelled_variance(bits: int) -> None:
    qmax = (1 << bits) - 1
    rows, d, draws = 24, 128, 1500
    g = _gen(100 + bits)
    offsets = torch.tensor([1000.0, -1e5, 1e6, -3.5, 77.7, 2.0e4] * 4, dtype=torch.float64)
    # relative ranges 1e-1..1e-3: float32 still resolves ~65+ positions per 8-bit step
    ranges = offsets.abs() * 10.0 ** -torch.randint(1, 4, (rows,), generator=g).double()
    x = (
        offsets[:, None] + ranges[:, None] * torch.rand(rows, d, generator=g, dtype=torch.float64)
    ).float()
    q = quantize(x.repeat(draws, 1), bits, _gen(200 + bits))
    q0 = QuantizedRows(q.codes[:rows], q.scale[:rows], q.zero_point[:rows], bits)
    assert torch.equal(q.scale.view(draws, rows), q0.scale.expand(draws, rows))
    zero = q0.zero_point.double()
    assert int((zero.to(PARAM_DTYPE).double() != zero).sum()) >= rows // 2  # mostly wide rows
    y = dequantize(q, dtype=torch.float64).view(draws, rows, d)

    # grid: every dequantized value is z + k s exactly, k an integer code in [0, qmax]
    s = q0.scale.double()
    k = (y - zero[:, None]) / s[:, None]
    assert torch.equal(k, k.round()) and float(k.min()) >= 0 and float(k.max()) <= qmax
    for v, kk in zip(y[0, 0, :8].tolist(), k[0, 0, :8].tolist(), strict=True):
        assert Fraction(v) == Fraction(float(zero[0])) + int(kk) * Fraction(float(s[0]))

    # unbiased: per element, mean error over its standard error (normal regime)
    xd = x.double()
    f = (xd - zero[:, None]) / s[:, None]
    f = f - f.floor()
    var_el = f * (1 - f) * s[:, None] ** 2  # theory: f (1 - f) s^2
    normal = draws * torch.minimum(f, 1 - f) >= 50
    zscore = (y.mean(0) - xd)[normal] / torch.sqrt(var_el[normal] / draws)
    assert normal.sum() > rows * d // 2 and float(zscore.abs().max()) < 5.5

    # variance: the sample variances against sum f (1 - f) s^2 (5 standard deviations of
    # the estimate: Var[S^2] ~ (mu4 - sigma^4) / T for a scaled Bernoulli(f))
    emp = y.var(0, correction=1)
    mu4 = s[:, None] ** 4 * f * (1 - f) * (1 - 3 * f * (1 - f))
    sd_total = float(torch.sqrt(((mu4 - var_el**2) / draws).sum()))
    assert abs(float(emp.sum() - var_el.sum())) < 5 * sd_total + 1e-12 * float(var_el.sum())

    # AdaQP's model (lightgraph/quant/variance_aware_bits.py): D s^2 / 6 per row with the
    # ideal step s = (max - min) / (2^b - 1). The step sent is within one bfloat16 ulp of
    # it ((1 + 2^-7)^2 in variance); sum f (1 - f) over uniform fractions has relative
    # standard deviation sqrt(1/180 / (rows d)) / (1/6) (5 of them allowed).
    ideal = (xd.amax(1) - xd.amin(1)) / qmax
    model = float((d * ideal**2 / 6).sum())
    ratio = float(emp.sum()) / model
    spread = 5 * math.sqrt(1 / 180 / (rows * d)) * 6
    assert 1 - spread < ratio < (1 + 2**-7) ** 2 + spread, ratio


# ------------------------------------------------------------------ wire format


def _decode(
    buf: torch.Tensor, row_bits: torch.Tensor, dim: int
) -> tuple[list[int], list[int], bytes]:
    n = row_bits.numel()
    at = packed_nbytes(row_bits, dim) - 4 * n
    raw = bytes(buf.tolist())
    scales = list(struct.unpack(f"<{n}H", raw[at : at + 2 * n]))
    zeros = list(struct.unpack(f"<{n}H", raw[at + 2 * n : at + 4 * n]))
    return scales, zeros, raw[at + 4 * n :]


@pytest.mark.parametrize("dim", [5, 64])
def test_message_with_and_without_wide_rows(dim: int) -> None:
    n = 150
    g = _gen(dim)
    row_bits = torch.tensor(BITS)[torch.randint(0, 4, (n,), generator=g)]
    relu = torch.randn(n, dim, generator=g).clamp(min=0)  # min 0: no wide row
    buf = pack_rows(relu, row_bits, _gen(1))
    assert wide_rows(buf, row_bits, dim) == 0 and buf.numel() == packed_nbytes(row_bits, dim)
    scales, _, trailer = _decode(buf, row_bits, dim)
    assert trailer == b"" and all(s < 0x8000 for s in scales)
    assert torch.all((unpack_rows(buf, row_bits, dim) - relu).abs() <= 5.0)

    x = torch.randn(n, dim, generator=g)
    x[::3] = 500.0 + x[::3] * 1e-3  # wide-offset rows
    buf = pack_rows(x, row_bits, _gen(2))
    w = wide_rows(buf, row_bits, dim)
    assert w >= n // 3
    assert buf.numel() == packed_nbytes(row_bits, dim) + 2 * w == message_nbytes(row_bits, dim, w)
    scales, zeros, trailer = _decode(buf, row_bits, dim)
    assert len(trailer) == 2 * w == 2 * sum(s >> 15 for s in scales)
    # reconstruct the float32 zero points from the sections (grouped order) and compare
    # with quantize's parameters for the same rows
    lows = list(struct.unpack(f"<{w}H", trailer))
    grouped = torch.argsort(row_bits, stable=True).tolist()
    y = unpack_rows(buf, row_bits, dim)
    j = 0
    for p, r in enumerate(grouped):
        lo = 0
        if scales[p] >> 15:
            lo, j = lows[j], j + 1
        zero = struct.unpack("<f", struct.pack("<I", zeros[p] << 16 | lo))[0]
        scale = struct.unpack("<f", struct.pack("<I", (scales[p] & 0x7FFF) << 16))[0]
        assert zero <= float(x[r].min())
        assert bool(scales[p] >> 15) == (lo != 0)  # wide iff the zero point is not bf16
        assert torch.all((y[r] - x[r]).abs() <= scale * (1 + 2**-20) + 2**-20 * abs(zero))
        if r % 3 == 0:  # the offset rows: step within 1% of the ideal one
            ideal = (float(x[r].max()) - float(x[r].min())) / ((1 << int(row_bits[r])) - 1)
            assert scale <= ideal * 1.01 and scale >= ideal * (1 - 1e-6)
    # the same rows, back to back with another message: the first message's size
    # follows from its flags alone
    other = pack_rows(relu, row_bits, _gen(3))
    both = torch.cat([buf, other])
    size = message_nbytes(row_bits, dim, wide_rows(both, row_bits, dim))
    assert size == buf.numel()
    assert torch.equal(unpack_rows(both[:size], row_bits, dim), y)
    assert torch.equal(unpack_rows(both[size:], row_bits, dim), unpack_rows(other, row_bits, dim))


def test_bad_buffers() -> None:
    x = torch.randn(8, 6, generator=_gen())
    x[::2] = 1000.3 + x[::2] * 1e-2  # wide-offset rows
    x[1::2] = x[1::2].clamp(min=0)  # ordinary rows (min 0)
    x[1::2, 0] = 0.0
    row_bits = torch.tensor([1, 2, 4, 8] * 2)
    buf = pack_rows(x, row_bits, _gen())
    nbytes = packed_nbytes(row_bits, 6)
    w = wide_rows(buf, row_bits, 6)
    assert w == 4 and buf.numel() == nbytes + 8
    with pytest.raises(
        ValueError,
        match=rf"unpack_rows: expected `buf` to hold packed_nbytes\(row_bits, dim=6\) \+ 2 \* W = {nbytes} \+ 2 \* 4 = {nbytes + 8} bytes \(W = 4 wide-offset rows flagged in its scale section\) but got {nbytes + 7}",
    ):
        unpack_rows(buf[:-1], row_bits, 6)
    with pytest.raises(ValueError, match=rf"but got {nbytes + 9}\."):
        unpack_rows(torch.cat([buf, buf[:1]]), row_bits, 6)
    with pytest.raises(
        ValueError,
        match=rf"unpack_rows: expected `buf` to hold packed_nbytes\(row_bits, dim=6\) = {nbytes} bytes plus 2 per wide-offset row but got {nbytes - 1}",
    ):
        unpack_rows(buf[: nbytes - 1], row_bits, 6)
    flipped = buf.clone()
    at = nbytes - 4 * 8
    ordinary = next(p for p in range(8) if flipped[at + 2 * p + 1] < 0x80)
    flipped[at + 2 * ordinary + 1] |= 0x80  # a flag without its trailer entry
    with pytest.raises(ValueError, match=r"W = 5 wide-offset rows flagged"):
        unpack_rows(flipped, row_bits, 6)
    with pytest.raises(
        ValueError,
        match=rf"wide_rows: expected `buf` to hold at least packed_nbytes\(row_bits, dim=6\) = {nbytes} bytes but got 3",
    ):
        wide_rows(buf[:3], row_bits, 6)
    with pytest.raises(ValueError, match=r"wide_rows: expected `buf` to be a 1-D uint8 tensor"):
        wide_rows(buf.float(), row_bits, 6)
    with pytest.raises(
        ValueError, match=r"message_nbytes: expected `num_wide` to be at most 8 but got 9"
    ):
        message_nbytes(row_bits, 6, 9)
    with pytest.raises(
        ValueError, match=r"message_nbytes: expected `num_wide` to be a non-negative int"
    ):
        message_nbytes(row_bits, 6, -1)
    with pytest.raises(ValueError, match=r"message_nbytes: expected every entry of `row_bits`"):
        message_nbytes([3], 6)
