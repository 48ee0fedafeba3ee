"""The fused numba kernels and the counter-based noise of lightgraph.functional.quantize.

The kernels must reproduce the torch reference bit for bit: same codes, parameters,
bytes and dequantized rows, for every width, mixed widths in one message, odd row
lengths (rows straddling bytes), empty and one-row inputs and every input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch

from lightgraph.functional.quantize import (
    BITS,
    SEED_HIGH,
    backend,
    counter_noise,
    dequantize,
    dispatch,
    fused,
    pack_rows,
    packed_nbytes,
    quantize,
    unpack_rows,
    warmup,
    wide_rows,
)

K = backend._kernels()
needs_numba = pytest.mark.skipif(K is None, reason="needs numba")


@pytest.fixture(autouse=True)
def _kernels_stay_enabled() -> Iterator[None]:
    # a kernel failure would silently fall back to the torch reference (with a warning)
    # and make the comparisons below compare the reference with itself
    yield
    assert backend._KERNELS is K


DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _seed(seed: int) -> int:
    return int(torch.randint(0, SEED_HIGH, (1,), generator=_gen(seed)))


def _rows(n: int, d: int, seed: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows of varied magnitude, sign and offset (many wide-offset rows), plus constants."""
    g = _gen(seed)
    top = 2 if dtype == torch.float16 else 4  # float16 overflows at 65504
    mags = 10.0 ** torch.randint(-4, top, (n, 1), generator=g).double()
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * mags
    x += torch.randint(-1, 2, (n, 1), generator=g).double() * 1000.0 * mags
    x[::7] = x[::7, :1]  # constant rows
    x[3::11] = x[3::11].clamp(min=0)  # ReLU-like rows
    return x.to(dtype)


def _widths(n: int, seed: int) -> torch.Tensor:
    return torch.tensor(BITS)[torch.randint(0, 4, (n,), generator=_gen(seed))]


def _torch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "_kernels", lambda: None)


# ------------------------------------------------------------------ counter noise


def test_counter_noise_values() -> None:
    u = counter_noise(12345, 300, 77)
    assert u.dtype == torch.float32 and u.shape == (300, 77)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    k = u.double() * 2**24
    assert torch.equal(k, k.floor())  # multiples of 2^-24, like torch.rand
    # counter-based: any window of rows is a slice of the stream
    assert torch.equal(counter_noise(12345, 100, 77, row_offset=150), u[150:250])
    assert torch.equal(counter_noise(12345, 300, 77), u)  # deterministic
    assert not torch.equal(counter_noise(12346, 300, 77), u)
    assert counter_noise(1, 0, 5).shape == (0, 5) and counter_noise(1, 5, 0).shape == (5, 0)
    top = counter_noise(7, 3, 4, row_offset=2**32 - 3)  # the last rows of the counter
    assert top.shape == (3, 4) and float(top.max()) < 1.0


def test_counter_noise_statistics() -> None:
    # 2^20 draws: moments of U[0, 1) and no correlation between neighbours (rows,
    # columns, seeds); 5-sigma bounds
    n, d = 4096, 256
    u = counter_noise(99, n, d).double()
    m = u.numel()
    assert abs(float(u.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / m)
    assert abs(float(u.var()) - 1 / 12) < 5 * math.sqrt(1 / 180 / m)
    hist = torch.histc(u.float(), bins=64, min=0.0, max=1.0)
    expected = m / 64
    chi2 = float(((hist - expected) ** 2 / expected).sum())  # 63 dof: mean 63, sd 11.2
    assert chi2 < 63 + 5 * math.sqrt(2 * 63)
    c = u - 0.5
    sd = 5 / math.sqrt(m) / 12  # of a mean of products of independent centred uniforms
    assert abs(float((c[:, 1:] * c[:, :-1]).mean())) < sd
    assert abs(float((c[1:] * c[:-1]).mean())) < sd
    other = counter_noise(100, n, d).double() - 0.5
    assert abs(float((c * other).mean())) < sd


def test_counter_noise_bad_arguments() -> None:
    with pytest.raises(
        ValueError, match=r"counter_noise: expected `seed` to be a non-negative int but got -1"
    ):
        counter_noise(-1, 2, 2)
    with pytest.raises(
        ValueError, match=r"counter_noise: expected `seed` to be at most 4294967295"
    ):
        counter_noise(2**32, 2, 2)
    with pytest.raises(
        ValueError, match=r"counter_noise: expected `dim` to be a non-negative int but got 2.0"
    ):
        counter_noise(1, 2, 2.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"counter_noise: expected `row_offset` to be at most 4294967294"
    ):
        counter_noise(1, 2, 2, row_offset=2**32 - 1)


# ------------------------------------------------------------------ kernel == reference


@needs_numba
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [1, 3, 5, 13, 64, 129])
def test_fused_kernels_equal_the_reference(dtype: torch.dtype, dim: int) -> None:
    n = 203  # several 64-row chunks per width group, a partial last one
    x = _rows(n, dim, seed=dim, dtype=dtype)
    row_bits = _widths(n, seed=dim)
    counts = [int((row_bits == b).sum()) for b in BITS]
    buf = pack_rows(x, row_bits, _gen(3))
    ref = dispatch._pack_reference("pack_rows", x, row_bits, counts, _seed(3), compiled=False)
    assert torch.equal(buf, ref)
    w = wide_rows(buf, row_bits, dim)
    assert buf.numel() == packed_nbytes(row_bits, dim) + 2 * w
    if dtype != torch.bfloat16:
        assert w > 0  # the rows above include wide-offset rows
    for out in DTYPES:
        y = unpack_rows(buf, row_bits, dim, out)
        assert y.dtype == out
        assert torch.equal(y, _reference_unpack(buf, row_bits, dim, out))


