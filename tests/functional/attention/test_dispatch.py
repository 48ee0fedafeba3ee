"""attend: the dual schedule over either sparse layout, kind="auto", bias lookup, argument
checks, every kind on CUDA."""

from __future__ import annotations

import pytest
import torch

import lightgraph.functional.attention.cluster_sparse as cluster_sparse
import lightgraph.functional.attention.dispatch as dispatch
from lightgraph.data.partition.sequences import build_sequence
from lightgraph.functional.attention import (
    AUTO_MIN_TILE_FILL,
    DEFAULT_DENSE_EVERY,
    KINDS,
    SPARSE_KINDS,
    AttentionGraph,
    attend,
    dense_attention,
    dual_uses_dense,
    raw_attention,
    resolve_kind,
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


CLUSTERS = {"num_clusters": 3, "block_size": 4, "threshold": 0.5}


def _sequence_graph(n: int = 23, **kwargs) -> AttentionGraph:
    """The pattern of a random node sequence (global token, token path): C1-C3 hold at 2
    layers; ``CLUSTERS`` transfers some of its cluster blocks."""
    gen = torch.Generator().manual_seed(2)
    edge_index = torch.randint(0, n, (2, 2 * n), generator=gen)
    graph = build_sequence(torch.zeros(n, 1), edge_index, **kwargs).graph
    graph.num_layers = 2
    return graph


def test_dual_follows_the_documented_rule_step_by_step() -> None:
    graph = _sequence_graph()
    assert all(graph.conditions().values())
    assert DEFAULT_DENSE_EVERY == 11 and SPARSE_KINDS == ("sparse", "cluster_sparse", "auto")
    for sparse_kind in ("sparse", "cluster_sparse"):
        for dense_every in (0, 1, 3, 4, DEFAULT_DENSE_EVERY):
            got = [
                resolve_kind(
                    graph,
                    "dual",
                    step=step,
                    dense_every=dense_every,
                    sparse_kind=sparse_kind,
                    **CLUSTERS,
                )
                for step in range(13)
            ]
            expected = [
                "dense" if dense_every > 0 and step % dense_every == 0 else sparse_kind
                for step in range(13)
            ]
            assert got == expected, (sparse_kind, dense_every)
    # The default period: dense at steps 0, 11, 22, ...
    default = [resolve_kind(graph, "dual", step=s) for s in range(23)]
    assert [s for s, kind in enumerate(default) if kind == "dense"] == [0, 11, 22]
    # A pattern failing C1 (a token without its self-loop) or C3 (too deep): always dense.
    src, dst = graph.edge_index
    no_loop = AttentionGraph(graph.num_tokens, graph.edge_index[:, (src != dst) | (src != 5)])
    too_far = _sequence_graph(global_token=False)
    too_far.num_layers = 1
    for failing, condition in ((no_loop, "c1"), (too_far, "c3")):
        assert not failing.conditions()[condition]
        for dense_every in (0, 4):
            kinds = {
                resolve_kind(failing, "dual", step=s, dense_every=dense_every, **CLUSTERS)
                for s in range(9)
            }
            assert kinds == {"dense"}
    # Other kinds resolve to themselves whatever the step.
    for kind in ("dense", "raw", "sparse", "cluster_sparse"):
        assert resolve_kind(graph, kind, step=0, dense_every=1) == kind


def test_dual_over_cluster_sparse_equals_the_kind_it_runs() -> None:
    graph = _sequence_graph()
    S, H, D = graph.num_tokens, 2, 4
    table = torch.randn(9, H, dtype=DT)
    weight = torch.randn(S, H, D, dtype=DT, generator=torch.Generator().manual_seed(3))

    def run(kind: str, **kwargs):
        q, k, v = qkv(S, H, D)
        tab = table.clone().requires_grad_()
        out = attend(q, k, v, graph, kind, tab, **CLUSTERS, **kwargs)
        grads = torch.autograd.grad((out * weight).sum(), (q, k, v, tab))
        return [out.detach(), *grads]

    dense, exact = run("dense"), run("cluster_sparse")
    assert not torch.allclose(exact[0], run("sparse")[0])  # the transfer changes the pattern
    assert not torch.allclose(exact[0], dense[0])
    for step in range(7):
        got = run("dual", step=step, dense_every=3, sparse_kind="cluster_sparse")
        expected = dense if step % 3 == 0 else exact
        for a, b in zip(got, expected, strict=True):
            assert_close(a, b)


def _block_diagonal(S: int = 32, block: int = 8) -> torch.Tensor:
    """Every token attends every token of its block of ``block``: full diagonal tiles."""
    t = torch.arange(S)
    same = (t[:, None] // block) == (t[None, :] // block)
    query, key = same.nonzero().t()
    return torch.stack([key, query])


def _scattered(S: int = 32) -> torch.Tensor:
    """Self-loops and one random key per query: tiles are mostly empty."""
    gen = torch.Generator().manual_seed(7)
    t = torch.arange(S)
    ei = torch.cat([t.repeat(2, 1), torch.stack([torch.randint(0, S, (S,), generator=gen), t])], 1)
    key = torch.unique(ei[1] * S + ei[0])
    return torch.stack([key % S, key // S])


def test_auto_picks_by_tile_fill_deterministically(monkeypatch) -> None:
    options = {"num_clusters": 4, "block_size": 8, "threshold": 0.0}
    full, scattered = _block_diagonal(), _scattered()
    assert AUTO_MIN_TILE_FILL == cluster_sparse.AUTO_MIN_TILE_FILL
    for ei, expected in ((full, "cluster_sparse"), (scattered, "sparse")):
        graph = AttentionGraph(32, ei)
        fill = graph.cluster_layout(**options).tile_fill
        assert (fill >= AUTO_MIN_TILE_FILL) == (expected == "cluster_sparse")
        picks = {resolve_kind(graph, "auto", **options) for _ in range(3)}
        picks.add(resolve_kind(AttentionGraph(32, ei.clone()), "auto", **options))  # fresh
        assert picks == {expected}
        assert graph.cache[("auto_kind", 4, 8, 0.0, AUTO_MIN_TILE_FILL)] == expected
    assert AttentionGraph(32, full).cluster_layout(**options).tile_fill == 1.0
    # The constant decides: lowered, the scattered pattern runs cluster-sparse; raised
    # above 1, nothing does (the decisions are cached per constant).
    graph = AttentionGraph(32, scattered)
    assert graph.auto_kind(**options) == "sparse"
    monkeypatch.setattr(cluster_sparse, "AUTO_MIN_TILE_FILL", 0.0)
    assert graph.auto_kind(**options) == "cluster_sparse"
    monkeypatch.setattr(cluster_sparse, "AUTO_MIN_TILE_FILL", 1.5)
    assert AttentionGraph(32, full).auto_kind(**options) == "sparse"
    # "dual" between its dense steps resolves sparse_kind="auto" the same way.
    sequence = _sequence_graph()
    for min_fill, expected in ((0.0, "cluster_sparse"), (1.5, "sparse")):
        monkeypatch.setattr(cluster_sparse, "AUTO_MIN_TILE_FILL", min_fill)
        kinds = [
            resolve_kind(sequence, "dual", step=s, dense_every=2, sparse_kind="auto", **CLUSTERS)
            for s in range(4)
        ]
        assert kinds == ["dense", expected, "dense", expected]


@pytest.mark.parametrize("pattern", ["full", "scattered"])
def test_auto_equals_the_kind_it_picks(pattern: str) -> None:
    S, H, D = 32, 2, 4
    ei = _block_diagonal() if pattern == "full" else _scattered()
    bucket = torch.randint(0, 3, (ei.shape[1],), generator=torch.Generator().manual_seed(1))
    graph = AttentionGraph(S, ei, bucket)
    options = {"num_clusters": 4, "block_size": 8}
    picked = graph.auto_kind(**options)
    assert picked == ("cluster_sparse" if pattern == "full" else "sparse")
    table = torch.randn(3, H, dtype=DT)
    results = []
    for kind in ("auto", picked):
        q, k, v = qkv(S, H, D)
        tab = table.clone().requires_grad_()
        out = attend(q, k, v, graph, kind, tab, **options)
        results.append([out, *torch.autograd.grad(out.square().sum(), (q, k, v, tab))])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


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
            lambda q, k, v, ei: attend(q, k, v, AttentionGraph(4, ei), "dual", sparse_kind="raw"),
            r"`sparse_kind` to be one of \('sparse', 'cluster_sparse', 'auto'\) but got 'raw'",
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


@pytest.mark.cuda
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


@pytest.mark.parametrize("shape", [(1000,), (30, 30)])
def test_lookup_rows_equals_indexing_and_a_one_hot_reference(shape) -> None:
    from lightgraph.functional.attention.dispatch import lookup_rows

    gen = torch.Generator().manual_seed(0)
    table = torch.randn(7, 4, dtype=DT, generator=gen, requires_grad=True)
    index = torch.randint(0, 6, shape, generator=gen)  # row 6 is never used: zero gradient
    weight = torch.randn(*shape, 4, dtype=DT, generator=gen)
    out = lookup_rows(table, index)
    (out * weight).sum().backward()
    torch.testing.assert_close(out, table.detach()[index], rtol=0, atol=0)
    one_hot = torch.nn.functional.one_hot(index.reshape(-1), 7).to(DT)  # [N, 7]
    expected = one_hot.t() @ weight.reshape(-1, 4)
    torch.testing.assert_close(table.grad, expected, rtol=1e-12, atol=1e-12)
    assert (table.grad[6] == 0).all()
    with torch.no_grad():
        assert lookup_rows(table, index).grad_fn is None
