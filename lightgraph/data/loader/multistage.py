"""JOESTAR's multistage sampling for in-memory graphs: macro-batches on the host, mini-batches
on the compute device.

Stage 1 runs on the host, in a background thread, one macro-batch ahead of training
(double buffering: the macro-batch being trained and the one being built; no reuse):

* **LBS** (large-batch sampling, JOESTAR-I): the ordinary neighbour sampler with the
  model's fanouts, run from ``|B_L| = ratio * |train|`` seeds at once; the sampled
  subgraph is the macro-batch. Its normalised working set ``C(B_L) / |B_L|`` shrinks as
  ``|B_L|`` grows (sampled neighbourhoods overlap), which is where the saving comes from.
* **PBS** (partition-based sampling, JOESTAR-II): ``parts_per_batch`` of the graph's
  ``num_parts`` GAP partitions ("inner" nodes, with all their in-edges) plus their 1-hop
  halo (in-neighbours outside the partitions: leaves, with no in-edges). The halo's hidden
  representations come from historical embeddings (:mod:`lightgraph.nn.history`).

Stage 2 runs where the model runs (:meth:`MultistageDataModule.on_after_batch_transfer`):
mini-batches of ``batch_size`` seeds, each seed of the macro-batch exactly once, are
neighbour-sampled *inside* the macro-batch (LBS: ``second_stage_fanouts``, by default
all neighbours; PBS: the model's fanouts). Every draw comes from a CPU generator keyed by
``(seed, epoch, macro-batch, mini-batch)``, so the samples are the same on the CPU and on a
GPU, for a prefetching and a serial loader, and after a resume. Under data parallelism each
rank builds and trains its own share of every epoch (see
:class:`~lightgraph.data.MultistageDataModule`), and its rank joins the keys of its stage-1
and stage-2 streams, so the ranks draw independent samples.

**Ahead-of-time (AoT) filtering**: the stage-2 samples of a whole macro-batch are drawn on
the host right after stage 1 (structure only), and only the nodes some mini-batch touches
(their feature rows, labels and history rows) plus the samples themselves move to the
device, which then reuses exactly those samples instead of sampling again. The mini-batches
are identical with and without AoT.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.loader.base import Emit, ResumableLoader
from lightgraph.data.loader.minibatch import gather_rows
from lightgraph.functional.neighbor_sampling import (
    NeighborSample,
    make_node_buffer,
    sample_neighbors,
    to_csc,
)
from lightgraph.utilities.memory import tensor_bytes
from lightgraph.utilities.random_state import make_generator


@dataclass
class StageOneBatch:
    """One macro-batch as stage 1 leaves it on the host.

    Attributes:
        epoch, index: which epoch and which macro-batch of it.
        node: store id of every macro-batch node, ``int64 [M]`` (PBS: inner nodes first).
        x, y: their features and labels (``None`` only between stage 1 and AoT, which
            gathers the rows it keeps straight from the graph).
        indptr, indices: CSC of the macro-batch subgraph over local ids (``None`` with AoT:
            the device receives the samples instead).
        num_inner: nodes ``[num_inner, M)`` are halo nodes (PBS); ``M`` for LBS.
        batches: the seeds (local ids) of every mini-batch, in training order.
        samples: AoT only: the stage-2 sample of every mini-batch, in local ids of this
            (filtered) macro-batch, as compact ``int32`` arrays.
        hist_nodes: AoT only: per hidden layer ``l``, the local ids of the halo nodes whose
            layer-``l`` history some mini-batch reads (those it holds at hops
            ``0 .. L-1-l``; a halo node seen only at the last hop needs its features and
            no history at all). ``None``: every halo node, every layer.
        num_seeds, num_nodes_sampled: seeds and nodes of the unfiltered macro-batch.
        build_seconds: host time of stage 1 (and of AoT sampling).
        rank: the data-parallel rank that built it (a key of its random streams), ``None``
            in one process (whose keys carry no rank).
    """

    epoch: int
    index: int
    node: Tensor
    x: Tensor | None
    y: Tensor | None
    indptr: Tensor | None
    indices: Tensor | None
    num_inner: int
    batches: list[Tensor]
    samples: list[NeighborSample] | None = None
    hist_nodes: list[Tensor] | None = None
    num_seeds: int = 0
    num_nodes_sampled: int = 0
    build_seconds: float = 0.0
    rank: int | None = None

    @property
    def num_nodes(self) -> int:
        return int(self.node.numel())

    @property
    def halo(self) -> Tensor:
        """Local ids of the halo nodes."""
        return torch.arange(self.num_inner, self.num_nodes)

    def device_bytes(self) -> int:
        """Bytes of this macro-batch that move to the compute device."""
        total = tensor_bytes(self.node, self.x, self.y, self.indptr, self.indices)
        for s in self.samples or ():
            total += tensor_bytes(s.node, s.row, s.col)
        return total


@dataclass
class StagedStep:
    """What the training loader yields: one mini-batch of a macro-batch, not sampled yet."""

    macro: StageOneBatch
    step: int

    @property
    def seeds(self) -> Tensor:
        return self.macro.batches[self.step]


@dataclass
class DeviceMacroBatch:
    """A macro-batch on the compute device (plus its halo's history rows)."""

    source: StageOneBatch
    node: Tensor
    x: Tensor
    y: Tensor
    indptr: Tensor | None
    indices: Tensor | None
    hist: list[Tensor] = field(default_factory=list)
    hist_slot: list[Tensor] = field(default_factory=list)  # local id -> row of ``hist[l]``
    # Stage 2's relabelling buffer (``int64 [M]``, all ``-1``), allocated on first use and
    # reused by every mini-batch of the macro-batch.
    node_buffer: Tensor | None = None
    # The original node ids of ``node`` (``int64 [M]``, on the device), gathered on first use
    # when the store maps its ids to original ones: once per macro-batch, not all N ids per
    # mini-batch.
    n_id: Tensor | None = None


@dataclass
class DeviceStep:
    """A mini-batch whose macro-batch is on the device: stage 2 turns it into ``Data``."""

    macro: DeviceMacroBatch
    step: int


# --------------------------------------------------------------------------- stage 1
def _macro_subgraph(sample: NeighborSample, num_nodes: int) -> tuple[Tensor, Tensor]:
    """CSC of the subgraph an LBS stage-1 sample spans (each sampled edge once)."""
    # Every node is expanded once (at the hop after it was first reached), so no edge
    # repeats without replacement: the sampled edges *are* the macro-batch subgraph.
    indptr, indices = to_csc(torch.stack([sample.row, sample.col]), num_nodes)
    return indptr, indices


def lbs_stage_one(
    indptr: Tensor,
    indices: Tensor,
    x: Tensor | None,
    y: Tensor | None,
    seeds: Tensor,
    fanouts: Sequence[int],
    generator: torch.Generator,
    num_threads: int = 1,
    node_buffer: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None]:
    """LBS stage 1: ``(node, indptr, indices, x, y)`` of the sampled macro-batch subgraph.

    The seeds come first (local ids ``0 .. len(seeds) - 1``). ``x``/``y`` ``None``: no rows
    are gathered (AoT gathers the kept ones, :func:`aot_filter`).
    """
    sample = sample_neighbors(
        indptr,
        indices,
        seeds,
        list(fanouts),
        generator=generator,
        node_buffer=node_buffer,
        num_threads=num_threads,
    )
    node = sample.node
    m_indptr, m_indices = _macro_subgraph(sample, node.numel())
    return node, m_indptr, m_indices, *_gather(x, y, node)


def _gather(
    x: Tensor | None, y: Tensor | None, node: Tensor
) -> tuple[Tensor | None, Tensor | None]:
    """The rows of ``node`` of ``x`` and ``y`` (``None`` stays ``None``)."""
    return (
        None if x is None else gather_rows(x, node),
        None if y is None else y.index_select(0, node),
    )


def pbs_stage_one(
    indptr: Tensor,
    indices: Tensor,
    x: Tensor | None,
    y: Tensor | None,
    inner: Tensor,
    scratch: Tensor,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor | None, int]:
    """PBS stage 1: the ``inner`` nodes with all their in-edges, plus their 1-hop halo.

    Args:
        indptr, indices: CSC of the whole graph (store ids).
        x, y: features and labels of the whole graph (``None``: not gathered, as for LBS).
        inner: store ids of the chosen partitions' nodes (sorted, distinct).
        scratch: ``int64 [num_nodes]`` all ``-1`` (it is ``-1`` again on return).

    Returns:
        ``(node, indptr, indices, x, y, num_inner)``: local ids ``[0, num_inner)`` are the
        inner nodes in the given order, ``[num_inner, M)`` the halo in ascending store id.
        Halo nodes have no in-edges.
    """
    start = indptr.index_select(0, inner).long()
    deg = indptr.index_select(0, inner + 1).long() - start
    total = int(deg.sum())
    ptr = torch.cumsum(deg, 0) - deg
    dst_rank = torch.repeat_interleave(torch.arange(inner.numel()), deg, output_size=total)
    edge = torch.arange(total) + (start - ptr).index_select(0, dst_rank)
    src = indices.index_select(0, edge).long()
    num_inner = inner.numel()
    try:
        scratch.index_copy_(0, inner, torch.arange(num_inner))
        outside = scratch.index_select(0, src) < 0
        # The distinct outside sources in ascending store id, without sorting.
        is_halo = torch.zeros(scratch.numel(), dtype=torch.bool)
        is_halo[src[outside]] = True
        halo = is_halo.nonzero().view(-1)
        scratch.index_copy_(0, halo, torch.arange(num_inner, num_inner + halo.numel()))
        local_src = scratch.index_select(0, src)
    finally:
        scratch.index_fill_(0, inner, -1)
        if "halo" in locals():
            scratch.index_fill_(0, halo, -1)
    node = torch.cat([inner, halo])
    m_indptr = torch.zeros(node.numel() + 1, dtype=torch.long)
    torch.cumsum(deg, 0, out=m_indptr[1 : num_inner + 1])
    m_indptr[num_inner + 1 :] = total
    mx, my = _gather(x, y, node)
    return node, m_indptr, local_src, mx, my, num_inner


def _compact(sample: NeighborSample) -> NeighborSample:
    """A sample with ``int32`` index arrays (what crosses the bus under AoT)."""
    return NeighborSample(
        node=sample.node.to(torch.int32),
        row=sample.row.to(torch.int32),
        col=sample.col.to(torch.int32),
        edge=sample.edge[:0],
        num_sampled_nodes=list(sample.num_sampled_nodes),
        num_sampled_edges=list(sample.num_sampled_edges),
    )


def aot_filter(
    macro: StageOneBatch,
    fanouts: Sequence[int],
    seed: int,
    history_layers: int = 0,
    node_buffer: Tensor | None = None,
    x: Tensor | None = None,
    y: Tensor | None = None,
) -> StageOneBatch:
    """Ahead-of-time filtering: draw every mini-batch's stage-2 sample now, keep only the
    nodes some mini-batch touches, and hand the samples (relabelled) to the device.

    The samples are drawn with exactly the generators stage 2 would use on the device, so
    the mini-batches do not change. With ``history_layers = L - 1 > 0`` the history rows
    are filtered per layer too (see :attr:`StageOneBatch.hist_nodes`). ``node_buffer``:
    the sampler's relabelling buffer for the macro-batch (``int64 [M]``, all ``-1``,
    :func:`~lightgraph.functional.neighbor_sampling.make_node_buffer`; ``-1`` again on
    return); ``None``: one is allocated for the call. ``x``, ``y``: the whole graph's
    features and labels, for a ``macro`` built without them: only the kept rows are read.
    """
    assert macro.indptr is not None and macro.indices is not None
    if node_buffer is None:
        node_buffer = make_node_buffer(macro.num_nodes)
    samples = [
        sample_neighbors(
            macro.indptr,
            macro.indices,
            seeds,
            list(fanouts),
            generator=stage_two_generator(seed, macro.epoch, macro.index, b, macro.rank),
            node_buffer=node_buffer,
        )
        for b, seeds in enumerate(macro.batches)
    ]
    touched = torch.zeros(macro.num_nodes, dtype=torch.bool)
    needs = [torch.zeros(macro.num_nodes, dtype=torch.bool) for _ in range(history_layers)]
    num_layers = len(fanouts)
    for s in samples:
        touched[s.node] = True
        ends = torch.cumsum(torch.tensor(s.num_sampled_nodes), 0).tolist()
        for layer, need in enumerate(needs):
            near = s.node[: ends[num_layers - 1 - layer]]
            need[near[near >= macro.num_inner]] = True
    keep = touched.nonzero().view(-1)  # ascending: inner nodes stay before halo nodes
    node = macro.node.index_select(0, keep)
    if macro.x is None or macro.y is None:
        if x is None or y is None:
            raise ValueError(
                "aot_filter: the macro-batch carries no features; pass the graph's `x` and `y`."
            )
        kept_x, kept_y = _gather(x, y, node)
    else:
        kept_x, kept_y = macro.x.index_select(0, keep), macro.y.index_select(0, keep)
    local = torch.full((macro.num_nodes,), -1, dtype=torch.long)
    local[keep] = torch.arange(keep.numel())
    relabelled = [_compact(s._replace(node=local[s.node])) for s in samples]
    return StageOneBatch(
        epoch=macro.epoch,
        index=macro.index,
        node=node,
        x=kept_x,
        y=kept_y,
        indptr=None,
        indices=None,
        num_inner=int((keep < macro.num_inner).sum()),
        batches=[local[b] for b in macro.batches],
        samples=relabelled,
        hist_nodes=[local[need.nonzero().view(-1)] for need in needs] if needs else None,
        num_seeds=macro.num_seeds,
        num_nodes_sampled=macro.num_nodes_sampled,
        build_seconds=macro.build_seconds,
        rank=macro.rank,
    )


def stage_two_generator(
    seed: int, epoch: int, macro: int, step: int, rank: int | None = None
) -> torch.Generator:
    """The CPU generator of one stage-2 mini-batch (the same on every device and under AoT);
    ``rank``: the data-parallel rank whose macro-batch it is (``None`` in one process)."""
    if rank is None:
        return make_generator(seed, "stage2", epoch, macro, step)
    return make_generator(seed, "stage2", epoch, macro, step, "rank", rank)


# --------------------------------------------------------------------------- stage 2
def stage_two(
    macro: DeviceMacroBatch,
    step: int,
    fanouts: Sequence[int],
    seed: int,
    node_ids: Tensor | None = None,
    history_layers: int = 0,
) -> Data:
    """Sample mini-batch ``step`` of ``macro`` on its device and gather its rows.

    Returns a ``Data`` laid out as :func:`lightgraph.data.loader.minibatch.sample_minibatch` does
    (seeds first, per-hop counts for trimming; ``n_id`` the original node ids when
    ``node_ids`` maps store ids to them). With ``history_layers = L - 1 > 0`` (PBS with
    historical embeddings) it also carries, per hidden layer ``l``, ``halo_index[l]`` (halo
    rows among hops ``0 .. L-1-l``), ``hist[l]`` (their history rows), ``push_index[l]``
    (inner rows among hops ``0 .. L-1-l``: the rows whose layer-``l`` output is computed from
    their whole sampled neighbourhood; hop ``L-l`` rows are cut off from their in-edges by
    trimming) and ``push_ids[l]`` (their store ids).
    """
    src = macro.source
    device = macro.x.device
    if src.samples is not None:  # AoT: reuse the host's sample
        s = src.samples[step]
        sample = NeighborSample(
            node=s.node.to(device=device, dtype=torch.long),
            row=s.row.to(device=device, dtype=torch.long),
            col=s.col.to(device=device, dtype=torch.long),
            edge=s.edge,
            num_sampled_nodes=s.num_sampled_nodes,
            num_sampled_edges=s.num_sampled_edges,
        )
    else:
        assert macro.indptr is not None and macro.indices is not None
        seeds = src.batches[step].to(device)
        if macro.node_buffer is None:
            macro.node_buffer = make_node_buffer(macro.node.numel(), device)
        sample = sample_neighbors(
            macro.indptr,
            macro.indices,
            seeds,
            list(fanouts),
            generator=stage_two_generator(seed, src.epoch, src.index, step, src.rank),
            node_buffer=macro.node_buffer,
        )
    node = sample.node
    store = macro.node.index_select(0, node)
    data = Data(
        x=macro.x.index_select(0, node),
        y=macro.y.index_select(0, node),
        edge_index=torch.stack([sample.row, sample.col]),
    )
    if node_ids is None:
        data.n_id = store
    else:
        if macro.n_id is None:
            index = macro.node if node_ids.device == device else macro.node.to(node_ids.device)
            macro.n_id = node_ids.index_select(0, index).to(device)
        data.n_id = macro.n_id.index_select(0, node)
    data.batch_size = int(sample.num_sampled_nodes[0])
    data.num_sampled_nodes = list(sample.num_sampled_nodes)
    data.num_sampled_edges = list(sample.num_sampled_edges)
    if history_layers > 0:
        num_layers = len(sample.num_sampled_nodes) - 1
        is_halo = node >= src.num_inner
        ends = torch.cumsum(torch.tensor(sample.num_sampled_nodes), 0).tolist()
        halo_index, hist, push_index, push_ids = [], [], [], []
        for layer in range(history_layers):
            rows = ends[num_layers - 1 - layer]  # hops 0 .. L-1-l
            h = is_halo[:rows].nonzero().view(-1)
            halo_index.append(h)
            hist.append(macro.hist[layer].index_select(0, macro.hist_slot[layer][node[h]]))
            pushed = (~is_halo[:rows]).nonzero().view(-1)
            push_index.append(pushed)
            push_ids.append(store.index_select(0, pushed))
        data.halo_index, data.hist = halo_index, hist
        data.push_index, data.push_ids = push_index, push_ids
    return data


# ------------------------------------------------------------------------ the loader
class MultistageLoader(ResumableLoader):
    """The training loader of :class:`~lightgraph.data.MultistageDataModule`.

    Yields one :class:`StagedStep` per mini-batch; stage 1 (and AoT sampling) of macro-batch
    ``k + 1`` runs in a background thread while macro-batch ``k`` trains. Every draw is
    keyed by ``(seed, epoch, macro-batch[, mini-batch])``, so prefetching, serial and
    resumed (:meth:`state_dict`) runs yield the same steps.

    **One pass, one epoch.** Each pass over the loader is one whole epoch: every seed of
    the plan once. A PBS epoch's step count (``sum over groups of ceil(training nodes in
    the group / batch_size)``) depends on that epoch's partition draw, while Lightning
    reads ``len()`` once per fit and stops every later epoch at that count. So only a loader
    whose step count is the same every epoch (``sized``: LBS) has a length; for PBS
    ``len()`` raises :class:`TypeError`, and Lightning, as for any iterable without a
    length, runs each epoch until the pass ends. A pass that the consumer abandons inside
    an epoch after steps were handed over (``limit_train_batches``) is not continued: the
    next pass starts the next epoch, as a new pass over a ``DataLoader`` does.

    **Data parallelism.** Every rank has a loader over its own share (``plan`` and ``build``
    give this rank's macro-batches), and every rank's epoch has the same number of steps;
    a rank resumes from rank 0's ``step`` (PBS ranks cut different macro-batches).
    Position, hand-over, prefetch and ``state_dict`` are the
    :class:`~lightgraph.data.loader.ResumableLoader`'s; the position is ``(macro-batch,
    mini-batch inside it)``.

    Args:
        build: ``build(epoch, k) -> StageOneBatch`` (stage 1, plus AoT when enabled).
        plan: ``plan(epoch) -> list of seeds per macro-batch`` (store ids).
        batch_size: seeds per mini-batch.
        prefetch: build the next macro-batch in a background thread.
        sized: every epoch has the same number of steps, and ``len()`` gives it.
        world_size: data-parallel replicas (each with a loader over its own share).
        dropped: ``dropped(epoch) ->`` training targets of ``epoch`` no rank trains
            (``stats.dropped_targets``, counted with the epoch's first step); ``None``: none.
        steps: ``steps(epoch) ->`` mini-batches of every macro-batch; ``None``:
            ``ceil(len(seeds) / batch_size)`` for each (:func:`~lightgraph.data.loader.batching.
            even_batches`).
    """

    STATS_KEYS = (
        "macro_batches",
        "mini_batches",
        "targets",
        "nodes_loaded",
        "nodes_moved",
        "stage1_seconds",
        "wait_seconds",
        "dropped_targets",
    )
    POSITION_SIZE = 2  # (macro-batch, mini-batch inside it)

    def __init__(
        self,
        build: Any,
        plan: Any,
        batch_size: int,
        prefetch: bool = True,
        sized: bool = True,
        world_size: int = 1,
        dropped: Any = None,
        steps: Any = None,
    ) -> None:
        self.build = build
        self.plan = plan
        self.steps = steps
        self.batch_size = batch_size
        self.sized = sized
        self.dropped = dropped
        self._length: int | None = None
        # the next epoch's first macro-batch, built ahead at the end of an epoch
        self._ahead: tuple[tuple[int, int], Future[StageOneBatch]] | None = None
        super().__init__(world_size=world_size, prefetch=prefetch)

    def _sizes(self, epoch: int) -> list[int]:
        if self.steps is not None:
            return list(self.steps(epoch))
        return [math.ceil(s.numel() / self.batch_size) for s in self.plan(epoch)]

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError(
                "MultistageLoader: the number of steps of a PBS epoch depends on its partition "
                "draw, so the loader has no length; each pass runs one whole epoch."
            )
        if self._length is None:
            self._length = sum(self._sizes(self.epoch))
        return self._length

    def _get(self, epoch: int, k: int, pending: Future[StageOneBatch] | None) -> StageOneBatch:
        tic = time.perf_counter()
        macro = pending.result() if pending is not None else self.build(epoch, k)
        self.stats.wait_seconds += time.perf_counter() - tic
        return macro

    def _epoch(self, epoch: int, position: tuple[int, ...]) -> Iterator[Emit]:
        first_macro, first_step = position
        sizes = self._sizes(epoch)
        if self.sized and sum(sizes) != len(self):
            raise RuntimeError(
                f"MultistageLoader: epoch {epoch} has {sum(sizes)} steps but the loader was "
                f"built as `sized` with {len(self)} steps per epoch."
            )
        count = len(sizes)
        last = max((k for k in range(count) if sizes[k]), default=-1)  # the last non-empty one
        # A macro-batch built ahead (at the end of the previous epoch) is used if it is the
        # one needed now; anything else is dropped.
        pending, self._ahead = self._ahead, None
        if pending is not None and pending[0] != (epoch, first_macro):
            pending[1].cancel()
            pending = None
        future = pending[1] if pending is not None else None
        if future is None and self.prefetch and first_macro < count:
            future = self.prefetcher.submit(self.build, epoch, first_macro)
        # The epoch's training targets no rank trains count with its first step.
        dropped = position == self._start() and self.dropped is not None
        try:
            for k in range(first_macro, count):
                macro = self._get(epoch, k, future)
                future = None
                if self.prefetch:
                    # Double buffering: the next macro-batch (the next epoch's first one
                    # after the last) is built while this one trains.
                    key = (epoch, k + 1) if k + 1 < count else (epoch + 1, 0)
                    future = self.prefetcher.submit(self.build, *key)
                    if k + 1 == count:
                        self._ahead, future = (key, future), None
                start = first_step if k == first_macro else 0
                for b in range(start, len(macro.batches)):
                    step = StagedStep(macro, b)
                    counts: dict[str, float] = {
                        "mini_batches": 1,
                        "targets": int(step.seeds.numel()),
                    }
                    if b == start:  # the macro-batch's own counters, with its first step
                        counts.update(
                            macro_batches=1,
                            nodes_loaded=macro.num_nodes_sampled,
                            nodes_moved=macro.num_nodes,
                            stage1_seconds=macro.build_seconds,
                        )
                    if dropped:
                        counts["dropped_targets"] = int(self.dropped(epoch))
                        dropped = False
                    if b + 1 < len(macro.batches):
                        after: tuple[int, int] | None = (k, b + 1)
                    elif k == last:
                        after = None
                    else:  # the next non-empty macro-batch
                        nxt = k + 1
                        while sizes[nxt] == 0:
                            nxt += 1
                        after = (nxt, 0)
                    yield Emit(step, after, counts)
        finally:
            if future is not None:
                future.cancel()

    def _locate(self, epoch: int, step: int) -> tuple[int, int]:
        sizes = self._sizes(epoch)
        left, k = step, 0
        while k < len(sizes) and left >= sizes[k]:  # past empty macro-batches too
            left -= sizes[k]
            k += 1
        return (k, left)

    def _reset(self) -> None:
        if self._ahead is not None:
            self._ahead[1].cancel()
            self._ahead = None
