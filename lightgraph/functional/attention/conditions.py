"""TorchGT's conditions C1-C3 on a topology-induced pattern.

TorchGT is ch. 4 of M. Zhang's PhD thesis (*Algorithm and System Co-design for Efficient
and Scalable Graph Learning*, NTU 2026); "the thesis" below means that one.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch import Tensor

from lightgraph.utilities.checks import check_graph_edge_index

__all__ = ["EXACT_HAMILTONIAN_MAX_TOKENS", "check_conditions"]


#: Largest sequence for which C2 is decided exactly (a bitmask search over all token
#: subsets, :math:`O(2^S S)`) when neither the token order nor Dirac's theorem certifies
#: a Hamiltonian path. 16 tokens take a few milliseconds.
EXACT_HAMILTONIAN_MAX_TOKENS: int = 16


def _simple_pairs(src: Tensor, dst: Tensor, n: int) -> Tensor:
    """``lo * n + hi`` of every undirected pair ``lo < hi`` of the pattern (sorted, unique)."""
    off = src != dst
    lo, hi = torch.minimum(src[off], dst[off]), torch.maximum(src[off], dst[off])
    return torch.unique(lo * n + hi)


@functools.lru_cache(maxsize=4)
def _subsets_by_size(n: int) -> tuple[Tensor, list[Tensor]]:
    """The token bits ``[n]`` and, per size ``k = 0 .. n``, the subsets of ``n`` tokens of
    that size (as bitmasks)."""
    bits = torch.ones(n, dtype=torch.long) << torch.arange(n)
    masks = torch.arange(1 << n, dtype=torch.long)
    size = ((masks[:, None] & bits) != 0).sum(1)
    order = torch.argsort(size, stable=True)
    counts = torch.bincount(size, minlength=n + 1).tolist()
    return bits, list(masks[order].split(counts))


def _has_hamiltonian_path_exact(pairs: Tensor, n: int) -> bool:
    """Whether the undirected simple graph of ``pairs`` has a Hamiltonian path (exact).

    Held-Karp over subsets, vectorised per subset size: ``ends[m]`` is the bitmask of the
    tokens at which a path visiting exactly the tokens of ``m`` can end.
    """
    pairs = pairs.cpu()
    adjacency = [0] * n
    for a, b in zip((pairs // n).tolist(), (pairs % n).tolist(), strict=True):
        adjacency[a] |= 1 << b
        adjacency[b] |= 1 << a
    adj = torch.tensor(adjacency, dtype=torch.long)
    bits, by_size = _subsets_by_size(n)
    ends = torch.zeros(1 << n, dtype=torch.long)
    ends[bits] = bits  # a single token is a path ending at itself
    for m in by_size[2:]:
        inside = (m[:, None] & bits) != 0  # [M, n]: token v in m
        before = ends[m[:, None] ^ bits]  # paths over m without v ...
        extend = inside & ((before & adj) != 0)  # ... that end next to v
        ends[m] = (extend.long() * bits).sum(1)
    return bool(ends[-1] != 0)


def _hamiltonian_path(src: Tensor, dst: Tensor, n: int) -> bool:
    """Condition C2 on the undirected simple graph of the pattern (see :func:`check_conditions`)."""
    if n <= 1:
        return True
    pairs = _simple_pairs(src, dst, n)
    chain = torch.arange(n - 1, device=src.device)
    if bool(torch.isin(chain * n + chain + 1, pairs).all()):
        return True  # the token order 0, 1, ..., n-1 is itself a Hamiltonian path
    if pairs.numel() < n - 1:
        return False  # too few pairs to connect n tokens
    if n >= 3:
        degree = torch.bincount(pairs // n, minlength=n) + torch.bincount(pairs % n, minlength=n)
        if bool(2 * degree.min() >= n):
            return True  # Dirac: a Hamiltonian cycle, hence a path
    if n <= EXACT_HAMILTONIAN_MAX_TOKENS:
        return _has_hamiltonian_path_exact(pairs, n)
    return False  # cannot certify


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


# Up to this many tokens C3 is decided on a dense boolean reachability matrix (faster
# than sparse BFS steps for small sequences; the same answer).
_DENSE_REACH_MAX_TOKENS = 128


def _within_hops_dense(src: Tensor, dst: Tensor, n: int, num_layers: int) -> bool:
    """:func:`_within_hops` on a dense ``[n, n]`` matrix: ``R <- R | A R`` from ``R = I``."""
    adjacency = torch.zeros(n, n, device=src.device)
    adjacency[dst, src] = 1.0  # row: query, column: key
    reached = torch.eye(n, device=src.device)
    for _ in range(num_layers):
        grown = ((reached + adjacency @ reached) > 0).float()
        if bool((grown == reached).all()):
            break  # nothing new: later hops add nothing either
        reached = grown
    return bool((reached > 0).all())


def _within_hops(src: Tensor, dst: Tensor, n: int, num_layers: int) -> bool:
    """Whether information of every token reaches every other within ``num_layers`` hops."""
    if n <= 1:
        return True
    if n <= _DENSE_REACH_MAX_TOKENS:
        return _within_hops_dense(src, dst, n, num_layers)
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
    * ``c2``: the pattern has a Hamiltonian path, on its undirected simple graph
      (directions, self-loops and duplicates dropped). ``True`` when the token order
      ``0, 1, ..., S-1`` is a path of the graph (always the case for patterns built with
      the token path, :func:`~lightgraph.functional.attention.add_token_path`), or when
      Dirac's theorem applies (:math:`S \\ge 3` and minimum degree :math:`\\ge S/2`,
      which gives a Hamiltonian cycle). Otherwise, for
      :math:`S \\le` :data:`EXACT_HAMILTONIAN_MAX_TOKENS` (16), an exact search over all
      token subsets decides, so ``False`` means "no Hamiltonian path"; for longer
      sequences ``False`` means "cannot certify" (there may be a path the two sufficient
      tests miss). ``S <= 1`` passes.
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
        "c2": _hamiltonian_path(src, dst, num_tokens),
        "c3": _within_hops(src, dst, num_tokens, num_layers),
    }
