from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import softmax as pyg_softmax

import lightgraph.nn.attention as attention
from lightgraph.nn.attention import (
    CLUSTER_CACHE_DIVISOR,
    KINDS,
    AttentionGraph,
    attend,
    check_conditions,
    default_num_clusters,
    dense_attention,
    dual_uses_dense,
    raw_attention,
    sparse_attention,
)

DT = torch.float64


def random_pattern(S: int, num_edges: int, seed: int = 0) -> torch.Tensor:
    """Coalesced pattern in random order: self-loops on all but the last two tokens, token
    ``S - 1`` with no entry, token ``S - 2`` with exactly one (non-self) entry."""
    gen = torch.Generator().manual_seed(seed)
    body = S - 2
    rand = torch.randint(0, body, (2, num_edges), generator=gen)
    loops = torch.arange(body).repeat(2, 1)
    single = torch.tensor([[3], [S - 2]])
    ei = torch.cat([rand, loops, single], dim=1)
    key = torch.unique(ei[1] * S + ei[0])
    ei = torch.stack([key % S, key // S])
    return ei[:, torch.randperm(ei.shape[1], generator=gen)]


def qkv(S: int, H: int, D: int, seed: int = 0, scale: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    out = [torch.randn(S, H, D, generator=gen, dtype=DT) for _ in range(3)]
    out[0] = out[0] * scale
    return [t.requires_grad_() for t in out]


def dense_reference(fn, q, k, v, edge_index, bias):
    """``fn`` (raw or dense attention) masked with the pattern, bias scattered from ``[E, H]``."""
    S, H, _ = q.shape
    mask = torch.zeros(S, S, dtype=torch.bool)
    mask[edge_index[1], edge_index[0]] = True
    dense_bias = None
    if bias is not None:
        E = edge_index.shape[1]
        heads = torch.arange(H)[:, None].expand(H, E)
        index = (heads, edge_index[1].expand(H, E), edge_index[0].expand(H, E))
        dense_bias = torch.zeros(H, S, S, dtype=q.dtype).index_put(index, bias.t())
    return fn(q, k, v, bias=dense_bias, mask=mask)


def assert_close(a, b, tol=1e-10):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("reference", [raw_attention, dense_attention])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_sparse_equals_masked_dense(with_bias, reference, scale) -> None:
    S, H, D = 23, 3, 5
    ei = random_pattern(S, 60)
    q, k, v = qkv(S, H, D, scale=scale)
    bias = torch.randn(ei.shape[1], H, dtype=DT, requires_grad=True) if with_bias else None
    out = sparse_attention(q, k, v, ei, bias)
    ref = dense_reference(reference, q, k, v, ei, bias)
    assert torch.isfinite(out).all()
    assert_close(out, ref)
    assert (out[S - 1] == 0).all()  # no entry: zeros
    assert_close(out[S - 2], v[3].detach())  # a single entry: that key's value
    grad = torch.randn_like(out)
    inputs = [q, k, v] + ([bias] if with_bias else [])
    got = torch.autograd.grad(out, inputs, grad)
    want = torch.autograd.grad(ref, inputs, grad)
    for g, w in zip(got, want, strict=True):
        assert torch.isfinite(g).all()
        assert_close(g, w)


def test_sparse_counts_every_column_and_accepts_any_order() -> None:
    # Duplicate entries each take part in the softmax (as in PyG's edge-wise attention).
    S, H, D = 9, 2, 3
    ei = torch.tensor([[0, 1, 1, 2, 4, 4, 4, 8], [0, 0, 0, 3, 3, 5, 5, 5]])
    q, k, v = qkv(S, H, D, seed=1)
    src, dst = ei
    alpha = pyg_softmax((q[dst] * k[src]).sum(-1) / D**0.5, dst, num_nodes=S)
    ref = torch.zeros(S, H, D, dtype=DT).index_add(0, dst, alpha[..., None] * v[src])
    assert_close(sparse_attention(q, k, v, ei), ref)
    perm = torch.randperm(ei.shape[1])
    assert_close(sparse_attention(q, k, v, ei[:, perm]), ref)


def test_sparse_without_entries_gives_zeros() -> None:
    q, k, v = qkv(5, 2, 3)
    out = sparse_attention(q, k, v, torch.empty(2, 0, dtype=torch.long))
    assert (out == 0).all()
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all((g == 0).all() for g in grads)


def test_sparse_gradcheck_with_dropout() -> None:
    S, H, D = 6, 1, 2
    ei = random_pattern(S, 8, seed=3)
    q, k, v = qkv(S, H, D, seed=2)
    bias = torch.randn(ei.shape[1], H, dtype=DT, requires_grad=True)

    def fn(q, k, v, bias):
        torch.manual_seed(0)  # the same dropout mask on every evaluation
        return sparse_attention(q, k, v, ei, bias, dropout_p=0.3)

    assert torch.autograd.gradcheck(fn, (q, k, v, bias), fast_mode=True)
    torch.manual_seed(0)
    dropped = sparse_attention(q, k, v, ei, bias, dropout_p=0.3)
    assert not torch.allclose(dropped, sparse_attention(q, k, v, ei, bias))


def autograd_node_names(out: torch.Tensor, depth: int = 4) -> set[str]:
    names, frontier = set(), [out.grad_fn]
    for _ in range(depth):
        frontier = [n for fn in frontier if fn is not None for n, _ in fn.next_functions]
        names |= {type(fn).__name__ for fn in frontier if fn is not None}
    return names | {type(out.grad_fn).__name__}


def test_dense_uses_the_fused_kernel_without_mask() -> None:
    q, k, v = (torch.randn(64, 2, 8, requires_grad=True) for _ in range(3))
    assert any("Flash" in name for name in autograd_node_names(dense_attention(q, k, v)))


def test_dense_kinds_agree_without_mask() -> None:
    q, k, v = qkv(11, 2, 4)
    bias = torch.randn(2, 11, 11, dtype=DT)
    assert_close(dense_attention(q, k, v), raw_attention(q, k, v))
    assert_close(dense_attention(q, k, v, bias=bias), raw_attention(q, k, v, bias=bias))


# --- conditions -------------------------------------------------------------------------


def undirected(pairs, n, loops=True):
    e = torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)
    e = torch.cat([e, e.flip(0)], dim=1)
    if loops:
        e = torch.cat([e, torch.arange(n).repeat(2, 1)], dim=1)
    return e


N = 6
PATH = [(i, i + 1) for i in range(N - 1)]
SHUFFLED_PATH = [(0, 2), (2, 4), (4, 1), (1, 3), (3, 5)]
STAR = [(0, i) for i in range(1, N)]
CYCLE = PATH + [(N - 1, 0)]
COMPLETE = [(i, j) for i in range(N) for j in range(i + 1, N)]
BIPARTITE = [(i, j) for i in range(3) for j in range(3, 6)]  # K_{3,3}: Dirac, order is no path
TRIANGLES = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3)]


