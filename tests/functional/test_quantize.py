"""Tests for per-row stochastic quantization and bit packing (lightgraph.functional.quantize)."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
import torch

from lightgraph.functional.quantize import (
    BITS,
    PARAM_BYTES_PER_ROW,
    PARAM_DTYPE,
    SEED_HIGH,
    QuantizedRows,
    backend,
    counter_noise,
    dequantize,
    fused_triton,
    message_nbytes,
    pack_codes,
    pack_rows,
    packed_nbytes,
    quantize,
    unpack_codes,
    unpack_rows,
    wide_rows,
)

ONE_MINUS = 1.0 - 2.0**-24  # largest float32 below 1


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _frac(x: torch.Tensor, q: QuantizedRows) -> torch.Tensor:
    """Fractional part of (x - zero) / scale in float64 (0 where scale == 0)."""
    scale = q.scale.double()[:, None]
    v = (x.double() - q.zero_point.double()[:, None]) / torch.where(scale == 0, 1.0, scale)
    return v - v.floor()


def _mixed_rows(n: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = _gen(seed)
    mags = 10.0 ** torch.randint(-3, 4, (n, 1), generator=g).double()
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * mags
    x[::3] += 5.0 * mags[::3]  # some rows entirely positive
    x[1::3] -= 5.0 * mags[1::3]  # some rows entirely negative
    return x.to(dtype)


# ------------------------------------------------------------------ statistics


@pytest.mark.parametrize("bits", BITS)
def test_unbiased(bits: int) -> None:
    # T independent draws per element. The code is floor(v) + Bernoulli(f), f = frac(v),
    # so T * (mean error) / scale = S - T f with S ~ Binomial(T, f).
    # * Where T min(f, 1 - f) >= 50 the binomial is close to normal: the mean error over
    #   its standard error sqrt(f (1 - f) / T) * scale must satisfy |z| < 5.
    # * Elsewhere (f near 0 or 1, skewed binomial) Bernstein's inequality bounds
    #   |S - T f| <= L / 3 + sqrt(L^2 / 9 + 2 L T f (1 - f)) with probability
    #   1 - 2 e^-L = 1 - 1e-9 (L = ln 2e9), without a normal approximation.
    x = _mixed_rows(6, 16, seed=bits)
    draws = 20_000
    q = quantize(x.repeat(draws, 1), bits, generator=_gen(10 + bits))
    y = dequantize(q, dtype=torch.float64).view(draws, *x.shape)
    n = x.shape[0]
    q0 = QuantizedRows(q.codes[:n], q.scale[:n], q.zero_point[:n], bits)
    assert torch.equal(q.scale.view(draws, -1), q0.scale.expand(draws, -1))
    f = _frac(x, q0)
    scale = q0.scale.double()[:, None].expand_as(x)
    random = f > 0
    assert torch.all(y[:, ~random] == x[~random])  # on-grid elements are exact
    f, scale = f[random], scale[random]
    dev = (y.mean(0) - x)[random] / scale * draws  # S - T f
    var = f * (1 - f)
    normal = draws * torch.minimum(f, 1 - f) >= 50
    z = dev[normal] / torch.sqrt(draws * var[normal])
    assert normal.sum() > 20 and z.abs().max() < 5.0, f"max |z| = {z.abs().max():.2f}"
    big_l = math.log(2e9)
    bound = big_l / 3 + torch.sqrt(big_l**2 / 9 + 2 * big_l * draws * var[~normal])
    assert torch.all(dev[~normal].abs() <= bound)


@pytest.mark.parametrize("bits", BITS)
def test_variance_per_element_and_per_row(bits: int) -> None:
    qmax = (1 << bits) - 1
    zero, scale = -0.75, 0.09375  # both exact in bfloat16
    spread, rows, draws = 256, 3, 4000
    g = _gen(bits)
    xs = []
    for _ in range(rows):
        frac = (torch.arange(spread, dtype=torch.float64) + 0.5) / spread  # stratified in [0, 1)
        k = torch.randint(0, qmax, (spread,), generator=g).double()  # k + 1 <= qmax
        vals = zero + (k + frac[torch.randperm(spread, generator=g)]) * scale
        # the anchors zero and zero + qmax * scale pin the parameters quantize picks
        xs.append(torch.cat([torch.tensor([zero, zero + qmax * scale]), vals]))
    x = torch.stack(xs)
    q = quantize(x.repeat(draws, 1), bits, generator=_gen(100 + bits))
    assert torch.all(q.zero_point.float() == zero) and torch.all(q.scale.float() == scale)
    y = dequantize(q, dtype=torch.float64).view(draws, rows, -1)
    var = y.var(0, correction=1)
    f = _frac(x, QuantizedRows(q.codes[:rows], q.scale[:rows], q.zero_point[:rows], bits))
    expected = f * (1 - f) * scale**2

    # Per element the code is floor(v) + Bernoulli(f), so var = f (1 - f) s^2 <= s^2 / 4.
    # |p(1-p) - f(1-f)| <= |p - f| <= 5 sqrt(f (1 - f) / T) <= 2.5 / sqrt(T) at 5 sigma,
    # plus the Bessel factor T / (T - 1) on a value <= 1/4.
    tol = scale**2 * (2.5 / math.sqrt(draws) + 0.25 / (draws - 1))
    assert torch.all(var <= scale**2 / 4 + tol)
    assert (var - expected).abs().max() <= tol

    # Per row: sum_j f_j (1 - f_j) = D / 6 + 1 / (12 D) exactly for the stratified
    # fractions (f_j = (j + 1/2) / D), and the unbiased sample variances sum to a value
    # with standard deviation ~ sqrt(D / (30 T)) s^2 (E[(1-2f)^2 f(1-f)] = 1/30 for uniform
    # f). Tolerance: 5 standard deviations plus the 1 / (12 D) term.
    row_var = var.sum(1)
    target = spread * scale**2 / 6
    row_tol = scale**2 * (5 * math.sqrt(spread / (30 * draws)) + 1 / (12 * spread))
    assert (row_var - target).abs().max() <= row_tol, (row_var, target, row_tol)


# ------------------------------------------------------------------ exactness


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("u", [0.0, ONE_MINUS])
def test_grid_values_are_exact_regardless_of_noise(bits: int, u: float) -> None:
    qmax = (1 << bits) - 1
    g = _gen(bits)
    zero = torch.tensor([-3.0, 0.125, 1024.0, -1e-20]).to(PARAM_DTYPE).float()
    scale = torch.tensor([0.5, 0.0078125, 3.0, 1e-22]).to(PARAM_DTYPE).float()
    k = torch.randint(0, qmax + 1, (4, 33), generator=g)
    k[:, 0], k[:, 1] = 0, qmax
    x = zero[:, None] + k.float() * scale[:, None]
    q = quantize(x, bits, noise=torch.full_like(x, u))
    assert torch.equal(q.codes.long(), k)
    assert torch.equal(q.scale.float(), scale) and torch.equal(q.zero_point.float(), zero)
    assert torch.equal(dequantize(q), x)


@pytest.mark.parametrize("bits", BITS)
def test_constant_and_zero_rows(bits: int) -> None:
    x = torch.tensor(
        [[1.5] * 5, [0.0] * 5, [-0.0] * 5, [-(2.0**-130)] * 5, [0.1] * 5, [-1e30] * 5],
        dtype=torch.float32,
    )
    for noise in (torch.zeros_like(x), torch.full_like(x, ONE_MINUS), None):
        q = quantize(x, bits, noise=noise, generator=None if noise is not None else _gen())
        y = dequantize(q)
        assert not torch.isnan(y).any()
        # every constant row: scale 0, codes 0, exact. Representable in bfloat16 (incl. a
        # bf16 subnormal): an ordinary row; 0.1 and -1e30 are not bfloat16 values, so
        # they are wide-offset rows with the exact float32 zero point
        assert torch.all(q.scale == 0) and torch.all(q.codes == 0)
        assert torch.equal(y, x) and torch.equal(q.zero_point, x[:, 0])
        assert q.zero_point.dtype == torch.float32
    # all-zero rows (and -0.0 rows): bitwise zero parameters
    assert q.zero_point[1].view(torch.int32) == 0 and q.zero_point[2].view(torch.int32) == 0
    buf = pack_rows(x, torch.full((6,), bits), _gen())
    assert wide_rows(buf, [bits] * 6, 5) == 2
    assert buf.numel() == packed_nbytes([bits] * 6, 5) + 4
    assert torch.equal(unpack_rows(buf, torch.full((6,), bits), 5), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_accepts_every_float_dtype(dtype: torch.dtype) -> None:
    x = torch.randn(5, 11, generator=_gen()).to(dtype)
    q = quantize(x, 4, generator=_gen(1))
    assert q.codes.dtype == torch.uint8 and q.scale.dtype == PARAM_DTYPE
    y = dequantize(q, dtype=dtype)
    assert y.dtype == dtype
    err = (y.double() - x.double()).abs()
    assert torch.all(err <= q.scale.double()[:, None] + 2**-7 * x.double().abs())


def test_empty_inputs() -> None:
    for shape in ((0, 4), (3, 0)):
        q = quantize(torch.zeros(shape), 2)
        assert q.codes.shape == shape and q.scale.shape == (shape[0],)
        assert dequantize(q).shape == shape
    assert pack_rows(torch.zeros(0, 5), torch.zeros(0, dtype=torch.long)).numel() == 0
    assert unpack_rows(
        torch.zeros(0, dtype=torch.uint8), torch.zeros(0, dtype=torch.long), 5
    ).shape == (0, 5)
    assert packed_nbytes([], 5) == 0


# ------------------------------------------------------------------ bfloat16 parameters


def _coverage_rows(dtype: torch.dtype) -> torch.Tensor:
    g = _gen(7)
    base = torch.randn(12, 31, generator=g, dtype=torch.float64)
    rows = [
        base[0] * 1e30,
        base[1] * 1e-30,
        base[2] * 1e-38,  # around float32/bfloat16 subnormals
        -1e30 + base[3] * 1e23,  # huge offset, narrow range
        1.0 + base[4] * 1e-7,  # range of a few float32 ulps
        -(base[5].abs() + 1) * 1e-30,  # negative only, tiny
        base[6].abs().clamp(max=1) * 3e37 + 3e38,  # near the top of bfloat16's range
        base[7] * 1e-3 - 7.0,
        base[8],
        base[9] * 1e10,
        torch.linspace(-1, 1, 31, dtype=torch.float64) * 255,
        base[11] * 1e-45 + 1e-44,  # float32 subnormals
    ]
    return torch.stack(rows).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("bits", BITS)
def test_bf16_params_cover_every_row_exactly(dtype: torch.dtype, bits: int) -> None:
    qmax = (1 << bits) - 1
    x = _coverage_rows(dtype)
    q = quantize(x, bits, generator=_gen())
    assert q.scale.dtype == PARAM_DTYPE and q.zero_point.dtype == torch.float32
    assert int(q.codes.max()) <= qmax
    for i in range(x.shape[0]):
        lo, hi = Fraction(float(x[i].min())), Fraction(float(x[i].max()))
        zero, scale = Fraction(float(q.zero_point[i])), Fraction(float(q.scale[i]))
        assert zero <= lo, i  # exact rational arithmetic
        assert zero + scale * qmax >= hi, i
        # and the scale is at most one bfloat16 ulp (2^-7 relative, or one subnormal
        # step 2^-133 below bfloat16's normal range) above the minimum
        assert scale <= (hi - zero) / qmax * (1 + Fraction(1, 64)) + Fraction(2, 2**133), i
    y = dequantize(q, dtype=torch.float64)
    assert torch.isfinite(y).all()
    assert torch.all((y - x.double()).abs() <= q.scale.double()[:, None])


# ------------------------------------------------------------------ bit packing


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("numel", [0, 1, 7, 13, 1001])
def test_pack_unpack_round_trip(bits: int, numel: int) -> None:
    codes = torch.randint(0, 1 << bits, (numel,), generator=_gen(numel), dtype=torch.uint8)
    packed = pack_codes(codes, bits)
    assert packed.dtype == torch.uint8 and packed.dim() == 1
    assert packed.numel() == math.ceil(numel * bits / 8)
    assert torch.equal(unpack_codes(packed, bits, numel), codes)


def test_pack_layout_is_little_endian_within_bytes() -> None:
    one = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1], dtype=torch.uint8)
    assert pack_codes(one, 1).tolist() == [0b00001101, 0b1]
    two = torch.tensor([[1, 2], [3, 0], [2, 2]], dtype=torch.uint8)  # row-major
    assert pack_codes(two, 2).tolist() == [1 | 2 << 2 | 3 << 4, 2 | 2 << 2]
    assert pack_codes(torch.tensor([15, 1, 7], dtype=torch.uint8), 4).tolist() == [0x1F, 7]
    eight = torch.tensor([0, 255, 7], dtype=torch.uint8)
    packed = pack_codes(eight, 8)
    assert packed.tolist() == [0, 255, 7] and packed.data_ptr() != eight.data_ptr()


# ------------------------------------------------------------------ mixed-width messages


def _seed(seed: int) -> int:
    """The seed pack_rows / quantize draw from ``_gen(seed)``."""
    return int(torch.randint(0, SEED_HIGH, (1,), generator=_gen(seed)))


def _param_bytes(scale: torch.Tensor, zero: torch.Tensor) -> list[torch.Tensor]:
    """Scales (sign bit = wide flag), bf16 zero points (top halves), trailer (low halves)."""
    wide = zero.to(PARAM_DTYPE).float() != zero
    s = scale.view(torch.int16).clone()
    s[wide] |= -32768
    bits = zero.view(torch.int32)
    hi = (bits >> 16).to(torch.int16)
    lo = (bits & 0xFFFF)[wide]
    lo = torch.where(lo >= 32768, lo - 65536, lo).to(torch.int16)
    return [t.view(torch.uint8) for t in (s, hi, lo)]


def _decode_params(
    buf: torch.Tensor, row_bits: torch.Tensor, dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, zero) float32 in original row order, decoded from the documented layout."""
    n = row_bits.numel()
    at = packed_nbytes(row_bits, dim) - 4 * n
    sbits = [
        int.from_bytes(bytes(buf[at + 2 * i : at + 2 * i + 2].tolist()), "little") for i in range(n)
    ]
    zbits = [
        int.from_bytes(bytes(buf[at + 2 * n + 2 * i : at + 2 * n + 2 * i + 2].tolist()), "little")
        for i in range(n)
    ]
    trailer = buf[at + 4 * n :].tolist()
    assert len(trailer) == 2 * sum(s >> 15 for s in sbits)
    scale, zero, w = [], [], 0
    for sb, zb in zip(sbits, zbits, strict=True):
        lo = 0
        if sb >> 15:
            lo = trailer[2 * w] | trailer[2 * w + 1] << 8
            w += 1
        scale.append(struct.unpack("<f", struct.pack("<I", (sb & 0x7FFF) << 16))[0])
        zero.append(struct.unpack("<f", struct.pack("<I", zb << 16 | lo))[0])
    grouped = torch.argsort(row_bits, stable=True)
    out_s, out_z = torch.empty(n), torch.empty(n)
    out_s[grouped] = torch.tensor(scale)
    out_z[grouped] = torch.tensor(zero)
    return out_s, out_z


