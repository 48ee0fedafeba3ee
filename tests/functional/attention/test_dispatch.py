"""attend: the dual schedule, bias lookup, argument checks, every kind on CUDA."""

from __future__ import annotations

import pytest
import torch

import lightgraph.functional.attention.dispatch as dispatch
from lightgraph.functional.attention import (
    KINDS,
    AttentionGraph,
    attend,
    dense_attention,
    dual_uses_dense,
    raw_attention,
    sparse_attention,
)
from tests.functional.attention.common import DT, assert_close, bad_input, qkv, random_pattern
from tests.functional.attention.test_conditions import COMPLETE, PATH, N, undirected


def counting(monkeypatch):
    calls = {"dense": 0, "sparse": 0}
    dense, sparse = dispatch.dense_attention, dispatch._sparse_attention

    def count_dense(*args, **kwargs):
        calls["dense"] += 1
        return dense(*args, **kwargs)

    def count_sparse(*args, **kwargs):
        calls["sparse"] += 1
        return sparse(*args, **kwargs)

    monkeypatch.setattr(dispatch, "dense_attention", count_dense)
    monkeypatch.setattr(dispatch, "_sparse_attention", count_sparse)
    return calls


def test_dual_interleaves_dense_every_period(monkeypatch) -> None:
    graph = AttentionGraph(N, undirected(COMPLETE, N), num_layers=1)
    assert all(graph.conditions().values())
    calls = counting(monkeypatch)
    q, k, v = qkv(N, 2, 3)
    picked = []
    for step in range(7):
        before = calls["dense"]
        attend(q, k, v, graph, "dual", step=step, dense_every=3)
        picked.append(calls["dense"] > before)
    assert picked == [True, False, False, True, False, False, True]
    assert calls == {"dense": 3, "sparse": 4}
    assert [dual_uses_dense(graph, s, 0) for s in range(3)] == [False] * 3


def test_dual_is_dense_when_a_condition_fails(monkeypatch) -> None:
    graph = AttentionGraph(N, undirected(PATH, N), num_layers=2)  # C3 fails
    calls = counting(monkeypatch)
    q, k, v = qkv(N, 2, 3)
    for step in range(4):
        attend(q, k, v, graph, "dual", step=step, dense_every=0)
    assert calls == {"dense": 4, "sparse": 0}


def test_attend_gathers_bias_from_the_table() -> None:
    S, H, D = 13, 2, 3
    ei = random_pattern(S, 30)
    gen = torch.Generator().manual_seed(5)
    bucket = torch.randint(0, 4, (ei.shape[1],), generator=gen)
    dense_bucket = torch.randint(0, 4, (S, S), generator=gen)
    table = torch.randn(4, H, dtype=DT, requires_grad=True)
    graph = AttentionGraph(S, ei, bucket, dense_bucket)
    q, k, v = qkv(S, H, D)
    assert_close(
        attend(q, k, v, graph, "sparse", table), sparse_attention(q, k, v, ei, table[bucket])
    )
    dense_bias = table[dense_bucket].permute(2, 0, 1)
    for kind, fn in (("dense", dense_attention), ("raw", raw_attention)):
        assert_close(attend(q, k, v, graph, kind, table), fn(q, k, v, bias=dense_bias))
    plain = AttentionGraph(S, ei)  # no buckets: the table is not used
    assert_close(attend(q, k, v, plain, "dense", table), dense_attention(q, k, v))
    assert_close(attend(q, k, v, plain, "sparse", table), sparse_attention(q, k, v, ei))
    out = attend(q, k, v, graph, "sparse", table)
    (grad,) = torch.autograd.grad(out.sum(), table)
    assert grad.abs().sum() > 0


def test_unknown_kind_lists_the_kinds() -> None:
    q, k, v = qkv(4, 1, 2)
    graph = AttentionGraph(4, torch.arange(4).repeat(2, 1))
    with pytest.raises(ValueError) as info:
        attend(q, k, v, graph, "flash", None)
    assert str(KINDS) in str(info.value) and "'flash'" in str(info.value)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, k, v, ei: attend(q, k, v, AttentionGraph(5, ei), "sparse"), "S=4 tokens"),
        (lambda q, k, v, ei: attend(q, k, v, AttentionGraph(4, ei + 1), "sparse"), "ids in"),
        (
            lambda q, k, v, ei: attend(q, k, v, AttentionGraph(4, ei), "sparse", torch.ones(3, 5)),
            r"`bias_table` of shape \[num_buckets, H=2\]",
        ),
        (
            lambda q, k, v, ei: attend(q, k, v, AttentionGraph(4, ei), "dual", dense_every=-1),
            "`dense_every`",
        ),
        (
            lambda q, k, v, ei: attend(
                q, k, v, AttentionGraph(4, ei), "cluster_sparse", block_size=0
            ),
            "`block_size` >= 1",
        ),
        (
            lambda q, k, v, ei: attend(
                q, k, v, AttentionGraph(4, ei), "cluster_sparse", threshold=1.5
            ),
            r"`threshold` in \[0, 1\]",
        ),
        (
            lambda q, k, v, ei: attend(
                q, k, v, AttentionGraph(4, ei), "cluster_sparse", num_clusters=5
            ),
            r"`num_clusters` in \[1, num_tokens=4\]",
        ),
        (
            lambda q, k, v, ei: attend(
                q, k, v, AttentionGraph(4, ei, ei[0] + 2), "sparse", torch.ones(3, 2)
            ),
            "`graph.edge_bucket` uses bucket 5 but `bias_table` has only 3 rows",
        ),
    ],
)
def test_bad_input(call, match) -> None:
    bad_input(call, match)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_on_cuda_matches_cpu(kind: str) -> None:
    # Same inputs on CPU and GPU (float64: the CSR, SDPA and tile kernels differ between
    # devices, the mathematics must not); dense kinds run without a pattern mask.
    S, H, D = 40, 4, 8
    ei = random_pattern(S, 150)
    ei = torch.cat([ei, torch.tensor([[S - 1], [S - 1]])], dim=1)  # C1 for "dual"
    bucket = torch.randint(0, 3, (ei.shape[1],), generator=torch.Generator().manual_seed(1))
    table = torch.randn(3, H, dtype=DT, requires_grad=True)
    options = {"num_clusters": 3, "block_size": 4, "threshold": 0.5}
    results = []
    for device in ("cpu", "cuda"):
        g = AttentionGraph(S, ei, edge_bucket=bucket).to(device)
        q, k, v = (t.detach().to(device).requires_grad_() for t in qkv(S, H, D))
        tab = table.detach().to(device).requires_grad_()
        bias = tab if kind not in ("dense", "raw") else None
        out = attend(q, k, v, g, kind, bias, **options)
        out.square().sum().backward()
        # "dual" resolves to dense here (the random pattern fails C2), which has no bias.
        grads = [t.grad for t in (q, k, v)] + ([tab.grad] if tab.grad is not None else [])
        results.append([out.detach().cpu()] + [t.cpu() for t in grads])
    for cpu, gpu in zip(*results, strict=True):
        torch.testing.assert_close(gpu, cpu, rtol=1e-9, atol=1e-9)
