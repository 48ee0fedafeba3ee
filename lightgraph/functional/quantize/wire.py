"""The wire format of quantized rows: bit packing, the message layout and its size.

**Bit packing.** Codes are packed little-endian within each byte: code ``j`` of a group of
``8 / b`` consecutive codes occupies bits ``[j b, (j + 1) b)`` of its byte; the last byte
is zero-padded (:func:`pack_codes`).

**One message.** :func:`~lightgraph.functional.quantize.pack_rows` lays out rows with
mixed widths as

``[codes of 1-bit rows][2-bit rows][4-bit rows][8-bit rows][scales][zero points][trailer]``

where rows are grouped by width (ascending) keeping their original relative order, each
code block is the packed row-major codes of its group (rows may straddle bytes when
``D b`` is not a multiple of 8), and the ``N`` scales and ``N`` zero points are raw
bfloat16 values, 2 bytes each, in the same grouped order. A wide-offset row sets the
sign bit of its scale (scales are ``>= 0``, so the bit is free), puts the high 16 bits
of its float32 zero point (a bfloat16 number: the top half of a float32) in its
zero-point slot, and the low 16 bits in the trailer: one 2-byte entry per wide-offset
row, in grouped order.

**Byte order.** Every 2-byte field (scale, zero point, trailer entry) is little-endian
on every host: its low byte comes first, so the wide-offset flag is the top bit of the
second byte of a scale.

**Size.**

.. math::

    \\text{nbytes} = \\underbrace{\\sum_{b} \\lceil n_b D b / 8 \\rceil + 4 N}
    _{\\text{packed\\_nbytes(row\\_bits, D)}} + 2 W

with ``W`` the number of wide-offset rows; a receiver finds ``W`` by counting the flags
of the scale section, whose offset follows from ``row_bits`` and ``D``
(:func:`wide_rows`, :func:`message_nbytes`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from lightgraph.functional.quantize import backend
from lightgraph.functional.quantize.checks import (
    _bits_counts,
    _check_bits,
    _check_buf,
    _check_count,
    _check_dim,
)
from lightgraph.functional.quantize.reference import PARAM_DTYPE
from lightgraph.utilities.checks import BITS

PARAM_BYTES_PER_ROW: int = 2 * torch.finfo(PARAM_DTYPE).bits // 8
"""Bytes of side information per row: one bfloat16 scale and one bfloat16 zero point (4)."""
WIDE_BYTES_PER_ROW: int = 2
"""Extra trailer bytes per wide-offset row (the low half of its float32 zero point)."""


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


def _nbytes(counts: Sequence[int], dim: int) -> int:
    return sum(
        -(-n * dim * b // 8) for n, b in zip(counts, BITS, strict=True)
    ) + PARAM_BYTES_PER_ROW * sum(counts)


def packed_nbytes(row_bits: Tensor | Sequence[int], dim: int) -> int:
    """Size in bytes of a :func:`pack_rows` buffer without wide-offset rows.

    .. math::

        \\text{nbytes} = \\sum_{b \\in \\{1, 2, 4, 8\\}} \\lceil n_b \\, D \\, b / 8 \\rceil + 4 N

    where ``n_b`` is the number of rows of width ``b`` and ``4 N`` the bfloat16 scale and
    zero point of each row. Sender and receiver both compute it from ``row_bits`` alone.
    A message with ``W`` wide-offset rows is ``2 W`` bytes longer
    (:func:`message_nbytes`); the sections before the trailer sit at the same offsets.

    Args:
        row_bits: per-row code width, each one of :data:`BITS`.
        dim: row length ``D``.

    Shapes:
        - row_bits: ``[N]``.
    """
    fn = "packed_nbytes"
    dim = _check_dim(fn, dim)
    return _nbytes(_bits_counts(fn, row_bits), dim)


def message_nbytes(row_bits: Tensor | Sequence[int], dim: int, num_wide: int = 0) -> int:
    """Exact size of a :func:`pack_rows` message with ``num_wide`` wide-offset rows.

    .. math::

        \\text{nbytes} = \\text{packed\\_nbytes}(\\text{row\\_bits}, D) + 2 W

    Args:
        row_bits: per-row code width, each one of :data:`BITS`.
        dim: row length ``D``.
        num_wide: ``W``, e.g. from :func:`wide_rows` (``0 <= W <= N``).

    Shapes:
        - row_bits: ``[N]``.
    """
    fn = "message_nbytes"
    dim = _check_dim(fn, dim)
    counts = _bits_counts(fn, row_bits)
    num_wide = _check_count(fn, "num_wide", num_wide, sum(counts))
    return _nbytes(counts, dim) + WIDE_BYTES_PER_ROW * num_wide


def wide_rows(buf: Tensor, row_bits: Tensor | Sequence[int], dim: int) -> int:
    """Number ``W`` of wide-offset rows of the message at the start of ``buf``.

    Counts the flag bits (sign bits) of the scale section, which starts at
    ``packed_nbytes(row_bits, dim) - 4 N``; only that section is read, so ``buf`` may be
    longer than the message (e.g. several messages back to back: the first one then
    takes ``message_nbytes(row_bits, dim, W)`` bytes).

    Args:
        buf: uint8 bytes starting with a :func:`pack_rows` message.
        row_bits: the widths it was packed with.
        dim: row length ``D``.

    Shapes:
        - buf: ``[>= packed_nbytes(row_bits, dim)]`` uint8; row_bits: ``[N]``.
    """
    fn = "wide_rows"
    dim = _check_dim(fn, dim)
    counts = _bits_counts(fn, row_bits)
    _check_buf(fn, buf)
    nbytes = _nbytes(counts, dim)
    if buf.numel() < nbytes:
        raise ValueError(
            f"{fn}: expected `buf` to hold at least packed_nbytes(row_bits, dim={dim}) = "
            f"{nbytes} bytes but got {buf.numel()}."
        )
    return _count_wide(buf, sum(counts), nbytes)


def _count_wide(buf: Tensor, n: int, nbytes: int) -> int:
    if n == 0:
        return 0
    at = nbytes - PARAM_BYTES_PER_ROW * n
    k = backend._KERNELS
    if k is not None and buf.device.type == "cpu":
        return int(k.count_wide(buf.numpy(), at, n))
    # the high byte of each little-endian bfloat16 scale holds its sign bit
    return int((buf[at + 1 : at + 2 * n : 2] >= 0x80).sum())


def _group_order(rb: Tensor, counts: Sequence[int]) -> Tensor | None:
    """Row order grouped by width (ascending, stable); None when already grouped."""
    if max(counts, default=0) == rb.numel():
        return None
    return torch.argsort(rb, stable=True)


def _le_bytes(v: Tensor) -> Tensor:
    """16-bit fields (int32 values, taken modulo ``2^16``) as little-endian bytes."""
    return torch.stack([v & 0xFF, (v >> 8) & 0xFF], dim=-1).reshape(-1).to(torch.uint8)


def _from_le(b: Tensor) -> Tensor:
    """Little-endian 16-bit fields as int32 values in ``[0, 2^16)``."""
    b = b.to(torch.int32).view(-1, 2)
    return b[:, 0] | (b[:, 1] << 8)


def _param_sections(scale: Tensor, zero: Tensor) -> list[Tensor]:
    """Wire bytes of the scales (flagged), zero points and trailer, in message order."""
    bits = zero.view(torch.int32)
    lo = bits & 0xFFFF
    wide = lo != 0  # a float32 zero point that is not a bfloat16 value
    s = scale.view(torch.int16).to(torch.int32) | (wide.to(torch.int32) << 15)  # the flag
    return [_le_bytes(s), _le_bytes(bits >> 16), _le_bytes(lo[wide])]


def _read_params(buf: Tensor, n: int, params_at: int, num_wide: int) -> tuple[Tensor, Tensor]:
    """(scale bfloat16, zero float32) in message order from the parameter sections."""
    half = 2 * n
    s = _from_le(buf[params_at : params_at + half])
    hi = _from_le(buf[params_at + half : params_at + 2 * half]).to(torch.int64)
    wide = s >= 0x8000
    scale = (s & 0x7FFF).to(torch.int16).view(PARAM_DTYPE)
    lo = torch.zeros(n, dtype=torch.int64, device=buf.device)
    if num_wide:
        at = params_at + 2 * half
        lo[wide] = _from_le(buf[at : at + WIDE_BYTES_PER_ROW * num_wide]).to(torch.int64)
    bits = (hi << 16) | lo  # in [0, 2^32)
    bits = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)
    return scale, bits.view(torch.float32)
