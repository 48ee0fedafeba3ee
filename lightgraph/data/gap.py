"""GNN-aware graph partitioning (GAP): label-balanced streaming FENNEL.

GAP (HANOI: T. Huang, *Efficient Systems for Large-Scale Graph Representation Learning*,
PhD thesis, MIT 2025, ch. 4, §4.3.2 and Algorithm 2; "the thesis" below) partitions a
graph so that every part keeps most of its nodes' neighbours (few cut edges, as FENNEL)
*and* a training-label distribution close to the global one (clustering partitioners
such as METIS put same-label nodes together on homophilous graphs, which biases every
macro-batch).

Every node belongs to one *stratum*: its training label (ids ``0 .. L-1``, the distinct
training labels in increasing order), or ``L`` for every non-training node. A node ``v``
of stratum ``s`` goes to the partition that maximises the label-wise FENNEL score of
Eq. 4.2,

.. math::

    \\delta g^{(s)}(v, V_i) = |N(v) \\cap V_i| - \\Delta C_s(|V_i^{(s)}|),

among the partitions whose stratum-``s`` count is below the cap (ties: smallest
partition id). The balancing term is the exact marginal of the per-stratum cost

.. math::

    C_s(c) = \\alpha \\, \\mu_s \\, (c / \\mu_s)^{\\gamma}, \\qquad
    \\Delta C_s(c) = C_s(c + 1) - C_s(c) \\approx \\alpha \\gamma (c / \\mu_s)^{\\gamma - 1},

i.e. FENNEL's :math:`\\delta c(x) = \\alpha\\gamma x^{\\gamma-1}` applied to the
label-normalised size :math:`x = |V_i^{(s)}| / \\mu_s` (``mu_s = n_s / N``, the share of
stratum ``s`` in ``V``), with FENNEL's ``gamma = 1.5`` and
``alpha = balance * m * k**(gamma - 1) / N**gamma`` (``m`` undirected edges, ``k``
parts; ``balance = 1`` is FENNEL's choice). At a balanced state every stratum then has
``x = N / k`` and a marginal cost of about ``1.5 * m / N`` (three quarters of the mean
degree), comparable to the neighbour term. Using the exact marginal makes every
refinement move a coordinate-ascent step: the objective

.. math::

    \\Phi(\\mathcal{P}) = \\#\\{\\text{uncut edges}\\} - \\sum_s \\sum_i C_s(|V_i^{(s)}|)

never decreases during a refinement pass.

Hard caps: partition ``i`` holds at most ``cap_s = ceil(slack * n_s / k)`` nodes of
stratum ``s`` (``slack >= 1``, so the caps always leave room), hence at most about
``slack * N / k + L + 1`` nodes in all.

Schedule: one streaming pass over the nodes in degree-descending order (ties in a
seeded random order), then ``passes`` refinement passes in the same order, each taking
every node out of its partition and placing it again (Algorithm 2). The best partition
is found in ``O(deg(v) + log k)``: a max-heap per stratum over the balance scores
gives the best partition without neighbours, and only the partitions of ``v``'s
neighbours are scanned for the neighbour term. Comparing the two candidates gives
exactly the argmax over all ``k`` partitions that FENNEL's ``O(k)`` scan would find.
Total time ``O((passes + 1) (|E| + |V| log k))`` plus ``O(|E| + |V| log |V|)`` for the
deduplicated undirected adjacency and the stream order (the nodes are renamed in stream
order, so the passes read their per-node arrays sequentially and the high-degree nodes
they look up most share a few cache lines). Unlike the thesis's out-of-core streaming
version, the adjacency is held in memory: ``O(|V| + |E|)`` (int32 ids), plus
``O(k (L + 1))`` for the heaps. Everything runs on the CPU (inputs on another device
are copied) and one core.

The kernels are compiled with numba (``pip install 'numba>=0.59'``); this module
imports without it, and :func:`gap_partition` then raises an ImportError.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import torch
from torch import Tensor

from lightgraph.utilities.checks import (
    check_graph_edge_index,
    check_int,
    check_non_negative,
    check_type,
    describe,
)

__all__ = ["GAP_GAMMA", "gap_partition"]

#: FENNEL's exponent of the balancing cost.
GAP_GAMMA = 1.5
_NUMBA_HINT = "`pip install 'numba>=0.59'`"
# The kernels below are plain Python until the first call of gap_partition, which swaps
# each for its numba dispatcher (numba is imported then, not when lightgraph is).
_KERNELS = (
    "_better",
    "_balance_score",
    "_heap_fix",
    "_undirected_csr",
    "_relabel",
    "_gap_passes",
    "_fill_empty",
)
_compiled = False
_compile_lock = threading.Lock()


def _compile_kernels(owner: str) -> None:
    """Replace the kernels by ``numba.njit(cache=True)`` dispatchers (compiled on their
    first call, or loaded from numba's on-disk cache). Kernels calling kernels resolve
    them through this module's globals when they compile, so they get the dispatchers."""
    global _compiled
    with _compile_lock:
        if _compiled:
            return
        try:
            import numba
        except ImportError as err:
            raise ImportError(
                f"{owner} needs numba to compile its partitioning kernels: {_NUMBA_HINT}."
            ) from err
        jit = numba.njit(cache=True, nogil=True)
        namespace = globals()
        for name in _KERNELS:
            namespace[name] = jit(namespace[name])
        _compiled = True


# ------------------------------------------------------------------------------ kernels
def _undirected_csr(row, col, num_nodes, indices):  # type: ignore[no-untyped-def]
    """Deduplicated undirected adjacency without self-loops.

    ``indices`` is scratch of length ``2 * len(row)`` (its dtype is the output's);
    returns ``(indptr, indices[:nnz])``.
    """
    indptr = np.zeros(num_nodes + 1, np.int64)
    for e in range(row.shape[0]):
        a, b = row[e], col[e]
        if a != b:
            indptr[a + 1] += 1
            indptr[b + 1] += 1
    for v in range(num_nodes):
        indptr[v + 1] += indptr[v]
    fill = indptr[:-1].copy()
    for e in range(row.shape[0]):
        a, b = row[e], col[e]
        if a != b:
            indices[fill[a]] = b
            fill[a] += 1
            indices[fill[b]] = a
            fill[b] += 1
    # Drop repeats, compacting in place (write <= read always); mark[u] == v once u is kept.
    mark = np.full(num_nodes, -1, np.int64)
    write = 0
    start = 0
    for v in range(num_nodes):
        stop = indptr[v + 1]
        for j in range(start, stop):
            u = indices[j]
            if mark[u] != v:
                mark[u] = v
                indices[write] = u
                write += 1
        start = stop
        indptr[v + 1] = write
    return indptr, indices[:write]


def _relabel(indptr, indices, order, rank, out):  # type: ignore[no-untyped-def]
    """The adjacency with node ``order[r]`` renamed ``r``: the passes then read their
    per-node arrays sequentially, and the neighbours they look up most (the high-degree
    nodes, streamed first) share a few cache lines. ``rank`` and ``out`` are scratch
    (``len(order)`` and ``len(indices)``); returns ``(indptr, out)`` of the new graph."""
    num_nodes = order.shape[0]
    for r in range(num_nodes):
        rank[order[r]] = r
    new_indptr = np.zeros(num_nodes + 1, np.int64)
    for r in range(num_nodes):
        v = order[r]
        start = new_indptr[r]
        for j in range(indptr[v], indptr[v + 1]):
            out[start + j - indptr[v]] = rank[indices[j]]
        new_indptr[r + 1] = start + indptr[v + 1] - indptr[v]
    return new_indptr, out


def _better(score_p, p, score_q, q):  # type: ignore[no-untyped-def]
    """Order of the candidates: higher score first, then smaller partition id."""
    return score_p > score_q or (score_p == score_q and p < q)


def _balance_score(s, p, counts, caps, offsets, marginal):  # type: ignore[no-untyped-def]
    c = counts[s, p]
    if c >= caps[s]:
        return -np.inf
    return -marginal[offsets[s] + c]


def _heap_fix(s, p, heap, pos, counts, caps, offsets, marginal):  # type: ignore[no-untyped-def]
    """Restore stratum ``s``'s max-heap after the count of partition ``p`` changed."""
    k = heap.shape[1]
    key = _balance_score(s, p, counts, caps, offsets, marginal)
    i = pos[s, p]
    while i > 0:  # sift up
        parent = (i - 1) // 2
        q = heap[s, parent]
        if not _better(key, p, _balance_score(s, q, counts, caps, offsets, marginal), q):
            break
        heap[s, i] = q
        pos[s, q] = i
        i = parent
    while True:  # sift down
        child = 2 * i + 1
        if child >= k:
            break
        c = heap[s, child]
        ckey = _balance_score(s, c, counts, caps, offsets, marginal)
        if child + 1 < k:
            c2 = heap[s, child + 1]
            c2key = _balance_score(s, c2, counts, caps, offsets, marginal)
            if _better(c2key, c2, ckey, c):
                c, ckey, child = c2, c2key, child + 1
        if not _better(ckey, c, key, p):
            break
        heap[s, i] = c
        pos[s, c] = i
        i = child
    heap[s, i] = p
    pos[s, p] = i


def _gap_passes(  # type: ignore[no-untyped-def]
    indptr, indices, stratum, num_strata, num_parts, caps, mu, alpha, gamma, passes, part
):
    """Streaming pass plus ``passes`` refinement passes of Algorithm 2 over the nodes
    ``0, 1, ...`` (already renamed in stream order), in place on ``part`` (``-1`` =
    unassigned)."""
    k = num_parts
    # Marginal costs Delta C_s(c) for c < cap_s, one run per stratum.
    offsets = np.zeros(num_strata + 1, np.int64)
    for s in range(num_strata):
        offsets[s + 1] = offsets[s] + caps[s]
    marginal = np.empty(offsets[num_strata], np.float64)
    for s in range(num_strata):
        for c in range(caps[s]):
            marginal[offsets[s] + c] = (
                alpha * mu[s] * (((c + 1) / mu[s]) ** gamma - (c / mu[s]) ** gamma)
            )
    counts = np.zeros((num_strata, k), np.int64)
    heap = np.empty((num_strata, k), np.int64)
    pos = np.empty((num_strata, k), np.int64)
    for s in range(num_strata):
        for p in range(k):
            heap[s, p] = p
            pos[s, p] = p
    for v in range(part.shape[0]):
        if part[v] >= 0:
            counts[stratum[v], part[v]] += 1
    for s in range(num_strata):
        for p in range(k):
            _heap_fix(s, p, heap, pos, counts, caps, offsets, marginal)

    num_nbr = np.zeros(k, np.int64)
    adjacent = np.empty(k, np.int64)
    for _ in range(passes + 1):
        for v in range(part.shape[0]):
            s = stratum[v]
            old = part[v]
            if old >= 0:  # move v out of its partition
                counts[s, old] -= 1
                _heap_fix(s, old, heap, pos, counts, caps, offsets, marginal)
            best_p = heap[s, 0]  # best balance: the 1st candidate
            best = _balance_score(s, best_p, counts, caps, offsets, marginal)
            num_adjacent = 0
            for j in range(indptr[v], indptr[v + 1]):
                pu = part[indices[j]]
                if pu >= 0:
                    if num_nbr[pu] == 0:
                        adjacent[num_adjacent] = pu
                        num_adjacent += 1
                    num_nbr[pu] += 1
            for a in range(num_adjacent):  # neighbour-guided search: the 2nd candidate
                p = adjacent[a]
                if counts[s, p] < caps[s]:
                    score = num_nbr[p] + _balance_score(s, p, counts, caps, offsets, marginal)
                    if _better(score, p, best, best_p):
                        best, best_p = score, p
                num_nbr[p] = 0
            part[v] = best_p
            counts[s, best_p] += 1
            _heap_fix(s, best_p, heap, pos, counts, caps, offsets, marginal)
    return part


def _fill_empty(part, k):  # type: ignore[no-untyped-def]
    """Move the smallest-id node of the largest partition into every empty one (this never
    breaks a cap: every non-empty stratum has cap >= 1)."""
    sizes = np.zeros(k, np.int64)
    for v in range(part.shape[0]):
        sizes[part[v]] += 1
    for p in range(k):
        if sizes[p] == 0:
            largest = np.argmax(sizes)
            for v in range(part.shape[0]):
                if part[v] == largest:
                    part[v] = p
                    sizes[largest] -= 1
                    sizes[p] += 1
                    break
    return part


# ------------------------------------------------------------------------------- public API
def gap_partition(
    edge_index: Tensor,
    num_nodes: int,
    num_parts: int,
    y: Tensor,
    train_mask: Tensor,
    *,
    passes: int = 3,
    seed: int = 0,
    balance: float = 1.0,
    slack: float = 1.1,
) -> Tensor:
    """Label-balanced, edge-cut minimising partition (GAP, HANOI Algorithm 2).

    See the module docstring for the score (Eq. 4.2 with the balancing function
    ``Delta C_s``), the caps and the schedule.

    Args:
        edge_index: ``[2, num_edges]`` integer connectivity; treated as undirected
            (neighbours are the union of in- and out-neighbours; repeats and self-loops
            are ignored).
        num_nodes: number of nodes.
        num_parts: number of partitions ``k`` (``1 <= k <= num_nodes``).
        y: node labels: integer ``[num_nodes]`` class ids (``>= 0`` on training nodes),
            or ``[num_nodes, num_classes]`` multi-label scores, reduced to their argmax
            (the first maximal class on ties). Labels of non-training nodes are ignored.
        train_mask: boolean ``[num_nodes]`` mask of the training nodes, whose labels are
            balanced; all other nodes form one extra stratum.
        passes: refinement passes after the streaming pass (``>= 0``).
        seed: orders nodes of equal degree in the stream (the result is deterministic
            for a given seed).
        balance: multiplier of FENNEL's ``alpha`` (``>= 0``): larger values weigh
            balance over the edge cut; ``0`` keeps only the caps.
        slack: cap factor (``>= 1``): partition ``i`` holds at most
            ``ceil(slack * n_s / k)`` nodes of stratum ``s``.

    Returns:
        ``torch.long`` tensor ``[num_nodes]`` with values in ``[0, num_parts)``; every
        partition receives at least one node.

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
        TypeError: if ``edge_index``, ``y`` or ``train_mask`` is not a tensor.
        ImportError: if numba is not installed.
    """
    owner = "gap_partition"
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes)
    num_parts = check_int(owner, "num_parts", num_parts, low=1)
    if num_parts > num_nodes:
        raise ValueError(
            f"{owner}: expected `num_parts` <= num_nodes ({num_nodes}) so that every "
            f"partition owns a node, but got num_parts={num_parts}."
        )
    passes = check_int(owner, "passes", passes, low=0)
    seed = check_int(owner, "seed", seed, low=0)
    balance = check_non_negative(owner, "balance", balance)
    if isinstance(slack, bool) or not isinstance(slack, (int, float)) or not slack >= 1.0:
        raise ValueError(f"{owner}: expected `slack` >= 1 (a real number) but got {slack!r}.")
    stratum, strata_sizes = _strata(owner, y, train_mask, num_nodes)
    _compile_kernels(owner)
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)

    ei = edge_index.cpu().numpy()
    scratch = np.empty(2 * ei.shape[1], np.int32 if num_nodes < 2**31 else np.int64)
    indptr, indices = _undirected_csr(ei[0], ei[1], num_nodes, scratch)
    num_edges = max(int(indptr[-1]) // 2, 1)

    degree = np.diff(indptr)
    perm = np.random.default_rng(seed).permutation(num_nodes)
    order = perm[np.argsort(-degree[perm], kind="stable")]
    del degree, perm
    rank = np.empty(num_nodes, indices.dtype)
    indptr, indices = _relabel(indptr, indices, order, rank, np.empty_like(indices))
    del rank, scratch

    caps = np.array([_cap(slack, int(n), num_parts) for n in strata_sizes], np.int64)
    mu = strata_sizes.astype(np.float64) / num_nodes
    alpha = balance * num_edges * num_parts ** (GAP_GAMMA - 1.0) / num_nodes**GAP_GAMMA
    ranked = np.full(num_nodes, -1, np.int32)  # int32: the random reads stay in cache longer
    _gap_passes(
        indptr, indices, stratum[order], len(strata_sizes), num_parts, caps, mu,
        float(alpha), GAP_GAMMA, passes, ranked,
    )  # fmt: skip
    part = np.empty(num_nodes, np.int64)
    part[order] = ranked
    return torch.from_numpy(_fill_empty(part, num_parts))


def _cap(slack: float, size: int, num_parts: int) -> int:
    """``ceil(slack * size / num_parts)``, robust to the float error in ``slack * size``."""
    return math.ceil(round(slack * size / num_parts, 9))


def _strata(
    owner: str, y: Tensor, train_mask: Tensor, num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-node stratum (compacted training label, or L for non-training) and stratum sizes."""
    check_type(owner, "y", y, torch.Tensor, "integer class ids [N] or multi-label scores [N, C]")
    check_type(owner, "train_mask", train_mask, torch.Tensor, "a boolean mask [N]")
    if train_mask.dtype != torch.bool or tuple(train_mask.shape) != (num_nodes,):
        raise ValueError(
            f"{owner}: expected `train_mask` to be a boolean tensor of shape ({num_nodes},) "
            f"but got {describe(train_mask)}."
        )
    y, train_mask = y.cpu(), train_mask.cpu()
    if y.dim() == 2 and y.size(0) == num_nodes and y.size(1) >= 1 and not y.is_complex():
        rows = y[train_mask]
        labels = (rows.to(torch.uint8) if rows.dtype == torch.bool else rows).argmax(dim=1)
    elif (
        y.dim() == 1
        and y.size(0) == num_nodes
        and not (y.is_floating_point() or y.is_complex() or y.dtype == torch.bool)
    ):
        labels = y[train_mask].long()
        if labels.numel() and int(labels.min()) < 0:
            raise ValueError(
                f"{owner}: expected the training labels `y[train_mask]` to be class ids >= 0 "
                f"but found {int(labels.min())}."
            )
    else:
        raise ValueError(
            f"{owner}: expected `y` to be integer class ids of shape ({num_nodes},) or "
            f"multi-label scores of shape ({num_nodes}, num_classes) but got {describe(y)}."
        )
    classes, compact = torch.unique(labels, return_inverse=True)
    num_labels = classes.numel()
    stratum = torch.full((num_nodes,), num_labels, dtype=torch.int32)
    stratum[train_mask] = compact.int()
    sizes = torch.bincount(stratum.long(), minlength=num_labels + 1)
    return stratum.numpy(), sizes.numpy()
