"""Queries whose every key is masked (all ``-inf`` bias, e.g. the masked bucket): zeros and
finite gradients under every kind, the other queries as a hand-written masked softmax."""

from __future__ import annotations

import math

import torch

from lightgraph.functional.attention import AttentionGraph, attend, dense_attention, raw_attention
from tests.functional.attention.common import DT, qkv, random_pattern

S, H, D = 14, 2, 4
MASKED = 4  # the table's last row, -inf for every head
DEAD = (2, 7)  # queries whose every entry gets the masked bucket


def _graph() -> AttentionGraph:
    """A random pattern (token S-1 has no entry at all, token S-2 one), learned buckets
    0..3, every entry of the DEAD queries in the masked bucket; ``dense_bucket`` gives the
    pattern's pairs their bucket and every other pair the masked one, so the dense kinds
    attend the same pairs as the sparse ones."""
    ei = random_pattern(S, 40)
    bucket = torch.randint(0, MASKED, (ei.shape[1],), generator=torch.Generator().manual_seed(3))
    dead = torch.isin(ei[1], torch.tensor(DEAD))
    assert int(dead.sum()) >= 2
    bucket[dead] = MASKED
    dense = torch.full((S, S), MASKED, dtype=torch.long)
    dense[ei[1], ei[0]] = bucket
    return AttentionGraph(S, ei, bucket, dense)


def _table() -> torch.Tensor:
    table = torch.randn(MASKED + 1, H, dtype=DT, generator=torch.Generator().manual_seed(4))
    table[MASKED] = float("-inf")
    return table


def _reference(q, k, v, graph: AttentionGraph, table: torch.Tensor) -> torch.Tensor:
    """Softmax over each query's unmasked entries, one query and head at a time."""
    out = torch.zeros(S, H, D, dtype=DT)
    src, dst = graph.edge_index.tolist()
    for i in range(S):
        for h in range(H):
            keys, logits = [], []
            for j, query, b in zip(src, dst, graph.edge_bucket.tolist(), strict=True):
                if query == i and b != MASKED:
                    keys.append(j)
                    logits.append(float(q[i, h] @ k[j, h]) / math.sqrt(D) + float(table[b, h]))
            if not keys:
                continue
            weights = torch.tensor(logits, dtype=DT).softmax(0)
            out[i, h] = (weights[:, None] * v[keys, h]).sum(0)
    return out


def test_every_kind_gives_zeros_and_finite_gradients_for_fully_masked_queries() -> None:
    graph = _graph()
    weight = torch.randn(S, H, D, dtype=DT, generator=torch.Generator().manual_seed(5))
    results = {}
    for kind in ("dense", "raw", "sparse", "cluster_sparse"):
        q, k, v = qkv(S, H, D)
        table = _table().requires_grad_()
        out = attend(q, k, v, graph, kind, table, num_clusters=3, block_size=4)
        grads = torch.autograd.grad((out * weight).sum(), (q, k, v, table))
        assert torch.isfinite(out).all(), kind
        for name, g in zip("qkvb", grads, strict=True):
            assert torch.isfinite(g).all(), (kind, name)
        results[kind] = [out.detach(), *grads]
    dead = list(DEAD) + [S - 1]  # S - 1: a query without any entry
    for kind, (out, *grads) in results.items():
        assert not out[dead].any(), kind
        assert not grads[0][dead].any(), kind  # no gradient reaches a dead query
        assert not grads[3][MASKED].any(), kind  # nor the masked row
        for a, b in zip(results["sparse"], [out, *grads], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=kind)
    q, k, v = (t.detach() for t in qkv(S, H, D))
    torch.testing.assert_close(results["raw"][0], _reference(q, k, v, graph, _table()))


def test_dense_kernels_on_an_all_minus_inf_bias_row() -> None:
    """The kernels directly: a head's bias row of -inf (with and without a mask) gives zeros
    and leaves the other rows' outputs and gradients as without that row."""
    q, k, v = qkv(6, H, 3)
    bias = torch.randn(H, 6, 6, dtype=DT)
    mask = torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) < 0.7
    mask.fill_diagonal_(True)
    for m in (None, mask):
        dead_bias = bias.clone()
        dead_bias[1, 4] = float("-inf")  # head 1 of query 4
        outs = {}
        for fn in (dense_attention, raw_attention):
            b = dead_bias.clone().requires_grad_()
            out = fn(q, k, v, bias=b, mask=m)
            grads = torch.autograd.grad(out.square().sum(), (q, k, v, b))
            assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
            assert not out[4, 1].any() and not grads[3][1, 4].any()
            outs[fn.__name__] = [out, *grads]
        for a, b in zip(outs["dense_attention"], outs["raw_attention"], strict=True):
            torch.testing.assert_close(a, b)
        # The live rows equal attention with head 1 of query 4 left out of the loss.
        b = bias.clone().requires_grad_()
        out = raw_attention(q, k, v, bias=b, mask=m)
        keep = torch.ones_like(out)
        keep[4, 1] = 0.0
        grads = torch.autograd.grad((out * keep).square().sum(), (q, k, v))
        live = outs["raw_attention"]
        torch.testing.assert_close(live[0] * keep, out * keep)
        for a, g in zip(live[1:4], grads, strict=True):
            torch.testing.assert_close(a, g)
