"""TorchGT's cluster-sparse attention: attention over the pairs of a
:class:`~lightgraph.functional.attention.ClusterSparseLayout`, computed tile by tile (or
on FlexAttention, :mod:`lightgraph.functional.attention.flex`).

The cluster count :math:`k` of the layout is an explicit argument everywhere; its default,
:func:`default_num_clusters`, depends only on the hidden size and the fixed nominal cache
size :data:`NOMINAL_CACHE_BYTES`, never on the machine, so one configuration gives one
attention pattern on every machine.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightgraph.functional.attention.cluster_sparse_layout import (
    ClusterSparseLayout,
    _Chunk,
    _from_segments_t,
    _strip_slices,
    _to_segments,
)
from lightgraph.functional.attention.flex import cluster_flex_attention, flex_available
from lightgraph.utilities.checks import (
    check_bias_table,
    check_choice,
    check_int,
    check_qkv,
    check_rate,
)

__all__ = [
    "AUTO_MIN_TILE_FILL",
    "CLUSTER_CACHE_DIVISOR",
    "IMPLEMENTATIONS",
    "NOMINAL_CACHE_BYTES",
    "cluster_sparse_attention",
    "default_num_clusters",
]

#: The integer :math:`i` of the thesis's rule :math:`k = \lfloor\sqrt{Q_{L2} / (i\,d)}\rfloor`.
#: 1536 reproduces the thesis's fitted ``k = 8`` for an RTX 3090 (6 MiB L2) at ``d = 64``.
CLUSTER_CACHE_DIVISOR: int = 1536

#: The nominal cache size :math:`Q_{L2}` of :func:`default_num_clusters`: 6 MiB, the L2
#: cache of the RTX 3090 the thesis fitted its rule on. A constant, so the default cluster
#: count (and with it the attention pattern) is the same on every machine.
NOMINAL_CACHE_BYTES: int = 6 * 2**20

#: Tile fill (:attr:`ClusterSparseLayout.tile_fill`) from which ``kind="auto"`` of
#: :func:`~lightgraph.functional.attention.attend` runs the cluster-sparse kernel instead of
#: the CSR sparse kernel. A constant, so the choice depends on the input only.
#:
#: Measured crossover (2026-11-24; a 2-core VM shared with other jobs, torch 2.13 CPU
#: build; one layer fwd+bwd, H = 8, D = 8, float32, no bias; default layout: k = 8,
#: d_b = 16, threshold 0; minimum of 5-7 interleaved runs per kernel) over 46 patterns at
#: S = 16K and 64K -- ``bench_attention.py``'s ``local`` (mean distance 4 / 16 / 64, far
#: share 0 / 0.02 / 0.1) and ``blocky`` (degree 8-64, communities of 16-64, far share
#: 0 / 0.02) generators, 11-44 entries per query. With 2 threads (wall time) every
#: pattern with ``tile_fill >= 0.40`` ran faster on the cluster-sparse kernel (0.26-0.87x
#: the CSR kernel's time); from 0.245 to 0.40 it won only with many entries per query
#: (>= 17 at 64K, >= 29 at 16K: 0.41-0.93x) and lost with about 12 (1.17-1.42x); below
#: 0.245 it always lost (1.25-3.05x). With 1 thread (CPU time) the same, a little more in
#: its favour: >= 0.40 always won (0.21-0.86x), 0.39 at 12 entries per query was even
#: (0.99-1.03x), <= 0.21 always lost (1.08-2.40x). 0.40 is the fill from which it won
#: every measured case.
AUTO_MIN_TILE_FILL: float = 0.4

#: The implementations of :func:`cluster_sparse_attention` (``"auto"``: FlexAttention on
#: CUDA where it applies, the tile kernel otherwise).
IMPLEMENTATIONS: tuple[str, ...] = ("auto", "tiles", "flex")

_LOG2E = 1.0 / math.log(2.0)


def default_num_clusters(hidden_channels: int, cache_bytes: int = NOMINAL_CACHE_BYTES) -> int:
    """TorchGT's cluster count :math:`k = \\lfloor\\sqrt{Q_{L2} / (i\\,d)}\\rfloor`, at least 1.

    :math:`Q_{L2}` is ``cache_bytes`` (default :data:`NOMINAL_CACHE_BYTES`, 6 MiB: nothing
    is read from the machine), :math:`d` is ``hidden_channels`` and :math:`i` is
    :data:`CLUSTER_CACHE_DIVISOR` (1536). The default gives the thesis's ``k = 8`` at
    ``d = 64`` (Graphormer-slim), 5 at ``d = 128`` (GT) and 2 at ``d = 768``.

    Args:
        hidden_channels: the attention's hidden size ``H * D`` (all heads).
        cache_bytes: the cache size the rule sizes the clusters for.
    """
    owner = "default_num_clusters"
    if not isinstance(hidden_channels, int) or hidden_channels < 1:
        raise ValueError(f"{owner}: expected `hidden_channels` >= 1 but got {hidden_channels!r}.")
    cache_bytes = check_int(owner, "cache_bytes", cache_bytes)
    return max(1, math.isqrt(cache_bytes // (CLUSTER_CACHE_DIVISOR * hidden_channels)))


def _segment_keys(xs: Tensor, hub: Tensor | None, chunk: _Chunk) -> Tensor:
    """``[H, R, W, D]``: a chunk's keys -- its rows' wide-tile segments side by side, then
    the key columns (zero where padded), then the hub keys."""
    H, G, db, D = xs.shape
    R = chunk.rows.numel()
    keys = xs.index_select(1, chunk.cols).view(H, R, -1, D)
    parts = [keys]
    if chunk.key_place is not None:
        columns = xs.view(H, G * db, D).index_select(1, chunk.key_place.reshape(-1))
        if chunk.key_pad is not None:
            columns.index_fill_(1, chunk.key_pad, 0.0)
        parts.append(columns.view(H, R, -1, D))
    if hub is not None:
        parts.append(hub[:, None].expand(H, R, hub.shape[1], D))
    return torch.cat(parts, dim=2) if len(parts) > 1 else keys


def _chunk_logits(
    qs: Tensor,
    ks: Tensor,
    k_hub: Tensor | None,
    table_t: Tensor | None,
    chunk: _Chunk,
) -> tuple[Tensor, Tensor, Tensor]:
    """Masked, biased base-2 scores ``[H, R, d_b, W]`` of a chunk, with its ``Q`` and ``K``."""
    Q = qs.index_select(1, chunk.rows)
    K = _segment_keys(ks, k_hub, chunk)
    logits = torch.matmul(Q, K.transpose(-1, -2))
    if table_t is not None:
        logits += table_t.index_select(1, chunk.bucket.reshape(-1)).view(logits.shape)
    if chunk.mask is not None:
        logits += chunk.mask
    return logits, Q, K


def _strip_logits(
    q_rows: Tensor, ks_flat: Tensor, table_t: Tensor | None, layout: ClusterSparseLayout, r: slice
) -> Tensor:
    """Masked, biased base-2 scores ``[H, c, G d_b]`` of hub queries ``r`` against every key."""
    logits = torch.matmul(q_rows, ks_flat.transpose(-1, -2))
    if table_t is not None:
        bucket = layout._row_strip_bucket[r]
        logits += table_t.index_select(1, bucket.reshape(-1)).view(logits.shape)
    return logits.masked_fill_(layout._row_strip_blocked[r], float("-inf"))


def _dropout_keep(like: Tensor, p: float, seed: int, chunk: int) -> Tensor:
    """The dropout mask of one chunk, reproducible from ``(seed, chunk)`` for the backward."""
    gen = torch.Generator(device=like.device).manual_seed(seed + chunk)
    return torch.rand(like.shape, generator=gen, dtype=like.dtype, device=like.device) >= p


def _scatter_keys(
    acc: Tensor,
    place_acc: Tensor | None,
    hub_acc: Tensor | None,
    grad_t: Tensor,
    chunk: _Chunk,
    db: int,
) -> None:
    """Add transposed key gradients ``[H, R, D, W]`` into ``acc`` ``[G, H, D, d_b]`` (wide
    tiles, by segment), ``place_acc`` ``[G d_b, H, D]`` (key columns, by place in the
    segment order; padded columns add zeros) and ``hub_acc`` ``[H, D, n_c]`` (hub keys)."""
    H, R, D, _ = grad_t.shape
    n = chunk.cols.numel() // R
    end = n * db
    tiles = grad_t[..., :end].reshape(H, R, D, n, db).permute(1, 3, 0, 2, 4)
    # A contiguous source: index_add_ takes a much slower path for a strided one.
    acc.index_add_(0, chunk.cols, tiles.reshape(R * n, H, D, db).contiguous())
    if chunk.key_place is not None:
        c = chunk.key_place.shape[1]
        columns = grad_t[..., end : end + c].permute(1, 3, 0, 2).reshape(R * c, H, D)
        place_acc.index_add_(0, chunk.key_place.reshape(-1), columns.contiguous())
        end += c
    if hub_acc is not None:
        hub_acc += grad_t[..., end:].sum(1)


class _ClusterSparseAttention(torch.autograd.Function):
    """Row-group matmuls over the tiles, plus the hub strips, with one softmax per query.

    Every chunk holds whole tile rows with the same wide-tile count ``n``: their queries
    ``[H, R, d_b, D]`` multiply their ``W = n d_b + c + n_c`` keys (the row's wide-tile
    segments side by side, its key columns, then the hub keys) in one batched matmul, and
    the softmax of a query runs over the last dimension. Products whose output would be ``D`` wide are taken
    transposed (``D x d_b`` and ``D x W`` outputs; a batched GEMM with an 8-wide output is
    about 3x slower on CPU). Hub queries' rows are computed apart, against every key.
    Only the row maxima :math:`m` and sums :math:`\\Sigma` of the softmax are kept (in
    base 2: scores and bias are scaled by :math:`\\log_2 e`); the backward recomputes each
    chunk's weights :math:`e = 2^{s - m}` and folds :math:`1/\\Sigma` into the output
    gradient: :math:`dv = e^\\top dO'` and :math:`ds = e\\,(dO' v^\\top - dO' \\cdot o)`
    with :math:`dO' = dO / \\Sigma`. Dropout masks are regenerated from a per-call seed.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        bias_table: Tensor | None,
        layout: ClusterSparseLayout,
        scale: float,
        dropout_p: float,
    ) -> Tensor:
        # Base-2 scores: exp2 skips the slow path exp takes on the -inf of masked pairs.
        qs = _to_segments(q, layout).mul_(scale * _LOG2E)
        ks, vs = _to_segments(k, layout), _to_segments(v, layout)
        H, G, db, _ = qs.shape
        Dv = vs.shape[-1]
        k_hub = v_hub = None
        if layout.hub_cols.numel():
            k_hub = k[layout.hub_cols].permute(1, 0, 2).contiguous()
            v_hub = v[layout.hub_cols].permute(1, 0, 2).contiguous()
        table_t = None if bias_table is None else (bias_table * _LOG2E).t().contiguous()
        # Rows without pairs keep these: zero output, no shift, unit sum.
        out_t = qs.new_zeros(G, H, Dv, db)
        row_max, denom = qs.new_zeros(G, H, db), qs.new_ones(G, H, db)
        seed = int(torch.randint(0, 2**62, (1,))) if dropout_p > 0.0 else 0
        plan = layout.plan(H, qs.dtype)
        for index, chunk in enumerate(plan):
            logits, _, _ = _chunk_logits(qs, ks, k_hub, table_t, chunk)
            m = logits.amax(-1, keepdim=True)
            m = m.masked_fill_(torch.isinf(m), 0.0)
            weights = logits.sub_(m).exp2_()
            total = weights.sum(-1)
            total = total.masked_fill_(total == 0, 1.0)
            if dropout_p > 0.0:
                keep = _dropout_keep(weights, dropout_p, seed, index)
                weights = weights.mul_(keep).div_(1.0 - dropout_p)
            V = _segment_keys(vs, v_hub, chunk)
            out = torch.matmul(V.transpose(-1, -2), weights.transpose(-1, -2))  # [H, R, Dv, db]
            out = out.div_(total[:, :, None, :])
            out_t.index_copy_(0, chunk.rows, out.transpose(0, 1))
            row_max.index_copy_(0, chunk.rows, m.squeeze(-1).transpose(0, 1))
            denom.index_copy_(0, chunk.rows, total.transpose(0, 1))
        out = _from_segments_t(out_t, layout)
        strip_stats = []
        if layout.hub_rows.numel():
            qs_flat, ks_flat = qs.view(H, G * db, -1), ks.view(H, G * db, -1)
            vs_flat = vs.view(H, G * db, Dv)
            at = layout.token_position[layout.hub_rows]
            for index, r in enumerate(_strip_slices(layout, H), start=len(plan)):
                logits = _strip_logits(qs_flat[:, at[r]], ks_flat, table_t, layout, r)
                m = logits.amax(-1, keepdim=True)
                m = m.masked_fill_(torch.isinf(m), 0.0)
                weights = logits.sub_(m).exp2_()
                total = weights.sum(-1, keepdim=True)
                total = total.masked_fill_(total == 0, 1.0)
                if dropout_p > 0.0:
                    keep = _dropout_keep(weights, dropout_p, seed, index)
                    weights = weights.mul_(keep).div_(1.0 - dropout_p)
                rows = torch.matmul(weights, vs_flat).div_(total)  # [H, c, Dv]
                out[layout.hub_rows[r]] = rows.transpose(0, 1)
                strip_stats += [m, total, rows]
        saved = (qs, ks, vs, row_max, denom, out_t, bias_table, *strip_stats)
        ctx.save_for_backward(*saved)
        ctx.layout, ctx.scale, ctx.dropout_p, ctx.seed = layout, scale, dropout_p, seed
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        qs, ks, vs, row_max, denom, out_t, bias_table, *strip_stats = ctx.saved_tensors
        layout: ClusterSparseLayout = ctx.layout
        table_t = None if bias_table is None else (bias_table * _LOG2E).t().contiguous()
        p = ctx.dropout_p
        need_q, need_k, need_v, need_table = ctx.needs_input_grad[:4]
        H, G, db, D = qs.shape
        Dv = vs.shape[-1]
        n_c = layout.hub_cols.numel()
        k_hub = v_hub = None
        if n_c:
            at = layout.token_position[layout.hub_cols]
            k_hub = ks.view(H, G * db, D)[:, at].contiguous()
            v_hub = vs.view(H, G * db, Dv)[:, at].contiguous()
        dk_place = dv_place = None  # key columns' gradients by place
        if layout.num_key_columns:
            dk_place = qs.new_zeros(G * db, H, D) if need_k else None
            dv_place = qs.new_zeros(G * db, H, Dv) if need_v else None
        do_seg = _to_segments(grad_out, layout).div_(denom.transpose(0, 1)[..., None])
        # sum_j p_ij dP_ij = dO_i . o_i, also with dropout (o uses the dropped weights).
        delta = (do_seg * out_t.permute(1, 0, 3, 2)).sum(-1).transpose(0, 1)  # [G, H, d_b]
        dq_t = qs.new_zeros(G, H, D, db) if need_q else None
        dk_t = qs.new_zeros(G, H, D, db) if need_k else None
        dv_t = qs.new_zeros(G, H, Dv, db) if need_v else None
        dk_hub = qs.new_zeros(H, D, n_c) if need_k and n_c else None
        dv_hub = qs.new_zeros(H, Dv, n_c) if need_v and n_c else None
        grad_table = torch.zeros_like(bias_table) if need_table else None
        plan = layout.plan(H, qs.dtype)
        for index, chunk in enumerate(plan):
            rows = chunk.rows
            logits, Q, K = _chunk_logits(qs, ks, k_hub, table_t, chunk)
            m = row_max.index_select(0, rows).transpose(0, 1)[..., None]
            weights = logits.sub_(m).exp2_()
            keep = _dropout_keep(weights, p, ctx.seed, index) if p > 0.0 else None
            d_out = do_seg.index_select(1, rows)  # [H, R, d_b, Dv]
            V = _segment_keys(vs, v_hub, chunk)
            if need_v:
                attn = weights if keep is None else weights * keep / (1.0 - p)
                dv = torch.matmul(d_out.transpose(-1, -2), attn)  # [H, R, Dv, W]
                _scatter_keys(dv_t, dv_place, dv_hub, dv, chunk, db)
            if not (need_q or need_k or need_table):
                continue
            d_logits = torch.matmul(d_out, V.transpose(-1, -2))
            if keep is not None:
                d_logits = d_logits.mul_(keep).div_(1.0 - p)
            d_rows = delta.index_select(0, rows).transpose(0, 1)[..., None]
            d_logits = d_logits.sub_(d_rows).mul_(weights)
            if need_q:
                dq = torch.matmul(K.transpose(-1, -2), d_logits.transpose(-1, -2))
                dq_t.index_copy_(0, rows, dq.transpose(0, 1))  # [R, H, D, d_b]
            if need_k:
                dk = torch.matmul(Q.transpose(-1, -2), d_logits)  # [H, R, D, W]
                _scatter_keys(dk_t, dk_place, dk_hub, dk, chunk, db)
            if need_table:
                grad_table.index_add_(
                    0, chunk.bucket.reshape(-1), d_logits.permute(1, 2, 3, 0).reshape(-1, H)
                )
        if layout.hub_rows.numel():
            qs_flat, ks_flat = qs.view(H, G * db, D), ks.view(H, G * db, D)
            vs_flat = vs.view(H, G * db, Dv)
            dq_rows = qs.new_zeros(H, layout.hub_rows.numel(), D)
            # Key gradients of the strips, transposed: [H, D, G d_b].
            dk_flat = qs.new_zeros(H, D, G * db) if need_k else None
            dv_flat = qs.new_zeros(H, Dv, G * db) if need_v else None
            at = layout.token_position[layout.hub_rows]
            for index, r in enumerate(_strip_slices(layout, H)):
                m, total, out_rows = strip_stats[3 * index : 3 * index + 3]
                q_rows = qs_flat[:, at[r]]
                logits = _strip_logits(q_rows, ks_flat, table_t, layout, r)
                probs = logits.sub_(m).exp2_().div_(total)
                keep = None
                if p > 0.0:
                    keep = _dropout_keep(probs, p, ctx.seed, len(plan) + index)
                d_out = grad_out[layout.hub_rows[r]].transpose(0, 1)  # [H, c, Dv]
                if need_v:
                    attn = probs if keep is None else probs * keep / (1.0 - p)
                    dv_flat += torch.matmul(d_out.transpose(-1, -2), attn)  # [H, Dv, G d_b]
                if not (need_q or need_k or need_table):
                    continue
                d_logits = torch.matmul(d_out, vs_flat.transpose(-1, -2))
                if keep is not None:
                    d_logits = d_logits.mul_(keep).div_(1.0 - p)
                d_rows = (d_out * out_rows).sum(-1, keepdim=True)
                d_logits = d_logits.sub_(d_rows).mul_(probs)
                if need_q:
                    dq_rows[:, r] = torch.matmul(d_logits, ks_flat)
                if need_k:
                    dk_flat += torch.matmul(q_rows.transpose(-1, -2), d_logits)  # [H, D, G d_b]
                if need_table:
                    bucket = layout._row_strip_bucket[r].reshape(-1)
                    grad_table.index_add_(0, bucket, d_logits.permute(1, 2, 0).reshape(-1, H))
            if need_k:
                dk_t += dk_flat.view(H, D, G, db).permute(2, 0, 1, 3)
            if need_v:
                dv_t += dv_flat.view(H, Dv, G, db).permute(2, 0, 1, 3)
        for acc, place_acc in ((dk_t, dk_place), (dv_t, dv_place)):
            if place_acc is not None:
                acc += place_acc.view(G, db, H, -1).permute(0, 2, 3, 1)
        grad_q = grad_k = grad_v = None
        if need_q:
            grad_q = _from_segments_t(dq_t, layout)
            if layout.hub_rows.numel():
                grad_q[layout.hub_rows] += dq_rows.transpose(0, 1)
            grad_q = grad_q.mul_(ctx.scale)
        if need_k:
            # qs carries scale * log2(e); dk needs q * scale.
            grad_k = _from_segments_t(dk_t, layout)

            if n_c:
                grad_k[layout.hub_cols] += dk_hub.permute(2, 0, 1)
            grad_k = grad_k.mul_(math.log(2.0))
        if need_v:
            grad_v = _from_segments_t(dv_t, layout)

            if n_c:
                grad_v[layout.hub_cols] += dv_hub.permute(2, 0, 1)
        return grad_q, grad_k, grad_v, grad_table, None, None, None


