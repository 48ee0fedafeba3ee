"""The cluster-sparse layout on PyTorch's FlexAttention (``torch.nn.attention.flex_attention``).

:func:`cluster_flex_attention` computes exactly what
:func:`~lightgraph.functional.attention.cluster_sparse_attention` computes, but hands the
work to one compiled FlexAttention call:

* the tokens are put in the layout's *segment order* (the ``G`` tile segments of
  ``d_b`` tokens side by side, padded at the end of every cluster), so every tile of the
  layout is exactly one FlexAttention block of ``d_b x d_b`` (the default
  ``block_size``);
* the :class:`~torch.nn.attention.flex_attention.BlockMask` lists, for every query
  block, the key blocks holding a pair (tiles and the hub strips' pairs); a tile whose
  every pair attends is a *full* block (no ``mask_mod`` there);
* ``mask_mod`` looks the pair up: a ``[G, G]`` table gives the tile of a block, then the
  tile's ``[d_b, d_b]`` mask; hub queries and hub keys look in their strips;
* ``score_mod`` adds ``bias_table[bucket, h]``, the bucket found the same way.

The structures are built once per layout (and device) and cached on it. The call is
compiled once per process (:func:`torch.compile` of ``flex_attention``, ``dynamic=False``);
every new padded length ``G d_b`` compiles again (a few seconds on a CPU).

Limits: no dropout (FlexAttention has none); on the CPU, no backward (torch's CPU
FlexAttention raises "FlexAttention does not support backward on CPU"), so a call that
needs gradients on the CPU is refused -- use ``implementation="tiles"`` there; inputs are
float32, float16 or bfloat16 on the CPU. Memory grows with ``G^2`` (``G = S / d_b`` tile
segments): the ``[G, G]`` tile table and the block mask's ``[G, G]`` key-block indices
take ``8 G^2`` bytes (512 MiB at ``S = 128K``, ``d_b = 16``), about twice that while
they are built. After ``torch._dynamo.config.recompile_limit`` (8) distinct shapes, dynamo
stops compiling and FlexAttention runs eagerly (slowly, materialising the scores).

Measured on a 2-core CPU (torch 2.13, 2 threads, forward only, ``local`` pattern of
``bench_attention.py``): FlexAttention took 0.067 s at ``S = 4K`` and 0.28 s at 16K
against 0.0095 s and 0.028 s for ``implementation="tiles"`` and 0.006 s and 0.024 s for the
CSR kernel; blocks of ``d_b = 16`` were the fastest (32 x 32: 0.72 s, 128 x 128: 6.0 s at
16K). On the CPU it is a cross-check, not a speed-up.
"""

from __future__ import annotations

import functools
import math
import shutil
from typing import Any

import torch
from torch import Tensor

from lightgraph.functional.attention.cluster_sparse_layout import ClusterSparseLayout, _to_segments

__all__ = ["cluster_flex_attention", "flex_available"]

_COMPILED: dict[str, Any] = {}

#: Smallest head dimension Triton's FlexAttention kernels take on CUDA; smaller heads are
#: padded with zero columns (which change no score).
CUDA_MIN_HEAD_DIM = 16

#: FlexAttention block (query and key) for a CUDA call in float16/bfloat16 that needs
#: gradients, when ``block_size`` is not given: Inductor's backward kernels for half
#: precision come in tiles of up to 128 (on an H200, torch 2.11: 64 x 64 for head
#: dimensions below 64, 64 x 128 up to 128), and a block mask whose blocks they do not
#: divide leaves Inductor no kernel to choose ("NoValidChoicesError"). float32's backward
#: takes 16 x 16 tiles, so one block per layout tile works there.
CUDA_HALF_BACKWARD_BLOCK = 128


def flex_available(device: torch.device | str = "cpu") -> bool:
    """Whether :func:`cluster_flex_attention` can run on ``device``: FlexAttention imports,
    :func:`torch.compile` is supported, and (CPU) a C++ compiler is on the path or (CUDA)
    Triton imports and a GPU is present. Cached per device type."""
    return _flex_available(torch.device(device).type)


@functools.cache
def _flex_available(device_type: str) -> bool:
    try:
        import torch._dynamo
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401

        if not torch._dynamo.is_dynamo_supported():
            return False
    except Exception:
        return False
    if device_type == "cuda":
        try:
            import triton  # noqa: F401
        except Exception:
            return False
        return torch.cuda.is_available()
    return any(shutil.which(name) for name in ("g++", "c++", "clang++"))


def _flex_attention():
    """``flex_attention`` compiled once per process."""
    fn = _COMPILED.get("flex")
    if fn is None:
        from torch.nn.attention.flex_attention import flex_attention

        fn = torch.compile(flex_attention, dynamic=False)
        _COMPILED["flex"] = fn
    return fn