def _reference_unpack(
    buf: torch.Tensor, row_bits: torch.Tensor, dim: int, dtype: torch.dtype
) -> torch.Tensor:
    kernels = backend._KERNELS
    try:
        backend._KERNELS = None  # _kernels() returns the cached module: disable it for one call
        return unpack_rows(buf, row_bits, dim, dtype)
    finally:
        backend._KERNELS = kernels


@needs_numba
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("shape", [(1, 1), (1, 7), (2, 3), (64, 9), (65, 128), (130, 33)])
def test_fused_kernels_every_width(bits: int, shape: tuple[int, int]) -> None:
    n, d = shape
    x = _rows(n, d, seed=bits + d, dtype=torch.float32)
    row_bits = torch.full((n,), bits)
    buf = pack_rows(x, row_bits, _gen(bits))
    ref = dispatch._pack_reference(
        "pack_rows", x, row_bits, [n if b == bits else 0 for b in BITS], _seed(bits), False
    )
    assert torch.equal(buf, ref)
    assert torch.equal(
        unpack_rows(buf, row_bits, d), _reference_unpack(buf, row_bits, d, torch.float32)
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bits", BITS)
def test_quantize_uses_the_documented_counter_noise(dtype: torch.dtype, bits: int) -> None:
    x = _rows(70, 13, seed=bits, dtype=dtype)
    q = quantize(x, bits, _gen(bits))
    r = quantize(x, bits, noise=counter_noise(_seed(bits), 70, 13))
    assert torch.equal(q.codes, r.codes)
    assert torch.equal(q.scale, r.scale) and torch.equal(q.zero_point, r.zero_point)


@pytest.mark.parametrize("dim", [3, 16])
def test_pack_rows_uses_message_row_indices(dim: int) -> None:
    # group b is quantized with counter_noise(seed, n_b, D, row_offset=start_b): the rows
    # of the grouped message, 1-bit rows first
    x = _rows(50, dim, seed=1, dtype=torch.float32)
    row_bits = _widths(50, seed=2)
    buf = pack_rows(x, row_bits, _gen(4))
    s = _seed(4)
    rows, start = [], 0
    for b in BITS:
        idx = (row_bits == b).nonzero().squeeze(1)
        q = quantize(x[idx], b, noise=counter_noise(s, idx.numel(), dim, row_offset=start))
        rows.append((idx, dequantize(q)))
        start += idx.numel()
    y = unpack_rows(buf, row_bits, dim)
    for idx, r in rows:
        assert torch.equal(y[idx], r)


def test_generator_advances_by_one_draw() -> None:
    x = _rows(20, 6, seed=0, dtype=torch.float32)
    for call in (
        lambda g: pack_rows(x, _widths(20, 1), g),
        lambda g: quantize(x, 2, g),
    ):
        g = _gen(11)
        call(g)
        ref = _gen(11)
        torch.randint(0, SEED_HIGH, (1,), generator=ref)
        assert torch.equal(g.get_state(), ref.get_state())
    # generator=None draws from torch's default generator the same way
    torch.manual_seed(21)
    a = pack_rows(x, _widths(20, 1))
    assert torch.equal(a, pack_rows(x, _widths(20, 1), _gen(21)))


def test_empty_and_degenerate_messages() -> None:
    for n, d in ((0, 5), (3, 0), (0, 0)):
        x = torch.zeros(n, d)
        rb = torch.full((n,), 2)
        buf = pack_rows(x, rb, _gen())
        assert buf.numel() == packed_nbytes(rb, d) == 4 * n
        assert unpack_rows(buf, rb, d).shape == (n, d)


@needs_numba
@pytest.mark.parametrize("dim", [8, 37])
def test_any_number_of_threads_gives_the_same_bytes(dim: int) -> None:
    # the message is split into parts run on threads; parts never share a byte
    x = _rows(500, dim, seed=5, dtype=torch.float32)
    row_bits = _widths(500, seed=5)
    counts = [int((row_bits == b).sum()) for b in BITS]
    a = fused._pack_fast(K, x, row_bits, counts, 77, threads=1)
    assert a is not None
    ya = fused._unpack_fast(K, a, row_bits, counts, dim, torch.float32, threads=1)
    assert torch.equal(ya, unpack_rows(a, row_bits, dim))
    qa = fused._quantize_fast(K, x, 4, 77, threads=1)
    assert qa is not None
    for parts in (2, 3, 7):  # threads, 4 parts each
        b = fused._pack_fast(K, x, row_bits, counts, 77, threads=parts)
        assert b is not None and torch.equal(a, b)
        yb = fused._unpack_fast(K, a, row_bits, counts, dim, torch.float32, threads=parts)
        assert torch.equal(ya, yb)
        qb = fused._quantize_fast(K, x, 4, 77, threads=parts)
        assert qb is not None
        assert all(torch.equal(u, v) for u, v in zip(qa[:3], qb[:3], strict=True))


@needs_numba
def test_concurrent_callers() -> None:
    # several threads packing at once share the helper threads
    from concurrent.futures import ThreadPoolExecutor

    x = _rows(3000, 64, seed=9, dtype=torch.float32)  # above the threading threshold
    row_bits = _widths(3000, seed=9)
    ref = pack_rows(x, row_bits, _gen(1))
    with ThreadPoolExecutor(4) as pool:
        bufs = list(pool.map(lambda _: pack_rows(x, row_bits, _gen(1)), range(8)))
    assert all(torch.equal(b, ref) for b in bufs)


def test_torch_path_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # without numba (or on a device the kernels do not serve) the torch reference runs
    x = _rows(90, 21, seed=8, dtype=torch.float32)
    row_bits = _widths(90, seed=8)
    buf = pack_rows(x, row_bits, _gen(8))
    y = unpack_rows(buf, row_bits, 21)
    q = quantize(x, 2, _gen(9))
    _torch_path(monkeypatch)
    assert torch.equal(pack_rows(x, row_bits, _gen(8)), buf)
    assert torch.equal(unpack_rows(buf, row_bits, 21), y)
    r = quantize(x, 2, _gen(9))
    assert torch.equal(r.codes, q.codes) and torch.equal(r.zero_point, q.zero_point)


def test_invalid_rows_raise_the_reference_errors() -> None:
    x = torch.randn(100, 8)
    x[70, 2] = float("nan")
    with pytest.raises(ValueError, match=r"pack_rows: `x` contains NaN or infinite values"):
        pack_rows(x, torch.full((100,), 4))
    with pytest.raises(ValueError, match=r"quantize: `x` contains NaN or infinite values"):
        quantize(x, 4)
    with pytest.raises(
        ValueError, match=r"pack_rows: expected the values of `x` to lie within bfloat16"
    ):
        pack_rows(torch.tensor([[-3.4e38, 0.0]]), torch.tensor([2]))
    big = torch.tensor([[-3e38, 3e38]])
    with pytest.raises(
        ValueError, match=r"quantize: expected every row range max - min of `x` to be finite"
    ):
        quantize(big, 8)


def test_warmup() -> None:
    t = warmup()
    assert isinstance(t, float) and t >= 0.0


@needs_numba
def test_a_failing_kernel_falls_back_to_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _rows(40, 9, seed=2, dtype=torch.float32)
    row_bits = _widths(40, seed=2)
    buf = pack_rows(x, row_bits, _gen(6))

    def broken(*args: object) -> None:
        raise RuntimeError("no LLVM today")

    monkeypatch.setattr(K, "quantize_rows", broken)
    monkeypatch.setattr(backend, "_KERNELS", K)  # restored after the test
    with pytest.warns(RuntimeWarning, match=r"the numba kernels failed .*no LLVM today"):
        again = pack_rows(x, row_bits, _gen(6))
    assert torch.equal(again, buf) and backend._KERNELS is None
    monkeypatch.undo()
