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
they look up most share a few cache lines). :func:`gap_partition` holds the adjacency
in memory: ``O(|V| + |E|)`` (int32 ids), plus ``O(k (L + 1))`` for the heaps.
:func:`gap_partition_on_disk`, like the thesis's out-of-core streaming version, keeps
its ``O(|V|)`` state in memory-mapped work files and only ``O(k (L + 1))`` state and
chunks of a memory budget in memory: it builds
the same adjacency by a chunked counting sort into memory-mapped files and streams it
through the same passes, so it returns the same partition. Everything runs on the CPU
(inputs on another device are copied) and one core.

The kernels are compiled with numba (``pip install 'numba>=0.59'``); this module
imports without it, and :func:`gap_partition` then raises an ImportError.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator

import numpy as np
import torch
from numpy.lib.format import open_memmap
from torch import Tensor

from lightgraph.data.partition.out_of_core import check_bool_mask, check_edge_array
from lightgraph.utilities.arrays import WorkArrays, edge_chunks, id_dtype_for
from lightgraph.utilities.checks import (
    check_edge_ids,
    check_graph_edge_index,
    check_int,
    check_non_negative,
    check_type,
    describe,
)
from lightgraph.utilities.memory import check_memory_budget
from lightgraph.utilities.spill import KeyedSpill

__all__ = ["GAP_GAMMA", "gap_partition", "gap_partition_on_disk"]

