"""MultiheadGraphAttention: masked-dense references, dense buckets, argument checks, and a
cluster count fixed by the configuration."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from lightgraph.data.token_batch import TokenBatch
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
    assert attn.last_dense


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
    with pytest.raises(ValueError, match="expected all 25 tokens .* got 10"):
        MultiheadGraphAttention(8, 2)(torch.randn(10, 8), sequence().graph)
    with pytest.raises(
        ValueError,
        match=r"`channels` \(8\) to be divisible by `heads` \(3\); pick `heads` in \(1, 2, 4, 8\)",
    ):
        MultiheadGraphAttention(8, 3)
    with pytest.raises(ValueError, match="`num_clusters` to be None or an integer >= 1"):
        MultiheadGraphAttention(8, 2, num_clusters=0)
