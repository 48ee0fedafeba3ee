"""A token pattern sorted by query, then key: the CSR order the sparse kernels read."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

__all__ = ["SortedPattern", "sort_by_query"]


class SortedPattern(NamedTuple):
    """A pattern sorted by query, then key (CSR order).

    Attributes:
        edge_index: ``[2, E]`` the sorted pattern.
        edge_bucket: ``[E]`` the sorted buckets (``None`` without buckets).
        perm: ``[E]`` the sort: ``sorted = original[..., perm]``.
        ptr: ``[S + 1]`` CSR pointer: the entries of query ``i`` are ``ptr[i]:ptr[i + 1]``.
    """

    edge_index: Tensor
    edge_bucket: Tensor | None
    perm: Tensor
    ptr: Tensor


def sort_by_query(edge_index: Tensor, num_tokens: int, edge_bucket: Tensor | None) -> SortedPattern:
    """Sort a ``[2, E]`` pattern by query, then key (stable; no copy when already sorted).

    Args:
        edge_index: ``[2, E]`` long, row 0 key, row 1 query.
        num_tokens: sequence length ``S``.
        edge_bucket: ``[E]`` buckets sorted along, or ``None``.

    Returns:
        The :class:`SortedPattern` with its CSR pointer over ``S`` queries.
    """
    src, dst = edge_index
    key = dst * num_tokens + src
    if key.numel() < 2 or bool((key[1:] >= key[:-1]).all()):
        perm = torch.arange(key.numel(), device=key.device)
    else:
        perm = torch.argsort(key, stable=True)
        edge_index = edge_index[:, perm]
        edge_bucket = None if edge_bucket is None else edge_bucket[perm]
    counts = torch.bincount(edge_index[1], minlength=num_tokens)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    return SortedPattern(edge_index, edge_bucket, perm, ptr)
