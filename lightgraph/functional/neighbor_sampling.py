"""Vectorised uniform neighbour sampling on a CSC graph (pure torch, CPU and CUDA).

A graph is held in CSC form: for every destination ``v``, ``indices[indptr[v]:indptr[v+1]]``
are the sources ``u`` of the edges ``u -> v`` (PyG's message direction, ``edge_index[0]``
= source), sorted by source. :func:`to_csc` builds it from an ``edge_index``;
:func:`sample_neighbors` draws a multi-hop neighbourhood of a batch of seeds with the
layout of PyG's ``SamplerOutput`` (``node``, ``row``, ``col``, ``edge``,
``num_sampled_nodes``, ``num_sampled_edges``), so a ``torch_geometric.loader.NodeLoader``
turns it into an ordinary ``Data`` mini-batch.

Every step is a tensor operation over all the nodes of a hop at once; the only Python
loops run over hops and, without replacement, over the ``k`` positions of a fanout
(Floyd's algorithm). ``indptr`` and ``indices`` may be ``int32`` or ``int64`` tensors
backed by a ``numpy.memmap``: they are only read by gathering the rows of the nodes
being expanded and the sampled edges, never converted or copied as a whole.

With ``num_threads > 1`` one large batch is sampled by several threads cooperating
(intra-batch parallelism, for the latency of one big "macro-batch"): every hop's
expansion (degrees, draws, edge ids and the gather of the sources) is split into
``num_threads`` contiguous chunks of the frontier, run on a shared thread pool (torch
ops release the GIL) and concatenated in chunk order, so the layout is the serial one;
only the relabelling stays serial. Chunk ``c`` of a hop draws from its own generator,
seeded by an integer drawn from ``generator``, so a sample is reproducible for a given
generator state and ``num_threads`` (but differs from the ``num_threads=1`` sample).

Sampling is many small tensor operations: torch's intra-op threads (``torch.
set_num_threads``) only add hand-offs to them, and on a machine whose cores are busy they
collapse it (``docs/benchmarks.md``, "Sampler threads", has the measurement). :func:`sample_neighbors` therefore runs with ``intra_op_threads=1`` by
default, set for the call and restored afterwards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor

from lightgraph.utilities.checks import (
    check_bool,
    check_fanouts,
    check_graph_edge_index,
    check_int,
    check_optional_int,
    check_type,
    describe,
)

__all__ = [
    "NODE_BUFFER_MAX_NODES",
    "NeighborSample",
    "check_fanouts",
    "make_node_buffer",
    "sample_neighbors",
    "to_csc",
]

#: Loaders relabel through a node buffer (:func:`make_node_buffer`, ``int64``: 8 bytes per
#: node of the sampled graph) up to this many nodes (256 MiB), and with ``torch.unique``
#: (slower, no O(N) memory) above it.
NODE_BUFFER_MAX_NODES = 1 << 25


# Without replacement a node of degree ``deg > k`` keeps ``k`` distinct neighbours. Floyd's
# algorithm costs ``O(k^2)`` per node whatever its degree (hubs are cheap); sorting random
# keys costs ``O(deg log deg)``. Keys are used for a node when ``deg * _KEYS_COST < k * k``,
# i.e. only for large fanouts (see benchmarks/bench_sampler.py): with ``k <= 16`` and
# ``deg > k`` Floyd always wins.
_KEYS_COST = 16

# With ``num_threads > 1``, a hop whose frontier has fewer nodes than this is expanded
# chunk by chunk in the calling thread (the chunks, their generators and so the sample
# are the same; only the thread hand-off, not worth it for small frontiers, is skipped).
_MIN_PARALLEL = 4096

# Workers of the shared pool; threads are spawned lazily, as many as chunks run at once
# (``num_threads - 1`` per call: the calling thread expands chunk 0 itself).
_MAX_WORKERS = 64
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1
_pool_lock = threading.Lock()


class NeighborSample(NamedTuple):
    """A sampled multi-hop neighbourhood, laid out as PyG's ``SamplerOutput``.

    Attributes:
        node: global ids of the sampled nodes, ``int64 [num_nodes]``: the seeds first
            (in the given order, repeated seeds included), then the nodes first reached
            at hop 1, hop 2, ... (each hop in order of first appearance).
        row: local index (into ``node``) of the source of every sampled edge.
        col: local index of its destination; messages flow ``row -> col``. Edges are
            grouped by hop, then by destination.
        edge: CSC edge id of every sampled edge (its position in ``indices``), ``int64``.
        num_sampled_nodes: nodes per hop, ``[num_seeds, new at hop 1, ...]`` (length
            ``len(fanouts) + 1``), as BasicGNN's ``num_sampled_nodes_per_hop``.
        num_sampled_edges: edges per hop (length ``len(fanouts)``), as
            ``num_sampled_edges_per_hop``.
    """

    node: Tensor
    row: Tensor
    col: Tensor
    edge: Tensor
    num_sampled_nodes: list[int]
    num_sampled_edges: list[int]


def to_csc(
    edge_index: Tensor, num_nodes: int, return_perm: bool = False
) -> tuple[Tensor, Tensor] | tuple[Tensor, Tensor, Tensor]:
    """CSC form ``(indptr, indices)`` of a graph given by ``edge_index``.

    Args:
        edge_index: integer ``[2, num_edges]``, ``edge_index[0]`` the sources and
            ``edge_index[1]`` the destinations.
        num_nodes: number of nodes; ids lie in ``[0, num_nodes)``.
        return_perm: also return ``perm`` (``int64 [num_edges]``): CSC edge ``e`` is the
            edge ``perm[e]`` of ``edge_index`` (PyG's ``edge_permutation``).

    Returns:
        ``indptr`` (``int64 [num_nodes + 1]``) and ``indices`` (``int64 [num_edges]``):
        ``indices[indptr[v]:indptr[v + 1]]`` are the sources of the edges into ``v``,
        sorted by source (repeated edges kept, in their original order); with
        ``return_perm`` also ``perm``.
    """
    owner = "to_csc"
    num_nodes = check_int(owner, "num_nodes", num_nodes, low=0)
    check_bool(owner, "return_perm", return_perm)
    edge_index = check_graph_edge_index(owner, "edge_index", edge_index, num_nodes)
    src, dst = edge_index[0], edge_index[1]
    if num_nodes <= 2**31:  # one sort on a combined key (no int64 overflow)
        perm = torch.sort(dst * num_nodes + src, stable=True).indices
    else:
        perm = torch.sort(src, stable=True).indices
        perm = perm[torch.sort(dst[perm], stable=True).indices]
    indices = src[perm]
    indptr = torch.zeros(num_nodes + 1, dtype=torch.long, device=edge_index.device)
    torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0, out=indptr[1:])
    return (indptr, indices, perm) if return_perm else (indptr, indices)


# ------------------------------------------------------------------------------ checks
def _check_csc(owner: str, indptr: Tensor, indices: Tensor) -> int:
    for name, t in (("indptr", indptr), ("indices", indices)):
        check_type(owner, name, t, torch.Tensor, "int32 or int64, e.g. from `to_csc`")
        if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"{owner}: expected `{name}` to be a 1-D torch.int32 or torch.int64 tensor but "
                f"got {describe(t)}."
            )
    if indptr.numel() < 1:
        raise ValueError(
            f"{owner}: expected `indptr` to hold num_nodes + 1 >= 1 entries but got 0."
        )
    if indptr.device != indices.device:
        raise ValueError(
            f"{owner}: expected `indptr` and `indices` on one device but got {indptr.device} "
            f"and {indices.device}."
        )
    return indptr.numel() - 1


def _check_seeds(owner: str, seeds: Tensor, num_nodes: int) -> Tensor:
    check_type(owner, "seeds", seeds, torch.Tensor, "global node ids")
    if (
        seeds.dim() != 1
        or seeds.dtype == torch.bool
        or seeds.is_floating_point()
        or seeds.is_complex()
    ):
        raise ValueError(
            f"{owner}: expected `seeds` to be a 1-D integer tensor of node ids but got "
            f"{describe(seeds)}."
        )
    if seeds.numel():
        lo, hi = int(seeds.min()), int(seeds.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"{owner}: expected `seeds` in [0, {num_nodes - 1}] (num_nodes = {num_nodes}) "
                f"but found values in [{lo}, {hi}]."
            )
    return seeds.long()


# ---------------------------------------------------------------------------- sampling
def _rand(n: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """``n`` float64 uniforms in ``[0, 1)``, drawn on the generator's device (so a CPU
    generator gives the same samples for CPU and CUDA graphs)."""
    where = generator.device if generator is not None else device
    return torch.rand(n, dtype=torch.float64, generator=generator, device=where).to(device)


def _floyd(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """``[M, k]`` distinct offsets in ``[0, deg_i)`` per row, uniform over k-subsets.

    Floyd's algorithm, vectorised over the rows: for ``j = deg - k, ..., deg - 1`` draw
    ``t`` uniform in ``[0, j]`` and keep ``t``, or ``j`` if ``t`` was already kept.
    """
    m, device = deg.numel(), deg.device
    j = deg.unsqueeze(1) - torch.arange(k, 0, -1, device=device)  # [M, k]: deg-k .. deg-1
    draw = _rand(m * k, generator, device).view(m, k) * (j + 1)
    chosen = torch.minimum(draw.long(), j)
    for step in range(1, k):
        t = chosen[:, step]
        hit = (chosen[:, :step] == t.unsqueeze(1)).any(1)
        chosen[:, step] = torch.where(hit, j[:, step], t)
    return chosen


def _random_keys(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """``[M, k]`` distinct offsets per row: the ``k`` smallest of ``deg_i`` random keys."""
    m, device = deg.numel(), deg.device
    total = int(deg.sum())
    seg = torch.repeat_interleave(torch.arange(m, device=device), deg, output_size=total)
    ptr = torch.cumsum(deg, 0) - deg
    # Segment id + a uniform in [0, 1): sorting keeps every segment in its place and
    # shuffles it uniformly.
    order = torch.sort(seg.double() + _rand(total, generator, device), stable=True).indices
    rank = torch.arange(total, device=device) - ptr[seg]
    return (order - ptr[seg])[rank < k].view(m, k)


def _without_replacement(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """``[M, k]`` distinct offsets per row (``deg_i > k``), in no particular order."""
    use_keys = deg * _KEYS_COST < k * k
    if not bool(use_keys.any()):
        chosen = _floyd(deg, k, generator)
    elif bool(use_keys.all()):
        chosen = _random_keys(deg, k, generator)
    else:
        chosen = torch.empty(deg.numel(), k, dtype=torch.long, device=deg.device)
        chosen[~use_keys] = _floyd(deg[~use_keys], k, generator)
        chosen[use_keys] = _random_keys(deg[use_keys], k, generator)
    return chosen


def _expand(
    indptr: Tensor,
    indices: Tensor,
    frontier: Tensor,
    k: int,
    replace: bool,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """One hop from ``frontier``: the sampled edges' CSC ids, their destinations (positions
    in ``frontier``) and their global sources, edges grouped by destination."""
    device = frontier.device
    start = indptr.index_select(0, frontier).long()
    deg = indptr.index_select(0, frontier + 1).long() - start
    if k < 0:
        count = deg
    elif replace:
        count = torch.where(deg > 0, k, 0)
    else:
        count = deg.clamp(max=k)
    ptr = torch.cumsum(count, 0) - count
    total = int(ptr[-1] + count[-1]) if count.numel() else 0
    if k > 0 and replace:  # k uniform draws for every node with neighbours
        has = (deg > 0).nonzero().squeeze(1)
        d = deg.index_select(0, has).unsqueeze(1)
        draw = _rand(total, generator, device).view(-1, k) * d
        edge = start.index_select(0, has).unsqueeze(1) + torch.minimum(draw.long(), d - 1)
        edge, dst = edge.view(-1), has.repeat_interleave(k)
    else:  # all neighbours in order, then k distinct ones where deg > k
        dst = torch.repeat_interleave(
            torch.arange(frontier.numel(), device=device), count, output_size=total
        )
        edge = torch.arange(total, device=device) + (start - ptr).index_select(0, dst)
        sampled = (deg > k).nonzero().squeeze(1) if k > 0 else deg[:0]
        if sampled.numel():
            arange_k = torch.arange(k, device=device)
            slots = ptr.index_select(0, sampled).unsqueeze(1) + arange_k
            chosen = _without_replacement(deg.index_select(0, sampled), k, generator)
            chosen += start.index_select(0, sampled).unsqueeze(1)
            edge.index_copy_(0, slots.view(-1), chosen.view(-1))
    return edge, dst, indices.index_select(0, edge).long()


def _executor() -> ThreadPoolExecutor:
    """The module's thread pool, created on first use (and anew in a forked child, where
    the parent's worker threads do not exist)."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(_MAX_WORKERS, thread_name_prefix="lightgraph-sampler")
            _pool_pid = os.getpid()
        return _pool