#: FENNEL's exponent of the balancing cost.
GAP_GAMMA = 1.5
_NUMBA_HINT = "`pip install 'numba>=0.59'`"
# The kernels below are plain Python until the first call of gap_partition, which swaps
# each for its numba dispatcher (numba is imported then, not when lightgraph is).
_KERNELS = (
    "_csr_count",
    "_csr_scatter",
    "_csr_dedup",
    "_better",
    "_balance_score",
    "_heap_fix",
    "_undirected_csr",
    "_relabel",
    "_gap_passes",
    "_fill_empty",
    "_invert",
    "_ordered_offsets",
    "_max_degree",
    "_order_by_degree",
    "_gather",
    "_scatter",
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
def _csr_count(row, col, indptr):  # type: ignore[no-untyped-def]
    """Add the undirected degree (self-loops skipped, repeats counted) of one chunk of
    edges to ``indptr[1:]``."""
    for e in range(row.shape[0]):
        a, b = row[e], col[e]
        if a != b:
            indptr[a + 1] += 1
            indptr[b + 1] += 1


def _csr_scatter(row, col, first, fill, out):  # type: ignore[no-untyped-def]
    """Append, in edge order, the neighbours that one chunk of edges gives the nodes
    ``first .. first + len(fill) - 1``: node ``v``'s next slot is ``out[fill[v - first]]``.
    Every edge ``a - b`` appends ``b`` to ``a`` and ``a`` to ``b``."""
    stop = first + fill.shape[0]
    for e in range(row.shape[0]):
        a, b = row[e], col[e]
        if a != b:
            if first <= a < stop:
                out[fill[a - first]] = b
                fill[a - first] += 1
            if first <= b < stop:
                out[fill[b - first]] = a
                fill[b - first] += 1


def _csr_dedup(indptr, first, stop, adjacency, mark, new_indptr):  # type: ignore[no-untyped-def]
    """Drop the repeated neighbours of nodes ``first .. stop - 1`` (first occurrence kept),
    compacting ``adjacency`` (their slots, from ``indptr[first]``) in place (write <= read
    always); ``mark[u] == v`` once ``u`` is kept for ``v``. Sets ``new_indptr[first + 1 :
    stop + 1]`` after ``new_indptr[first]`` and returns the number of neighbours kept."""
    base = indptr[first]
    write = 0
    for v in range(first, stop):
        for j in range(indptr[v] - base, indptr[v + 1] - base):
            u = adjacency[j]
            if mark[u] != v:
                mark[u] = v
                adjacency[write] = u
                write += 1
        new_indptr[v + 1] = new_indptr[first] + write
    return write


def _undirected_csr(row, col, num_nodes, indices):  # type: ignore[no-untyped-def]
    """Deduplicated undirected adjacency without self-loops.

    Node ``v``'s neighbours are listed in the order of the edges that give them (the
    other end of every edge ``(a, b)`` with ``v`` in ``{a, b}``), each at its first
    occurrence. ``indices`` is scratch of length ``2 * len(row)`` (its dtype is the
    output's); returns ``(indptr, indices[:nnz])``.
    """
    indptr = np.zeros(num_nodes + 1, np.int64)
    _csr_count(row, col, indptr)
    for v in range(num_nodes):
        indptr[v + 1] += indptr[v]
    _csr_scatter(row, col, 0, indptr[:-1].copy(), indices)
    new_indptr = np.zeros(num_nodes + 1, np.int64)
    write = _csr_dedup(indptr, 0, num_nodes, indices, np.full(num_nodes, -1, np.int64), new_indptr)
    return new_indptr, indices[:write]


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


def _relabel_on_disk(  # type: ignore[no-untyped-def]
    indptr, indices, order, rank, out, window_bytes, directory, new_indptr=None
):
    """:func:`_relabel` for a memory-mapped ``indices`` and ``out``, with sequential reads
    and writes only: the old node lists are read in id order, a run of nodes at a time,
    renamed, and spilled to the files of their windows of new ids
    (:class:`~lightgraph.utilities.spill.KeyedSpill` under ``directory``); each window is
    then placed in memory and written to ``out`` in order. Random reads of node lists
    under a memory limit re-read the disk's read-ahead windows (504 GB for an 84M-edge
    graph in 1 GiB), and a window per pass over ``indices`` reads it once per window; this
    reads it once. ``window_bytes`` bounds a run and a window; ``new_indptr`` (``[N + 1]``)
    receives the new offsets (default: a new array)."""
    num_nodes = order.shape[0]
    _invert(order, rank)
    if new_indptr is None:
        new_indptr = np.empty(num_nodes + 1, np.int64)
    _ordered_offsets(indptr, order, new_indptr)
    spill = KeyedSpill(new_indptr, out.dtype, (), directory, window_bytes, "renamed")
    # a run's slots: the owners' new ids (int64), the renamed neighbours, the spilled
    # records and the sort by window
    slots = max(1, window_bytes // 2 // _RELABEL_SLOT_BYTES)
    try:
        for p in range(spill.passes):
            v = 0
            while v < num_nodes:
                w = int(np.searchsorted(indptr, indptr[v] + slots, side="right")) - 1
                w = min(num_nodes, max(v + 1, w))
                lo, hi = int(indptr[v]), int(indptr[w])
                owners = np.repeat(np.asarray(rank[v:w]), np.diff(np.asarray(indptr[v : w + 1])))
                spill.add(p, owners, np.asarray(rank)[np.asarray(indices[lo:hi])])
                v = w
            for first, stop, renamed in spill.windows(p, "gap_partition_on_disk"):
                out[new_indptr[first] : new_indptr[stop]] = renamed
    finally:
        spill.close()
    return new_indptr, out


#: Bytes per slot of a run of old node lists renamed by :func:`_relabel_on_disk`.
_RELABEL_SLOT_BYTES = 48


def _invert(order, rank):  # type: ignore[no-untyped-def]
    """``rank[order[r]] = r``."""
    for r in range(order.shape[0]):
        rank[order[r]] = r


def _ordered_offsets(indptr, order, new_indptr):  # type: ignore[no-untyped-def]
    """The offsets of the adjacency with its node lists in ``order``."""
    new_indptr[0] = 0
    for r in range(order.shape[0]):
        v = order[r]
        new_indptr[r + 1] = new_indptr[r] + indptr[v + 1] - indptr[v]


def _max_degree(indptr):  # type: ignore[no-untyped-def]
    best = 0
    for v in range(indptr.shape[0] - 1):
        best = max(best, indptr[v + 1] - indptr[v])
    return best


def _order_by_degree(indptr, perm, buckets, order):  # type: ignore[no-untyped-def]
    """The nodes of ``perm`` by decreasing degree, in ``perm``'s order within a degree (a
    stable counting sort: ``argsort(-degree[perm], "stable")`` in ``O(N + max
    degree)``); ``buckets`` is zeroed scratch of ``max degree + 2``."""
    top = buckets.shape[0] - 2
    for v in range(perm.shape[0]):
        buckets[top - (indptr[v + 1] - indptr[v]) + 1] += 1
    for b in range(top + 1):
        buckets[b + 1] += buckets[b]
    for i in range(perm.shape[0]):
        v = perm[i]
        b = top - (indptr[v + 1] - indptr[v])
        order[buckets[b]] = v
        buckets[b] += 1


def _gather(values, index, out):  # type: ignore[no-untyped-def]
    """``out[i] = values[index[i]]``."""
    for i in range(index.shape[0]):
        out[i] = values[index[i]]


def _scatter(values, index, out):  # type: ignore[no-untyped-def]
    """``out[index[i]] = values[i]``."""
    for i in range(index.shape[0]):
        out[index[i]] = values[i]


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
            best_p = heap[s, 0]  # best balance: the 1st candidate
            if old >= 0:
                # v leaves its partition. The heap is fixed only if v moves: the count of
                # ``old`` fell, so the best balance is the heap's top or ``old``.
                counts[s, old] -= 1
            best = _balance_score(s, best_p, counts, caps, offsets, marginal)
            if old >= 0 and old != best_p:
                score = _balance_score(s, old, counts, caps, offsets, marginal)
                if _better(score, old, best, best_p):
                    best, best_p = score, old
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
            moved = best_p != old  # (staying restores the count the heap holds)
            if moved and old >= 0:
                _heap_fix(s, old, heap, pos, counts, caps, offsets, marginal)
            counts[s, best_p] += 1
            if moved:
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
    num_parts, passes, seed, balance, slack = _check_options(
        owner, num_nodes, num_parts, passes, seed, balance, slack
    )
    stratum, strata_sizes = _strata(owner, y, train_mask, num_nodes)
    _compile_kernels(owner)
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)

    ei = edge_index.cpu().numpy()
    scratch = np.empty(2 * ei.shape[1], id_dtype_for(num_nodes))
    indptr, indices = _undirected_csr(ei[0], ei[1], num_nodes, scratch)
    num_edges = max(int(indptr[-1]) // 2, 1)
    order = _stream_order(indptr, seed, WorkArrays(None))
    rank = np.empty(num_nodes, indices.dtype)
    indptr, indices = _relabel(indptr, indices, order, rank, np.empty_like(indices))
    del rank, scratch
    part = _assign(
        indptr, indices, stratum[order], strata_sizes, order, num_edges, num_parts, passes,
        balance, slack,
    )  # fmt: skip
    return torch.from_numpy(part)


def gap_partition_on_disk(
    edge_index: np.ndarray,
    num_nodes: int,
    num_parts: int,
    y: np.ndarray,
    train_mask: np.ndarray,
    *,
    passes: int = 3,
    seed: int = 0,
    balance: float = 1.0,
    slack: float = 1.1,
    memory_budget: int | None = None,
    workdir: str | None = None,
) -> np.ndarray:
    """:func:`gap_partition` of a graph kept on disk, in memory bounded by a budget.

    Returns exactly what :func:`gap_partition` returns on the same arrays (as a NumPy
    array, memory-mapped), holding in memory only ``O(k (L + 1))`` state and chunk
    buffers of about ``memory_budget`` bytes. The ``O(N)`` state (degrees, offsets,
    strata, the stream order, ranks and the assignment; about 60 bytes per node) lives
    in memory-mapped work files under ``workdir``
    (:class:`~lightgraph.utilities.arrays.WorkArrays`): file pages the kernel reclaims
    under a memory limit. The stream order is a counting sort by degree.

    1. degrees: one pass over ``edge_index`` in chunks;
    2. the deduplicated undirected adjacency, a distribution sort: one pass over the
       edge chunks appends both directions of every edge to the spill file of its
       node's window (a range of nodes whose neighbour slots fit the budget; one node
       whose slots exceed it is a window of its own); each window is then placed in
       memory in edge order (:func:`gap_partition`'s neighbour order), deduplicated and
       appended to a memory-mapped file;
    3. the adjacency renamed in stream order into a second memory-mapped file, the same
       way: one sequential read of the first file spills the renamed lists to windows of
       the new order, each placed in memory and written in order (no random reads);
    4. the same streaming and refinement passes, which read the renamed adjacency
       sequentially (``passes + 1`` reads of the file, paged in by the OS).

    The two files (int32 ids below ``2**31`` nodes: at most ``8 E`` bytes each) and the
    spill files (``8`` bytes per neighbour slot, at most ``16 E`` bytes, removed window by
    window) live in a fresh directory under ``workdir`` and are removed before
    returning, also on error. Passes over ``edge_index``: three (more only beyond
    :data:`~lightgraph.utilities.spill.MAX_OPEN_FILES` windows).

    Args:
        edge_index: ``[2, E]`` ``int32``/``int64`` array (e.g. a read-only
            ``numpy.memmap``), row 0 the source; treated as undirected.
        num_nodes, num_parts, passes, seed, balance, slack: as :func:`gap_partition`.
        y: ``[N]`` integer class ids or ``[N, C]`` multi-label scores (may be a memmap,
            read in row chunks).
        train_mask: boolean ``[N]`` array.
        memory_budget: bytes of chunk buffers (``>= 1``; ``None``:
            :func:`~lightgraph.utilities.memory.default_memory_budget`): a chunk of
            ``edge_index`` and its spilled records, or one window of neighbour slots.
        workdir: existing directory for the work files (``None``: the system's
            temporary directory).

    Returns:
        ``int64`` array ``[num_nodes]`` with values in ``[0, num_parts)``.

    Raises:
        ValueError: naming the argument, the allowed values and the value received
            (also for node ids outside ``[0, num_nodes)``).
        TypeError: if an array argument is not a NumPy array.
        ImportError: if numba is not installed.
    """
    owner = "gap_partition_on_disk"
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    check_edge_array(owner, edge_index)
    num_parts, passes, seed, balance, slack = _check_options(
        owner, num_nodes, num_parts, passes, seed, balance, slack
    )
    budget = check_memory_budget(owner, memory_budget)
    if workdir is not None and not os.path.isdir(workdir):
        raise ValueError(
            f"{owner}: expected `workdir` to be an existing directory or None but got {workdir!r}."
        )
    _compile_kernels(owner)
    work = tempfile.mkdtemp(prefix="lightgraph-gap-", dir=workdir)
    try:
        arrays = WorkArrays(work)
        stratum, strata_sizes = _strata_chunked(owner, y, train_mask, num_nodes, budget, arrays)
        if num_parts == 1:
            _check_edge_ids(owner, edge_index, num_nodes, budget)
            return arrays.zeros("part", num_nodes, np.int64)  # zeros
        indptr, adjacency, nnz = _undirected_csr_on_disk(
            owner, edge_index, num_nodes, budget, os.path.join(work, "adjacency.npy"), arrays
        )
        order = _stream_order(indptr, seed, arrays)
        rank = arrays.zeros("rank", num_nodes, adjacency.dtype)
        renamed = open_memmap(
            os.path.join(work, "renamed.npy"), "w+", adjacency.dtype, (max(nnz, 1),)
        )
        new_indptr = arrays.zeros("renamed-indptr", num_nodes + 1, np.int64)
        indptr, indices = _relabel_on_disk(
            indptr, adjacency[:nnz], order, rank, renamed, budget, work, new_indptr
        )
        del rank, adjacency
        os.remove(os.path.join(work, "adjacency.npy"))
        ordered = arrays.zeros("ordered-stratum", num_nodes, stratum.dtype)
        _gather(stratum, order, ordered)
        del stratum
        ranked = arrays.zeros("ranked", num_nodes, np.int32, fill=-1)
        part = _assign(
            indptr, indices, ordered, strata_sizes, order, max(nnz // 2, 1), num_parts,
            passes, balance, slack, ranked=ranked, part=arrays.zeros("part", num_nodes, np.int64),
        )  # fmt: skip
        del indices, renamed
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return part


def _check_options(
    owner: str, num_nodes: int, num_parts: int, passes: int, seed: int, balance: float,
    slack: float,
) -> tuple[int, int, int, float, float]:  # fmt: skip
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
    return num_parts, passes, seed, balance, float(slack)


def _stream_order(indptr: np.ndarray, seed: int, arrays: WorkArrays) -> np.ndarray:
    """Nodes by decreasing degree, ties in a seeded random order (a counting sort by
    degree over a seeded permutation), in ``arrays``."""
    num_nodes = len(indptr) - 1
    perm = arrays.arange("permutation", num_nodes, id_dtype_for(num_nodes))
    # Generator.permutation(n) is arange(n) shuffled; the shuffle draws the same numbers
    # whatever the dtype. A plain ndarray view takes NumPy's in-place fast path.
    np.random.default_rng(seed).shuffle(perm.view(np.ndarray))
    buckets = arrays.zeros("degree-buckets", int(_max_degree(indptr)) + 2, np.int64)
    order = arrays.zeros("order", num_nodes, id_dtype_for(num_nodes))
    _order_by_degree(indptr, perm, buckets, order)
    return order


def _assign(
    indptr: np.ndarray,
    indices: np.ndarray,
    ordered_stratum: np.ndarray,
    strata_sizes: np.ndarray,
    order: np.ndarray,
    num_edges: int,
    num_parts: int,
    passes: int,
    balance: float,
    slack: float,
    ranked: np.ndarray | None = None,
    part: np.ndarray | None = None,
) -> np.ndarray:
    """The passes over the adjacency renamed in stream ``order``; ``int64`` part per node.
    ``ordered_stratum`` is the stratum of node ``order[r]`` at ``r``; ``ranked`` (``-1``
    everywhere) and ``part`` are scratch (default: new arrays in memory)."""
    num_nodes = len(order)
    caps = np.array([_cap(slack, int(n), num_parts) for n in strata_sizes], np.int64)
    mu = strata_sizes.astype(np.float64) / num_nodes
    alpha = balance * num_edges * num_parts ** (GAP_GAMMA - 1.0) / num_nodes**GAP_GAMMA
    if ranked is None:  # int32: the random reads stay in cache longer
        ranked = np.full(num_nodes, -1, np.int32)
    _gap_passes(
        indptr, indices, ordered_stratum, len(strata_sizes), num_parts, caps, mu,
        float(alpha), GAP_GAMMA, passes, ranked,
    )  # fmt: skip
    if part is None:
        part = np.empty(num_nodes, np.int64)
    _scatter(ranked, order, part)
    return _fill_empty(part, num_parts)


def _undirected_csr_on_disk(
    owner: str,
    edge_index: np.ndarray,
    num_nodes: int,
    budget: int,
    path: str,
    arrays: WorkArrays,
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`_undirected_csr` into the memory-mapped file ``path``: ``(indptr, adjacency,
    nnz)`` with the neighbours in ``adjacency[:nnz]`` (see :func:`gap_partition_on_disk`).
    The per-node arrays are ``arrays``. The lists are a distribution sort: one pass over
    the edges spills every neighbour to the file of its node's window (a
    :class:`~lightgraph.utilities.spill.KeyedSpill` next to ``path``, windows of nodes
    whose slots fit ``budget``); each window is then placed, deduplicated in memory and
    appended to ``adjacency``."""
    id_dtype = np.dtype(id_dtype_for(num_nodes))
    chunk = max(1, budget // 4 // (2 * edge_index.dtype.itemsize))
    indptr = arrays.zeros("degrees", num_nodes + 1, np.int64)
    for start, row, col in edge_chunks(edge_index, chunk):
        check_edge_ids(owner, start, row, col, num_nodes)  # before the kernel indexes them
        _csr_count(row, col, indptr)
    np.cumsum(indptr, out=indptr)

    adjacency = open_memmap(path, "w+", id_dtype, (max(int(indptr[-1]), 1),))
    new_indptr = arrays.zeros("indptr", num_nodes + 1, np.int64)
    mark = arrays.zeros("mark", num_nodes, id_dtype, fill=-1)
    # Every edge a - b appends b to a's list and a to b's, in edge order: the pairs are
    # interleaved, (a, b) then (b, a), so that a stable sort by node keeps edge order.
    spill = KeyedSpill(indptr, id_dtype, (), os.path.dirname(path), budget, "adjacency")
    spill_chunk = max(1, budget // 2 // _SPILL_EDGE_BYTES)
    nnz = 0
    try:
        for p in range(spill.passes):
            for _, row, col in edge_chunks(edge_index, spill_chunk):
                loop = row != col
                ends = np.stack([row[loop], col[loop]], 1)
                spill.add(p, ends.reshape(-1), ends[:, ::-1].reshape(-1).astype(id_dtype))
                del ends, loop
            for first, stop, slots in spill.windows(p, owner):
                kept = _csr_dedup(indptr, first, stop, slots, mark, new_indptr)
                adjacency[nnz : nnz + kept] = slots[:kept]
                nnz += kept
    finally:
        spill.close()
    return new_indptr, adjacency, nnz


#: Bytes per edge of a chunk spilled by :func:`_undirected_csr_on_disk`: both directions'
#: keys and values, their records, the windows and the sort's order.
_SPILL_EDGE_BYTES = 96


def _check_edge_ids(owner: str, edge_index: np.ndarray, num_nodes: int, budget: int) -> None:
    """Node ids in ``[0, num_nodes)``, checked in chunks of ``budget`` bytes."""
    for start, row, col in edge_chunks(
        edge_index, max(1, budget // (2 * edge_index.dtype.itemsize))
    ):
        check_edge_ids(owner, start, row, col, num_nodes)


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
    multilabel = y.dim() == 2 and y.size(0) == num_nodes and y.size(1) >= 1
    if not (
        (multilabel and not y.is_complex())
        or (
            y.dim() == 1
            and y.size(0) == num_nodes
            and not (y.is_floating_point() or y.is_complex() or y.dtype == torch.bool)
        )
    ):
        raise ValueError(
            f"{owner}: expected `y` to be integer class ids of shape ({num_nodes},) or "
            f"multi-label scores of shape ({num_nodes}, num_classes) but got {describe(y)}."
        )
    return _compact_strata(_training_labels(owner, y, train_mask), train_mask, num_nodes)


def _strata_chunked(
    owner: str,
    y: np.ndarray,
    train_mask: np.ndarray,
    num_nodes: int,
    budget: int,
    arrays: WorkArrays,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_strata` of NumPy arrays (memmaps) into a work array: ``y`` and
    ``train_mask`` read in row chunks of about ``budget`` bytes, twice (the distinct
    training labels, then every node's stratum)."""
    check_bool_mask(owner, "train_mask", train_mask, num_nodes, copy=False)
    if not isinstance(y, np.ndarray) or not (
        (y.ndim == 2 and y.shape[0] == num_nodes and y.shape[1] >= 1 and y.dtype.kind in "biuf")
        or (y.ndim == 1 and y.shape[0] == num_nodes and y.dtype.kind in "iu")
    ):
        got = f"shape {y.shape}, dtype {y.dtype}" if isinstance(y, np.ndarray) else repr(y)
        raise ValueError(
            f"{owner}: expected `y` to be integer class ids of shape ({num_nodes},) or "
            f"multi-label scores of shape ({num_nodes}, num_classes) but got {got}."
        )
    # per row: the copies of y and the mask, the labels, the stratum block and its counts
    rows = max(1, budget // (48 + y.itemsize * (y.shape[1] if y.ndim == 2 else 1)))

    def chunks() -> Iterator[tuple[int, Tensor, Tensor]]:
        for start in range(0, num_nodes, rows):
            mask = torch.from_numpy(np.array(train_mask[start : start + rows]))
            labels = _training_labels(
                owner, torch.from_numpy(np.array(y[start : start + rows])), mask
            )  # a writable copy
            yield start, mask, labels

    classes = torch.empty(0, dtype=torch.long)
    for _, _, labels in chunks():
        classes = torch.unique(torch.cat([classes, labels]))
    stratum = arrays.zeros("stratum", num_nodes, np.int32)
    sizes = torch.zeros(classes.numel() + 1, dtype=torch.long)
    for start, mask, labels in chunks():
        block = torch.full((mask.numel(),), classes.numel(), dtype=torch.int32)
        block[mask] = torch.searchsorted(classes, labels).int()
        stratum[start : start + mask.numel()] = block.numpy()
        sizes += torch.bincount(block.long(), minlength=classes.numel() + 1)
    return stratum, sizes.numpy()


def _training_labels(owner: str, y: Tensor, train_mask: Tensor) -> Tensor:
    """The class id of every training row of ``y``: the first maximal class of a
    multi-label row."""
    if y.dim() == 2:
        rows = y[train_mask]
        return (rows.to(torch.uint8) if rows.dtype == torch.bool else rows).argmax(dim=1)
    labels = y[train_mask].long()
    if labels.numel() and int(labels.min()) < 0:
        raise ValueError(
            f"{owner}: expected the training labels `y[train_mask]` to be class ids >= 0 "
            f"but found {int(labels.min())}."
        )
    return labels


def _compact_strata(
    labels: Tensor, train_mask: Tensor, num_nodes: int
) -> tuple[np.ndarray, np.ndarray]:
    classes, compact = torch.unique(labels, return_inverse=True)
    num_labels = classes.numel()
    stratum = torch.full((num_nodes,), num_labels, dtype=torch.int32)
    stratum[train_mask] = compact.int()
    sizes = torch.bincount(stratum.long(), minlength=num_labels + 1)
    return stratum.numpy(), sizes.numpy()