def _reference_rows(
    x: torch.Tensor, row_bits: torch.Tensor, seed: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize + dequantize each width group with the documented counter noise."""
    return _reference_for_seed(x, row_bits, _seed(seed), dtype)


def _reference_for_seed(
    x: torch.Tensor, row_bits: torch.Tensor, s: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    out = torch.empty_like(x, dtype=dtype)
    codes, scales, zeros = [], [], []
    start = 0
    for b in BITS:
        idx = (row_bits == b).nonzero().squeeze(1)
        if idx.numel() == 0:
            continue
        u = counter_noise(s, idx.numel(), x.shape[1], row_offset=start)
        q = quantize(x[idx], b, noise=u)
        out[idx] = dequantize(q, dtype=dtype)
        codes.append(pack_codes(q.codes, b))
        scales.append(q.scale)
        zeros.append(q.zero_point)
        start += idx.numel()
    layout = torch.cat(codes + _param_bytes(torch.cat(scales), torch.cat(zeros)))
    return out, layout


@pytest.mark.parametrize("dim", [1, 19, 128])
def test_pack_rows_round_trip_mixed_widths(dim: int) -> None:
    n = 37
    x = _mixed_rows(n, dim, seed=dim, dtype=torch.float32)
    row_bits = torch.tensor(BITS)[torch.randint(0, 4, (n,), generator=_gen(dim))]
    buf = pack_rows(x, row_bits, _gen(5))
    assert buf.dtype == torch.uint8 and buf.dim() == 1
    counts = [int((row_bits == b).sum()) for b in BITS]
    formula = sum(math.ceil(c * dim * b / 8) for c, b in zip(counts, BITS, strict=True)) + 4 * n
    assert packed_nbytes(row_bits, dim) == packed_nbytes(row_bits.tolist(), dim) == formula
    w = wide_rows(buf, row_bits, dim)
    assert buf.numel() == formula + 2 * w == message_nbytes(row_bits, dim, w)
    assert PARAM_BYTES_PER_ROW == 4
    ref, layout = _reference_rows(x, row_bits, seed=5)
    assert torch.equal(buf, layout)  # codes by width, scales, zero points, trailer
    y = unpack_rows(buf, row_bits, dim)
    assert torch.equal(y, ref)
    ref64, _ = _reference_rows(x, row_bits, seed=5, dtype=torch.float64)
    assert torch.equal(unpack_rows(buf, row_bits.int(), dim, torch.float64), ref64)
    # the parameters sit in the buffer in grouped order; each scale is within one bfloat16
    # ulp of (max - zero) / (2^b - 1), and the reconstruction error of a row is below its
    # scale (up to float32 rounding of code * scale + zero)
    scale, zero = _decode_params(buf, row_bits, dim)
    assert torch.all(zero <= x.amin(1))
    step = (x.double().amax(1) - zero.double()) / ((1 << row_bits) - 1)
    assert torch.all(scale.double() <= step * (1 + 2**-6) + 2.0**-132)
    assert torch.all((y - x).abs() <= scale[:, None] + 2**-20 * x.abs())


@pytest.mark.parametrize("bits", BITS)
def test_pack_rows_single_width(bits: int) -> None:
    x = torch.randn(9, 13, generator=_gen(bits))
    row_bits = torch.full((9,), bits)
    buf = pack_rows(x, row_bits, _gen(1))
    ref, layout = _reference_rows(x, row_bits, seed=1)
    w = wide_rows(buf, row_bits, 13)
    assert torch.equal(buf, layout) and buf.numel() == math.ceil(9 * 13 * bits / 8) + 36 + 2 * w
    assert torch.equal(unpack_rows(buf, row_bits, 13), ref)
    if bits == 8:  # stochastic rounding moves a value by less than one step
        q = quantize(x, 8, noise=counter_noise(_seed(1), 9, 13))
        assert torch.all((unpack_rows(buf, row_bits, 13) - x).abs() < q.scale.float()[:, None])


def test_packed_nbytes_worked_example() -> None:
    assert packed_nbytes([2] * 1000, 128) == 32_000 + 4_000
    assert packed_nbytes(torch.tensor([1, 1, 1]), 3) == 2 + 12  # ceil(9 / 8) = 2
    assert packed_nbytes(torch.tensor([1, 2, 4, 8]), 5) == 1 + 2 + 3 + 5 + 16


# ------------------------------------------------------------------ bad input


def test_bad_input_messages() -> None:
    x = torch.randn(4, 6)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[2, 3] = bad
        with pytest.raises(ValueError, match=r"quantize: `x` contains NaN or infinite values"):
            quantize(y, 4)
        with pytest.raises(ValueError, match=r"pack_rows: `x` contains NaN or infinite values"):
            pack_rows(y, torch.full((4,), 2))
    with pytest.raises(
        ValueError, match=r"quantize: expected `bits` to be one of \(1, 2, 4, 8\) but got 3"
    ):
        quantize(x, 3)
    with pytest.raises(ValueError, match=r"expected `bits` to be one of .* but got True"):
        quantize(x, True)
    with pytest.raises(
        ValueError, match=r"quantize: expected `x` to be 2-D \[N, D\] but got shape \(6,\)"
    ):
        quantize(x[0], 2)
    with pytest.raises(
        TypeError, match=r"quantize: expected `x` dtype to be one of .* but got torch.int64"
    ):
        quantize(torch.ones(2, 2, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"quantize: expected `noise` to have the shape"):
        quantize(x, 2, noise=torch.rand(4, 5))
    with pytest.raises(ValueError, match=r"quantize: expected `noise` values in \[0, 1\)"):
        quantize(x, 2, noise=torch.ones_like(x))
    with pytest.raises(
        ValueError, match=r"quantize: expected at most one of `generator` and `noise`"
    ):
        quantize(x, 2, generator=_gen(), noise=torch.rand_like(x))
    with pytest.raises(
        ValueError, match=r"quantize: expected the values of `x` to lie within bfloat16"
    ):
        quantize(torch.tensor([[-3.4e38, 0.0]]), 2)
    with pytest.raises(ValueError, match=r"quantize: expected every row range max - min of `x`"):
        quantize(torch.tensor([[-3e38, 3e38]]), 2)

    with pytest.raises(
        ValueError,
        match=r"pack_rows: expected every entry of `row_bits` to be one of \(1, 2, 4, 8\) but got 0 \(at row 2\)",
    ):
        pack_rows(x, torch.tensor([2, 2, 0, 8]))
    with pytest.raises(
        ValueError,
        match=r"packed_nbytes: expected every entry of `row_bits` .* but got 3 \(at row 1\)",
    ):
        packed_nbytes([2, 3], 4)
    with pytest.raises(
        ValueError, match=r"packed_nbytes: expected every entry of `row_bits` .* but got -1"
    ):
        packed_nbytes(torch.tensor([-1, 2]), 4)
    with pytest.raises(TypeError, match=r"pack_rows: expected `row_bits` to have an integer dtype"):
        pack_rows(x, torch.full((4,), 2.0))
    with pytest.raises(
        ValueError,
        match=r"pack_rows: expected `row_bits` to have one entry per row of `x` \(4\) but got 3",
    ):
        pack_rows(x, torch.full((3,), 2))

    row_bits = torch.tensor([1, 2, 4, 8])
    buf = pack_rows(x, row_bits)
    nbytes = packed_nbytes(row_bits, 6)
    with pytest.raises(
        ValueError,
        match=rf"unpack_rows: expected `buf` to hold packed_nbytes\(row_bits, dim=6\) = {nbytes} bytes plus 2 per wide-offset row but got {nbytes - 1}",
    ):
        unpack_rows(buf[: nbytes - 1], row_bits, 6)
    with pytest.raises(ValueError, match=r"unpack_rows: expected every entry of `row_bits`"):
        unpack_rows(buf, torch.tensor([1, 2, 4, 16]), 6)
    with pytest.raises(ValueError, match=r"unpack_rows: expected `dtype` to be one of"):
        unpack_rows(buf, row_bits, 6, torch.int32)
    with pytest.raises(
        ValueError,
        match=r"unpack_codes: expected `packed` to hold ceil\(numel \* bits / 8\) = 2 bytes",
    ):
        unpack_codes(torch.zeros(3, dtype=torch.uint8), 1, 9)
    with pytest.raises(
        ValueError, match=r"pack_codes: expected `codes` values in \[0, 3\] for bits=2 but got 4"
    ):
        pack_codes(torch.tensor([1, 4], dtype=torch.uint8), 2)
    with pytest.raises(ValueError, match=r"dequantize: expected `scale` of shape \(4,\)"):
        dequantize(quantize(x, 2).codes, torch.ones(3), torch.zeros(4))


# ------------------------------------------------------------------ compiled fast path


def test_compiled_path_is_bit_identical_to_eager() -> None:
    # large enough (>= 2**14 elements per call) to take the torch.compile path
    x = _mixed_rows(400, 129, seed=3, dtype=torch.float32)
    noise = torch.rand(x.shape, generator=_gen(1))
    for bits in (1, 8):
        eager = quantize(x, bits, noise=noise)
        fast = quantize(x, bits, noise=noise, compiled=True)
        assert torch.equal(eager.codes, fast.codes)
        assert torch.equal(eager.scale, fast.scale) and torch.equal(
            eager.zero_point, fast.zero_point
        )
        assert torch.equal(dequantize(eager), dequantize(eager, compiled=True))
    x64 = x.double()
    noise64 = torch.rand(x.shape, generator=_gen(2), dtype=torch.float64)
    eager = quantize(x64, 4, noise=noise64)
    assert torch.equal(eager.codes, quantize(x64, 4, noise=noise64, compiled=True).codes)
    assert torch.equal(
        dequantize(eager, dtype=torch.float64),
        dequantize(eager, dtype=torch.float64, compiled=True),
    )
    # same generator -> same bytes, through the mixed-width message API
    row_bits = torch.tensor([2, 8]).repeat_interleave(200)[torch.randperm(400, generator=_gen(2))]
    buf = pack_rows(x, row_bits, _gen(4))
    assert torch.equal(buf, pack_rows(x, row_bits, _gen(4), compiled=True))
    assert torch.equal(
        unpack_rows(buf, row_bits, 129), unpack_rows(buf, row_bits, 129, compiled=True)
    )


def test_compiled_counter_core_equals_the_fused_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # The torch.compile counter core (the CUDA path's graph, here through Inductor's C++
    # backend) computes hash + quantization in one graph; it must give the numba bytes.
    x = _mixed_rows(400, 129, seed=3, dtype=torch.float32)
    row_bits = torch.tensor([1, 4]).repeat_interleave(200)[torch.randperm(400, generator=_gen(2))]
    fast = pack_rows(x, row_bits, _gen(4))
    monkeypatch.setattr(backend, "_kernels", lambda: None)  # the torch path
    assert torch.equal(pack_rows(x, row_bits, _gen(4), compiled=True), fast)
    assert torch.equal(pack_rows(x, row_bits, _gen(4)), fast)  # eager torch reference


@pytest.mark.cuda
@pytest.mark.parametrize("bits", BITS)
def test_cuda_codes_equal_cpu_codes_for_the_same_noise(bits: int) -> None:
    x = _mixed_rows(64, 24, seed=bits, dtype=torch.float32)
    u = torch.rand(x.shape, generator=_gen(bits))
    cpu = quantize(x, bits, noise=u)
    gpu = quantize(x.cuda(), bits, noise=u.cuda())
    assert torch.equal(gpu.scale.cpu(), cpu.scale) and torch.equal(
        gpu.zero_point.cpu(), cpu.zero_point
    )
    assert torch.equal(gpu.codes.cpu(), cpu.codes)
    packed = pack_codes(gpu.codes.reshape(-1), bits)
    assert torch.equal(packed.cpu(), pack_codes(cpu.codes.reshape(-1), bits))
    assert torch.equal(unpack_codes(packed, bits, x.numel()).cpu(), cpu.codes.reshape(-1))
    torch.testing.assert_close(dequantize(gpu).cpu(), dequantize(cpu), rtol=0, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("path", ["auto", "torch"])
@pytest.mark.parametrize("dim", [24, 129])
def test_cuda_messages_equal_cpu_messages(dim: int, path: str) -> None:
    # Both CUDA paths: "auto" takes the fused Triton kernels, "torch" the reference with
    # its torch.compile counter core (groups of >= 2**14 elements with dim=129, eager
    # with dim=24). Neither was run where it was written (no GPU); this checks them
    # against the documented stream and the CPU kernel, bytes and rows.
    if path == "auto" and fused_triton.triton_unavailable() is not None:
        pytest.skip(str(fused_triton.triton_unavailable()))
    n = 800
    x = _mixed_rows(n, dim, seed=dim, dtype=torch.float32)
    x[::5] += 1000.0  # wide-offset rows
    row_bits = torch.tensor(BITS)[torch.randint(0, 4, (n,), generator=_gen(dim))]
    cpu = pack_rows(x, row_bits, _gen(1))
    cuda_gen = torch.Generator("cuda").manual_seed(1)
    gpu = pack_rows(x.cuda(), row_bits.cuda(), cuda_gen, path=path)
    assert gpu.is_cuda
    # As pack_rows draws it: on the generator's device (a CUDA generator makes CUDA draws).
    cuda_gen = torch.Generator("cuda").manual_seed(1)
    seed = int(torch.randint(0, SEED_HIGH, (1,), generator=cuda_gen, device="cuda"))
    ref, layout = _reference_for_seed(x, row_bits, seed)
    assert torch.equal(gpu.cpu(), layout)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        rows, _ = _reference_for_seed(x, row_bits, seed, dtype)
        assert torch.equal(unpack_rows(gpu, row_bits.cuda(), dim, dtype, path=path).cpu(), rows)
    assert torch.equal(cpu, pack_rows(x, row_bits, _gen(1)))
    q = quantize(x.cuda(), 4, torch.Generator("cuda").manual_seed(2), path=path)
    want = quantize(x, 4, noise=counter_noise(seed_of_cuda_generator(2), n, dim))
    assert torch.equal(q.codes.cpu(), want.codes) and torch.equal(q.scale.cpu(), want.scale)
    assert torch.equal(q.zero_point.cpu(), want.zero_point)


def seed_of_cuda_generator(seed: int) -> int:
    """The seed quantize / pack_rows draw from a CUDA generator seeded with ``seed``."""
    g = torch.Generator("cuda").manual_seed(seed)
    return int(torch.randint(0, SEED_HIGH, (1,), generator=g, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_unpack_rows_into_a_slice_of_a_larger_buffer(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(40, 12, generator=gen) * 5 + 1000  # some wide-offset rows
    bits = torch.tensor([1, 2, 4, 8] * 10)
    buf = pack_rows(x, bits, torch.Generator().manual_seed(0))
    expected = unpack_rows(buf, bits, 12, dtype)
    whole = torch.full((50, 12), -7.0, dtype=dtype)
    got = unpack_rows(buf, bits, 12, dtype, out=whole[5:45])
    assert got.data_ptr() == whole[5:45].data_ptr()
    assert torch.equal(whole[5:45], expected)
    assert (whole[:5] == -7).all() and (whole[45:] == -7).all()


def test_unpack_rows_rejects_a_bad_out() -> None:
    bits = torch.full((4,), 2)
    buf = pack_rows(torch.randn(4, 8), bits, torch.Generator().manual_seed(0))
    for out in (torch.empty(3, 8), torch.empty(4, 8, dtype=torch.float64), torch.empty(8, 4).t()):
        with pytest.raises(ValueError, match="`out`"):
            unpack_rows(buf, bits, 8, out=out)
