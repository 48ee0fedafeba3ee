"""MultiheadGraphAttention: masked-dense references, dense buckets, argument checks, a
cluster count fixed by the configuration, and the kind each call runs (dual, auto)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import lightgraph.functional.attention.cluster_sparse as cluster_sparse
from lightgraph.data.loader.token_batch import TokenBatch
from lightgraph.functional.attention import DEFAULT_DENSE_EVERY
from lightgraph.nn.attention import MultiheadGraphAttention
from tests.functional.attention.test_cluster_sparse import _refuse_machine_reads
from tests.nn.models.transformer_checks import sequence


def _reference(attn: MultiheadGraphAttention, x: Tensor, batch: TokenBatch, masked: bool) -> Tensor:
    """Materialised softmax attention: the pattern as a mask and its buckets as bias, or
    (``masked=False``) every pair with its ``dense_bucket`` bias."""
    graph = batch.graph
    S, H, D = x.size(0), attn.heads, attn.head_channels
    q, k, v = (p(x).view(S, H, D) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    table = attn.full_bias_table()
    if masked:
        src, dst = graph.edge_index
        bias = torch.full((H, S, S), float("-inf"), dtype=x.dtype)
        bias[:, dst, src] = table[graph.edge_bucket].t()
    else:
        bias = table[graph.dense_bucket].permute(2, 0, 1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D) + bias
    out = torch.einsum("hij,jhd->ihd", scores.softmax(-1), v)
    return attn.out_proj(out.reshape(S, H * D))


def _attention(kind: str, **kwargs) -> MultiheadGraphAttention:
    torch.manual_seed(1)
    attn = MultiheadGraphAttention(8, 4, kind=kind, num_buckets=9, **kwargs).double()
    torch.nn.init.normal_(attn.bias_table, std=1.0)  # a bias large enough to matter
    return attn


@pytest.mark.parametrize("kind", ["sparse", "cluster_sparse"])
def test_sparse_kinds_equal_dense_attention_under_the_pattern_mask(kind: str) -> None:
    item = sequence(n=40, dense_limit=0)
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    attn = _attention(kind, num_clusters=3, block_size=4)  # threshold 0: exact layout
    torch.testing.assert_close(attn(x, item.graph), _reference(attn, x, item, masked=True))


@pytest.mark.parametrize("kind", ["dense", "raw"])
def test_dense_kinds_use_the_dense_buckets(kind: str) -> None:
    item = sequence(n=30)
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    attn = _attention(kind)
    torch.testing.assert_close(attn(x, item.graph), _reference(attn, x, item, masked=False))
    assert attn.last_dense and attn.last_kind == kind


@pytest.mark.parametrize("sparse_kind", ["sparse", "cluster_sparse"])
def test_dual_runs_its_schedule_and_reports_the_kind(sparse_kind: str) -> None:
    item = sequence(n=30)
    item.graph.num_layers = 2  # C3 through the global token
    assert all(item.graph.conditions().values())  # C2 through the token path
    attn = _attention("dual", dense_every=3, sparse_kind=sparse_kind, num_clusters=3)
    assert attn.last_kind is None and not attn.last_dense
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    kinds, dense = [], []
    for _ in range(7):
        attn(x, item.graph)
        kinds.append(attn.last_kind)
        dense.append(attn.last_dense)
    assert kinds == ["dense", sparse_kind, sparse_kind] * 2 + ["dense"]
    assert dense == [kind == "dense" for kind in kinds] and attn.step == 7
    # Evaluation ignores the period: step 9 is a multiple of 3, yet the sparse kind runs.
    attn.eval()
    attn.step = 9
    for _ in range(2):
        attn(x, item.graph)
        assert attn.last_kind == sparse_kind and not attn.last_dense
    assert attn.step == 9  # evaluation does not advance the schedule
    assert "dense_every=3" in repr(attn) and f"sparse_kind='{sparse_kind}'" in repr(attn)


def test_default_period_and_auto(monkeypatch) -> None:
    attn = MultiheadGraphAttention(8, 2, kind="dual")
    assert attn.dense_every == DEFAULT_DENSE_EVERY == 11 and attn.sparse_kind == "sparse"
    item = sequence(n=30)
    item.graph.num_layers = 2
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    attn = _attention("auto", num_clusters=3, block_size=4)
    for min_fill, expected in ((0.0, "cluster_sparse"), (1.5, "sparse")):
        monkeypatch.setattr(cluster_sparse, "AUTO_MIN_TILE_FILL", min_fill)
        assert attn.resolve_kind(item.graph) == expected
        out = attn(x, item.graph)
        assert attn.last_kind == expected and not attn.last_dense
        attn.kind = expected
        torch.testing.assert_close(out, attn(x, item.graph), rtol=0, atol=0)
        attn.kind = "auto"
    attn.kind, attn.sparse_kind = "dual", "auto"
    attn.step = 1
    assert attn.resolve_kind(item.graph) == "sparse"  # AUTO_MIN_TILE_FILL is still 1.5


def test_default_cluster_count_depends_on_the_configuration_only(monkeypatch) -> None:
    _refuse_machine_reads(monkeypatch)
    attn = MultiheadGraphAttention(64, 8, kind="cluster_sparse")
    assert attn.num_clusters is None
    # From all 64 channels, also on a rank that computes only some heads.
    assert [attn.cluster_count(S) for S in (5, 8, 50, 4096)] == [5, 8, 8, 8]
    attn.sequence_parallel = type("TwoRanks", (), {"world_size": 2})()
    assert attn.cluster_count(50) == 8
    attn.sequence_parallel = None
    assert MultiheadGraphAttention(64, 8, num_clusters=3).cluster_count(50) == 3
    item = sequence(n=49, dense_limit=0)  # 50 tokens with the global token
    attn(torch.randn(item.num_tokens, 64), item.graph)
    key, layout = item.graph.cache["cluster_layout"]
    assert key == (8, 16, 0.0)
    assert layout.cluster_ptr.tolist() == [0, 7, 14, 20, 26, 32, 38, 44, 50]


def test_bad_arguments() -> None:
    attn = MultiheadGraphAttention(8, 2)
    with pytest.raises(ValueError, match="`threshold` in \\[0, 1\\]"):
        attn.threshold = 1.5
    with pytest.raises(ValueError, match="`kind` to be one of"):
        attn.kind = "linear"
    with pytest.raises(
        ValueError,
        match=r"`sparse_kind` to be one of \('sparse', 'cluster_sparse', 'auto'\) but got 'dense'",
    ):
        MultiheadGraphAttention(8, 2, kind="dual", sparse_kind="dense")
    with pytest.raises(ValueError, match="expected all 25 tokens .* got 10"):
        MultiheadGraphAttention(8, 2)(torch.randn(10, 8), sequence().graph)
    with pytest.raises(
        ValueError,
        match=r"`channels` \(8\) to be divisible by `heads` \(3\); pick `heads` in \(1, 2, 4, 8\)",
    ):
        MultiheadGraphAttention(8, 3)
    with pytest.raises(ValueError, match="`num_clusters` to be None or an integer >= 1"):
        MultiheadGraphAttention(8, 2, num_clusters=0)