@pytest.mark.parametrize(
    "edge_index,num_layers,expected",
    [
        (undirected(PATH, N), 5, (True, True, True)),  # the token order is the path
        (undirected(PATH, N), 4, (True, True, False)),  # diameter 5
        (undirected(SHUFFLED_PATH, N), 5, (True, False, True)),  # path exists, not certified
        (undirected(STAR, N), 2, (True, False, True)),  # no Hamiltonian path; hub certificate
        (undirected(STAR, N), 1, (True, False, False)),
        (undirected(CYCLE, N), 3, (True, True, True)),
        (undirected(CYCLE, N), 2, (True, True, False)),
        (undirected(COMPLETE, N), 1, (True, True, True)),
        (undirected(BIPARTITE, N), 2, (True, True, True)),  # Dirac: min degree 3 >= 6 / 2
        (undirected(TRIANGLES, N), 8, (True, False, False)),  # disconnected
        (undirected(COMPLETE, N, loops=False), 1, (False, True, True)),  # no self-loops
        (undirected(COMPLETE, N)[:, :-1], 1, (False, True, True)),  # token 5 lacks its loop
        (torch.tensor([[0], [0]]), 1, (True, True, True)),  # a single token
    ],
)
def test_conditions_on_hand_made_graphs(edge_index, num_layers, expected) -> None:
    n = int(edge_index.max()) + 1
    got = check_conditions(edge_index, n, num_layers)
    assert (got["c1"], got["c2"], got["c3"]) == expected


@pytest.mark.parametrize("num_layers,expected", [(5, True), (4, False)])
def test_c3_follows_the_direction_of_attention(num_layers, expected) -> None:
    # Directed cycle 0 -> 1 -> ... -> 5 -> 0: key j reaches query j+1 only; no hub shortcut.
    src = torch.arange(N)
    ei = torch.cat([torch.stack([src, (src + 1) % N]), src.repeat(2, 1)], dim=1)
    assert check_conditions(ei, N, num_layers)["c3"] is expected


def test_conditions_scale_to_100k_tokens() -> None:
    S = 100_000
    src = torch.arange(S)
    ring = torch.stack([src, (src + 1) % S])
    ei = torch.cat([ring, ring.flip(0), src.repeat(2, 1)], dim=1)
    assert check_conditions(ei, S, num_layers=4) == {"c1": True, "c2": True, "c3": False}
    hub = torch.stack([torch.zeros(S, dtype=torch.long), src])  # token 0 as a global token
    ei = torch.cat([ei, hub, hub.flip(0)], dim=1)
    assert check_conditions(ei, S, num_layers=2)["c3"] is True


