"""ClusterSparseLayout and cluster_sparse_attention: the layout rule, exactness, gradients,
and a default cluster count that depends on the configuration only."""

from __future__ import annotations

import builtins
import io
import math
import os

import pytest
import torch

import lightgraph.functional.attention.cluster_sparse_layout as cluster_sparse_layout
from lightgraph.functional.attention import (
    CLUSTER_CACHE_DIVISOR,
    NOMINAL_CACHE_BYTES,
    AttentionGraph,
    ClusterSparseLayout,
    attend,
    cluster_sparse_attention,
    default_num_clusters,
    raw_attention,
    sparse_attention,
)
from tests.functional.attention.common import bad_input

DT = torch.float64


def random_pattern(S: int, num_edges: int, seed: int = 0) -> torch.Tensor:
    """Coalesced, shuffled; self-loops on all tokens but the last, which has no entry."""
    gen = torch.Generator().manual_seed(seed)
    rand = torch.randint(0, S - 1, (2, num_edges), generator=gen)
    ei = torch.cat([rand, torch.arange(S - 1).repeat(2, 1)], dim=1)
    key = torch.unique(ei[1] * S + ei[0])
    ei = torch.stack([key % S, key // S])
    return ei[:, torch.randperm(ei.shape[1], generator=gen)]


def qkv(S: int, H: int, D: int, seed: int = 0, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    out = [torch.randn(S, H, D, generator=gen, dtype=DT) for _ in range(3)]
    out[0] = out[0] * scale
    return [t.requires_grad_() for t in out]


def assert_close(a, b, tol=1e-12):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def brute_force_pattern(ei, bucket, S, k, db, threshold, far):
    """The layout rule with Python loops: {(query, key): bucket}, plus (added, dropped)."""
    entries = {(int(i), int(j)): int(b) for j, i, b in zip(ei[0], ei[1], bucket, strict=True)}
    sizes = [S // k + (1 if a < S % k else 0) for a in range(k)]
    starts = [sum(sizes[:a]) for a in range(k)]
    kept, added, dropped = {}, 0, 0
    for a in range(k):
        for b in range(k):
            r0, r1 = starts[a], starts[a] + sizes[a]
            c0, c1 = starts[b], starts[b] + sizes[b]
            block = [(i, j) for (i, j) in entries if r0 <= i < r1 and c0 <= j < c1]
            beta = len(block) / (sizes[a] * sizes[b])
            if a == b or not block or beta >= threshold:
                kept.update({p: entries[p] for p in block})
                continue
            tiles: dict[tuple[int, int], int] = {}
            for i, j in block:
                t = ((i - r0) // db, (j - c0) // db)
                tiles[t] = tiles.get(t, 0) + 1
            m = math.ceil(len(block) / db**2)
            chosen = sorted(tiles, key=lambda t: (-tiles[t], t))[:m]
            dropped += len(block) - sum(tiles[t] for t in chosen)
            for ti, tj in chosen:
                for i in range(r0 + ti * db, min(r0 + (ti + 1) * db, r1)):
                    for j in range(c0 + tj * db, min(c0 + (tj + 1) * db, c1)):
                        added += (i, j) not in entries
                        kept[(i, j)] = entries.get((i, j), far)
    return kept, added, dropped


def as_dict(layout):
    ei, bucket = layout.pattern()
    return {(int(i), int(j)): int(b) for j, i, b in zip(ei[0], ei[1], bucket, strict=True)}


def masked_reference(q, k, v, layout, table):
    """Raw attention masked with ``layout.pattern()``, bias ``table[bucket]`` on every pair."""
    S, H, _ = q.shape
    ei, bucket = layout.pattern()
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[ei[1], ei[0]] = True
    E = ei.shape[1]
    index = (torch.arange(H)[:, None].expand(H, E), ei[1].expand(H, E), ei[0].expand(H, E))
    bias = torch.zeros(H, S, S, dtype=DT).index_put(index, table[bucket].t())
    return raw_attention(q, k, v, bias=bias, mask=mask)


@pytest.fixture(params=["one_chunk", "small_chunks"])
def chunking(request, monkeypatch):
    """The kernel in one chunk, and in chunks of (about) one tile row each."""
    if request.param == "small_chunks":
        monkeypatch.setattr(cluster_sparse_layout, "CHUNK_ELEMENTS", 1)
    return request.param


@pytest.mark.parametrize("num_clusters,block_size", [(1, 1), (2, 3), (3, 4), (5, 16), (7, 2)])
def test_threshold_zero_equals_sparse(num_clusters, block_size, chunking) -> None:
    S, H, D = 37, 2, 3  # 37 is divisible by neither k nor d_b
    ei = random_pattern(S, 160)
    bucket = torch.randint(0, 6, (ei.shape[1],), generator=torch.Generator().manual_seed(1))
    table = torch.randn(6, H, dtype=DT, requires_grad=True)
    layout = ClusterSparseLayout(ei, S, num_clusters, block_size, 0.0, bucket, far_bucket=5)
    assert layout.num_tiles_transferred == layout.num_entries_added == 0
    assert layout.num_entries_dropped == 0 and layout.num_entries == ei.shape[1]
    q, k, v = qkv(S, H, D)
    out = cluster_sparse_attention(q, k, v, layout, table)
    ref = sparse_attention(q, k, v, ei, table[bucket])
    assert_close(out, ref)
    assert (out[S - 1] == 0).all()
    grad = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (q, k, v, table), grad),
        torch.autograd.grad(ref, (q, k, v, table), grad),
        strict=True,
    ):
        assert_close(g, w)


def test_huge_logits_stay_finite() -> None:
    S, H, D = 20, 2, 4
    ei = random_pattern(S, 60, seed=2)
    q, k, v = qkv(S, H, D, scale=1e4)
    layout = ClusterSparseLayout(ei, S, 3, 4)
    out = cluster_sparse_attention(q, k, v, layout)
    assert torch.isfinite(out).all()
    assert_close(out, sparse_attention(q, k, v, ei), tol=1e-10)
    assert all(torch.isfinite(g).all() for g in torch.autograd.grad(out.sum(), (q, k, v)))


# Tiny case: S = 8, k = 2 (tokens 0-3 | 4-7), d_b = 2. Pairs are (query, key).
TINY_SELF = [(i, i) for i in range(8)]
TINY_DIAG = [(1, 0), (2, 3)]  # diagonal block (0, 0): always exact
# Block (0, 1), queries 0-3 x keys 4-7, five entries, beta_C = 5/16. Its 2x2 tiles:
# A = q{0,1} x k{4,5}: 1 entry, B = q{0,1} x k{6,7}: 2, C = q{2,3} x k{4,5}: 1, D = q{2,3} x k{6,7}: 1.
TINY_SPARSE = [(0, 4), (0, 6), (1, 7), (3, 5), (2, 6)]
# Block (1, 0), queries 4-7 x keys 0-3, eight entries: beta_C = 1/2.
TINY_HALF = [(4, 0), (4, 1), (5, 0), (5, 1), (6, 2), (7, 3), (6, 3), (7, 2)]
TINY = TINY_SELF + TINY_DIAG + TINY_SPARSE + TINY_HALF


def tiny_layout(threshold):
    pairs = torch.tensor(TINY)
    ei = torch.stack([pairs[:, 1], pairs[:, 0]])
    bucket = torch.arange(1, len(TINY) + 1)
    return ClusterSparseLayout(ei, 8, 2, 2, threshold, bucket, far_bucket=99), ei, bucket


def test_tiny_case_by_hand() -> None:
    layout, ei, bucket = tiny_layout(0.5)
    # Block (0, 1) (5/16 < 0.5) is transferred: m = ceil(5 / 4) = 2 tiles, B (2 entries) and
    # A (first of the 1-entry ties in row-major order) become dense; C's (3, 5) and D's
    # (2, 6) are dropped. Block (1, 0) (1/2 >= 0.5) and the diagonal blocks stay exact.
    dense_a = [(i, j) for i in (0, 1) for j in (4, 5)]
    dense_b = [(i, j) for i in (0, 1) for j in (6, 7)]
    expected_pairs = sorted(
        set(TINY_SELF + TINY_DIAG + TINY_HALF + dense_a + dense_b + [(0, 4), (0, 6), (1, 7)])
    )
    assert expected_pairs == sorted(
        [(i, i) for i in range(8)]
        + [(1, 0), (2, 3)]
        + [(0, 4), (0, 5), (1, 4), (1, 5), (0, 6), (0, 7), (1, 6), (1, 7)]
        + [(4, 0), (4, 1), (5, 0), (5, 1), (6, 2), (6, 3), (7, 2), (7, 3)]
    )
    original = {p: b for p, b in zip(TINY, range(1, len(TINY) + 1), strict=True)}
    expected = {p: original.get(p, 99) for p in expected_pairs}
    assert as_dict(layout) == expected
    pattern, _ = layout.pattern()
    key = pattern[1] * 8 + pattern[0]
    assert (key[1:] > key[:-1]).all()  # sorted by query, then key
    assert layout.transferred.tolist() == [[False, True], [False, False]]
    assert layout.block_entries.tolist() == [[6, 5], [8, 4]]
    assert layout.cluster_density.tolist() == [[6 / 16, 5 / 16], [8 / 16, 4 / 16]]
    assert layout.global_density == len(TINY) / 64
    assert (layout.num_tiles_transferred, layout.num_entries_added) == (2, 5)
    assert layout.num_entries_dropped == 2
    assert layout.num_entries == len(TINY) - 2 + 5
    # Exact tiles: the two diagonal tiles of each of the blocks (0, 0), (1, 1) and (1, 0).
    assert layout.num_tiles_kept == 6
    # With a threshold at or below 5/16 nothing moves.
    low, ei, bucket = tiny_layout(0.3)
    assert low.num_tiles_transferred == 0
    assert as_dict(low) == original


@pytest.mark.parametrize("threshold", [0.05, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("num_clusters,block_size", [(3, 3), (4, 2), (2, 5)])
def test_pattern_matches_brute_force(threshold, num_clusters, block_size) -> None:
    S = 29
    ei = random_pattern(S, 90, seed=num_clusters)
    bucket = torch.randint(0, 50, (ei.shape[1],), generator=torch.Generator().manual_seed(0))
    layout = ClusterSparseLayout(ei, S, num_clusters, block_size, threshold, bucket, far_bucket=77)
    expected, added, dropped = brute_force_pattern(
        ei, bucket, S, num_clusters, block_size, threshold, 77
    )
    assert as_dict(layout) == expected
    if threshold >= 0.2:
        assert layout.num_tiles_transferred > 0 and layout.num_entries_dropped > 0
    assert (layout.num_entries_added, layout.num_entries_dropped) == (added, dropped)
    assert layout.num_entries == len(expected)


@pytest.mark.parametrize("threshold", [0.1, 0.4, 1.0])
def test_transferred_layout_equals_masked_dense(threshold, chunking) -> None:
    S, H, D = 26, 3, 4
    ei = random_pattern(S, 90, seed=4)
    bucket = torch.randint(0, 5, (ei.shape[1],), generator=torch.Generator().manual_seed(3))
    table = torch.randn(6, H, dtype=DT, requires_grad=True)
    layout = ClusterSparseLayout(ei, S, 3, 4, threshold, bucket, far_bucket=5)
    assert layout.num_tiles_transferred > 0 and layout.num_entries_added > 0
    q, k, v = qkv(S, H, D, seed=5)
    out = cluster_sparse_attention(q, k, v, layout, table)
    ref = masked_reference(q, k, v, layout, table)
    assert_close(out, ref)
    grad = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (q, k, v, table), grad),
        torch.autograd.grad(ref, (q, k, v, table), grad),
        strict=True,
    ):
        assert_close(g, w)


def test_gradcheck_with_dropout(chunking) -> None:
    S, H, D = 9, 1, 2
    ei = random_pattern(S, 25, seed=6)
    bucket = torch.randint(0, 3, (ei.shape[1],), generator=torch.Generator().manual_seed(0))
    layout = ClusterSparseLayout(ei, S, 2, 2, 0.6, bucket, far_bucket=2)
    q, k, v = qkv(S, H, D, seed=7)
    table = torch.randn(3, H, dtype=DT, requires_grad=True)

    def fn(q, k, v, table):
        torch.manual_seed(0)  # the same dropout mask on every evaluation
        return cluster_sparse_attention(q, k, v, layout, table, dropout_p=0.25)

    assert torch.autograd.gradcheck(fn, (q, k, v, table), fast_mode=True)


def test_attend_builds_and_caches_the_layout() -> None:
    S, H, D = 30, 2, 3
    ei = random_pattern(S, 70, seed=8)
    graph = AttentionGraph(S, ei)
    q, k, v = qkv(S, H, D)
    out = attend(q, k, v, graph, "cluster_sparse", num_clusters=3, block_size=4, threshold=0.0)
    assert_close(out, sparse_attention(q, k, v, ei))
    layout = graph.cluster_layout(3, 4, 0.0)
    assert graph.cluster_layout(3, 4, 0.0) is layout
    attend(q, k, v, graph, "cluster_sparse", num_clusters=3, block_size=4, threshold=0.5)
    assert graph.cluster_layout(3, 4, 0.5).threshold == 0.5
    # Without num_clusters the thesis rule picks k (at most S).
    assert torch.isfinite(attend(q, k, v, graph, "cluster_sparse")).all()


def test_layout_moves() -> None:
    layout, _, _ = tiny_layout(0.5)
    before = as_dict(layout)
    assert as_dict(layout.to("cpu")) == before


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"block_size": 0}, "`block_size` >= 1"),
        ({"threshold": -0.1}, r"`threshold` in \[0, 1\]"),
        ({"threshold": 1.5}, r"`threshold` in \[0, 1\]"),
        ({"num_clusters": 9}, r"`num_clusters` in \[1, num_tokens=8\]"),
        ({"num_clusters": 0}, r"`num_clusters` in \[1, num_tokens=8\]"),
        ({"edge_bucket": torch.zeros(3, dtype=torch.long)}, "`edge_bucket` of shape"),
        ({"far_bucket": -1}, "`far_bucket` >= 0"),
        (
            {"edge_index": torch.tensor([[0, 8], [0, 1]])},
            r"token ids in `edge_index` to lie in \[0, 7\] \(num_tokens = 8\)",
        ),
        ({"edge_index": torch.tensor([[0, 0], [1, 1]])}, "without duplicate pairs"),
    ],
)
def test_layout_rejects_bad_arguments(kwargs, match) -> None:
    args = dict(edge_index=torch.arange(8).repeat(2, 1), num_tokens=8, num_clusters=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ClusterSparseLayout(**args)


def test_attention_rejects_mismatched_layout_and_table() -> None:
    layout, _, _ = tiny_layout(0.5)
    q, k, v = qkv(8, 2, 3)
    with pytest.raises(ValueError, match="built for S=9 tokens"):
        cluster_sparse_attention(*qkv(9, 2, 3), layout)
    with pytest.raises(ValueError, match="uses bucket 99"):
        cluster_sparse_attention(q, k, v, layout, torch.zeros(10, 2, dtype=DT))
    plain = ClusterSparseLayout(torch.arange(8).repeat(2, 1), 8, 2)
    with pytest.raises(ValueError, match="has no buckets"):
        cluster_sparse_attention(q, k, v, plain, torch.zeros(3, 2, dtype=DT))
    with pytest.raises(ValueError, match="to be a ClusterSparseLayout"):
        cluster_sparse_attention(q, k, v, "layout")


def test_default_num_clusters() -> None:
    assert default_num_clusters(64, cache_bytes=6 * 2**20) == 8  # the thesis's RTX 3090 fit
    assert default_num_clusters(64, cache_bytes=CLUSTER_CACHE_DIVISOR * 64 * 25) == 5
    assert default_num_clusters(4096, cache_bytes=1024) == 1  # clamped
    assert default_num_clusters(64) >= 1
    bad_input(lambda q, k, v, ei: default_num_clusters(0), "`hidden_channels` >= 1")


def _refuse_machine_reads(monkeypatch) -> None:
    """Any attempt to read a file or query the machine fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"the cluster count read the machine: {args!r}")

    for module, name in (
        (builtins, "open"),
        (io, "open"),
        (os, "open"),
        (os, "sysconf"),
        (os, "listdir"),
        (os, "scandir"),
    ):
        monkeypatch.setattr(module, name, refuse)


def test_default_cluster_count_is_the_same_on_every_machine(monkeypatch) -> None:
    _refuse_machine_reads(monkeypatch)
    assert NOMINAL_CACHE_BYTES == 6 * 2**20
    # k = isqrt(6 MiB / (1536 d)): the thesis's 8 at d = 64, then 5 (GT) and 2 (large).
    assert [default_num_clusters(d) for d in (64, 128, 768)] == [8, 5, 2]
    assert default_num_clusters(64) == default_num_clusters(64, NOMINAL_CACHE_BYTES)
    # A given configuration (S = 50 tokens, H * D = 8 * 8 = 64) gets one fixed layout.
    S, H, D = 50, 8, 8
    ring = torch.arange(S)
    ei = torch.cat([ring.repeat(2, 1), torch.stack([ring, (ring + 1) % S])], dim=1)
    graph = AttentionGraph(S, ei)
    q, k, v = qkv(S, H, D)
    out = attend(q, k, v, graph, "cluster_sparse")
    key, layout = graph.cache["cluster_layout"]
    assert key == (8, 16, 0.0)
    # 50 tokens in 8 clusters: the first 50 % 8 = 2 get one token more.
    assert layout.cluster_ptr.tolist() == [0, 7, 14, 20, 26, 32, 38, 44, 50]
    assert layout.num_tiles_transferred == 0 and layout.num_entries == ei.shape[1]
    assert_close(out, sparse_attention(q, k, v, ei))


# ------------------------------------------------------------------------------ hubs
def global_pattern(S: int, num_edges: int, seed: int = 0) -> torch.Tensor:
    """``random_pattern`` plus a global token 0 attending to and attended by tokens 0..S-2
    (token S - 1 keeps no entry)."""
    ei = random_pattern(S, num_edges, seed)
    g = torch.arange(S - 1)
    zero = torch.zeros_like(g)
    ei = torch.cat([ei, torch.stack([g, zero]), torch.stack([zero, g])], dim=1)
    key = torch.unique(ei[1] * S + ei[0])
    return torch.stack([key % S, key // S])


@pytest.mark.parametrize("hub_min_tiles", [None, 1, 5])
@pytest.mark.parametrize("threshold", [0.0, 0.3])
def test_hubs_change_the_computation_not_the_function(hub_min_tiles, threshold, chunking) -> None:
    S, H, D = 41, 2, 3
    ei = global_pattern(S, 150, seed=9)
    bucket = torch.randint(0, 6, (ei.shape[1],), generator=torch.Generator().manual_seed(2))
    table = torch.randn(7, H, dtype=DT, requires_grad=True)
    args = (ei, S, 3, 4, threshold, bucket)
    plain = ClusterSparseLayout(*args, far_bucket=6, hub_min_tiles=0)
    layout = ClusterSparseLayout(*args, far_bucket=6, hub_min_tiles=hub_min_tiles)
    assert plain.hub_rows.numel() == plain.hub_cols.numel() == 0
    assert as_dict(layout) == as_dict(plain)  # the same pairs and buckets
    assert layout.num_entries == plain.num_entries
    assert layout.num_tiles < plain.num_tiles
    if hub_min_tiles is None:  # G = 11 segments: the global token alone is a hub, both ways
        assert layout.hub_threshold == 8
        assert layout.hub_rows.tolist() == [0] and layout.hub_cols.tolist() == [0]
    elif hub_min_tiles == 1:  # every query with a pair is a hub: no tiles are left
        assert layout.num_tiles == 0 and layout.hub_rows.numel() == S - 1
    else:
        assert layout.hub_rows.numel() > 1 and layout.hub_cols.numel() > 0
    q, k, v = qkv(S, H, D, seed=3)
    out = cluster_sparse_attention(q, k, v, layout, table)
    ref = masked_reference(q, k, v, plain, table)
    assert_close(out, ref)
    assert (out[S - 1] == 0).all()
    grad = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (q, k, v, table), grad),
        torch.autograd.grad(ref, (q, k, v, table), grad),
        strict=True,
    ):
        assert_close(g, w)


def test_hub_layout_bookkeeping() -> None:
    S, k, db = 41, 3, 4
    ei = global_pattern(S, 150, seed=9)
    plain = ClusterSparseLayout(ei, S, k, db, hub_min_tiles=0, narrow_max_keys=0)
    layout = ClusterSparseLayout(ei, S, k, db, narrow_max_keys=0)
    G = layout.segment_token.shape[0]
    # The rule's counts do not depend on the hubs; the computed tiles do.
    assert (layout.num_tiles_kept, layout.num_tiles_transferred) == (
        plain.num_tiles_kept,
        plain.num_tiles_transferred,
    )
    assert plain.num_tiles == plain.num_tiles_kept
    # Strips hold the global token's pairs: its row (all S - 1 keys) and its column (the
    # other S - 2 queries).
    assert int(layout.row_strip_mask.sum()) == S - 1
    assert int(layout.col_strip_mask.sum()) == S - 2
    assert not layout.tile_mask[layout.tile_row == 0][:, 0].any()  # token 0's query line
    assert layout.num_scores == (
        layout.num_tiles * db * db + 1 * G * db + 1 * db * layout.num_rows_computed
    )
    assert layout.tile_fill == layout.num_entries / layout.num_scores
    assert plain.tile_fill == plain.num_entries / (plain.num_tiles * db * db)
    assert layout.tile_fill > plain.tile_fill
    assert layout.num_key_columns == 0 and not layout.tile_narrow.any()
    assert layout.num_row_groups == len(layout._row_groups)
    assert sum(g["rows"].numel() for g in layout._row_groups) == layout.num_rows_computed
    assert sum(g["cols"].numel() for g in layout._row_groups) == layout.num_tiles


def test_narrow_tile_bookkeeping() -> None:
    S, k, db = 41, 3, 4
    ei = global_pattern(S, 150, seed=9)
    layout = ClusterSparseLayout(ei, S, k, db, narrow_max_keys=1)
    assert layout.narrow_threshold == 1
    used = layout.tile_mask.any(1)
    assert torch.equal(layout.tile_narrow, used.sum(1) <= 1)
    assert 0 < int(layout.tile_narrow.sum()) < layout.num_tiles
    # One key column per used column of a narrow tile, with that column's mask.
    assert layout.num_key_columns == int(used[layout.tile_narrow].sum())
    for t in layout.tile_narrow.nonzero().squeeze(1).tolist()[:5]:
        (j,) = used[t].nonzero().squeeze(1).tolist()
        token = int(layout.segment_token[layout.tile_col[t], j])
        row = int(layout.tile_row[t])
        (c,) = ((layout.keycol_row == row) & (layout.keycol_token == token)).nonzero()[0]
        assert torch.equal(layout.keycol_mask[c], layout.tile_mask[t, :, j])
    wide = int((~layout.tile_narrow).sum())
    G, n_r, n_c = layout.segment_token.shape[0], layout.hub_rows.numel(), layout.hub_cols.numel()
    assert layout.num_scores == (
        wide * db * db
        + layout.num_key_columns * db
        + n_r * G * db
        + n_c * db * layout.num_rows_computed
    )
    assert sum(g["cols"].numel() for g in layout._row_groups) == wide
    assert sum(int(g["columns"].sum()) for g in layout._row_groups) == layout.num_key_columns
    # Narrow tiles change the computation, not the pairs.
    wide_only = ClusterSparseLayout(ei, S, k, db, narrow_max_keys=0)
    assert torch.equal(layout.pattern()[0], wide_only.pattern()[0])


@pytest.mark.parametrize("narrow_max_keys", [1, 2, 4])
@pytest.mark.parametrize("hub_min_tiles", [None, 0])
def test_narrow_tiles_change_the_computation_not_the_function(
    narrow_max_keys, hub_min_tiles, chunking
) -> None:
    S, H, D = 41, 2, 3
    ei = global_pattern(S, 150, seed=9)
    bucket = torch.randint(0, 6, (ei.shape[1],), generator=torch.Generator().manual_seed(2))
    table = torch.randn(7, H, dtype=DT, requires_grad=True)
    args = (ei, S, 3, 4, 0.3, bucket)
    plain = ClusterSparseLayout(*args, far_bucket=6, hub_min_tiles=0, narrow_max_keys=0)
    layout = ClusterSparseLayout(
        *args, far_bucket=6, hub_min_tiles=hub_min_tiles, narrow_max_keys=narrow_max_keys
    )
    assert layout.num_key_columns > 0
    if narrow_max_keys == 4:  # every tile is narrow
        assert bool(layout.tile_narrow.all())
    q, k, v = qkv(S, H, D, seed=4)
    out = cluster_sparse_attention(q, k, v, layout, table)
    ref = masked_reference(q, k, v, plain, table)
    assert_close(out, ref)
    grad = torch.randn_like(out)
    for g, w in zip(
        torch.autograd.grad(out, (q, k, v, table), grad),
        torch.autograd.grad(ref, (q, k, v, table), grad),
        strict=True,
    ):
        assert_close(g, w)


@pytest.mark.parametrize("narrow_max_keys", [0, 2])  # wide tiles only, key columns only
def test_gradcheck_with_dropout_and_hubs(narrow_max_keys, chunking) -> None:
    S, H, D = 11, 1, 2
    ei = global_pattern(S, 15, seed=6)
    bucket = torch.randint(0, 3, (ei.shape[1],), generator=torch.Generator().manual_seed(0))
    layout = ClusterSparseLayout(
        ei, S, 2, 2, 0.5, bucket, far_bucket=2, hub_min_tiles=3, narrow_max_keys=narrow_max_keys
    )
    assert layout.hub_rows.numel() > 0 and layout.hub_cols.numel() > 0
    assert (layout.num_key_columns > 0) == (narrow_max_keys > 0)
    q, k, v = qkv(S, H, D, seed=7)
    table = torch.randn(3, H, dtype=DT, requires_grad=True)

    def fn(q, k, v, table):
        torch.manual_seed(0)  # the same dropout masks on every evaluation
        return cluster_sparse_attention(q, k, v, layout, table, dropout_p=0.25)

    assert torch.autograd.gradcheck(fn, (q, k, v, table), fast_mode=True)


def test_fully_masked_rows_by_bias() -> None:
    """A query whose every pair has a -inf bias outputs zeros (tiles and strips)."""
    S, H, D = 41, 2, 3
    ei = global_pattern(S, 150, seed=9)
    bucket = torch.zeros(ei.shape[1], dtype=torch.long)
    bucket[ei[1] == 5] = 1  # every pair of query 5
    bucket[ei[1] == 0] = 1  # and of the global token (a hub query)
    table = torch.zeros(2, H, dtype=DT)
    table[1] = float("-inf")
    layout = ClusterSparseLayout(ei, S, 3, 4, edge_bucket=bucket)
    assert layout.hub_rows.tolist() == [0]
    q, k, v = qkv(S, H, D)
    out = cluster_sparse_attention(q, k, v, layout, table)
    assert (out[5] == 0).all() and (out[0] == 0).all() and torch.isfinite(out).all()
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


def test_layout_rejects_bad_hub_and_narrow_arguments() -> None:
    with pytest.raises(ValueError, match="`hub_min_tiles` to be an integer >= 0"):
        ClusterSparseLayout(torch.arange(8).repeat(2, 1), 8, 2, hub_min_tiles=-1)
    with pytest.raises(ValueError, match="`narrow_max_keys` to be an integer >= 0"):
        ClusterSparseLayout(torch.arange(8).repeat(2, 1), 8, 2, narrow_max_keys=1.5)


def test_implementation_is_checked() -> None:
    layout, _, _ = tiny_layout(0.5)
    q, k, v = qkv(8, 2, 3)
    with pytest.raises(ValueError, match="`implementation` to be one of"):
        cluster_sparse_attention(q, k, v, layout, implementation="cuda")


def test_auto_implementation_is_the_tile_kernel_on_the_cpu() -> None:
    S = 60
    ei = random_pattern(S, 400, seed=4)
    layout = ClusterSparseLayout(ei, S, 3, 16)
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(S, 2, 8, generator=gen) for _ in range(3))
    assert torch.equal(
        cluster_sparse_attention(q, k, v, layout),
        cluster_sparse_attention(q, k, v, layout, implementation="tiles"),
    )