def _extend(strip: Tensor) -> Tensor:
    """``strip`` with one more row and column of zeros (the dummy hub and the padding)."""
    out = strip.new_zeros(strip.shape[0] + 1, strip.shape[1] + 1)
    out[:-1, :-1] = strip
    return out


class _FlexStructures:
    """What FlexAttention needs from a layout: the block mask and the lookup tables."""

    def __init__(self, layout: ClusterSparseLayout, block_size: tuple[int, int]) -> None:
        from torch.nn.attention.flex_attention import BlockMask

        db, S = layout.block_size, layout.num_tokens
        G = layout.segment_token.shape[0]
        L = G * db  # the padded length of the segment order
        device = layout.tile_mask.device
        T = layout.num_tiles
        n_r, n_c = layout.hub_rows.numel(), layout.hub_cols.numel()
        position = layout.token_position  # token -> place in the segment order
        flat_token = layout.segment_token.reshape(-1)  # place -> token (S: padding)

        # Lookup tables; index T / n_r / n_c is an all-False dummy.
        tile_id = torch.full((G, G), T, dtype=torch.int32, device=device)
        tile_id[layout.tile_row, layout.tile_col] = torch.arange(
            T, dtype=torch.int32, device=device
        )
        self.tile_id = tile_id
        pad_tile = torch.zeros(1, db, db, dtype=torch.bool, device=device)
        self.tile_mask = torch.cat([layout.tile_mask, pad_tile])
        self.tile_bucket = None
        if layout.tile_bucket is not None:
            self.tile_bucket = torch.cat([layout.tile_bucket, pad_tile.long()])
        self.num_hub_rows, self.num_hub_cols = n_r, n_c
        if n_r:
            index = torch.full((S + 1,), n_r, dtype=torch.int32, device=device)
            index[layout.hub_rows] = torch.arange(n_r, dtype=torch.int32, device=device)
            self.row_index = index[flat_token]  # [L]
            self.row_mask = _extend(layout.row_strip_mask)[:, flat_token]  # [n_r + 1, L]
            if layout.row_strip_bucket is not None:
                self.row_bucket = _extend(layout.row_strip_bucket)[:, flat_token]
        if n_c:
            index = torch.full((S + 1,), n_c, dtype=torch.int32, device=device)
            index[layout.hub_cols] = torch.arange(n_c, dtype=torch.int32, device=device)
            self.col_index = index[flat_token]  # [L]
            self.col_mask = _extend(layout.col_strip_mask)[flat_token]  # [L, n_c + 1]
            if layout.col_strip_bucket is not None:
                self.col_bucket = _extend(layout.col_strip_bucket)[flat_token]

        # Block mask over the segment order: blocks of bq x bk places.
        bq, bk = block_size
        nq, nk = math.ceil(L / bq), math.ceil(L / bk)
        t, i, j = layout.tile_mask.nonzero().unbind(1)
        qp = layout.tile_row[t] * db + i
        kp = layout.tile_col[t] * db + j
        r, rk = layout.row_strip_mask.nonzero().unbind(1)
        cq, c = layout.col_strip_mask.nonzero().unbind(1)
        qp = torch.cat([qp, position[layout.hub_rows[r]], position[cq]])
        kp = torch.cat([kp, position[rk], position[layout.hub_cols[c]]])
        pairs = torch.bincount((qp // bq) * nk + kp // bk, minlength=nq * nk).view(nq, nk)
        # A block is full when all its bq x bk places are pairs (padding never is).
        full = pairs == bq * bk
        partial = (pairs > 0) & ~full

        def ordered(blocks: Tensor) -> tuple[Tensor, Tensor]:
            num = blocks.sum(1, dtype=torch.int32)
            # FlexAttention takes the block count from the width: keep all nk columns.
            order = torch.argsort((~blocks).to(torch.int8), dim=1, stable=True)
            return num[None, None], order.to(torch.int32)[None, None].contiguous()

        kv_num, kv_idx = ordered(partial)
        full_num, full_idx = ordered(full)
        self.length = L
        self.block_mask = BlockMask.from_kv_blocks(
            kv_num,
            kv_idx,
            full_num,
            full_idx,
            BLOCK_SIZE=(bq, bk),
            mask_mod=self.mask_mod(),
            seq_lengths=(L, L),
        )
        self.num_blocks = int(partial.sum()) + int(full.sum())
        self.num_full_blocks = int(full.sum())

    def mask_mod(self):
        db = int(self.tile_mask.shape[-1])
        tile_id, tile_mask = self.tile_id, self.tile_mask
        n_r, n_c = self.num_hub_rows, self.num_hub_cols
        row_index = getattr(self, "row_index", None)
        row_mask = getattr(self, "row_mask", None)
        col_index = getattr(self, "col_index", None)
        col_mask = getattr(self, "col_mask", None)

        def mask_mod(b, h, q_idx, kv_idx):
            t = tile_id[q_idx // db, kv_idx // db]
            attend = tile_mask[t, q_idx % db, kv_idx % db]
            if n_r:
                attend = attend | row_mask[row_index[q_idx], kv_idx]
            if n_c:
                attend = attend | col_mask[q_idx, col_index[kv_idx]]
            return attend

        return mask_mod

    def score_mod(self, table: Tensor):
        db = int(self.tile_mask.shape[-1])
        tile_id, tile_bucket = self.tile_id, self.tile_bucket
        n_r, n_c = self.num_hub_rows, self.num_hub_cols
        row_index = getattr(self, "row_index", None)
        row_bucket = getattr(self, "row_bucket", None)
        col_index = getattr(self, "col_index", None)
        col_bucket = getattr(self, "col_bucket", None)

        def score_mod(score, b, h, q_idx, kv_idx):
            bucket = tile_bucket[tile_id[q_idx // db, kv_idx // db], q_idx % db, kv_idx % db]
            if n_c:
                c = col_index[kv_idx]
                bucket = torch.where(c < n_c, col_bucket[q_idx, c], bucket)
            if n_r:
                r = row_index[q_idx]
                bucket = torch.where(r < n_r, row_bucket[r, kv_idx], bucket)
            return score + table[bucket, h]

        return score_mod


def _structures(layout: ClusterSparseLayout, block_size: tuple[int, int]) -> _FlexStructures:
    cached = layout._flex.get(block_size)
    if cached is None:
        cached = _FlexStructures(layout, block_size)
        layout._flex[block_size] = cached
    return cached


def cluster_flex_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: ClusterSparseLayout,
    bias_table: Tensor | None = None,
    block_size: int | tuple[int, int] | None = None,
) -> Tensor:
    """:func:`~lightgraph.functional.attention.cluster_sparse_attention` over ``layout`` as
    one compiled FlexAttention call (see the module docstring).

    Call it through ``cluster_sparse_attention(..., implementation="flex")``, which checks
    the arguments; this function assumes them valid.

    Args:
        q, k, v: ``[S, H, D]`` (``v`` may have its own last dimension).
        layout: the cluster-sparse layout of the sequence (same device as ``q``).
        bias_table: ``[num_buckets, H]`` per-head bias looked up with the layout's buckets.
        block_size: FlexAttention block (``int`` or ``(query, key)``) over the segment
            order; ``None``: the layout's ``block_size`` (one block per tile), except on
            CUDA in float16/bfloat16 with gradients, where it is the least common multiple
            of that and :data:`CUDA_HALF_BACKWARD_BLOCK` (Inductor's half-precision
            backward has no smaller kernel tiles).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    if block_size is None:
        block_size = layout.block_size
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, v, bias_table)
        )
        if q.is_cuda and needs_grad and q.dtype in (torch.float16, torch.bfloat16):
            block_size = math.lcm(layout.block_size, CUDA_HALF_BACKWARD_BLOCK)
    if isinstance(block_size, int):
        block_size = (block_size, block_size)
    st = _structures(layout, tuple(block_size))
    H, G, db = q.shape[1], layout.segment_token.shape[0], layout.block_size
    L = G * db

    D, Dv = q.shape[-1], v.shape[-1]
    kernel_options = None
    pad_qk = pad_v = 0
    if q.is_cuda:
        # Triton's products need head dimensions >= 16 (zero columns change no score) and
        # kernel tiles that divide the mask's blocks (its defaults are 64 x 64 or larger).
        pad_qk, pad_v = max(0, CUDA_MIN_HEAD_DIM - D), max(0, CUDA_MIN_HEAD_DIM - Dv)
        kernel_options = {"BLOCK_M": math.gcd(block_size[0], 64)}
        kernel_options["BLOCK_N"] = math.gcd(block_size[1], 64)

    def seg(x: Tensor, pad: int) -> Tensor:
        if pad:
            x = torch.nn.functional.pad(x, (0, pad))
        return _to_segments(x, layout).view(1, H, L, x.shape[-1])  # segment order

    score_mod = None if bias_table is None else st.score_mod(bias_table)
    out = _flex_attention()(
        seg(q, pad_qk),
        seg(k, pad_qk),
        seg(v, pad_v),
        score_mod=score_mod,
        block_mask=st.block_mask,
        scale=1.0 / math.sqrt(D),
        kernel_options=kernel_options,
    )
    out = out[..., :Dv].reshape(H, L, Dv).transpose(0, 1)  # [L, H, Dv] in segment order
    return out.index_select(0, layout.token_position)
