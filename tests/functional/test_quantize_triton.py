"""The fused Triton kernels of the quantiser (lightgraph.functional.quantize, path="triton").

On this CPU-only machine the kernels run under Triton's interpreter on CPU tensors; on a
GPU they are the default path of CUDA tensors (the CUDA tests of test_quantize.py and
benchmarks/gpu_check.py). The reference (``_reference_for_seed`` of test_quantize.py) is
the torch quantiser driven with the documented counter noise (``quantize(x, b,
noise=counter_noise(...))``, which never takes a fused path), packed with ``pack_codes``
and laid out as the wire format documents, so every byte of a message is checked, not
only a round trip. The kernels are also compiled
for two GPU architectures (no GPU needed) to check that the generated code keeps the
reference's rounding: no fused multiply-add, no approximate division, no flushing of
subnormals.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from lightgraph.functional.quantize import (
    BITS,
    PATHS,
    SEED_HIGH,
    counter_noise,
    dispatch,
    fused_triton,
    pack_rows,
    quantize,
    unpack_rows,
)
from lightgraph.functional.quantize.reference import PARAM_DTYPE
from tests.functional.test_quantize import _reference_for_seed

NO_TRITON = fused_triton.triton_unavailable()
pytestmark = pytest.mark.skipif(NO_TRITON is not None, reason=str(NO_TRITON))


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _seed(seed: int) -> int:
    """The seed pack_rows / quantize draw from ``_gen(seed)``."""
    return int(torch.randint(0, SEED_HIGH, (1,), generator=_gen(seed)))


def _rows(n: int, d: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rows of every kind: magnitudes 1e-3..1e3, all-positive and all-negative rows,
    wide-offset rows (far from zero relative to their range), constant rows, a zero row."""
    g = _gen(seed)
    mags = 10.0 ** torch.randint(-3, 4, (n, 1), generator=g).double()
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * mags
    x[::3] += 5.0 * mags[::3]
    x[1::3] -= 5.0 * mags[1::3]
    x[2::5] += 1000.0  # wide-offset rows
    if n > 4:
        x[4] = 0.3  # a constant row whose value is not a bfloat16 value
    if n > 6:
        x[6] = 0.0
    return x.to(dtype)


def _widths(n: int, seed: int, choices: tuple[int, ...] = BITS) -> torch.Tensor:
    pick = torch.randint(0, len(choices), (n,), generator=_gen(seed))
    return torch.tensor(choices)[pick]


SHAPES = [(1, 1), (1, 7), (5, 1), (37, 19), (16, 8), (9, 300), (150, 3)]


@pytest.mark.parametrize("shape", SHAPES)
def test_messages_equal_the_reference_bit_for_bit(shape: tuple[int, int]) -> None:
    # odd shapes: one row, one column, rows straddling bytes (D b not a multiple of 8),
    # rows longer than a tile (300 > 256 columns), many programs per width (150 x 3)
    n, d = shape
    x = _rows(n, d, seed=n + d)
    row_bits = _widths(n, seed=d)
    buf = pack_rows(x, row_bits, _gen(7), path="triton")
    rows, layout = _reference_for_seed(x, row_bits, _seed(7))
    assert torch.equal(buf, layout)
    assert torch.equal(unpack_rows(buf, row_bits, d, path="triton"), rows)
    assert torch.equal(buf, pack_rows(x, row_bits, _gen(7), path="torch"))


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("dim", [3, 8, 13])
def test_every_single_width(bits: int, dim: int) -> None:
    n = 21
    x = _rows(n, dim, seed=bits * dim)
    row_bits = torch.full((n,), bits)
    buf = pack_rows(x, row_bits, _gen(bits), path="triton")
    rows, layout = _reference_for_seed(x, row_bits, _seed(bits))
    assert torch.equal(buf, layout)
    assert torch.equal(unpack_rows(buf, row_bits, dim, path="triton"), rows)


