"""The cluster-sparse layout of a token pattern (TorchGT's elastic computation reformation).

:class:`ClusterSparseLayout` decides which pairs of a pattern the cluster-sparse kernels
compute and how (tiles, hub strips, narrow key columns) and plans the tile kernel's
chunks; both kernels, the tiles of
:func:`~lightgraph.functional.attention.cluster_sparse_attention` and
:func:`~lightgraph.functional.attention.flex.cluster_flex_attention`, read tokens in its
segment order.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

import copy
import math
from typing import Any, NamedTuple

import torch
from torch import Tensor

from lightgraph.utilities.checks import check_graph_edge_index, check_int

__all__ = [
    "CHUNK_ELEMENTS",
    "HUB_MIN_SHARE",
    "HUB_MIN_TILES",
    "NARROW_MAX_SHARE",
    "ClusterSparseLayout",
]

#: Scores (rows x heads x d_b x keys) the cluster-sparse kernel computes per step: about
#: 1 MiB of float32, so a chunk's intermediates stay in a CPU core's L2 cache.
CHUNK_ELEMENTS: int = 1 << 18

#: A token whose query row (key column) has pairs in at least ``max(HUB_MIN_TILES,
#: ceil(HUB_MIN_SHARE * G))`` tiles (``G`` tile segments) is a *hub*: its row (column) is
#: taken out of the tiles and computed as a strip (see :class:`ClusterSparseLayout`). A
#: strip costs about ``G d_b`` scores, a tile ``d_b^2``, so a hub whose tiles it leaves
#: empty saves ``d_b`` times more than its strip costs once ``HUB_MIN_SHARE`` of the
#: tiles are freed. Typical hub: the global token, whose row and column touch every tile.
HUB_MIN_TILES: int = 8

#: See :data:`HUB_MIN_TILES`.
HUB_MIN_SHARE: float = 0.25

#: A tile whose pairs use at most ``floor(NARROW_MAX_SHARE * d_b)`` key columns (8 of 16)
#: is *narrow*: the kernel computes those key columns one by one (``d_b`` scores each)
#: instead of the whole ``d_b x d_b`` tile. A random long-range edge makes a tile with one
#: pair: one column instead of 256 scores.
NARROW_MAX_SHARE: float = 0.5


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

    *Hubs* change how the pairs are computed, never which: after the rule, a query whose
    row has pairs in at least ``hub_min_tiles`` tiles (a global token's row has one in
    every tile column) is a hub query, and all its pairs move to the *row strip*
    (``[len(hub_rows), S]``, computed as one dense row per hub against every key); then a
    key whose column (among the other queries) has pairs in at least ``hub_min_tiles``
    tiles is a hub key, and its pairs move to the *column strip* (``[S, len(hub_cols)]``,
    appended as extra keys to every tile row). Tiles left without a pair are dropped.

    *Narrow tiles* change the computation too, never the pairs: a tile whose pairs use at
    most ``narrow_max_keys`` of its ``d_b`` key columns (a random long-range edge makes a
    tile with one pair) is computed as those *key columns* only -- ``d_b`` scores each
    instead of ``d_b^2`` for the tile; the other tiles are *wide*.

    The kernel computes the tile rows in *row groups*: rows with the same count ``n`` of
    wide tiles, whose ``n`` key segments, then their key columns (padded to the most in
    the chunk), then the hub keys sit side by side, so a query's softmax runs over one
    contiguous row of ``W = n d_b + c + len(hub_cols)`` scores.

    Args:
        edge_index: ``[2, E]`` pattern, row 0 the key (source) token, row 1 the query.
        num_tokens: sequence length ``S``.
        num_clusters: number of clusters :math:`k`, in ``[1, S]``.
        block_size: tile side :math:`d_b` (``>= 1``).
        threshold: transfer threshold :math:`\\beta_{thre}` in ``[0, 1]``.
        edge_bucket: ``[E]`` bias bucket of every entry, or ``None`` for no bias.
        far_bucket: bucket of the pairs a transfer adds.
        hub_min_tiles: tiles from which a token is a hub; ``None``: ``max(HUB_MIN_TILES,
            ceil(HUB_MIN_SHARE * G))`` (8, or a quarter of the ``G`` tile segments);
            0: no hubs.
        narrow_max_keys: key columns up to which a tile is narrow; ``None``:
            ``max(1, floor(NARROW_MAX_SHARE * d_b))`` (8 of 16); 0: no narrow tiles.

    Attributes:
        cluster_ptr: ``[k + 1]`` first token of every cluster, then ``S``.
        block_entries: ``[k, k]`` :math:`n_{ab}` (query cluster ``a``, key cluster ``b``).
        cluster_density: ``[k, k]`` float64 :math:`\\beta_C`.
        global_density: :math:`\\beta_G`.
        transferred: ``[k, k]`` bool, the blocks that were transferred.
        num_tiles_kept: exact (masked) tiles of the rule; ``num_tiles_transferred``: dense
            tiles of the rule (before the hubs leave; :attr:`num_tiles` is what is computed).
        num_entries_added: pairs the dense tiles add; ``num_entries_dropped``: entries of
            transferred blocks outside the chosen tiles; ``num_entries``: pairs attended.
        segment_token: ``[G, d_b]`` tokens of every tile row/column segment (``S`` pads).
        tile_row, tile_col: ``[T]`` segment of every computed tile, sorted row-major.
        tile_dense: ``[T]`` bool, the tiles a transfer made dense.
        tile_mask: ``[T, d_b, d_b]`` bool, which pairs of a tile attend (hub pairs not).
        tile_bucket: ``[T, d_b, d_b]`` bias bucket of every pair (``None`` without buckets).
        hub_threshold: the ``hub_min_tiles`` in use.
        hub_rows: ``[n_r]`` hub queries; ``row_strip_mask`` ``[n_r, S]`` bool their pairs,
            ``row_strip_bucket`` ``[n_r, S]`` their buckets (``None`` without buckets).
        hub_cols: ``[n_c]`` hub keys; ``col_strip_mask`` ``[S, n_c]`` bool their pairs with
            the other queries, ``col_strip_bucket`` ``[S, n_c]``.
        narrow_threshold: the ``narrow_max_keys`` in use; ``tile_narrow`` ``[T]`` bool, the
            narrow tiles.
        keycol_row, keycol_token: ``[C]`` tile row and key token of every key column
            (sorted by row); ``keycol_mask`` ``[C, d_b]`` bool, the row's queries that
            attend it; ``keycol_bucket`` ``[C, d_b]`` (``None`` without buckets).
        num_key_columns: ``C``; ``num_row_groups``: row groups; ``num_rows_computed``: tile
            rows the kernel computes.
        num_scores: scores the kernel computes per head (the padding of key columns to a
            chunk's most not counted): ``d_b^2`` per wide tile, ``d_b`` per key column,
            ``G d_b`` per hub query and ``d_b`` per hub key and computed row.
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
        hub_min_tiles: int | None = None,
        narrow_max_keys: int | None = None,
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
        if hub_min_tiles is not None:
            check_int(owner, "hub_min_tiles", hub_min_tiles, 0)
        if narrow_max_keys is not None:
            check_int(owner, "narrow_max_keys", narrow_max_keys, 0)
        self.num_tokens, self.num_clusters, self.block_size = num_tokens, num_clusters, block_size
        self.threshold, self.far_bucket = float(threshold), far_bucket
        self.hub_min_tiles, self.narrow_max_keys = hub_min_tiles, narrow_max_keys
        self._plans: dict[tuple[int, torch.dtype, int], list[_Chunk]] = {}
        self._flex: dict[tuple[int, int], Any] = {}  # flex.py's structures per block size
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
        self._pad_places = (seg_token.reshape(-1) == S).nonzero().squeeze(1)
        self.num_tiles_transferred = int(dense.numel())
        self.num_tiles_kept = T - self.num_tiles_transferred
        self.num_entries_dropped = int((~keep).sum())
        in_dense = int((keep & t_transfer[inverse]).sum())
        dense_area = int((rows_ok.sum(1) * cols_ok.sum(1)).sum())
        self.num_entries_added = dense_area - in_dense
        self.num_entries = E - self.num_entries_dropped + self.num_entries_added
        self._take_hubs()
        self._take_key_columns()
        self.tiles_per_row = torch.bincount(self.tile_row[~self.tile_narrow], minlength=G)
        self._build_row_groups()

    def _take_hubs(self) -> None:
        """Move the pairs of hub queries and hub keys out of the tiles into the strips."""
        S = self.num_tokens
        G = self.segment_token.shape[0]
        device = self.tile_mask.device
        hub_min = self.hub_min_tiles
        if hub_min is None:
            hub_min = max(HUB_MIN_TILES, math.ceil(HUB_MIN_SHARE * G))
        self.hub_threshold = hub_min
        mask, tb = self.tile_mask, self.tile_bucket
        q_tok = self.segment_token[self.tile_row]  # [T, d_b] token of every query line
        k_tok = self.segment_token[self.tile_col]  # [T, d_b] token of every key line
        token_pad = torch.full((S + 1,), -1, dtype=torch.long, device=device)

        def hubs(lines: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
            """Tokens with pairs in at least ``hub_min`` tiles, and every token's hub index."""
            touched = torch.bincount(tokens[lines], minlength=S + 1)[:S]
            found = (touched >= hub_min).nonzero().squeeze(1) if hub_min > 0 else touched[:0]
            index = token_pad.clone()
            index[found] = torch.arange(found.numel(), device=device)
            return found, index

        def strip(shape: tuple[int, int], at: tuple[Tensor, Tensor], t, i, j):
            strip_mask = torch.zeros(shape, dtype=torch.bool, device=device)
            strip_mask[at] = True
            strip_bucket = None
            if tb is not None:
                strip_bucket = torch.full(shape, self.far_bucket, dtype=torch.long, device=device)
                strip_bucket[at] = tb[t, i, j]
            return strip_mask, strip_bucket

        # Hub queries take their whole row (hub keys included).
        self.hub_rows, row_index = hubs(mask.any(2), q_tok)
        hub_line = row_index[q_tok] >= 0  # [T, d_b] query lines of hub queries
        t, i, j = (mask & hub_line[:, :, None]).nonzero().unbind(1)
        at = (row_index[q_tok[t, i]], k_tok[t, j])
        self.row_strip_mask, self.row_strip_bucket = strip((self.hub_rows.numel(), S), at, t, i, j)
        mask = mask & ~hub_line[:, :, None]
        # Hub keys take their column among the other queries.
        self.hub_cols, col_index = hubs(mask.any(1), k_tok)
        hub_line = col_index[k_tok] >= 0  # [T, d_b] key lines of hub keys
        t, i, j = (mask & hub_line[:, None, :]).nonzero().unbind(1)
        at = (q_tok[t, i], col_index[k_tok[t, j]])
        self.col_strip_mask, self.col_strip_bucket = strip((S, self.hub_cols.numel()), at, t, i, j)
        mask = mask & ~hub_line[:, None, :]
        # Tiles left without a pair are not computed.
        kept = mask.flatten(1).any(1)
        self.tile_row, self.tile_col = self.tile_row[kept], self.tile_col[kept]
        self.tile_dense, self.tile_mask = self.tile_dense[kept], mask[kept]
        if tb is not None:
            self.tile_bucket = tb[kept]

    def _take_key_columns(self) -> None:
        """Mark the narrow tiles and list their key columns."""
        db = self.block_size
        most = self.narrow_max_keys
        if most is None:
            most = max(1, math.floor(NARROW_MAX_SHARE * db))
        self.narrow_threshold = most
        used = self.tile_mask.any(1)  # [T, d_b] key columns with a pair
        self.tile_narrow = used.sum(1) <= most
        t, j = (used & self.tile_narrow[:, None]).nonzero().unbind(1)  # row-major: by row
        self.keycol_row = self.tile_row[t]
        self.keycol_token = self.segment_token[self.tile_col[t], j]
        self.keycol_mask = self.tile_mask[t, :, j]  # [C, d_b]
        self.keycol_bucket = None if self.tile_bucket is None else self.tile_bucket[t, :, j]

    def _build_row_groups(self) -> None:
        """The tile rows the kernel computes, grouped by their wide-tile count ``n``.

        A row's keys are its ``n`` wide tiles' key segments side by side, then its key
        columns (padded per chunk), then the hub keys; one softmax runs over all of them.
        Inside a group, rows are sorted by their key-column count.
        """
        db = self.block_size
        G = self.segment_token.shape[0]
        device = self.tile_mask.device
        n_c = self.hub_cols.numel()
        counts = self.tiles_per_row
        columns = torch.bincount(self.keycol_row, minlength=G)
        active = (counts > 0) | (columns > 0)
        hub_mask = hub_bucket = None
        if n_c:
            pad = torch.zeros(1, n_c, dtype=torch.bool, device=device)
            hub_mask = torch.cat([self.col_strip_mask, pad])[self.segment_token]  # [G, d_b, n_c]
            active |= hub_mask.flatten(1).any(1)
            if self.col_strip_bucket is not None:
                hub_bucket = torch.cat([self.col_strip_bucket, pad.long()])[self.segment_token]
        rows = active.nonzero().squeeze(1)
        rows = rows[torch.argsort(columns[rows], stable=True)]
        rows = rows[torch.argsort(counts[rows], stable=True)]  # by n, then by columns
        sizes, num = torch.unique_consecutive(counts[rows], return_counts=True)
        wide = ~self.tile_narrow
        wide_col, wide_mask = self.tile_col[wide], self.tile_mask[wide]
        wide_bucket = None if self.tile_bucket is None else self.tile_bucket[wide]
        first_tile = torch.cumsum(counts, 0) - counts
        first_column = torch.cumsum(columns, 0) - columns
        self._row_groups: list[dict[str, Any]] = []
        self.num_rows_computed = rows.numel()
        start = 0
        for n, R in zip(sizes.tolist(), num.tolist(), strict=True):
            g_rows = rows[start : start + R]
            start += R
            ids = (first_tile[g_rows][:, None] + torch.arange(n, device=device)).reshape(-1)
            mask = wide_mask[ids].view(R, n, db, db).transpose(1, 2).reshape(R, db, n * db)
            bucket = None
            if wide_bucket is not None:
                bucket = wide_bucket[ids].view(R, n, db, db).transpose(1, 2)
                bucket = bucket.reshape(R, db, n * db)
            self._row_groups.append(
                {
                    "n": n,
                    "rows": g_rows,
                    "cols": wide_col[ids],
                    "mask": mask,
                    "bucket": bucket,
                    "hub_mask": None if hub_mask is None else hub_mask[g_rows],
                    "hub_bucket": None if hub_bucket is None else hub_bucket[g_rows],
                    "columns": columns[g_rows],
                    "first_column": first_column[g_rows],
                }
            )
        self.num_row_groups = len(self._row_groups)
        # Key positions of every hub query's row strip in the [G d_b] segment order.
        pad = torch.zeros(self.hub_rows.numel(), 1, dtype=torch.bool, device=device)
        self._row_strip_blocked = ~torch.cat([self.row_strip_mask, pad], 1)[
            :, self.segment_token.reshape(-1)
        ]
        self._row_strip_bucket = None
        if self.row_strip_bucket is not None:
            b = torch.cat([self.row_strip_bucket, pad.long()], 1)
            self._row_strip_bucket = b[:, self.segment_token.reshape(-1)]
        self.num_key_columns = self.keycol_token.numel()
        self.num_scores = (
            int(wide.sum()) * db * db
            + self.num_key_columns * db
            + self.hub_rows.numel() * G * db
            + n_c * db * self.num_rows_computed
        )

    def _chunk(self, group: dict[str, Any], a: int, b: int, dtype: torch.dtype) -> _Chunk:
        """Rows ``a:b`` of a row group as a chunk: key columns padded to the chunk's most."""
        n = group["n"]
        device = group["rows"].device
        rows = group["rows"][a:b]
        parts, buckets = [group["mask"][a:b]], [group["bucket"]]
        if group["bucket"] is not None:
            buckets = [group["bucket"][a:b]]
        width = int(group["columns"][a:b].max()) if b > a else 0
        key_place = key_pad = None
        if width:
            step = torch.arange(width, device=device)
            valid = step < group["columns"][a:b, None]
            at = torch.where(valid, group["first_column"][a:b, None] + step, 0)
            key_place = torch.where(valid, self.token_position[self.keycol_token[at]], 0)
            if not bool(valid.all()):
                key_pad = (~valid).reshape(-1).nonzero().squeeze(1)  # zeroed when gathered
            parts.append((self.keycol_mask[at] & valid[..., None]).transpose(1, 2))
            if self.keycol_bucket is not None:
                buckets.append(self.keycol_bucket[at].transpose(1, 2))
        if group["hub_mask"] is not None:
            parts.append(group["hub_mask"][a:b])
            if group["hub_bucket"] is not None:
                buckets.append(group["hub_bucket"][a:b])
        attend = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
        mask = None
        if not bool(attend.all()):
            mask = torch.zeros(attend.shape, dtype=dtype, device=device)
            mask = mask.masked_fill_(~attend, float("-inf"))
        bucket = None
        if self.tile_bucket is not None:
            bucket = torch.cat(buckets, dim=2) if len(buckets) > 1 else buckets[0]
            if self.max_bucket < 2**31:
                bucket = bucket.int()
        return _Chunk(rows, group["cols"][a * n : b * n], key_place, key_pad, mask, bucket)

    def plan(self, num_heads: int, dtype: torch.dtype) -> list[_Chunk]:
        """The kernel's chunks for ``num_heads`` heads: runs of rows of one row group of
        about :data:`CHUNK_ELEMENTS` scores each (a row longer than that is one chunk),
        with their additive masks in ``dtype``. Cached per head count, dtype and chunk
        size."""
        key = (num_heads, dtype, CHUNK_ELEMENTS)
        cached = self._plans.get(key)
        if cached is None:
            cached = []
            db, n_c = self.block_size, self.hub_cols.numel()
            for group in self._row_groups:
                R, columns, n = group["rows"].numel(), group["columns"].tolist(), group["n"]

                def rows_for(width: int, n: int = n) -> int:
                    return max(1, CHUNK_ELEMENTS // (num_heads * db * (n * db + width + n_c)))

                a = 0
                while a < R:
                    b = min(R, a + rows_for(columns[a]))
                    b = min(b, a + rows_for(columns[b - 1]))  # rows are sorted by columns
                    cached.append(self._chunk(group, a, b, dtype))
                    a = b
            self._plans[key] = cached
        return cached

    @property
    def num_tiles(self) -> int:
        """Tiles ``T``: the rule's exact and transferred tiles, less those the hub strips
        emptied (wide and narrow)."""
        return self.tile_row.numel()

    @property
    def tile_fill(self) -> float:
        """Share of the scores the kernel computes that are attended pairs:
        ``num_entries / num_scores`` (1.0 for a layout without scores).

        ``num_scores`` counts ``block_size ** 2`` scores per wide tile, ``block_size``
        per key column of the narrow tiles, and the hub strips (``G d_b`` per hub query,
        ``d_b`` per hub key and computed tile row), so ``1 / tile_fill`` is the kernel's
        work per attended pair; ``kind="auto"`` of
        :func:`~lightgraph.functional.attention.attend` compares it with
        :data:`~lightgraph.functional.attention.AUTO_MIN_TILE_FILL`.
        """
        if self.num_scores == 0:
            return 1.0
        return self.num_entries / self.num_scores

    def pattern(self) -> tuple[Tensor, Tensor | None]:
        """The pairs the layout attends (tiles and hub strips).

        Returns:
            ``edge_index`` ``[2, E']`` (row 0 key, row 1 query; sorted by query, then key)
            and the ``[E']`` bucket of every pair (``None`` for a layout without buckets).
        """
        t, i, j = self.tile_mask.nonzero().unbind(1)
        r, rk = self.row_strip_mask.nonzero().unbind(1)
        cq, c = self.col_strip_mask.nonzero().unbind(1)
        query = torch.cat([self.segment_token[self.tile_row[t], i], self.hub_rows[r], cq])
        key = torch.cat([self.segment_token[self.tile_col[t], j], rk, self.hub_cols[c]])
        order = torch.argsort(query * self.num_tokens + key)
        edge_index = torch.stack([key[order], query[order]])
        bucket = None
        if self.tile_bucket is not None:
            bucket = torch.cat(
                [
                    self.tile_bucket[t, i, j],
                    self.row_strip_bucket[r, rk],
                    self.col_strip_bucket[cq, c],
                ]
            )[order]
        return edge_index, bucket

    def to(self, device: torch.device | str) -> ClusterSparseLayout:
        """A copy of the layout on ``device``."""
        out = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                setattr(out, name, value.to(device))
        out._row_groups = [
            {key: x.to(device) if isinstance(x, Tensor) else x for key, x in group.items()}
            for group in self._row_groups
        ]
        out._plans, out._flex = {}, {}
        return out

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_tokens={self.num_tokens}, num_clusters={self.num_clusters}, "
            f"block_size={self.block_size}, threshold={self.threshold}, "
            f"tiles_kept={self.num_tiles_kept}, tiles_transferred={self.num_tiles_transferred}, "
            f"entries_added={self.num_entries_added}, entries_dropped={self.num_entries_dropped})"
        )


