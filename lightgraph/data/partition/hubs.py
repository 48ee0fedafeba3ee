"""Hub nodes: the nodes most influential on the training nodes (HANOI, §4.3.3).

HANOI is ch. 4 of T. Huang, *Efficient Systems for Large-Scale Graph Representation
Learning*, PhD thesis, MIT, 2025; equation numbers below are the thesis's.

A node's influence on the training set is the landing probability of a lazy *reverse*
random walk of ``walk_length`` steps started from the training nodes (Eq. 4.1). HANOI
sums this score over the partitions, each walk starting from that partition's
training nodes; by linearity the sum is one walk from the multi-hot vector ``e_B`` of
all training nodes, which is what :func:`hub_scores` computes:

.. math::

    \\mathrm{score} = \\tilde A^{L} e_B, \\qquad
    \\tilde A = \\lambda I + (1 - \\lambda) \\, A D_{\\mathrm{in}}^{-1},

where ``A[i, j]`` counts the edges ``i -> j`` of ``edge_index`` (row 0 = source, the
message-passing direction of PyG), ``D_in`` is the diagonal of in-degrees and
``lambda = laziness``. Column ``j`` of ``A D_in^{-1}`` is the uniform distribution over
the in-neighbours of ``j`` (repeated edges count with their multiplicity, a self-loop is
an ordinary edge): a walker at ``j`` stays with probability ``lambda``, and otherwise
steps *against* an edge to one of the nodes ``j`` aggregates from. A node without
in-neighbours keeps the walker (its column is ``e_j``), so ``score`` sums to the number
of training nodes. Equivalently, ``score`` is ``e_B`` times the ``L``-th power of the
row-stochastic ``lambda I + (1 - lambda) D_in^{-1} A^T`` (the usual lazy walk
``(I + D_in^{-1} A^T) / 2`` for ``lambda = 1/2``). For an undirected graph, pass both
directions of every edge.

Cost: ``L`` sparse matrix-vector products, ``O(L * |E|)`` time and ``O(|V| + |E|)``
memory (scipy CSR, on the CPU). :func:`hub_scores_on_disk` and
:func:`select_hubs_on_disk` compute the same products from a (memory-mapped) CSC in
chunks of targets: ``O(|V|)`` vectors and a chunk of ``memory_budget`` bytes in memory,
``L`` sequential reads of the CSC, and the same floating-point operations in the same
order as scipy's, so the same scores to the bit.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from lightgraph.data.partition.out_of_core import check_bool_mask
from lightgraph.utilities.arrays import WorkArrays
from lightgraph.utilities.checks import (
    check_fraction,
    check_graph_edge_index,
    check_int,
    check_type,
    describe,
)
from lightgraph.utilities.memory import check_memory_budget

__all__ = ["hub_scores", "hub_scores_on_disk", "select_hubs", "select_hubs_on_disk"]

#: Bytes per node of a window of the on-disk per-node passes (a few ``float64``
#: temporaries per node: degrees, weights, the ranked scores and ids).
_NODE_WINDOW_BYTES = 64

_product_kernel = None
_kernel_lock = threading.Lock()


def hub_scores(
    edge_index: Tensor,
    num_nodes: int,
    train_mask: Tensor,
    walk_length: int = 3,
    laziness: float = 0.5,
) -> Tensor:
    """Landing probability of the lazy reverse walk from all training nodes (Eq. 4.1).

    Args:
        edge_index: ``[2, num_edges]`` integer connectivity, row 0 the source.
        num_nodes: number of nodes.
        train_mask: boolean ``[num_nodes]`` mask of the training nodes (the walk starts).
        walk_length: number of steps ``L >= 0``.
        laziness: probability ``lambda`` in ``[0, 1]`` of staying at a step.

    Returns:
        ``torch.float64`` tensor ``[num_nodes]``, ``Ã^L e_B`` (see the module docstring).

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
        TypeError: if ``edge_index`` or ``train_mask`` is not a tensor.
    """
    return torch.from_numpy(
        _scores("hub_scores", edge_index, num_nodes, train_mask, walk_length, laziness)
    )


def select_hubs(
    edge_index: Tensor,
    num_nodes: int,
    train_mask: Tensor,
    fraction: float = 0.01,
    walk_length: int = 3,
    laziness: float = 0.5,
    exclude: Tensor | None = None,
) -> Tensor:
    """The ``ceil(fraction * num_nodes)`` nodes of highest :func:`hub_scores`.

    ``exclude`` keeps nodes out of the selection (fewer hubs if too few remain). The
    macro-batch data modules exclude the training nodes: a hub is never a training
    target, and the lazy walk returns much of its mass to its start nodes, so without the
    exclusion a graph with few training nodes would pin most of them as hubs and never
    train on them.

    The product is rounded to 9 decimals before the ceiling, so that float error (``0.07 *
    100 = 7.000000000000001``) does not add a node.

    Args:
        edge_index: ``[2, num_edges]`` integer connectivity, row 0 the source.
        num_nodes: number of nodes.
        train_mask: boolean ``[num_nodes]`` mask of the training nodes.
        fraction: share of the nodes to pin, in ``[0, 1]`` (``0``: no hubs).
        walk_length: number of walk steps ``L >= 0``.
        laziness: probability in ``[0, 1]`` of staying at a step.
        exclude: optional boolean ``[num_nodes]`` mask of nodes that may not be hubs.

    Returns:
        ``torch.long`` tensor of the hub ids in increasing order. Among nodes of equal
        score the smaller id wins.

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
        TypeError: if ``edge_index`` or ``train_mask`` is not a tensor.
    """
    owner = "select_hubs"
    fraction = check_fraction(owner, "fraction", fraction)
    scores = _scores(owner, edge_index, num_nodes, train_mask, walk_length, laziness)
    if exclude is not None:
        if (
            not isinstance(exclude, torch.Tensor)
            or exclude.dtype != torch.bool
            or exclude.shape != (num_nodes,)
        ):
            shape = (
                tuple(exclude.shape)
                if isinstance(exclude, torch.Tensor)
                else type(exclude).__name__
            )
            raise ValueError(
                f"{owner}: expected `exclude` to be a boolean tensor of shape [{num_nodes}] or "
                f"None but got {shape}."
            )
        return torch.from_numpy(_top(scores, fraction, exclude.numpy()))
    return torch.from_numpy(_top(scores, fraction, None))


def hub_scores_on_disk(
    indptr: np.ndarray,
    indices: np.ndarray,
    num_nodes: int,
    train_mask: np.ndarray,
    walk_length: int = 3,
    laziness: float = 0.5,
    *,
    memory_budget: int | None = None,
    workdir: str | None = None,
) -> np.ndarray:
    """:func:`hub_scores` from the CSC of the graph, read in chunks (e.g. memory-mapped).

    Column ``j`` of the CSC lists the sources of the edges ``i -> j``; a product
    ``(A D_in^{-1}) x`` adds ``(1 - lambda) x[j] / in_degree(j)`` to entry ``i`` for every
    edge, one chunk of whole columns at a time (a column longer than the chunk is read
    alone). Entry ``i`` thus receives its terms in increasing ``j``, repeated edges
    merged first, exactly as scipy's CSR product of :func:`hub_scores` sums them, so
    the scores are equal to the bit.

    Args:
        indptr: ``[num_nodes + 1]`` integer array, ``indptr[0] = 0``, non-decreasing,
            ``indptr[-1] = len(indices)``.
        indices: ``[num_edges]`` ``int32``/``int64`` sources, sorted within every column
            (the layout of :func:`lightgraph.functional.neighbor_sampling.to_csc`).
        num_nodes: number of nodes.
        train_mask: boolean ``[num_nodes]`` array of the training nodes (the walk starts).
        walk_length: number of steps ``L >= 0``.
        laziness: probability ``lambda`` in ``[0, 1]`` of staying at a step.
        memory_budget: bytes of one chunk of ``indices`` and of the per-node arrays'
            windows (``>= 1``; ``None``:
            :func:`~lightgraph.utilities.memory.default_memory_budget`).
        workdir: an existing directory for the per-node arrays (the walk's scores and
            the step's weights, ``float64``), memory-mapped so that they are file pages
            the kernel may reclaim, not the process's memory; ``None``: in memory.

    Returns:
        ``float64`` array ``[num_nodes]``, equal to :func:`hub_scores` of the same graph.

    Raises:
        ValueError: naming the argument, the allowed values and the value received (also
            for a column not sorted by source or a source outside ``[0, num_nodes)``).
        ImportError: if numba is not installed.
    """
    owner = "hub_scores_on_disk"
    return _scores_on_disk(
        owner, indptr, indices, num_nodes, train_mask, walk_length, laziness, memory_budget,
        workdir,
    )  # fmt: skip


def select_hubs_on_disk(
    indptr: np.ndarray,
    indices: np.ndarray,
    num_nodes: int,
    train_mask: np.ndarray,
    fraction: float = 0.01,
    walk_length: int = 3,
    laziness: float = 0.5,
    exclude: np.ndarray | None = None,
    *,
    memory_budget: int | None = None,
    workdir: str | None = None,
) -> np.ndarray:
    """:func:`select_hubs` from the CSC of the graph, read in chunks
    (:func:`hub_scores_on_disk`): the same hubs. The best nodes are kept while the scores
    are read in windows, so besides the per-node arrays (memory-mapped under ``workdir``)
    it holds one window and the hubs.

    Args:
        indptr, indices: the CSC, as :func:`hub_scores_on_disk`.
        num_nodes, fraction, walk_length, laziness: as :func:`select_hubs`.
        train_mask: boolean ``[num_nodes]`` array of the training nodes.
        exclude: optional boolean ``[num_nodes]`` array of nodes that may not be hubs.
        memory_budget, workdir: as :func:`hub_scores_on_disk`.

    Returns:
        ``int64`` array of the hub ids in increasing order (ties: the smaller id).

    Raises:
        ValueError: naming the argument, the allowed values and the value received.
        ImportError: if numba is not installed.
    """
    owner = "select_hubs_on_disk"
    fraction = check_fraction(owner, "fraction", fraction)
    scores = _scores_on_disk(
        owner, indptr, indices, num_nodes, train_mask, walk_length, laziness, memory_budget,
        workdir,
    )  # fmt: skip
    if exclude is not None:
        exclude = check_bool_mask(owner, "exclude", exclude, num_nodes, copy=False)
    budget = check_memory_budget(owner, memory_budget)
    return _top(scores, fraction, exclude, _node_rows(budget))


def _top(
    scores: np.ndarray, fraction: float, excluded: np.ndarray | None, rows: int | None = None
) -> np.ndarray:
    """The ``ceil(fraction * N)`` best nodes not ``excluded`` (highest score first, ties:
    the smaller id), ``int64``, increasing. ``scores`` (and ``excluded``) are read
    ``rows`` nodes at a time (default: all at once): the best nodes so far and one window
    are ranked together, so memory is the hubs plus a window, whatever the node count."""
    num_nodes = len(scores)
    rows = max(1, num_nodes if rows is None else rows)
    count = min(math.ceil(round(fraction * num_nodes, 9)), num_nodes)
    if excluded is not None:
        num_excluded = sum(
            int(np.count_nonzero(excluded[lo : lo + rows])) for lo in range(0, num_nodes, rows)
        )
        count = min(count, num_nodes - num_excluded)
    best_ids = np.empty(0, np.int64)
    best_scores = np.empty(0, np.float64)
    if count == 0:
        return best_ids
    for lo in range(0, num_nodes, rows):
        hi = min(num_nodes, lo + rows)
        window = np.array(scores[lo:hi], dtype=np.float64)
        if excluded is not None:
            window[np.asarray(excluded[lo:hi])] = -np.inf
        ids = np.concatenate([best_ids, np.arange(lo, hi, dtype=np.int64)])
        values = np.concatenate([best_scores, window])
        keep = np.lexsort((ids, -values))[:count]
        best_ids, best_scores = ids[keep], values[keep]
    return np.sort(best_ids)


def _node_rows(budget: int) -> int:
    """Nodes per window of the per-node passes: their ``float64`` temporaries in half the
    budget."""
    return max(1, budget // 2 // _NODE_WINDOW_BYTES)


def _scores(
    owner: str,
    edge_index: Tensor,
    num_nodes: int,
    train_mask: Tensor,
    walk_length: int,
    laziness: float,
) -> np.ndarray:
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes)
    check_type(owner, "train_mask", train_mask, torch.Tensor, "a boolean mask [N]")
    if train_mask.dtype != torch.bool or tuple(train_mask.shape) != (num_nodes,):
        raise ValueError(
            f"{owner}: expected `train_mask` to be a boolean tensor of shape ({num_nodes},) "
            f"but got {describe(train_mask)}."
        )
    walk_length = check_int(owner, "walk_length", walk_length, low=0)
    laziness = check_fraction(owner, "laziness", laziness)

    edge_index, train_mask = edge_index.cpu(), train_mask.cpu()
    src = edge_index[0].numpy()
    dst = edge_index[1].numpy()
    in_degree = np.bincount(dst, minlength=num_nodes).astype(np.float64)
    # step[i, j] = (1 - lambda) / in_degree(j) per edge i -> j (repeats summed by scipy).
    weight = (1.0 - laziness) / in_degree[dst]
    step = sp.csr_matrix((weight, (src, dst)), shape=(num_nodes, num_nodes))
    stay = laziness + (1.0 - laziness) * (in_degree == 0)  # sources keep the walker
    score = train_mask.numpy().astype(np.float64)
    for _ in range(walk_length):
        score = stay * score + step @ score
    return score


def _scores_on_disk(
    owner: str,
    indptr: np.ndarray,
    indices: np.ndarray,
    num_nodes: int,
    train_mask: np.ndarray,
    walk_length: int,
    laziness: float,
    memory_budget: int | None,
    workdir: str | None = None,
) -> np.ndarray:
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    for name, array in (("indptr", indptr), ("indices", indices)):
        if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype.kind not in "iu":
            got = (
                f"shape {array.shape}, dtype {array.dtype}"
                if isinstance(array, np.ndarray)
                else type(array).__name__
            )
            raise ValueError(
                f"{owner}: expected `{name}` to be a 1-D integer NumPy array (a CSC, e.g. from "
                f"`to_csc`) but got {got}."
            )
    if indptr.shape != (num_nodes + 1,):
        raise ValueError(
            f"{owner}: expected `indptr` to be of shape ({num_nodes + 1},) (num_nodes + 1) "
            f"but got shape {indptr.shape}."
        )
    rows = _node_rows(check_memory_budget(owner, memory_budget))
    if int(indptr[0]) != 0 or int(indptr[-1]) != len(indices) or _decreases(indptr, rows):
        raise ValueError(
            f"{owner}: expected `indptr` to start at 0, be non-decreasing and end at "
            f"len(indices) = {len(indices)} but got indptr[0] = {int(indptr[0])}, "
            f"indptr[-1] = {int(indptr[-1])}."
        )
    check_bool_mask(owner, "train_mask", train_mask, num_nodes, copy=False)
    walk_length = check_int(owner, "walk_length", walk_length, low=0)
    laziness = check_fraction(owner, "laziness", laziness)
    # half the budget for a chunk of sources, half for the windows of per-node temporaries
    chunk = max(1, check_memory_budget(owner, memory_budget) // 2 // indices.itemsize)
    product = _compiled_product(owner)
    starts = indptr if indptr.dtype == np.int64 else _as_int64(indptr, rows, workdir)

    arrays = WorkArrays(workdir)
    weight = arrays.zeros("hub-weight", num_nodes, np.float64)
    stay = arrays.zeros("hub-stay", num_nodes, np.float64)
    score = arrays.zeros("hub-score", num_nodes, np.float64)
    step = arrays.zeros("hub-step", num_nodes, np.float64)
    for lo in range(0, num_nodes, rows):
        hi = min(num_nodes, lo + rows)
        in_degree = np.diff(starts[lo : hi + 1]).astype(np.float64)
        weight[lo:hi] = np.divide(
            1.0 - laziness, in_degree, out=np.zeros(hi - lo), where=in_degree > 0
        )
        stay[lo:hi] = laziness + (1.0 - laziness) * (in_degree == 0)  # sources keep the walker
        score[lo:hi] = train_mask[lo:hi]
    windows = []  # whole columns, about `chunk` sources each
    first = 0
    while first < num_nodes:
        fits = int(np.searchsorted(starts, starts[first] + chunk, side="right")) - 1
        stop = min(max(fits, first + 1), num_nodes)
        windows.append((first, stop))
        first = stop
    for _ in range(walk_length):
        step[:] = 0.0
        for first, stop in windows:
            sources = np.array(indices[starts[first] : starts[stop]])
            status, column, value = product(starts, sources, first, stop, score, weight, step)
            if status == 1:
                raise ValueError(
                    f"{owner}: expected the sources `indices` of every target to be sorted by "
                    f"source (as `to_csc` gives them) but those of target {column} are not."
                )
            if status == 2:
                raise ValueError(
                    f"{owner}: expected the sources in `indices` to lie in "
                    f"[0, {num_nodes - 1}] but found {value} (target {column})."
                )
            del sources
        for lo in range(0, num_nodes, rows):
            hi = min(num_nodes, lo + rows)
            score[lo:hi] = stay[lo:hi] * score[lo:hi] + step[lo:hi]
    return score


def _decreases(indptr: np.ndarray, rows: int) -> bool:
    """Whether ``indptr`` decreases anywhere, read ``rows`` entries at a time."""
    for lo in range(0, len(indptr) - 1, rows):
        window = np.asarray(indptr[lo : lo + rows + 1])
        if np.any(window[1:] < window[:-1]):
            return True
    return False


def _as_int64(indptr: np.ndarray, rows: int, workdir: str | None) -> np.ndarray:
    """``indptr`` as ``int64`` (a work array), copied ``rows`` entries at a time."""
    out = WorkArrays(workdir).zeros("hub-indptr", len(indptr), np.int64)
    for lo in range(0, len(indptr), rows):
        out[lo : lo + rows] = indptr[lo : lo + rows]
    return out


def _csc_product(indptr, sources, first, stop, x, weight, out):  # type: ignore[no-untyped-def]
    """``out[i] += merged_weight(i, j) * x[j]`` over the edges ``i -> j`` into the targets
    ``first .. stop - 1``, whose sources are ``sources[indptr[j] - indptr[first] : ...]``.

    ``merged_weight`` sums ``weight[j]`` once per repeated edge, left to right (scipy's
    ``sum_duplicates``). Returns ``(0, -1, 0)``, or ``(1, j, 0)`` for an unsorted column
    ``j``, ``(2, j, i)`` for a source ``i`` out of range."""
    num_nodes = out.shape[0]
    base = indptr[first]
    for j in range(first, stop):
        xj = x[j]
        wj = weight[j]
        e = indptr[j] - base
        end = indptr[j + 1] - base
        previous = -1
        while e < end:
            i = sources[e]
            if i < 0 or i >= num_nodes:
                return 2, j, i
            if i < previous:
                return 1, j, 0
            merged = wj
            e += 1
            while e < end and sources[e] == i:
                merged += wj
                e += 1
            out[i] += merged * xj
            previous = i
    return 0, -1, 0


def _compiled_product(owner: str):  # type: ignore[no-untyped-def]
    """:func:`_csc_product` compiled by numba (once, or loaded from numba's cache)."""
    global _product_kernel
    with _kernel_lock:
        if _product_kernel is None:
            try:
                import numba
            except ImportError as err:
                raise ImportError(
                    f"{owner} needs numba to compile its sparse product: "
                    "`pip install 'numba>=0.59'`."
                ) from err
            _product_kernel = numba.njit(cache=True, nogil=True)(_csc_product)
    return _product_kernel
