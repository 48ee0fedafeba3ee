"""Argument checks of the quantiser's public functions.

Each check names the function, the argument, the allowed values and the value received.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from lightgraph.functional.quantize import backend
from lightgraph.utilities.checks import BITS

_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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
    k = backend._KERNELS  # the kernel when loaded: one serial pass, no thread team
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
