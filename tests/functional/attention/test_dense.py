"""dense_attention: the fused kernel without mask, argument checks."""

from __future__ import annotations

import pytest
import torch

from lightgraph.functional.attention import dense_attention
from tests.functional.attention.common import bad_input


def autograd_node_names(out: torch.Tensor, depth: int = 4) -> set[str]:
    names, frontier = set(), [out.grad_fn]
    for _ in range(depth):
        frontier = [n for fn in frontier if fn is not None for n, _ in fn.next_functions]
        names |= {type(fn).__name__ for fn in frontier if fn is not None}
    return names | {type(out.grad_fn).__name__}


def test_dense_uses_the_fused_kernel_without_mask() -> None:
    q, k, v = (torch.randn(64, 2, 8, requires_grad=True) for _ in range(3))
    assert any("Flash" in name for name in autograd_node_names(dense_attention(q, k, v)))


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda q, k, v, ei: dense_attention(q, k, v[:, :1]), "`v` of shape"),
        (lambda q, k, v, ei: dense_attention(q, k, v, mask=torch.ones(4, 3).bool()), "`mask`"),
    ],
)
def test_bad_input(call, match) -> None:
    bad_input(call, match)
