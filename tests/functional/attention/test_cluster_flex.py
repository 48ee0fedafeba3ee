"""cluster_sparse_attention(implementation="flex"): FlexAttention over the cluster-sparse
layout equals the tile kernel and a dense masked softmax; its limits raise clear errors.

Every distinct padded length, block size, bias/hub combination compiles FlexAttention
once (seconds on a CPU), so the cases share one sequence shape."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import ClusterSparseLayout, cluster_sparse_attention
from lightgraph.functional.attention.flex import flex_available
from tests.functional.attention.test_cluster_sparse import global_pattern, random_pattern

pytestmark = pytest.mark.skipif(
    not flex_available("cpu"), reason="FlexAttention needs torch.compile and a C++ compiler"
)

S, H, D = 150, 2, 8  # 3 clusters of 50 tokens: G = 12 segments of 16, 192 places


def inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(S, H, D, generator=gen) for _ in range(3)]


def dense_reference(q, k, v, layout, table):
    """Materialised ``[H, S, S]`` scores, masked with ``layout.pattern()``, in float64."""
    q, k, v = q.double(), k.double(), v.double()
    edge_index, bucket = layout.pattern()
    scores = torch.einsum("qhd,khd->hqk", q, k) / D**0.5
    if table is not None:
        bias = torch.zeros(H, S, S, dtype=torch.float64)
        bias[:, edge_index[1], edge_index[0]] = table.double()[bucket].t()
        scores = scores + bias
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[edge_index[1], edge_index[0]] = True
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)  # rows without a pair: zeros
    return torch.einsum("hqk,khd->qhd", probs, v).float()


def check(layout, table, seed=0):
    q, k, v = inputs(seed)
    with torch.no_grad():
        out = cluster_sparse_attention(q, k, v, layout, table, implementation="flex")
        tiles = cluster_sparse_attention(q, k, v, layout, table)
    ref = dense_reference(q, k, v, layout, table)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, tiles, rtol=1e-5, atol=1e-5)
    return out


@pytest.mark.parametrize("threshold", [0.0, 0.05])
def test_flex_without_bias_or_hubs(threshold) -> None:
    ei = random_pattern(S, 900, seed=1)  # token S - 1 has no pair
    layout = ClusterSparseLayout(ei, S, 3, 16, threshold, hub_min_tiles=0)
    if threshold:
        assert layout.num_tiles_transferred > 0
    out = check(layout, None)
    assert (out[S - 1] == 0).all()


@pytest.mark.parametrize("threshold,hub_min_tiles", [(0.0, None), (0.05, 4)])
def test_flex_with_bias_and_hubs(threshold, hub_min_tiles) -> None:
    ei = global_pattern(S, 400, seed=2)
    bucket = torch.randint(0, 5, (ei.shape[1],), generator=torch.Generator().manual_seed(0))
    layout = ClusterSparseLayout(
        ei, S, 3, 16, threshold, bucket, far_bucket=5, hub_min_tiles=hub_min_tiles
    )
    if hub_min_tiles is None:  # the global token, both ways
        assert layout.hub_rows.tolist() == [0] and layout.hub_cols.tolist() == [0]
    else:
        assert layout.num_tiles_transferred > 0
        assert layout.hub_rows.numel() > 1 and layout.hub_cols.numel() > 1
    table = torch.randn(6, H)
    out = check(layout, table, seed=int(threshold > 0))
    assert (out[S - 1] == 0).all()


def test_flex_with_bias_no_hubs_and_small_tiles() -> None:
    """Tiles of 5 (not a divisor of the clusters) become FlexAttention blocks of 5."""
    ei = global_pattern(S, 600, seed=3)
    bucket = torch.randint(0, 4, (ei.shape[1],), generator=torch.Generator().manual_seed(1))
    layout = ClusterSparseLayout(ei, S, 4, 5, 0.1, bucket, far_bucket=4, hub_min_tiles=12)
    assert layout.hub_rows.numel() > 0
    check(layout, torch.randn(5, H))


def test_flex_structures_are_cached() -> None:
    ei = random_pattern(S, 900, seed=1)
    layout = ClusterSparseLayout(ei, S, 3, 16, hub_min_tiles=0)
    check(layout, None)
    (structures,) = layout._flex.values()
    check(layout, None, seed=1)
    assert next(iter(layout._flex.values())) is structures
    assert layout.to("cpu")._flex == {}


def test_flex_limits() -> None:
    ei = random_pattern(S, 900, seed=1)
    layout = ClusterSparseLayout(ei, S, 3, 16)
    q, k, v = inputs()
    with pytest.raises(ValueError, match="has no dropout"):
        with torch.no_grad():
            cluster_sparse_attention(q, k, v, layout, dropout_p=0.1, implementation="flex")
    with pytest.raises(NotImplementedError, match="use implementation='tiles'"):
        cluster_sparse_attention(q.requires_grad_(), k, v, layout, implementation="flex")
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        with torch.no_grad():
            cluster_sparse_attention(
                q.double(), k.double(), v.double(), layout, implementation="flex"
            )


@pytest.mark.parametrize("block", [128])  # 64 divides the 192 places: 128 covers more
def test_flex_blocks_spanning_several_tiles(block) -> None:
    """Blocks larger than a tile (what a half-precision CUDA backward uses), with the 192
    places not a multiple of the block: the block mask still covers exactly the pairs."""
    from lightgraph.functional.attention.flex import cluster_flex_attention

    ei = global_pattern(S, 400, seed=2)
    bucket = torch.randint(0, 5, (ei.shape[1],), generator=torch.Generator().manual_seed(0))
    layout = ClusterSparseLayout(ei, S, 3, 16, 0.05, bucket, far_bucket=5, hub_min_tiles=4)
    table = torch.randn(6, H)
    q, k, v = inputs(1)
    with torch.no_grad():
        out = cluster_flex_attention(q, k, v, layout, table, block_size=block)
    torch.testing.assert_close(out, dense_reference(q, k, v, layout, table), rtol=1e-5, atol=1e-5)
    assert (block, block) in layout._flex