class _Chunk(NamedTuple):
    """Rows ``[R]`` of one row group, their wide tiles' key segments ``[R n]``, their key
    columns ``[R, c]`` (places ``g d_b + i`` in the segment order; ``None``: no columns)
    and the padded ones among those ``R c`` (``None``: none), the additive mask
    ``[R, d_b, W]`` (0 where a pair attends, ``-inf`` elsewhere; ``None``: every pair
    attends) and the buckets ``[R, d_b, W]`` (``None``: no bias)."""

    rows: Tensor
    cols: Tensor
    key_place: Tensor | None
    key_pad: Tensor | None
    mask: Tensor | None
    bucket: Tensor | None


def _to_segments(x: Tensor, layout: ClusterSparseLayout) -> Tensor:
    """``[S, H, D]`` -> head-major ``[H, G, d_b, D]``: place ``(g, i)`` holds token
    ``segment_token[g, i]``, padded places are zero."""
    S, H, D = x.shape
    G, db = layout.segment_token.shape
    # Padding reads token S - 1 and is zeroed after: cheaper than concatenating a zero row.
    index = layout.segment_token.reshape(-1).clamp(max=S - 1)
    seg = x.index_select(0, index)  # index_select: much faster than x[index]
    seg = seg.view(G, db, H, D).permute(2, 0, 1, 3).contiguous()
    if layout._pad_places.numel():
        seg.view(H, G * db, D)[:, layout._pad_places] = 0
    return seg


def _from_segments_t(x: Tensor, layout: ClusterSparseLayout) -> Tensor:
    """Transposed segments ``[G, H, D, d_b]`` -> ``[S, H, D]``."""
    G, H, D, db = x.shape
    return x.permute(0, 3, 1, 2).reshape(G * db, H, D).index_select(0, layout.token_position)


def _strip_slices(layout: ClusterSparseLayout, num_heads: int) -> list[slice]:
    """Runs of hub queries of about :data:`CHUNK_ELEMENTS` scores each."""
    n_r, width = layout.hub_rows.numel(), layout.segment_token.numel()
    step = max(1, CHUNK_ELEMENTS // (num_heads * width))
    return [slice(a, min(n_r, a + step)) for a in range(0, n_r, step)]