def counting(monkeypatch):
    calls = {"dense": 0, "sparse": 0}
    dense, sparse = attention.dense_attention, attention._sparse_attention

    def count_dense(*args, **kwargs):
        calls["dense"] += 1
        return dense(*args, **kwargs)

    def count_sparse(*args, **kwargs):
        calls["sparse"] += 1
        return sparse(*args, **kwargs)

    monkeypatch.setattr(attention, "dense_attention", count_dense)
    monkeypatch.setattr(attention, "_sparse_attention", count_sparse)
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


# --- attend and the graph --------------------------------------------------------------


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


def test_attention_graph_caches_and_moves() -> None:
    S = 10
    ei = random_pattern(S, 20)
    bucket = torch.arange(ei.shape[1])
    graph = AttentionGraph(S, ei, bucket)
    pattern = graph.sorted_by_query()
    assert graph.sorted_by_query() is pattern
    key = pattern.edge_index[1] * S + pattern.edge_index[0]
    assert (key[1:] > key[:-1]).all()
    assert torch.equal(pattern.edge_index, ei[:, pattern.perm])
    assert torch.equal(pattern.edge_bucket, bucket[pattern.perm])
    counts = torch.bincount(ei[1], minlength=S)
    assert pattern.ptr.tolist() == [0] + torch.cumsum(counts, 0).tolist()
    assert graph.conditions() == check_conditions(ei, S, 1)
    moved = graph.to("cpu")
    assert moved is not graph and torch.equal(moved.edge_index, ei)
    assert moved.cache["conditions"] == graph.cache["conditions"]


def test_default_num_clusters() -> None:
    assert default_num_clusters(64, cache_bytes=6 * 2**20) == 8  # the thesis's RTX 3090 fit
    assert default_num_clusters(64, cache_bytes=CLUSTER_CACHE_DIVISOR * 64 * 25) == 5
    assert default_num_clusters(4096, cache_bytes=1024) == 1  # clamped
    assert default_num_clusters(64) >= 1


# --- bad input -------------------------------------------------------------------------


def test_unknown_kind_lists_the_kinds() -> None:
    q, k, v = qkv(4, 1, 2)
    graph = AttentionGraph(4, torch.arange(4).repeat(2, 1))
    with pytest.raises(ValueError) as info:
        attend(q, k, v, graph, "flash", None)
    assert str(KINDS) in str(info.value) and "'flash'" in str(info.value)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, k, v, ei: sparse_attention(q, k[:3], v, ei), "`q` and `k` of the same shape"),
        (lambda q, k, v, ei: dense_attention(q, k, v[:, :1]), "`v` of shape"),
        (lambda q, k, v, ei: raw_attention(q[0], k, v), "`q` of shape"),
        (lambda q, k, v, ei: sparse_attention(q, k, v, ei + 3), r"ids in `edge_index` in \[0, 4\)"),
        (lambda q, k, v, ei: sparse_attention(q, k, v, ei[0]), r"`edge_index` of shape \[2, E\]"),
        (lambda q, k, v, ei: sparse_attention(q, k, v, ei.int()), "dtype torch.long"),
        (
            lambda q, k, v, ei: sparse_attention(q, k, v, ei, torch.ones(3, 2)),
            r"`bias` of shape \[E, H\]",
        ),
        (lambda q, k, v, ei: dense_attention(q, k, v, mask=torch.ones(4, 3).bool()), "`mask`"),
        (lambda q, k, v, ei: raw_attention(q, k, v, bias=torch.ones(4, 4)), "`bias` of shape"),
        (lambda q, k, v, ei: sparse_attention(q, k, v, ei, dropout_p=1.0), "`dropout_p`"),
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
        (lambda q, k, v, ei: check_conditions(ei, 4, 0), "`num_layers` >= 1"),
        (lambda q, k, v, ei: default_num_clusters(0), "`hidden_channels` >= 1"),
    ],
)
def test_bad_input(call, match) -> None:
    q, k, v = (torch.randn(4, 2, 3) for _ in range(3))
    ei = torch.arange(4).repeat(2, 1)
    with pytest.raises(ValueError, match=match):
        call(q, k, v, ei)


def test_graph_validate_rejects_bad_buckets() -> None:
    ei = torch.arange(4).repeat(2, 1)
    with pytest.raises(ValueError, match="`edge_bucket` of shape"):
        AttentionGraph(4, ei, edge_bucket=torch.zeros(3, dtype=torch.long)).validate()
    with pytest.raises(ValueError, match="`dense_bucket` of shape"):
        AttentionGraph(4, ei, dense_bucket=torch.zeros(4, 4)).validate()
    with pytest.raises(ValueError, match="`edge_bucket` >= 0"):
        AttentionGraph(4, ei, edge_bucket=-torch.ones(4, dtype=torch.long)).validate()
    with pytest.raises(ValueError, match="`num_layers` >= 1"):
        AttentionGraph(4, ei, num_layers=0).validate()


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
