"""Inputs and references shared by the attention-kernel tests."""

from __future__ import annotations

import pytest
import torch

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


def bad_input(call, match) -> None:
    """``call(q, k, v, ei)`` on 4 tokens, 2 heads raises a ValueError matching ``match``."""
    q, k, v = (torch.randn(4, 2, 3) for _ in range(3))
    ei = torch.arange(4).repeat(2, 1)
    with pytest.raises(ValueError, match=match):
        call(q, k, v, ei)