def cluster_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: ClusterSparseLayout,
    bias_table: Tensor | None = None,
    dropout_p: float = 0.0,
    implementation: str = "auto",
) -> Tensor:
    """Attention over the pairs of a :class:`ClusterSparseLayout`, computed tile by tile.

    .. math::
        \\mathbf{o}_i = \\sum_{j \\in \\mathcal{P}(i)} \\operatorname{softmax}_j\\Big(
        \\frac{\\mathbf{q}_i^\\top \\mathbf{k}_j}{\\sqrt{D}} + b_{\\mathrm{bucket}(i,j)}\\Big)
        \\mathbf{v}_j

    with :math:`\\mathcal{P}(i)` the keys of query :math:`i` in ``layout.pattern()``.

    ``implementation="tiles"`` (default): the layout's row groups (tile rows with the
    same tile count) run as batched matmuls of their queries ``[H, R, d_b, D]`` against
    their ``W`` keys (the row's tile segments side by side, then the hub keys), so a query's
    softmax spans one contiguous row of scores; the hub queries' rows run as dense strips
    against every key. Work runs in chunks of whole rows of about
    :data:`~lightgraph.functional.attention.cluster_sparse_layout.CHUNK_ELEMENTS`
    scores; memory beyond q, k, v is one chunk plus ``O(S H)`` softmax statistics (the
    backward recomputes the chunk's scores). Only first-order gradients.

    ``implementation="flex"``: one compiled FlexAttention call over the same pairs
    (:func:`~lightgraph.functional.attention.flex.cluster_flex_attention`: the layout's
    tiles become FlexAttention blocks, the block mask and lookup tables are cached on the
    layout). No dropout; on the CPU forward only -- torch's CPU FlexAttention has no
    backward, so a call that needs gradients there raises.

    ``implementation="auto"`` (default): ``"flex"`` on CUDA when it applies (no dropout,
    ``layout.block_size`` a multiple of 16, float32/float16/bfloat16, Triton available),
    ``"tiles"`` otherwise: on a GPU FlexAttention is faster than the tiles (docs/benchmarks.md
    has the measurement); on the CPU it is forward only and slower, so the CPU always runs
    the tiles.

    A query with no pair outputs zeros under every implementation.

    Args:
        q, k, v: ``[S, H, D]`` (``v`` may have its own last dimension).
        layout: the cluster-sparse layout of the sequence (same device as ``q``).
        bias_table: ``[num_buckets, H]`` per-head bias looked up with ``layout.tile_bucket``;
            needs a layout built with ``edge_bucket``.
        dropout_p: dropout on the attention probabilities (pass 0 in evaluation); not
            with ``implementation="flex"``.
        implementation: ``"auto"``, ``"tiles"`` (the kernel here) or ``"flex"``
            (FlexAttention).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "cluster_sparse_attention"
    S, H, D = check_qkv(owner, q, k, v)
    dropout_p = check_rate(owner, "dropout_p", dropout_p)
    check_choice(owner, "implementation", implementation, IMPLEMENTATIONS)
    if not isinstance(layout, ClusterSparseLayout):
        raise ValueError(
            f"{owner}: expected `layout` to be a ClusterSparseLayout but got {type(layout).__name__}."
        )
    if layout.num_tokens != S:
        raise ValueError(
            f"{owner}: expected `layout` built for S={S} tokens but it has {layout.num_tokens}."
        )
    if layout.tile_mask.device != q.device:
        raise ValueError(
            f"{owner}: expected `layout` on {q.device} but it is on {layout.tile_mask.device}; "
            f"call `layout.to(device)`."
        )
    if bias_table is not None:
        check_bias_table(owner, bias_table, H, q)
        if layout.tile_bucket is None:
            raise ValueError(
                f"{owner}: got a `bias_table` but `layout` has no buckets; build it with "
                f"`edge_bucket`."
            )
        if layout.max_bucket >= bias_table.shape[0]:
            raise ValueError(
                f"{owner}: `layout` uses bucket {layout.max_bucket} but `bias_table` has only "
                f"{bias_table.shape[0]} rows."
            )
    if implementation == "auto":
        implementation = "tiles"
        if (
            q.is_cuda
            and dropout_p == 0.0
            and layout.block_size % 16 == 0
            and q.dtype in (torch.float32, torch.float16, torch.bfloat16)
        ):
            if flex_available(q.device):
                implementation = "flex"
    if implementation == "flex":
        if dropout_p > 0.0:
            raise ValueError(
                f"{owner}: `implementation='flex'` has no dropout (FlexAttention has none) but "
                f"got dropout_p={dropout_p}; pass dropout_p=0 or use implementation='tiles'."
            )
        needs_grad = torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, v, bias_table)
        )
        if needs_grad and q.device.type == "cpu":
            raise NotImplementedError(
                f"{owner}: `implementation='flex'` cannot compute gradients on the CPU "
                f'(torch {torch.__version__}: "FlexAttention does not support backward on '
                f"CPU\"); use implementation='tiles', or call it under torch.no_grad() or "
                f"with inputs that do not require grad."
            )
        if q.device.type == "cpu" and q.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(
                f"{owner}: `implementation='flex'` on the CPU takes float32, float16 or "
                f"bfloat16 inputs (torch's CPU FlexAttention) but got {q.dtype}."
            )
        if q.is_cuda and layout.block_size % 16:
            raise ValueError(
                f"{owner}: `implementation='flex'` on CUDA needs a layout `block_size` that is "
                f"a multiple of 16 (Triton's kernel tiles) but got {layout.block_size}; use "
                f"implementation='tiles' or a block_size of 16, 32, ..."
            )
        return cluster_flex_attention(q, k, v, layout, bias_table)
    return _ClusterSparseAttention.apply(q, k, v, bias_table, layout, 1.0 / math.sqrt(D), dropout_p)