@pytest.mark.parametrize("choices", [(1, 8), (2, 4), (1, 2, 8)])
def test_mixed_widths_with_absent_widths(choices: tuple[int, ...]) -> None:
    n, d = 45, 11
    x = _rows(n, d, seed=len(choices))
    row_bits = _widths(n, seed=3, choices=choices)
    buf = pack_rows(x, row_bits, _gen(4), path="triton")
    rows, layout = _reference_for_seed(x, row_bits, _seed(4))
    assert torch.equal(buf, layout)
    assert torch.equal(unpack_rows(buf, row_bits, d, path="triton"), rows)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows(dtype: torch.dtype) -> None:
    x = _rows(30, 10, seed=5, dtype=dtype)
    row_bits = _widths(30, seed=6)
    buf = pack_rows(x, row_bits, _gen(8), path="triton")
    _, layout = _reference_for_seed(x, row_bits, _seed(8))
    assert torch.equal(buf, layout)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_unpack_to_every_dtype_and_into_a_slice(dtype: torch.dtype) -> None:
    n, d = 40, 12
    x = _rows(n, d, seed=9)
    row_bits = torch.tensor([1, 2, 4, 8] * 10)
    buf = pack_rows(x, row_bits, _gen(0), path="torch")
    rows, _ = _reference_for_seed(x, row_bits, _seed(0), dtype)
    assert torch.equal(unpack_rows(buf, row_bits, d, dtype, path="triton"), rows)
    whole = torch.full((n + 10, d), -7.0, dtype=dtype)
    got = unpack_rows(buf, row_bits, d, dtype, out=whole[5 : n + 5], path="triton")
    assert got.data_ptr() == whole[5].data_ptr()
    assert torch.equal(whole[5 : n + 5], rows)
    assert (whole[:5] == -7).all() and (whole[n + 5 :] == -7).all()


@pytest.mark.parametrize("bits", BITS)
def test_quantize_equals_the_reference_for_seed(bits: int) -> None:
    x = _rows(26, 9, seed=bits)
    got = quantize(x, bits, _gen(bits), path="triton")
    want = quantize(x, bits, noise=counter_noise(_seed(bits), 26, 9))
    assert torch.equal(got.codes, want.codes)
    assert torch.equal(got.scale, want.scale) and got.scale.dtype == PARAM_DTYPE
    assert torch.equal(got.zero_point, want.zero_point)


def test_empty_blocks() -> None:
    for n, d in [(0, 5), (3, 0), (0, 0)]:
        x = torch.zeros(n, d)
        row_bits = torch.full((n,), 4)
        buf = pack_rows(x, row_bits, _gen(0), path="triton")
        assert torch.equal(buf, pack_rows(x, row_bits, _gen(0), path="torch"))
        out = unpack_rows(buf, row_bits, d, path="triton")
        assert out.shape == (n, d)
        q = quantize(x, 4, _gen(0), path="triton")
        assert q.codes.shape == (n, d) and q.scale.shape == (n,)


@pytest.mark.parametrize(
    "value, match",
    [
        (float("nan"), "NaN or infinite"),
        (float("inf"), "NaN or infinite"),
        (3.0e38, "finite"),  # range max - min overflows float32
    ],
)
def test_invalid_rows_raise_the_reference_errors(value: float, match: str) -> None:
    x = torch.randn(12, 6, generator=_gen(1))
    x[7, 2] = value
    if value == 3.0e38:
        x[7, 3] = -3.0e38
    row_bits = _widths(12, seed=2)
    with pytest.raises(ValueError, match=match) as triton_err:
        pack_rows(x, row_bits, _gen(0), path="triton")
    with pytest.raises(ValueError) as torch_err:
        pack_rows(x, row_bits, _gen(0), path="torch")
    assert str(triton_err.value) == str(torch_err.value)
    with pytest.raises(ValueError, match=match):
        quantize(x, 2, _gen(0), path="triton")


