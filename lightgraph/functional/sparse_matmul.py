"""Sparse-dense products whose backward reuses a cached transposed adjacency."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode


class _CachedTransposeSpmm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, x: Tensor, adj: Tensor, adj_transposed: Tensor, inv_deg: Tensor | None
    ) -> Tensor:  # type: ignore[override]
        ctx.adj_transposed = adj_transposed
        ctx.inv_deg = inv_deg
        out = torch.sparse.mm(adj, x)
        return out if inv_deg is None else out * inv_deg

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.inv_deg is not None:
            grad = grad * ctx.inv_deg
        return torch.sparse.mm(ctx.adj_transposed, grad.contiguous()), None, None, None


def cached_transpose_spmm(
    adj: Tensor, adj_transposed: Tensor, x: Tensor, reduce: str = "sum"
) -> Tensor:
    """``adj @ x`` (``reduce="sum"``) or its row mean (``reduce="mean"``) for a CSR ``adj``.

    The gradient with respect to ``x`` is ``adj.T @ grad``; torch builds ``adj.T`` in CSR
    form (a sort of all non-zeros) on every backward call, which dominates a GCN layer's
    step on CPU. Here the caller supplies it once.

    Args:
        adj: ``[M, N]`` sparse CSR matrix (its values do not require gradients).
        adj_transposed: ``adj.t()`` as a sparse CSR matrix ``[N, M]``.
        x: dense ``[N, F]``.
        reduce: ``"sum"`` or ``"mean"`` (mean over each row's stored entries, as
            ``torch.sparse.mm(adj, x, "mean")``).
    """
    if reduce not in ("sum", "mean"):
        raise ValueError(
            f"cached_transpose_spmm: expected `reduce` in ('sum', 'mean') but got {reduce!r}."
        )
    inv_deg = None
    if reduce == "mean":
        crow = adj.crow_indices()
        inv_deg = 1.0 / (crow[1:] - crow[:-1]).clamp(min=1).to(x.dtype).view(-1, 1)
    return _CachedTransposeSpmm.apply(x, adj, adj_transposed, inv_deg)


class _SpmmMode(TorchFunctionMode):
    def __init__(self, pairs: dict[int, tuple[Tensor, Tensor]]) -> None:
        super().__init__()
        self.pairs = pairs

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if func is torch.sparse.mm and args and id(args[0]) in self.pairs and not kwargs:
            adj, adj_transposed = self.pairs[id(args[0])]
            reduce = args[2] if len(args) > 2 else "sum"
            if adj is args[0] and reduce in ("sum", "mean") and args[1].layout == torch.strided:
                return cached_transpose_spmm(adj, adj_transposed, args[1], reduce)
        return func(*args, **kwargs)


@contextmanager
def spmm_with_cached_transpose(adj: Tensor, adj_transposed: Tensor) -> Iterator[None]:
    """Route ``torch.sparse.mm(adj, x[, "sum" | "mean"])`` calls through :func:`cached_transpose_spmm`.

    PyG layers with a fused sparse path (``GCNConv``, ``SAGEConv``, ``GCN2Conv``, ...)
    call ``torch.sparse.mm`` on the adjacency they are given; inside this context those
    calls on ``adj`` (identified by object identity) reuse ``adj_transposed`` in backward.
    Every other call is untouched.
    """
    with _SpmmMode({id(adj): (adj, adj_transposed)}):
        yield
