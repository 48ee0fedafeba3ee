"""sparse_attention: equals masked dense attention, counts duplicates, gradients, dropout."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.utils import softmax as pyg_softmax

from lightgraph.functional.attention import dense_attention, raw_attention, sparse_attention
from tests.functional.attention.common import (
    DT,
    assert_close,
    bad_input,
    dense_reference,
    qkv,
    random_pattern,
)


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


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, k, v, ei: sparse_attention(q, k[:3], v, ei), "`q` and `k` of the same shape"),
        (
            lambda q, k, v, ei: sparse_attention(q, k, v, ei + 3),
            r"token ids in `edge_index` to lie in \[0, 3\] \(num_tokens = 4\)",
        ),
        (
            lambda q, k, v, ei: sparse_attention(q, k, v, ei[0]),
            r"`edge_index` to be a tensor of shape \[2, num_edges\] and dtype torch.long but got shape \(4,\)",
        ),
        (
            lambda q, k, v, ei: sparse_attention(q, k, v, ei.int()),
            "dtype torch.long but got .* dtype torch.int32",
        ),
        (
            lambda q, k, v, ei: sparse_attention(q, k, v, ei, torch.ones(3, 2)),
            r"`bias` of shape \[E, H\]",
        ),
        (lambda q, k, v, ei: sparse_attention(q, k, v, ei, dropout_p=1.0), "`dropout_p`"),
    ],
)
def test_bad_input(call, match) -> None:
    bad_input(call, match)
