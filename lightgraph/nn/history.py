"""Historical embeddings for partition-based sampling (JOESTAR's PBS, GNNAutoScale style).

A PBS mini-batch is a neighbour sample taken inside a *macro-batch*: a few graph
partitions (the *inner* nodes, which keep all their in-edges) plus their 1-hop *halo*
(in-neighbours of inner nodes that lie outside those partitions). Halo nodes have no
in-edges in the macro-batch, so any hidden embedding computed for them would be wrong.
As in GNNAutoScale (`Fey et al., 2021 <https://arxiv.org/abs/2106.05609>`_), their
hidden embeddings are read from a table of *historical* embeddings, one table per
hidden layer, kept on the host and refreshed with the embeddings the training steps
compute for non-halo nodes.

Chosen semantics for the inputs of halo nodes (JOESTAR's specification, ch. 5 of T. Huang,
*Efficient Systems for Large-Scale Graph Representation Learning*, PhD thesis, MIT 2025,
leaves this open): **halo nodes carry their real input features**, so the first layer's
aggregation over halo neighbours is exact (as in GNNAutoScale); **their outputs of hidden
layers 1..L-1** (0-based ``l = 0..L-2``) **come from the history tables**. The tables are
not zero-initialised: :meth:`HistoricalEmbeddings.fill` computes every hidden layer's exact
embeddings of the initial model first (GNNAutoScale's warm-up fill).

* :class:`HistoricalEmbeddings` is the table: :meth:`~HistoricalEmbeddings.pull` rows
  (node ids of the graph) of one layer, :meth:`~HistoricalEmbeddings.push` fresh rows
  back, :meth:`~HistoricalEmbeddings.fill` all layers exactly.
* :func:`~lightgraph.nn.destination.destination_forward` (with ``halo_index`` and
  ``hist``) runs a PyG ``BasicGNN`` over a mini-batch as ``BasicGNN.forward`` does, each
  layer on its destination rows only, and splices the pulled history into the halo rows
  of every hidden layer's output.

Row layout with per-hop counts (``num_sampled_nodes`` given, nodes and edges ordered by
hop): the output of layer ``l`` holds the rows of hops ``0..L-1-l`` (the rows layer
``l + 1`` reads); ``halo_index[l]`` are the halo positions among them; the caller pushes,
for layer ``l``, the non-halo rows among the same hops (their outputs saw their whole
sampled neighbourhood).

**Data parallelism.** Under a data-parallel strategy every rank trains its own macro-batches
and holds its own replica of the tables; a halo row one rank reads may be one another rank
just computed. With ``sync="step"`` (the default) every :meth:`~HistoricalEmbeddings.push`
is an all-gather over the ranks: each replica writes the rows every rank pushed in that
step, in rank order, so all replicas stay equal to the one table a single process would hold
after receiving the same pushes in rank order (the rows pushed by other ranks in a step
arrive at its end: a replica is never staler than that single table by more than those).
With ``sync="epoch"`` nothing is exchanged: each replica gets its own rank's pushes, and the
other ranks' rows stay at the last exact refresh (the warm fill, then every exact validation,
``MiniBatchNodeClassifier(refresh_history=True)``), which makes the replicas equal again.
Replicas start equal: the warm fill is deterministic and runs at train start, after the
strategy broadcast rank 0's weights. The per-step exchange costs three collectives per
push (the row counts, then the values and ids padded to the largest count): every rank
receives every other rank's pushed rows (``stats["bytes_gathered"]``).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from lightgraph.nn.destination import check_layered_gnn
from lightgraph.nn.layerwise import layerwise_inference
from lightgraph.utilities.checks import check_choice, check_int, check_type
from lightgraph.utilities.collectives import all_gather_rows

__all__ = ["HistoricalEmbeddings"]

#: How replicas of the tables meet under data parallelism (see the module docstring).
SYNC_MODES: tuple[str, ...] = ("step", "epoch")


def _check_ids(owner: str, name: str, ids: Any, num_nodes: int) -> Tensor:
    check_type(owner, name, ids, Tensor, "a 1-D integer tensor of node ids")
    if (
        ids.dim() != 1
        or ids.dtype.is_floating_point
        or ids.dtype.is_complex
        or ids.dtype == torch.bool
    ):
        raise ValueError(
            f"{owner}: expected `{name}` to be a 1-D integer tensor of node ids but got a "
            f"{ids.dim()}-D {ids.dtype} tensor."
        )
    if ids.numel() > 0:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= num_nodes:
            raise IndexError(
                f"{owner}: expected `{name}` to hold node ids in [0, {num_nodes}) but got ids "
                f"in [{lo}, {hi}]."
            )
    return ids.to(torch.long)


def _all_gather_rows(
    ids: Tensor, values: Tensor, group: Any
) -> tuple[list[tuple[Tensor, Tensor]], int]:
    """Every rank's pushed rows: ``(rows, nbytes)``, ``rows[r] = (ids, values)`` of rank
    ``r`` and ``nbytes`` the bytes this rank received.

    Ranks push different row counts: the counts are gathered first, then every rank's
    values and ids, each padded to the largest count, into one tensor each
    (three collectives; the ranks' rows arrive as contiguous slices, nothing is packed or
    unpacked). CUDA tensors with NCCL, host tensors with any other backend.
    """
    world = dist.get_world_size(group)
    nccl = "nccl" in str(dist.get_backend(group))
    device = values.device if nccl and values.is_cuda else torch.device("cpu")
    counts = torch.empty(world, dtype=torch.long, device=device)
    mine = torch.tensor([ids.numel()], dtype=torch.long, device=device)
    all_gather_rows(counts, mine, group)
    sizes = counts.tolist()
    longest = max(sizes)
    if longest == 0:
        return [(ids[:0], values[:0]) for _ in sizes], 0

    def gather(rows: Tensor) -> Tensor:
        rows = rows.to(device)
        if rows.size(0) < longest:
            padded = rows.new_zeros((longest, *rows.shape[1:]))
            padded[: rows.size(0)] = rows
            rows = padded
        out = rows.new_empty((world * longest, *rows.shape[1:]))
        all_gather_rows(out, rows, group)
        return out

    all_values, all_ids = gather(values), gather(ids.to(torch.long))
    starts = [r * longest for r in range(world)]
    rows = [(all_ids[a : a + n], all_values[a : a + n]) for a, n in zip(starts, sizes, strict=True)]
    received = (world - 1) * longest * (values.size(1) * values.element_size() + 8)
    return rows, received


class HistoricalEmbeddings:
    """One table per hidden layer of a ``BasicGNN``, rows indexed by the graph's node ids.

    ``tables[l]`` (``[num_nodes, d_l]``) holds the output of hidden layer ``l``
    (``l = 0..L-2``: after its norm and activation, before dropout), for every node of
    the graph (store row ids). The tables are allocated by :meth:`fill` or, lazily and
    zero-initialised, by the first :meth:`push` of each layer (in layer order).

    Under data parallelism (``torch.distributed`` initialised, more than one rank in
    ``group``) each rank holds a replica; ``sync`` says how the replicas meet (module
    docstring): ``"step"`` makes every :meth:`push` a collective (every rank must push the
    same layers in the same order, as training steps in lockstep do), ``"epoch"`` keeps
    pushes local and relies on the exact refresh by validation. One process: no difference.

    Args:
        num_nodes: rows of every table (nodes of the graph).
        device: where the tables live (default: host memory).
        dtype: floating dtype of the tables (e.g. ``torch.float16`` halves their size).
        sync: ``"step"`` (all-gather the pushed rows at every push) or ``"epoch"`` (no
            exchange).
        group: the process group of the replicas (default: the whole world).

    Attributes:
        filled: ``True`` once :meth:`fill` ran (or a filled table was loaded).
        tables: the per-layer tables.
        stats: ``{"bytes_pulled", "bytes_pushed", "bytes_gathered"}``, bytes of table rows
            read by :meth:`pull` and written by this rank's :meth:`push`, and bytes received
            from the other ranks by ``sync="step"`` (ids and padding included);
            ``"gather_seconds"`` in those all-gathers and ``"refresh_seconds"`` in the
            refreshes ``sync="epoch"`` adds (:meth:`reset_stats` zeroes them).
    """

    def __init__(
        self,
        num_nodes: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        sync: str = "step",
        group: Any = None,
    ) -> None:
        owner = "HistoricalEmbeddings"
        self.num_nodes = check_int(owner, "num_nodes", num_nodes, low=1)
        check_type(owner, "device", device, (str, torch.device), "e.g. 'cpu' or 'cuda:0'")
        self.device = torch.device(device)
        check_type(owner, "dtype", dtype, torch.dtype, "e.g. torch.float32")
        if not dtype.is_floating_point:
            raise ValueError(
                f"{owner}: expected `dtype` to be a floating dtype (torch.float32, "
                f"torch.float16, torch.bfloat16, ...) but got {dtype}."
            )
        self.dtype = dtype
        self.sync = check_choice(owner, "sync", sync, SYNC_MODES)
        self.group = group
        self.tables: list[Tensor] = []
        self.filled = False
        self.stats: dict[str, float] = {}
        self.reset_stats()

    def __repr__(self) -> str:
        widths = [int(t.size(1)) for t in self.tables]
        return (
            f"HistoricalEmbeddings(num_nodes={self.num_nodes}, widths={widths}, "
            f"dtype={self.dtype}, device={self.device}, sync={self.sync!r}, filled={self.filled})"
        )

    def num_layers(self) -> int:
        """Number of allocated tables (hidden layers)."""
        return len(self.tables)

    @property
    def nbytes(self) -> int:
        """Bytes held by the tables."""
        return sum(t.numel() * t.element_size() for t in self.tables)

    def reset_stats(self) -> None:
        """Zero :attr:`stats`."""
        self.stats = {
            "bytes_pulled": 0,
            "bytes_pushed": 0,
            "bytes_gathered": 0,
            # wall seconds in the all-gathers (waiting for the other ranks included)
            "gather_seconds": 0.0,
            # wall seconds of exact refreshes run only to make the replicas meet
            # (MiniBatchNodeClassifier(history_sync="epoch") in epochs without validation)
            "refresh_seconds": 0.0,
        }

    def exchanges(self) -> bool:
        """Whether :meth:`push` all-gathers: ``sync="step"`` among several initialised ranks."""
        return (
            self.sync == "step"
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size(self.group) > 1
        )

    def _check_layer(self, owner: str, layer: Any, allow_next: bool = False) -> int:
        n = self.num_layers()
        high = n if allow_next else n - 1
        if high < 0:
            raise ValueError(
                f"{owner}: expected `layer` to name an allocated table but the history has no "
                f"tables yet (call fill() or push() first); got layer={layer!r}."
            )
        return check_int(owner, "layer", layer, low=0, high=high)

    def pull(self, layer: int, ids: Tensor) -> Tensor:
        """A copy of the rows ``ids`` of table ``layer`` (on the table's device and dtype)."""
        owner = "HistoricalEmbeddings.pull"
        layer = self._check_layer(owner, layer)
        table = self.tables[layer]
        ids = _check_ids(owner, "ids", ids, self.num_nodes).to(table.device)
        rows = table.index_select(0, ids)
        self.stats["bytes_pulled"] += rows.numel() * rows.element_size()
        return rows

    def push(self, layer: int, ids: Tensor, values: Tensor) -> None:
        """Write ``values`` (detached, moved to the table's device and dtype) into rows ``ids``.

        The first push of layer ``num_layers()`` allocates that table (zeros, width
        ``values.size(1)``). With repeated ids, which of their values is kept is unspecified.
        With :meth:`exchanges`, every rank's rows of this push are written, rank by rank
        (a later rank's row wins over an earlier rank's for the same id).
        """
        owner = "HistoricalEmbeddings.push"
        layer = self._check_layer(owner, layer, allow_next=True)
        ids = _check_ids(owner, "ids", ids, self.num_nodes)
        check_type(owner, "values", values, Tensor)
        if values.dim() != 2 or values.size(0) != ids.numel():
            raise ValueError(
                f"{owner}: expected `values` to be a 2-D tensor with one row per id "
                f"([{ids.numel()}, d]) but got shape {tuple(values.shape)}."
            )
        if layer == self.num_layers():
            self.tables.append(
                torch.zeros(self.num_nodes, values.size(1), dtype=self.dtype, device=self.device)
            )
        table = self.tables[layer]
        if values.size(1) != table.size(1):
            raise ValueError(
                f"{owner}: expected `values` to have the width of table {layer} "
                f"({table.size(1)}) but got {values.size(1)} columns."
            )
        values = values.detach().to(dtype=table.dtype)
        self.stats["bytes_pushed"] += values.size(0) * table.size(1) * table.element_size()
        if not self.exchanges():
            table.index_copy_(0, ids.to(table.device), values.to(table.device))
            return
        tic = time.perf_counter()
        rows, received = _all_gather_rows(ids, values, self.group)
        self.stats["gather_seconds"] += time.perf_counter() - tic
        self.stats["bytes_gathered"] += received
        for rank_ids, rank_values in rows:  # rank by rank: a later rank wins a shared id
            if rank_ids.numel():
                table.index_copy_(0, rank_ids.to(table.device), rank_values.to(table.device))

    @torch.no_grad()
    def fill(
        self,
        model: nn.Module,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        chunk_size: int = 8192,
        device: str | torch.device | None = None,
    ) -> None:
        """Exact embeddings of every hidden layer for every node (GNNAutoScale's warm-up fill).

        Runs :func:`~lightgraph.nn.layerwise.layerwise_inference` (eval mode) over the whole
        CSC graph up to the last hidden layer and keeps each layer's output as its table
        (replacing any existing tables). Exact for mean/sum/max/attention aggregations;
        GCN's chunked normalisation is exact only with ``chunk_size >= num_nodes``.

        Args:
            model: a PyG ``BasicGNN`` (``jk`` ``None`` or ``"last"``).
            indptr: CSC row pointers ``[num_nodes + 1]``.
            indices: CSC sources.
            x: input features ``[num_nodes, in_channels]``.
            chunk_size: destination nodes per chunk.
            device: where the layers run (default: the model's device).
        """
        owner = "HistoricalEmbeddings.fill"
        check_type(owner, "indptr", indptr, Tensor)
        if indptr.numel() - 1 != self.num_nodes:
            raise ValueError(
                f"{owner}: expected `indptr` to describe a graph of num_nodes={self.num_nodes} "
                f"nodes ({self.num_nodes + 1} entries) but got {indptr.numel()} entries."
            )
        check_layered_gnn(owner, model, "the tables hold one layer's output each")
        hidden = len(model.convs) - 1
        buffers: list[Tensor] = []

        def buffer(layer: int, num_nodes: int, channels: int) -> Tensor:
            # Computed in float32; cast to the table dtype once every layer is done, so a
            # low-precision table does not feed rounded inputs to the next layer.
            out = torch.empty(num_nodes, channels, dtype=torch.float32, device=self.device)
            buffers.append(out)
            return out

        if hidden > 0:
            layerwise_inference(
                model,
                indptr,
                indices,
                x,
                chunk_size=chunk_size,
                device=device,
                buffer=buffer,
                depth=hidden,
            )
        elif getattr(model, "jk_mode", None) not in (None, "last"):
            raise ValueError(
                f"{owner}: expected a model with jk in (None, 'last') but got jk={model.jk_mode!r}."
            )
        self.tables = [b.to(self.dtype) for b in buffers]
        self.filled = True

    def state_dict(self) -> dict[str, Any]:
        """``{"num_nodes", "filled", "sync", "tables"}`` (the tables are not copied)."""
        return {
            "num_nodes": self.num_nodes,
            "filled": self.filled,
            "sync": self.sync,
            "tables": list(self.tables),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore tables, ``filled`` and ``sync`` when saved (tables moved to this history's
        device and dtype)."""
        owner = "HistoricalEmbeddings.load_state_dict"
        check_type(owner, "state", state, dict, "from HistoricalEmbeddings.state_dict()")
        missing = [k for k in ("num_nodes", "filled", "tables") if k not in state]
        if missing:
            raise ValueError(
                f"{owner}: expected `state` to have keys ('num_nodes', 'filled', 'tables') but "
                f"it lacks {tuple(missing)}."
            )
        if int(state["num_nodes"]) != self.num_nodes:
            raise ValueError(
                f"{owner}: expected `state['num_nodes']` to equal num_nodes={self.num_nodes} "
                f"but got {state['num_nodes']}."
            )
        tables = []
        for i, t in enumerate(state["tables"]):
            if not isinstance(t, Tensor) or t.dim() != 2 or t.size(0) != self.num_nodes:
                shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise ValueError(
                    f"{owner}: expected `state['tables'][{i}]` to be a [{self.num_nodes}, d] "
                    f"tensor but got {shape}."
                )
            tables.append(t.detach().to(device=self.device, dtype=self.dtype, copy=True))
        self.tables = tables
        self.filled = bool(state["filled"])
        if "sync" in state:
            self.sync = check_choice(owner, "state['sync']", state["sync"], SYNC_MODES)
