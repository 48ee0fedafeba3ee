"""TorchGT's cluster-sparse attention: the elastic computation reformation of a token pattern.

The cluster count :math:`k` of the layout is an explicit argument everywhere; its default,
:func:`default_num_clusters`, depends only on the hidden size and the fixed nominal cache
size :data:`NOMINAL_CACHE_BYTES`, never on the machine, so one configuration gives one
attention pattern on every machine.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from lightgraph.utilities.checks import (
    check_bias_table,
    check_graph_edge_index,
    check_int,
    check_qkv,
    check_rate,
)

__all__ = [
    "AUTO_MIN_TILE_FILL",
    "CHUNK_ELEMENTS",
    "CLUSTER_CACHE_DIVISOR",
    "NOMINAL_CACHE_BYTES",
    "ClusterSparseLayout",
    "cluster_sparse_attention",
    "default_num_clusters",
]

#: Scores (tiles x heads x d_b^2) the cluster-sparse kernel computes per step: about 1 MiB
#: of float32, so a chunk's intermediates stay in a CPU core's L2 cache.
CHUNK_ELEMENTS: int = 1 << 18

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
AUTO_MIN_TILE_FILL: float = 0.5

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


class ClusterSparseLayout:
    """The cluster-sparse layout of a token pattern, TorchGT's *elastic computation
    reformation* (Thesis ch. 4, §4.3.4).

    Tokens are taken to be METIS-ordered, so ``num_clusters`` (:math:`k`) contiguous,
    near-equal ranges are the clusters (the first ``S % k`` clusters get one token more).
    The pattern is an ``S x S`` matrix (query rows, key columns) cut into :math:`k^2` cluster
    blocks; every block is tiled into ``block_size`` x ``block_size`` tiles (:math:`d_b`)
    anchored at the block's top-left corner and clipped at its edges, so no tile straddles
    two clusters. With :math:`n_{ab}` the pattern entries of block :math:`(a, b)`:

    .. math::
        \\beta_C(a, b) = \\frac{n_{ab}}{|a|\\,|b|}, \\qquad \\beta_G = \\frac{E}{S^2}.

    The rule, applied per block:

    * diagonal blocks (:math:`a = b`) stay exact: every tile with at least one entry is
      computed under its in-tile mask;
    * off-diagonal blocks with :math:`\\beta_C \\ge` ``threshold`` stay exact the same way;
    * off-diagonal blocks with :math:`0 < \\beta_C <` ``threshold`` are *transferred*: their
      :math:`m = \\lceil n_{ab} / d_b^2 \\rceil` tiles with the most entries (ties go to the
      earlier tile in row-major order) become fully dense tiles -- every pair inside attends,
      pairs that were not entries get the bucket ``far_bucket`` -- and the block's other
      entries are dropped.

    ``threshold == 0`` transfers nothing, so the layout attends exactly the pattern.
    Duplicate entries are rejected (a mask cannot count a pair twice); coalesce first.
    Building is vectorised (sorting and scatters over entries and tiles) and runs whenever
    the threshold changes.

    Args:
        edge_index: ``[2, E]`` pattern, row 0 the key (source) token, row 1 the query.
        num_tokens: sequence length ``S``.
        num_clusters: number of clusters :math:`k`, in ``[1, S]``.
        block_size: tile side :math:`d_b` (``>= 1``).
        threshold: transfer threshold :math:`\\beta_{thre}` in ``[0, 1]``.
        edge_bucket: ``[E]`` bias bucket of every entry, or ``None`` for no bias.
        far_bucket: bucket of the pairs a transfer adds.

    Attributes:
        cluster_ptr: ``[k + 1]`` first token of every cluster, then ``S``.
        block_entries: ``[k, k]`` :math:`n_{ab}` (query cluster ``a``, key cluster ``b``).
        cluster_density: ``[k, k]`` float64 :math:`\\beta_C`.
        global_density: :math:`\\beta_G`.
        transferred: ``[k, k]`` bool, the blocks that were transferred.
        num_tiles_kept: exact (masked) tiles; ``num_tiles_transferred``: dense tiles.
        num_entries_added: pairs the dense tiles add; ``num_entries_dropped``: entries of
            transferred blocks outside the chosen tiles; ``num_entries``: pairs attended.
        segment_token: ``[G, d_b]`` tokens of every tile row/column segment (``S`` pads).
        tile_row, tile_col: ``[T]`` segment of every active tile, sorted row-major.
        tile_mask: ``[T, d_b, d_b]`` bool, which pairs of a tile attend.
        tile_bucket: ``[T, d_b, d_b]`` bias bucket of every pair (``None`` without buckets).
    """

    def __init__(
        self,
        edge_index: Tensor,
        num_tokens: int,
        num_clusters: int,
        block_size: int = 16,
        threshold: float = 0.0,
        edge_bucket: Tensor | None = None,
        far_bucket: int = 0,
    ) -> None:
        owner = "ClusterSparseLayout"
        if not isinstance(num_tokens, int) or num_tokens < 1:
            raise ValueError(f"{owner}: expected `num_tokens` >= 1 but got {num_tokens!r}.")
        check_graph_edge_index(
            owner, "edge_index", edge_index, num_tokens, unit="token", require_long=True
        )
        if not isinstance(num_clusters, int) or not 1 <= num_clusters <= num_tokens:
            raise ValueError(
                f"{owner}: expected `num_clusters` in [1, num_tokens={num_tokens}] but got "
                f"{num_clusters!r}; use fewer clusters than tokens."
            )
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"{owner}: expected `block_size` >= 1 but got {block_size!r}.")
        if not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
            raise ValueError(f"{owner}: expected `threshold` in [0, 1] but got {threshold!r}.")
        if edge_bucket is not None and (
            edge_bucket.shape != (edge_index.shape[1],) or edge_bucket.dtype != torch.long
        ):
            raise ValueError(
                f"{owner}: expected `edge_bucket` of shape [E={edge_index.shape[1]}] and dtype "
                f"torch.long but got {tuple(edge_bucket.shape)} {edge_bucket.dtype}."
            )
        if not isinstance(far_bucket, int) or far_bucket < 0:
            raise ValueError(f"{owner}: expected `far_bucket` >= 0 but got {far_bucket!r}.")
        self.num_tokens, self.num_clusters, self.block_size = num_tokens, num_clusters, block_size
        self.threshold, self.far_bucket = float(threshold), far_bucket
        self._additive_masks: dict[torch.dtype, Tensor] = {}
        self._chunks: dict[int, list[tuple[int, int, int, int]]] = {}
        self._build(edge_index, edge_bucket)

    def _build(self, edge_index: Tensor, edge_bucket: Tensor | None) -> None:
        S, k, db = self.num_tokens, self.num_clusters, self.block_size
        device = edge_index.device
        src, dst = edge_index
        key, order = torch.sort(dst * S + src)
        if key.numel() > 1 and bool((key[1:] == key[:-1]).any()):
            raise ValueError(
                "ClusterSparseLayout: expected `edge_index` without duplicate pairs; coalesce it "
                "first (torch_geometric.utils.coalesce)."
            )
        src, dst = key % S, key // S
        bucket = edge_bucket[order] if edge_bucket is not None else None
        E = key.numel()

        # Clusters and the tile segments inside them.
        sizes = torch.full((k,), S // k, dtype=torch.long, device=device)
        sizes[: S % k] += 1
        self.cluster_ptr = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)])
        seg_per_cluster = (sizes + db - 1) // db
        seg_first = torch.cat([sizes.new_zeros(1), seg_per_cluster.cumsum(0)])
        G = int(seg_first[-1])
        seg_cluster = torch.repeat_interleave(torch.arange(k, device=device), seg_per_cluster)
        seg_local = torch.arange(G, device=device) - seg_first[seg_cluster]
        seg_start = self.cluster_ptr[seg_cluster] + seg_local * db
        seg_len = torch.minimum(
            self.cluster_ptr[seg_cluster + 1] - seg_start, seg_start.new_tensor(db)
        )
        arange_db = torch.arange(db, device=device)
        seg_token = seg_start[:, None] + arange_db
        seg_token[arange_db >= seg_len[:, None]] = S
        token_cluster = torch.repeat_interleave(torch.arange(k, device=device), sizes)
        within = torch.arange(S, device=device) - self.cluster_ptr[token_cluster]
        token_seg = seg_first[token_cluster] + within // db
        token_off = within % db

        # Densities.
        r, c = token_seg[dst], token_seg[src]
        block = token_cluster[dst] * k + token_cluster[src]
        n_ab = torch.bincount(block, minlength=k * k)
        area = (sizes[:, None] * sizes[None, :]).reshape(-1)
        self.block_entries = n_ab.view(k, k)
        self.cluster_density = (n_ab.double() / area.double()).view(k, k)
        self.global_density = E / float(S) ** 2
        diagonal = torch.eye(k, dtype=torch.bool, device=device).reshape(-1)
        transferred = ~diagonal & (n_ab > 0) & (self.cluster_density.reshape(-1) < self.threshold)
        self.transferred = transferred.view(k, k)

        # Occupied tiles, then the m fullest tiles of every transferred block.
        tiles, inverse, counts = torch.unique(r * G + c, return_inverse=True, return_counts=True)
        t_row, t_col = tiles // G, tiles % G
        t_block = seg_cluster[t_row] * k + seg_cluster[t_col]
        t_transfer = transferred[t_block]
        t_active = ~t_transfer
        cand = t_transfer.nonzero().squeeze(1)
        if cand.numel():
            blk = t_block[cand]
            by_count = torch.argsort(-counts[cand], stable=True)  # cand is row-major: ties keep it
            by_block = by_count[torch.argsort(blk[by_count], stable=True)]
            blk_sorted = blk[by_block]
            _, group = torch.unique_consecutive(blk_sorted, return_counts=True)
            rank = torch.arange(cand.numel(), device=device) - torch.repeat_interleave(
                group.cumsum(0) - group, group
            )
            m = (n_ab + db * db - 1) // (db * db)
            t_active[cand[by_block]] = rank < m[blk_sorted]

        active = t_active.nonzero().squeeze(1)
        self.tile_row, self.tile_col = t_row[active], t_col[active]
        self.tile_dense = t_transfer[active]
        T = active.numel()
        position = torch.cumsum(t_active.long(), 0) - 1  # unique tile -> active tile
        keep = t_active[inverse]
        flat = position[inverse[keep]] * db * db + token_off[dst[keep]] * db + token_off[src[keep]]

        mask = torch.zeros(T, db, db, dtype=torch.bool, device=device)
        dense = self.tile_dense.nonzero().squeeze(1)
        rows_ok = arange_db < seg_len[self.tile_row[dense]][:, None]
        cols_ok = arange_db < seg_len[self.tile_col[dense]][:, None]
        mask[dense] = rows_ok[:, :, None] & cols_ok[:, None, :]
        mask.view(-1)[flat] = True
        self.tile_mask = mask
        self.tile_bucket: Tensor | None = None
        self.max_bucket = -1
        if bucket is not None:
            tb = torch.full((T, db, db), self.far_bucket, dtype=torch.long, device=device)
            tb.view(-1)[flat] = bucket[keep]
            self.tile_bucket = tb
            self.max_bucket = int(tb.max()) if tb.numel() else -1

        self.segment_token = seg_token
        self.token_position = token_seg * db + token_off
        self.tiles_per_row = torch.bincount(self.tile_row, minlength=G)
        self.num_tiles_transferred = int(dense.numel())
        self.num_tiles_kept = T - self.num_tiles_transferred
        self.num_entries_dropped = int((~keep).sum())
        in_dense = int((keep & t_transfer[inverse]).sum())
        dense_area = int((rows_ok.sum(1) * cols_ok.sum(1)).sum())
        self.num_entries_added = dense_area - in_dense
        self.num_entries = E - self.num_entries_dropped + self.num_entries_added

    def additive_mask(self, dtype: torch.dtype) -> Tensor:
        """``[T, 1, d_b, d_b]``: 0 where a pair attends, ``-inf`` elsewhere (cached per dtype)."""
        cached = self._additive_masks.get(dtype)
        if cached is None:
            cached = torch.zeros(self.tile_mask.shape, dtype=dtype, device=self.tile_mask.device)
            cached = cached.masked_fill_(~self.tile_mask, float("-inf")).unsqueeze(1)
            self._additive_masks[dtype] = cached
        return cached

    def chunks(self, num_heads: int) -> list[tuple[int, int, int, int]]:
        """Runs of whole tile rows ``(g0, g1, t0, t1)`` (segments ``g0:g1``, tiles ``t0:t1``)
        of about :data:`CHUNK_ELEMENTS` scores each (a row longer than that is one chunk).
        Cached per head count."""
        cached = self._chunks.get(num_heads)
        if cached is None:
            per_chunk = max(1, CHUNK_ELEMENTS // (num_heads * self.block_size**2))
            tile_end = torch.cumsum(self.tiles_per_row, 0)
            chunk_of_row = (tile_end - self.tiles_per_row) // per_chunk
            _, rows_per_chunk = torch.unique_consecutive(chunk_of_row, return_counts=True)
            row_end = torch.cumsum(rows_per_chunk, 0)
            g = [0] + row_end.tolist()
            t = [0] + tile_end[row_end - 1].tolist()
            cached = [
                (g[i], g[i + 1], t[i], t[i + 1]) for i in range(len(g) - 1) if t[i + 1] > t[i]
            ]
            self._chunks[num_heads] = cached
        return cached

    @property
    def num_tiles(self) -> int:
        """Active tiles ``T`` (exact plus transferred)."""
        return self.tile_row.numel()

    @property
    def tile_fill(self) -> float:
        """Share of the computed scores that are attended pairs:
        ``num_entries / (num_tiles * block_size ** 2)`` (1.0 for a layout without tiles).

        The tile kernel computes every score of an active tile, so ``1 / tile_fill`` is its
        work per attended pair; ``kind="auto"`` of
        :func:`~lightgraph.functional.attention.attend` compares it with
        :data:`AUTO_MIN_TILE_FILL`.
        """
        if self.num_tiles == 0:
            return 1.0
        return self.num_entries / (self.num_tiles * self.block_size**2)

    def pattern(self) -> tuple[Tensor, Tensor | None]:
        """The pairs the layout attends.

        Returns:
            ``edge_index`` ``[2, E']`` (row 0 key, row 1 query; sorted by query, then key)
            and the ``[E']`` bucket of every pair (``None`` for a layout without buckets).
        """
        t, i, j = self.tile_mask.nonzero().unbind(1)
        query = self.segment_token[self.tile_row[t], i]
        key = self.segment_token[self.tile_col[t], j]
        order = torch.argsort(query * self.num_tokens + key)
        edge_index = torch.stack([key[order], query[order]])
        bucket = None if self.tile_bucket is None else self.tile_bucket[t, i, j][order]
        return edge_index, bucket

    def to(self, device: torch.device | str) -> ClusterSparseLayout:
        """A copy of the layout on ``device``."""
        out = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                setattr(out, name, value.to(device))
        out._additive_masks, out._chunks = {}, {}
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_tokens={self.num_tokens}, num_clusters={self.num_clusters}, "
            f"block_size={self.block_size}, threshold={self.threshold}, "
            f"tiles_kept={self.num_tiles_kept}, tiles_transferred={self.num_tiles_transferred}, "
            f"entries_added={self.num_entries_added}, entries_dropped={self.num_entries_dropped})"
        )


def _to_segments(x: Tensor, layout: ClusterSparseLayout) -> Tensor:
    """``[S, H, D]`` -> ``[G, H, d_b, D]`` (zero rows where a segment is padded)."""
    padded = torch.cat([x, x.new_zeros((1,) + tuple(x.shape[1:]))])
    return padded[layout.segment_token].permute(0, 2, 1, 3).contiguous()


def _from_segments(x: Tensor, layout: ClusterSparseLayout) -> Tensor:
    """``[G, H, d_b, D]`` -> ``[S, H, D]``."""
    G, H, db, D = x.shape
    return x.permute(0, 2, 1, 3).reshape(G * db, H, D)[layout.token_position]


def _tile_logits(
    qs: Tensor, ks: Tensor, bias_table: Tensor | None, layout: ClusterSparseLayout, t0: int, t1: int
) -> Tensor:
    """Masked, biased scores ``[t1 - t0, H, d_b, d_b]`` of active tiles ``t0:t1``."""
    rows, cols = layout.tile_row[t0:t1], layout.tile_col[t0:t1]
    logits = torch.matmul(qs.index_select(0, rows), ks.index_select(0, cols).transpose(-1, -2))
    if bias_table is not None:
        logits += bias_table[layout.tile_bucket[t0:t1]].permute(0, 3, 1, 2)
    return logits.add_(layout.additive_mask(logits.dtype)[t0:t1])


def _dropout_keep(like: Tensor, p: float, seed: int, chunk: int) -> Tensor:
    """The dropout mask of one chunk, reproducible from ``(seed, chunk)`` for the backward."""
    gen = torch.Generator(device=like.device).manual_seed(seed + chunk)
    return torch.rand(like.shape, generator=gen, dtype=like.dtype, device=like.device) >= p


class _ClusterSparseAttention(torch.autograd.Function):
    """Batched tile matmuls with a softmax across the tiles of every tile row.

    Runs over chunks of whole tile rows (:meth:`ClusterSparseLayout.chunks`), so every
    softmax completes inside one chunk and a chunk's tiles stay in cache. Only the row
    maxima :math:`m` and sums :math:`\\Sigma` of the softmax are kept (in base 2:
    scores and bias are scaled by :math:`\\log_2 e`); the backward recomputes each chunk's
    weights :math:`e = 2^{s - m}` and folds :math:`1/\\Sigma`
    into the output gradient: :math:`dv = e^\\top dO'` and :math:`ds = e\\,(dO' v^\\top -
    dO' \\cdot o)` with :math:`dO' = dO / \\Sigma`. Dropout masks are regenerated from a
    per-call seed.
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
        qs = _to_segments(q * (scale * _LOG2E), layout)
        ks, vs = _to_segments(k, layout), _to_segments(v, layout)
        table = None if bias_table is None else bias_table * _LOG2E
        G, H, db, _ = qs.shape
        # Rows without tiles keep these: zero output, no shift, unit sum.
        out_seg = torch.zeros_like(vs)
        row_max, denom = qs.new_zeros(G, H, db), qs.new_ones(G, H, db)
        seed = int(torch.randint(0, 2**62, (1,))) if dropout_p > 0.0 else 0
        for chunk, (g0, g1, t0, t1) in enumerate(layout.chunks(H)):
            rows, lengths = layout.tile_row[t0:t1] - g0, layout.tiles_per_row[g0:g1]
            logits = _tile_logits(qs, ks, table, layout, t0, t1)
            # Softmax of a query row across all tiles of its tile row: a scattered logsumexp.
            m = torch.segment_reduce(logits.amax(-1), "max", lengths=lengths, axis=0, unsafe=True)
            m = m.masked_fill_(torch.isinf(m), 0.0)
            weights = logits.sub_(m.index_select(0, rows)[..., None]).exp2_()
            total = torch.segment_reduce(
                weights.sum(-1), "sum", lengths=lengths, axis=0, unsafe=True
            )
            total = total.masked_fill_(total == 0, 1.0)
            if dropout_p > 0.0:
                keep = _dropout_keep(weights, dropout_p, seed, chunk)
                weights = weights.mul_(keep).div_(1.0 - dropout_p)
            out = torch.matmul(weights, vs.index_select(0, layout.tile_col[t0:t1]))
            out = torch.segment_reduce(out, "sum", lengths=lengths, axis=0, unsafe=True)
            out_seg[g0:g1] = out.div_(total[..., None])
            row_max[g0:g1], denom[g0:g1] = m, total
        ctx.save_for_backward(qs, ks, vs, row_max, denom, out_seg, bias_table)
        ctx.layout, ctx.scale, ctx.dropout_p, ctx.seed = layout, scale, dropout_p, seed
        return _from_segments(out_seg, layout)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        qs, ks, vs, row_max, denom, out_seg, bias_table = ctx.saved_tensors
        table = None if bias_table is None else bias_table * _LOG2E
        layout: ClusterSparseLayout = ctx.layout
        p = ctx.dropout_p
        need_q, need_k, need_v, need_table = ctx.needs_input_grad[:4]
        H = qs.shape[1]
        do_seg = _to_segments(grad_out, layout).div_(denom[..., None])
        # sum_j p_ij dP_ij = dO_i . o_i, also with dropout (o uses the dropped weights).
        delta = (do_seg * out_seg).sum(-1, keepdim=True)
        dq_seg = torch.zeros_like(qs) if need_q else None
        dk_seg = torch.zeros_like(ks) if need_k else None
        dv_seg = torch.zeros_like(vs) if need_v else None
        grad_table = torch.zeros_like(bias_table) if need_table else None
        for chunk, (g0, g1, t0, t1) in enumerate(layout.chunks(H)):
            rows, cols = layout.tile_row[t0:t1], layout.tile_col[t0:t1]
            logits = _tile_logits(qs, ks, table, layout, t0, t1)
            weights = logits.sub_(row_max.index_select(0, rows)[..., None]).exp2_()
            keep = _dropout_keep(weights, p, ctx.seed, chunk) if p > 0.0 else None
            do_tiles = do_seg.index_select(0, rows)
            if need_v:
                attn = weights if keep is None else weights * keep / (1.0 - p)
                dv_seg.index_add_(0, cols, torch.matmul(attn.transpose(-1, -2), do_tiles))
            if not (need_q or need_k or need_table):
                continue
            d_logits = torch.matmul(do_tiles, vs.index_select(0, cols).transpose(-1, -2))
            if keep is not None:
                d_logits = d_logits.mul_(keep).div_(1.0 - p)
            d_logits = d_logits.sub_(delta.index_select(0, rows)).mul_(weights)
            if need_q:
                dq = torch.matmul(d_logits, ks.index_select(0, cols))
                lengths = layout.tiles_per_row[g0:g1]
                dq_seg[g0:g1] = torch.segment_reduce(
                    dq, "sum", lengths=lengths, axis=0, unsafe=True
                )
            if need_k:
                dk_seg.index_add_(
                    0, cols, torch.matmul(d_logits.transpose(-1, -2), qs.index_select(0, rows))
                )
            if need_table:
                grad_table.index_add_(
                    0,
                    layout.tile_bucket[t0:t1].reshape(-1),
                    d_logits.permute(0, 2, 3, 1).reshape(-1, H),
                )
        grad_q = _from_segments(dq_seg.mul_(ctx.scale), layout) if need_q else None
        # qs carries scale * log2(e); dk needs q * scale.
        grad_k = _from_segments(dk_seg.mul_(math.log(2.0)), layout) if need_k else None
        grad_v = _from_segments(dv_seg, layout) if need_v else None
        return grad_q, grad_k, grad_v, grad_table, None, None, None


def cluster_sparse_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    layout: ClusterSparseLayout,
    bias_table: Tensor | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """Attention over the pairs of a :class:`ClusterSparseLayout`, computed tile by tile.

    .. math::
        \\mathbf{o}_i = \\sum_{j \\in \\mathcal{P}(i)} \\operatorname{softmax}_j\\Big(
        \\frac{\\mathbf{q}_i^\\top \\mathbf{k}_j}{\\sqrt{D}} + b_{\\mathrm{bucket}(i,j)}\\Big)
        \\mathbf{v}_j

    with :math:`\\mathcal{P}(i)` the keys of query :math:`i` in ``layout.pattern()``.
    The active tiles' query and key segments are gathered into ``[T, H, d_b, D]`` batches
    and multiplied as dense blocks; a query row's softmax spans all tiles of its tile row
    (max over tiles, then the sum of exponentials), and each tile's ``probs @ v`` is summed
    into the output. Work runs in chunks of whole tile rows of about :data:`CHUNK_ELEMENTS`
    scores; memory beyond q, k, v is one chunk plus ``O(S H)`` softmax statistics (the
    backward recomputes the chunk's scores). A query with no pair outputs zeros. Only
    first-order gradients.

    Args:
        q, k, v: ``[S, H, D]`` (``v`` may have its own last dimension).
        layout: the cluster-sparse layout of the sequence (same device as ``q``).
        bias_table: ``[num_buckets, H]`` per-head bias looked up with ``layout.tile_bucket``;
            needs a layout built with ``edge_bucket``.
        dropout_p: dropout on the attention probabilities (pass 0 in evaluation).

    Shapes:
        - **input:** q, k ``[S, H, D]``, v ``[S, H, D_v]``
        - **output:** ``[S, H, D_v]``
    """
    owner = "cluster_sparse_attention"
    S, H, D = check_qkv(owner, q, k, v)
    dropout_p = check_rate(owner, "dropout_p", dropout_p)
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
    return _ClusterSparseAttention.apply(q, k, v, bias_table, layout, 1.0 / math.sqrt(D), dropout_p)