def test_path_argument() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    # the default on CUDA is the fused kernel for the dtypes it takes
    assert dispatch.resolve_path("f", "auto", cuda, torch.float32) == "triton"
    assert dispatch.resolve_path("f", "auto", cuda, torch.bfloat16) == "triton"
    assert dispatch.resolve_path("f", "auto", cuda, None) == "triton"
    assert dispatch.resolve_path("f", "auto", cuda, torch.float64) == "torch"
    assert dispatch.resolve_path("f", "auto", cpu, torch.float32) in ("numba", "torch")
    assert set(PATHS) == {"auto", "numba", "triton", "torch"}
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"pack_rows: expected `path` to be one of .* 'gpu'"):
        pack_rows(x, torch.full((4,), 2), path="gpu")
    with pytest.raises(ValueError, match=r"path='triton' takes rows of .* torch.float64"):
        quantize(x.double(), 2, path="triton")
    with pytest.raises(ValueError, match="path='numba' runs on CPU tensors"):
        dispatch.resolve_path("unpack_rows", "numba", cuda, None)


def test_a_failing_triton_kernel_warns_once_and_falls_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("no kernel for this device")

    monkeypatch.setattr(dispatch, "_TRITON_FAILED", False)
    with pytest.warns(RuntimeWarning, match="Triton kernels failed"):
        assert dispatch._triton("auto", broken) is None
    assert dispatch._TRITON_FAILED
    assert dispatch.resolve_path("f", "auto", torch.device("cuda"), torch.float32) == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="no kernel"):
            dispatch._triton("triton", broken)  # asked for explicitly: raises


# ------------------------------------------------------------ the GPU code


def _compile(kernel: object, signature: dict[str, str], constexprs: dict[str, object], arch: int):  # type: ignore[no-untyped-def]
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = kernel.arg_names  # type: ignore[attr-defined]
    src = ASTSource(
        fn=kernel,
        signature={**signature, **{k: "constexpr" for k in constexprs}},
        constexprs={(names.index(k),): v for k, v in constexprs.items()},
    )
    options = {"num_warps": 4, "enable_fp_fusion": False}
    return triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)


_PACK_SIGNATURE = {
    "x_ptr": "*fp32", "x_stride": "i32", "src_ptr": "*i64", "n_rows": "i32", "dim": "i32",
    "msg_row0": "i32", "key_a": "i64", "key_b": "i32", "out_ptr": "*u8", "code_at": "i64",
    "zero_ptr": "*fp32", "scale_ptr": "*fp32", "bad_ptr": "*i8", "params_at": "i64",
    "n_total": "i32",
}  # fmt: skip
_UNPACK_SIGNATURE = {
    "buf_ptr": "*u8", "src_ptr": "*i64", "n_rows": "i32", "dim": "i32", "msg_row0": "i32",
    "code_at": "i64", "params_at": "i64", "trailer_at": "i64", "n_total": "i32",
    "tidx_ptr": "*i32", "out_ptr": "*bf16",
}  # fmt: skip


@pytest.mark.parametrize("arch", [80, 90])
def test_the_gpu_code_keeps_the_reference_rounding(arch: int) -> None:
    # Compiled (not run) for a GPU: the message equals the CPU's only if every float
    # operation rounds as the reference's does.
    k = fused_triton.kernels(interpret=False)
    assert k is not None
    try:
        pack = _compile(
            k.quantize_kernel,
            _PACK_SIGNATURE,
            {"HAS_SRC": True, "PACKED": True, "BITS": 2, "ROWS": 16, "BLOCK_D": 128,
             "BLOCK_BYTES": 512, "MAX_BUMPS": 64},
            arch,
        )  # fmt: skip
        unpack = _compile(
            k.dequantize_kernel,
            _UNPACK_SIGNATURE,
            {"HAS_SRC": True, "BITS": 4, "F64": False, "BF16": True, "ROWS": 16,
             "BLOCK_D": 128},
            arch,
        )  # fmt: skip
    except Exception as err:  # no CUDA toolchain in this triton install
        if "ptxas" in str(err) or "CUDA" in str(err):
            pytest.skip(f"cannot compile for a GPU here: {err}")
        raise
    for compiled in (pack, unpack):
        ptx = compiled.asm["ptx"]
        assert "fma.rn.f32" not in ptx and "mad.f32" not in ptx
        assert "div.approx" not in ptx and "div.full" not in ptx
        assert ".ftz" not in ptx
    assert "div.rn.f32" in pack.asm["ptx"]  # the scale search and v = (x - z) / s
    assert "mul.rn.f32" in unpack.asm["ptx"] or "mul.f32" in unpack.asm["ptx"]
