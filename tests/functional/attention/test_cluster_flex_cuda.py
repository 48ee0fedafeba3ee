"""cluster_sparse_attention(implementation="flex") on a GPU: forward AND backward (the CPU
FlexAttention has no backward) equal a float64 dense masked softmax and the tile kernel.

Runs only where CUDA and Triton are available (a lent GPU machine); skipped elsewhere."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import ClusterSparseLayout, cluster_sparse_attention
from lightgraph.functional.attention.flex import flex_available
from tests.functional.attention.test_cluster_sparse import global_pattern, random_pattern

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not flex_available("cuda"), reason="needs a CUDA device with Triton"),
]

S, H, D = 150, 2, 8  # head dim 8 as Graphormer-slim (flex pads it to 16 on CUDA)


def dense_reference(q, k, v, edge_index, bucket, table):
    """Materialised ``[H, S, S]`` scores masked with the layout's pattern (float64, CPU,
    differentiable); rows without a pair give zeros."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / D**0.5
    if table is not None:
        bias = torch.zeros(H, S, S, dtype=torch.float64)
        bias[:, edge_index[1], edge_index[0]] = table[bucket].t()
        scores = scores + bias
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[edge_index[1], edge_index[0]] = True
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return torch.einsum("hqk,khd->qhd", probs, v)


def run(layout, table, implementation, seed=0):
    gen = torch.Generator().manual_seed(seed)
    base = [torch.randn(S, H, D, generator=gen) for _ in range(3)]
    weight = torch.randn(S, H, D, generator=gen)
    inputs = [t.cuda().requires_grad_() for t in base]
    tab = None if table is None else table.cuda().requires_grad_()
    out = cluster_sparse_attention(*inputs, layout.to("cuda"), tab, implementation=implementation)
    (out * weight.cuda()).sum().backward()
    grads = [t.grad.cpu() for t in inputs] + ([] if tab is None else [tab.grad.cpu()])
    ref_in = [t.double().requires_grad_() for t in base]
    ref_tab = None if table is None else table.double().requires_grad_()
    edge_index, bucket = layout.pattern()
    ref = dense_reference(*ref_in, edge_index, bucket, ref_tab)
    (ref * weight.double()).sum().backward()
    ref_grads = [t.grad for t in ref_in] + ([] if ref_tab is None else [ref_tab.grad])
    return out.detach().cpu(), grads, ref.float(), [g.float() for g in ref_grads]


@pytest.mark.parametrize("implementation", ["flex", "tiles"])
@pytest.mark.parametrize("threshold,with_bias", [(0.0, False), (0.05, True)])
def test_cuda_forward_and_backward_equal_dense(implementation, threshold, with_bias) -> None:
    if with_bias:
        ei = global_pattern(S, 400, seed=2)
        bucket = torch.randint(0, 5, (ei.shape[1],), generator=torch.Generator().manual_seed(0))
        layout = ClusterSparseLayout(ei, S, 3, 16, threshold, bucket, far_bucket=5)
        table = torch.randn(6, H)
    else:
        layout = ClusterSparseLayout(random_pattern(S, 900, seed=1), S, 3, 16, threshold)
        table = None
    out, grads, ref, ref_grads = run(layout, table, implementation)
    torch.testing.assert_close(out, ref, rtol=2e-4, atol=2e-4)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-4)


def test_auto_runs_flex_on_cuda_without_dropout_and_tiles_with_it() -> None:
    layout = ClusterSparseLayout(random_pattern(S, 900, seed=1), S, 3, 16).to("cuda")
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(S, H, D, generator=gen).cuda() for _ in range(3))
    with torch.no_grad():
        auto = cluster_sparse_attention(q, k, v, layout)
        flex = cluster_sparse_attention(q, k, v, layout, implementation="flex")
        tiles = cluster_sparse_attention(q, k, v, layout, implementation="tiles")
    assert torch.equal(auto, flex)
    torch.testing.assert_close(auto, tiles, rtol=2e-4, atol=2e-4)
    torch.manual_seed(0)
    dropped = cluster_sparse_attention(q, k, v, layout, dropout_p=0.5)  # flex has no dropout
    torch.manual_seed(0)
    assert torch.equal(
        dropped, cluster_sparse_attention(q, k, v, layout, dropout_p=0.5, implementation="tiles")
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_auto_trains_in_half_precision_on_cuda(dtype) -> None:
    """``implementation="auto"`` picks flex for half precision on CUDA: its backward must
    compile there too (flex's backward configs need blocks that divide the 16 x 16 sparse
    blocks), and agree with float64 dense within half-precision rounding."""
    layout = ClusterSparseLayout(random_pattern(S, 900, seed=1), S, 3, 16)
    gen = torch.Generator().manual_seed(5)
    base = [torch.randn(S, H, D, generator=gen) for _ in range(3)]
    weight = torch.randn(S, H, D, generator=gen)
    inputs = [t.to("cuda", dtype).requires_grad_() for t in base]
    out = cluster_sparse_attention(*inputs, layout.to("cuda"))
    (out.float() * weight.cuda()).sum().backward()
    ref_in = [t.double().requires_grad_() for t in base]
    edge_index, bucket = layout.pattern()
    ref = dense_reference(*ref_in, edge_index, bucket, None)
    (ref * weight.double()).sum().backward()
    torch.testing.assert_close(out.float().cpu(), ref.float(), rtol=3e-2, atol=3e-2)
    for got, want in zip(inputs, ref_in, strict=True):
        torch.testing.assert_close(got.grad.float().cpu(), want.grad.float(), rtol=5e-2, atol=5e-2)