def _chunk_generators(generator: torch.Generator | None, n: int) -> list[torch.Generator]:
    """``n`` fresh CPU generators seeded by ``n`` integers drawn from ``generator`` (the
    global CPU generator when ``None``)."""
    where = generator.device if generator is not None else torch.device("cpu")
    seeds = torch.randint(0, 2**62, (n,), generator=generator, device=where).tolist()
    return [torch.Generator().manual_seed(s) for s in seeds]


def _expand_parallel(
    indptr: Tensor,
    indices: Tensor,
    frontier: Tensor,
    k: int,
    replace: bool,
    generator: torch.Generator | None,
    num_threads: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_expand` over ``num_threads`` contiguous chunks of ``frontier``, concurrently,
    concatenated in chunk order (the serial layout)."""
    m = frontier.numel()
    gens = _chunk_generators(generator, num_threads)  # drawn even for empty chunks
    bounds = [m * c // num_threads for c in range(num_threads + 1)]

    def chunk(c: int) -> tuple[Tensor, Tensor, Tensor]:
        lo, hi = bounds[c], bounds[c + 1]
        edge, dst, src = _expand(indptr, indices, frontier[lo:hi], k, replace, gens[c])
        return edge, dst + lo, src

    todo = [c for c in range(num_threads) if bounds[c + 1] > bounds[c]] or [0]
    if m < _MIN_PARALLEL or len(todo) == 1:
        parts = [chunk(c) for c in todo]
    else:
        futures = [_executor().submit(chunk, c) for c in todo[1:]]
        try:
            first = chunk(todo[0])
        finally:
            wait(futures)  # no chunk outlives the call, even on an error
        parts = [first] + [f.result() for f in futures]
    if len(parts) == 1:
        return parts[0]
    edge, dst, src = (torch.cat(p) for p in zip(*parts, strict=True))
    return edge, dst, src


def make_node_buffer(num_nodes: int, device: torch.device | str | None = None) -> Tensor:
    """The ``node_buffer`` of :func:`sample_neighbors`: ``int64 [num_nodes]``, all ``-1``."""
    num_nodes = check_int("make_node_buffer", "num_nodes", num_nodes, low=0)
    return torch.full((num_nodes,), -1, dtype=torch.long, device=device)


@contextmanager
def _intra_op_threads(threads: int | None) -> Iterator[None]:
    """Torch's intra-op thread count set to ``threads`` for the block (``None``: unchanged).

    Only on the main thread: the count is process-wide, so a sampler running in a
    background thread (a prefetcher, a stage-1 thread) would change it under the main
    thread's model step; there the process's setting is left as it is.
    """
    before = torch.get_num_threads()
    on_main = threading.current_thread() is threading.main_thread()
    if threads is None or threads == before or not on_main:
        yield
        return
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Relabel:
    """Global -> local ids of the nodes sampled so far, new nodes in order of appearance.

    With a node-sized ``buffer`` (``int64``, all ``-1``) lookups are gathers and no sort
    is needed; the touched entries are reset to ``-1`` by :meth:`release`. Without one,
    every hop runs a ``torch.unique`` over the known and the newly reached nodes.
    """

    def __init__(self, seeds: Tensor, buffer: Tensor | None) -> None:
        self.buffer = buffer
        self.nodes = [seeds]
        self.count = seeds.numel()
        if buffer is not None:
            # Repeated seeds map to their first position.
            pos = torch.arange(self.count, device=seeds.device)
            buffer.index_fill_(0, seeds, self.count)
            buffer.scatter_reduce_(0, seeds, pos, "amin")

    def __call__(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Local ids of ``src`` and the new nodes among them (appended to the known)."""
        n, device = self.count, src.device
        if self.buffer is not None:
            buf = self.buffer
            unknown = (buf.index_select(0, src) < 0).nonzero().squeeze(1)
            cand = src.index_select(0, unknown)
            buf.index_fill_(0, cand, src.numel())
            buf.scatter_reduce_(0, cand, unknown, "amin")
            new = cand[buf.index_select(0, cand) == unknown]  # first appearances, in order
            buf.index_copy_(0, new, torch.arange(n, n + new.numel(), device=device))
            local = buf.index_select(0, src)
        else:
            known = torch.cat(self.nodes)
            both = torch.cat([known, src])
            uniq, inverse = torch.unique(both, return_inverse=True)
            pos = torch.arange(both.numel(), device=device)
            first = torch.full_like(uniq, both.numel()).scatter_reduce_(0, inverse, pos, "amin")
            is_new = first >= n
            mark = torch.zeros(both.numel(), dtype=torch.bool, device=device)
            mark[first[is_new]] = True
            rank = torch.cumsum(mark, 0) - 1
            local_of_uniq = torch.where(is_new, n + rank.index_select(0, first), first)
            local = local_of_uniq.index_select(0, inverse[n:])
            new = both[mark]
        self.nodes.append(new)
        self.count += new.numel()
        return local, new

    def release(self) -> None:
        if self.buffer is not None:
            for nodes in self.nodes:
                self.buffer.index_fill_(0, nodes, -1)


def sample_neighbors(
    indptr: Tensor,
    indices: Tensor,
    seeds: Tensor,
    fanouts: Sequence[int],
    replace: bool = False,
    generator: torch.Generator | None = None,
    node_buffer: Tensor | None = None,
    num_threads: int = 1,
    intra_op_threads: int | None = 1,
) -> NeighborSample:
    """Sample a ``len(fanouts)``-hop neighbourhood of ``seeds``, uniformly per node.

    Hop 1 expands every seed; hop ``h > 1`` expands the nodes first reached at hop
    ``h - 1``. A node expanded with fanout ``k`` keeps, of its ``deg`` in-neighbours:

    * all of them if ``k == -1``, or if ``deg <= k`` without replacement;
    * ``k`` distinct ones, uniform over the ``k``-subsets, if ``deg > k`` without
      replacement;
    * ``k`` independent uniform draws (repeats possible) with replacement (none if
      ``deg == 0``).

    Args:
        indptr: ``[num_nodes + 1]`` CSC pointer, ``int32`` or ``int64`` (may be backed by
            a ``numpy.memmap``: only the expanded rows are read).
        indices: ``[num_edges]`` CSC sources, ``int32`` or ``int64`` (may be memmapped:
            only the sampled edges are read). See :func:`to_csc`.
        seeds: 1-D integer tensor of global node ids in ``[0, num_nodes)``; repeats are
            allowed (each position is expanded).
        fanouts: one entry per hop, a positive integer or ``-1`` (all neighbours).
        replace: sample with replacement.
        generator: the random source; with a given state the sample is reproducible,
            whatever the dtype or storage of ``indptr``/``indices``. A CPU generator also
            serves a CUDA graph (its draws are copied over), giving the same samples.
        node_buffer: optional ``int64 [num_nodes]`` scratch tensor on the graph's device,
            all ``-1`` (:func:`make_node_buffer`), for relabelling without sorting; it is
            ``-1`` again on return. Without it, ``torch.unique`` is used (slower: the
            loaders pass a buffer up to :data:`NODE_BUFFER_MAX_NODES` nodes).
        num_threads: threads that expand every hop together (``>= 1``). With ``n > 1``
            each hop's frontier is cut into ``n`` contiguous chunks expanded concurrently
            on a shared pool and concatenated in order, so the layout is the serial one;
            chunk ``c`` draws from a fresh CPU generator seeded by an integer drawn from
            ``generator`` (the global CPU generator if ``None``). The sample is then
            reproducible for a given generator state and ``num_threads``, with the same
            distribution as, but other draws than, ``num_threads=1`` (the default,
            unchanged). Pays off on large batches with idle cores; hops with fewer than
            4096 frontier nodes run their chunks in the calling thread (same sample).
            These threads add to torch's intra-op threads (each may start its own
            OpenMP team): on few cores, lower ``torch.set_num_threads`` accordingly.
        intra_op_threads: torch's intra-op threads while sampling (``torch.
            set_num_threads``, restored on return); ``None`` leaves torch's setting. The
            default 1 keeps a busy machine from collapsing the sampler's many small ops.
            Applied on the main thread only: the setting is process-wide, and a sampler in
            a background thread must not change it under the main thread's work.

    Returns:
        A :class:`NeighborSample` on the device of ``indptr``.

    Raises:
        ValueError: on a bad ``fanouts`` entry (``0`` or ``< -1``), seeds out of range,
            ``num_threads < 1``, ``intra_op_threads < 1``, or tensors of the wrong shape or
            dtype (the message names the argument).
    """
    owner = "sample_neighbors"
    num_nodes = _check_csc(owner, indptr, indices)
    fanouts = check_fanouts(owner, fanouts)
    check_bool(owner, "replace", replace)
    num_threads = check_int(owner, "num_threads", num_threads, low=1)
    intra_op_threads = check_optional_int(owner, "intra_op_threads", intra_op_threads, low=1)
    if generator is not None:
        check_type(owner, "generator", generator, torch.Generator)
    device = indptr.device
    seeds = _check_seeds(owner, seeds, num_nodes).to(device)
    if node_buffer is not None:
        check_type(owner, "node_buffer", node_buffer, torch.Tensor)
        if (
            node_buffer.shape != (num_nodes,)
            or node_buffer.dtype != torch.long
            or node_buffer.device != device
        ):
            raise ValueError(
                f"{owner}: expected `node_buffer` to be an int64 tensor of shape "
                f"({num_nodes},) on {device} but got {describe(node_buffer)} on "
                f"{node_buffer.device}."
            )

    with _intra_op_threads(intra_op_threads):
        return _sample(
            indptr, indices, seeds, fanouts, replace, generator, node_buffer, num_threads
        )


def _sample(
    indptr: Tensor,
    indices: Tensor,
    seeds: Tensor,
    fanouts: list[int],
    replace: bool,
    generator: torch.Generator | None,
    node_buffer: Tensor | None,
    num_threads: int,
) -> NeighborSample:
    """:func:`sample_neighbors` on checked arguments."""
    relabel = _Relabel(seeds, node_buffer)
    try:
        rows: list[Tensor] = []
        cols: list[Tensor] = []
        edges: list[Tensor] = []
        num_sampled_nodes = [seeds.numel()]
        num_sampled_edges: list[int] = []
        frontier, frontier_start = seeds, 0
        for k in fanouts:
            if num_threads == 1:
                edge, dst, src = _expand(indptr, indices, frontier, k, replace, generator)
            else:
                edge, dst, src = _expand_parallel(
                    indptr, indices, frontier, k, replace, generator, num_threads
                )
            total = edge.numel()
            row, new = relabel(src)
            rows.append(row)
            cols.append(dst + frontier_start)
            edges.append(edge)
            num_sampled_edges.append(total)
            num_sampled_nodes.append(new.numel())
            frontier_start = relabel.count - new.numel()
            frontier = new
        node = torch.cat(relabel.nodes)
    finally:
        relabel.release()
    return NeighborSample(
        node=node,
        row=torch.cat(rows),
        col=torch.cat(cols),
        edge=torch.cat(edges),
        num_sampled_nodes=num_sampled_nodes,
        num_sampled_edges=num_sampled_edges,
    )
