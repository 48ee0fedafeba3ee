"""The counter-based rounding noise of the quantiser: a hash of ``(seed, row, column)``.

Without an explicit ``noise`` tensor, the stochastic rounding noise ``u`` comes from a
counter-based stream: a 32-bit integer hash of ``(seed, row, column)``, computed where it
is used (inside the fused kernel), never materialised. One ``seed`` is drawn per call of
:func:`~lightgraph.functional.quantize.quantize` /
:func:`~lightgraph.functional.quantize.pack_rows`,
``seed = torch.randint(0, 2**31 - 1, (1,), generator=generator)`` (on the generator's
device; ``generator=None`` draws from torch's default CPU generator), so the generator
advances by exactly one draw per call. ``row`` is the row's position in the *message*:
its index in ``x`` for ``quantize``, its position in the width-grouped order for
``pack_rows`` (:mod:`~lightgraph.functional.quantize.wire`). With ``(a, b)`` derived
from the seed,

.. math::

    h = \\operatorname{mix}(\\operatorname{mix}(\\text{row} \\cdot \\phi_r + a) \\oplus
    \\operatorname{mix}(\\text{col} \\cdot \\phi_c + b)),
    \\qquad u = \\lfloor h / 2^8 \\rfloor \\cdot 2^{-24}

(arithmetic modulo ``2^32``, ``mix`` the "lowbias32" finaliser, a bijection of 32-bit
integers), so ``u`` takes the same ``2^24`` equally likely float32 values as
``torch.rand``. Equal seeds give equal codes on every path and device.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightgraph.functional.quantize.checks import _check_count

SEED_HIGH: int = 2**31 - 1
"""Seeds of the counter stream are drawn from ``[0, SEED_HIGH)``."""

# counter-hash constants (mirrored in lightgraph/functional/_quantize_kernels.py)
_M32 = 0xFFFFFFFF
_MIX1, _MIX2 = 0x7FEB352D, 0x846CA68B
_ROW_MUL, _COL_MUL = 0x9E3779B9, 0x85EBCA77
_SEED_B_XOR = 0x5BD1E995


def _mul32(h: Tensor | int, c: int) -> Any:
    """``(h * c) mod 2^32`` for ``0 <= h < 2^32``, exact in int64 (no product >= 2^49)."""
    return (h * (c & 0xFFFF) + (((h * (c >> 16)) & 0xFFFF) << 16)) & _M32


def _mix32(h: Tensor | int) -> Any:
    """The "lowbias32" finaliser on 32-bit values held in int64 (or Python ints)."""
    h = h ^ (h >> 16)
    h = _mul32(h, _MIX1)
    h = h ^ (h >> 15)
    h = _mul32(h, _MIX2)
    return h ^ (h >> 16)


def _seed_keys(seed: int) -> tuple[int, int]:
    """Row and column key offsets ``(a, b)`` of a seed."""
    a = _mix32(seed & _M32)
    return a, _mix32(a ^ _SEED_B_XOR)


def _noise_from_keys(
    num_rows: int, dim: int, keys: Tensor, device: torch.device | str | None
) -> Tensor:
    """:func:`counter_noise` with ``keys = [a, b, row_offset]`` (an int64 tensor)."""
    rows = torch.arange(num_rows, dtype=torch.int64, device=device) + keys[2]
    cols = torch.arange(dim, dtype=torch.int64, device=device)
    rk = _mix32((_mul32(rows, _ROW_MUL) + keys[0]) & _M32)
    ck = _mix32((_mul32(cols, _COL_MUL) + keys[1]) & _M32)
    h = _mix32(rk[:, None] ^ ck[None, :])
    return (h >> 8).to(torch.float32) * 2.0**-24


def _mix32_(h: Tensor) -> Tensor:
    """In-place :func:`_mix32` of an int64 tensor of 32-bit values."""
    h ^= h >> 16
    _mul32_(h, _MIX1)
    h ^= h >> 15
    _mul32_(h, _MIX2)
    h ^= h >> 16
    return h


def _mul32_(h: Tensor, c: int) -> None:
    t = h * (c >> 16)
    t &= 0xFFFF
    t <<= 16
    h *= c & 0xFFFF
    h += t
    h &= _M32


_NOISE_CHUNK = 1 << 16  # elements per block of the eager noise: int64 temporaries in L2


def _noise_eager(num_rows: int, dim: int, seed: int, row_offset: int, device: Any) -> Tensor:
    """:func:`counter_noise` computed in place, block by block (the eager reference)."""
    a, b = _seed_keys(seed)
    out = torch.empty((num_rows, dim), dtype=torch.float32, device=device)
    if out.numel() == 0:
        return out
    cols = torch.arange(dim, dtype=torch.int64, device=device)
    ck = _mix32_((_mul32(cols, _COL_MUL) + b) & _M32)
    step = max(1, _NOISE_CHUNK // dim)
    for r0 in range(0, num_rows, step):
        r1 = min(r0 + step, num_rows)
        rows = torch.arange(r0 + row_offset, r1 + row_offset, dtype=torch.int64, device=device)
        rk = _mix32_((_mul32(rows, _ROW_MUL) + a) & _M32)
        h = _mix32_(rk[:, None] ^ ck[None, :])
        h >>= 8
        torch.mul(h, 2.0**-24, out=out[r0:r1])  # exact: h < 2^24
    return out


def _keys_tensor(seed: int, row_offset: int, device: torch.device | str | None) -> Tensor:
    a, b = _seed_keys(seed)
    return torch.tensor([a, b, row_offset], dtype=torch.int64, device=device)


def counter_noise(
    seed: int,
    num_rows: int,
    dim: int,
    row_offset: int = 0,
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """The counter-based rounding noise ``u`` of rows ``row_offset .. row_offset + num_rows - 1``.

    .. math::

        u_{rc} = \\lfloor h(\\text{seed}, r, c) / 2^8 \\rfloor \\cdot 2^{-24} \\in [0, 1)

    with ``h`` the 32-bit hash above (pure torch, int64 arithmetic with
    masks, exact on every device). The fused kernels compute the same values in place:
    ``pack_rows(x, row_bits, g)`` quantizes width group ``b`` (message rows
    ``start_b .. start_b + n_b - 1``) with
    ``counter_noise(seed, n_b, D, row_offset=start_b)``, and ``quantize(x, bits, g)``
    with ``counter_noise(seed, N, D)``, where ``seed`` is the one draw
    ``torch.randint(0, SEED_HIGH, (1,), generator=g)``.

    Args:
        seed: integer in ``[0, 2^32)``.
        num_rows: number of rows ``N``.
        dim: row length ``D``.
        row_offset: index of the first row (``row_offset + num_rows <= 2^32``).
        device: device of the result.

    Shapes:
        - output: ``[num_rows, dim]`` float32.
    """
    fn = "counter_noise"
    seed = _check_count(fn, "seed", seed, _M32)
    num_rows = _check_count(fn, "num_rows", num_rows)
    dim = _check_count(fn, "dim", dim)
    row_offset = _check_count(fn, "row_offset", row_offset, _M32 + 1 - num_rows)
    return _noise_eager(num_rows, dim, seed, row_offset, device)


def _draw_seed(generator: torch.Generator | None) -> int:
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, SEED_HIGH, (1,), generator=generator, device=device))
