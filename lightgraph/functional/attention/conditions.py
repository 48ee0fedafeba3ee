"""TorchGT's conditions C1-C3 on a topology-induced pattern, and the dual-attention schedule."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lightgraph.utilities.checks import check_graph_edge_index

if TYPE_CHECKING:
    from lightgraph.functional.attention.pattern import AttentionGraph

__all__ = ["check_conditions", "dual_uses_dense"]


def _hamiltonian_certificate(src: Tensor, dst: Tensor, n: int) -> bool:
    """Whether the undirected simple graph of the pattern provably has a Hamiltonian path."""
    if n <= 1:
        return True
    off = src != dst
    lo, hi = torch.minimum(src[off], dst[off]), torch.maximum(src[off], dst[off])
    pairs = torch.unique(lo * n + hi)
    chain = torch.arange(n - 1, device=src.device)
    if bool(torch.isin(chain * n + chain + 1, pairs).all()):
        return True  # the token order 0, 1, ..., n-1 is itself a Hamiltonian path
    if n < 3:
        return False
    degree = torch.bincount(pairs // n, minlength=n) + torch.bincount(pairs % n, minlength=n)
    return bool(2 * degree.min() >= n)  # Dirac: a Hamiltonian cycle, hence a path


def _csr_adjacency(rows: Tensor, cols: Tensor, n: int) -> Tensor:
    order = torch.argsort(rows * n + cols)
    rows, cols = rows[order], cols[order]
    counts = torch.bincount(rows, minlength=n)
    crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    values = torch.ones(rows.numel(), device=rows.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, cols, values, (n, n), check_invariants=False)


def _hops_to_cover(adjacency: Tensor, start: Tensor, max_hops: int) -> int | None:
    """Hops until every column's BFS (from the rows ``start`` marks) covers all tokens."""
    reached = start
    if bool(reached.all()):
        return 0
    for hop in range(1, max_hops + 1):
        reached = reached | (torch.sparse.mm(adjacency, reached.float()) > 0)
        if bool(reached.all()):
            return hop
    return None


def _within_hops(src: Tensor, dst: Tensor, n: int, num_layers: int) -> bool:
    """Whether information of every token reaches every other within ``num_layers`` hops."""
    if n <= 1:
        return True
    forward = _csr_adjacency(dst, src, n)  # (A x)_i gathers from the keys of query i
    backward = _csr_adjacency(src, dst, n)
    off = src != dst
    degree = torch.bincount(src[off], minlength=n) + torch.bincount(dst[off], minlength=n)
    hub = torch.zeros(n, 1, dtype=torch.bool, device=src.device)
    hub[int(degree.argmax())] = True
    # The hub must reach everyone and be reached by everyone: otherwise C3 fails at once.
    out_hops = _hops_to_cover(forward, hub, num_layers)
    if out_hops is None:
        return False
    in_hops = _hops_to_cover(backward, hub, num_layers)
    if in_hops is None:
        return False
    if out_hops + in_hops <= num_layers:
        return True  # every pair routes through the hub (e.g. a global token)
    # Exact: a BFS from every token, a batch of sources per sparse product, first failure exits.
    batch = max(1, min(n, (1 << 22) // n))
    for first in range(0, n, batch):
        sources = torch.arange(first, min(first + batch, n), device=src.device)
        start = torch.zeros(n, sources.numel(), dtype=torch.bool, device=src.device)
        start[sources, torch.arange(sources.numel(), device=src.device)] = True
        if _hops_to_cover(forward, start, num_layers) is None:
            return False
    return True


def check_conditions(edge_index: Tensor, num_tokens: int, num_layers: int) -> dict[str, bool]:
    """TorchGT's conditions for the topology-induced pattern (Thesis ch. 4, §4.3.2).

    * ``c1``: every token has a self-loop entry.
    * ``c2``: the pattern has a Hamiltonian path -- *certified* by a sufficient test on the
      undirected simple graph (directions, self-loops and duplicates dropped): either the
      token order ``0, 1, ..., S-1`` is a path of the graph, or Dirac's theorem applies
      (:math:`S \\ge 3` and minimum degree :math:`\\ge S/2`, which gives a Hamiltonian
      cycle). ``False`` means "cannot certify", not "no such path". ``S <= 1`` passes.
    * ``c3``: information of every token reaches every other token within ``num_layers``
      hops along the entries (key to query; walks of at most ``num_layers`` edges). Sparse
      BFS steps with early exit: the highest-degree token must reach and be reached by all
      tokens (else ``False``); if the two hop counts sum to at most ``num_layers`` (a
      global token) the answer is ``True``; otherwise batched BFS from every token decides.

    Args:
        edge_index: ``[2, E]`` long, row 0 key (source), row 1 query (target).
        num_tokens: sequence length ``S``.
        num_layers: model depth ``L``.

    Returns:
        ``{"c1": bool, "c2": bool, "c3": bool}``.
    """
    owner = "check_conditions"
    if not isinstance(num_tokens, int) or num_tokens < 1:
        raise ValueError(f"{owner}: expected `num_tokens` >= 1 but got {num_tokens!r}.")
    if not isinstance(num_layers, int) or num_layers < 1:
        raise ValueError(f"{owner}: expected `num_layers` >= 1 but got {num_layers!r}.")
    check_graph_edge_index(
        owner, "edge_index", edge_index, num_tokens, unit="token", require_long=True
    )
    src, dst = edge_index
    has_loop = torch.zeros(num_tokens, dtype=torch.bool, device=src.device)
    has_loop[src[src == dst]] = True
    return {
        "c1": bool(has_loop.all()),
        "c2": _hamiltonian_certificate(src, dst, num_tokens),
        "c3": _within_hops(src, dst, num_tokens, num_layers),
    }


def dual_uses_dense(graph: AttentionGraph, step: int, dense_every: int) -> bool:
    """Whether dual-interleaved attention runs the dense pattern at ``step``.

    Dense when ``dense_every > 0`` and ``step % dense_every == 0`` (the periodic
    fully-connected interleave), and always when ``graph`` fails any of C1-C3.

    Args:
        graph: the sequence's pattern (its conditions are cached on it).
        step: the training step.
        dense_every: period of the dense interleave (0: only when a condition fails).
    """
    owner = "dual_uses_dense"
    if not isinstance(dense_every, int) or dense_every < 0:
        raise ValueError(f"{owner}: expected `dense_every` >= 0 but got {dense_every!r}.")
    if not isinstance(step, int) or step < 0:
        raise ValueError(f"{owner}: expected `step` >= 0 but got {step!r}.")
    if dense_every > 0 and step % dense_every == 0:
        return True
    return not all(graph.conditions().values())
