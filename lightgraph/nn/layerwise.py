"""Exact layer-wise inference of a PyG ``BasicGNN`` over a graph that may live on disk.

Sampled training leaves evaluation with a choice: sample again (cheap, noisy) or
compute every node's embedding exactly, one layer at a time over chunks of destination
nodes, each chunk with its *whole* 1-hop in-neighbourhood (what PyG's
``BasicGNN.inference`` does with a ``NeighborLoader(num_neighbors=[-1])``).
:func:`layerwise_inference` does the latter straight from a CSC adjacency (``indptr``,
``indices``), which may be memory-mapped: a chunk of destinations ``[a, b)`` reads the
contiguous slice ``indices[indptr[a]:indptr[b]]``, so a pass over the graph is one
sequential read of the structure per layer. Each chunk's layer computes only the
chunk's destination rows (:func:`~lightgraph.nn.destination.conv_to_destinations`:
bipartite message passing, GCN's normalised propagation into the destinations).

Exactness: for mean/sum/max aggregations (GraphSAGE, GIN, GAT's attention over the
full neighbourhood) the result equals the full-graph forward pass. GCN's symmetric
normalisation uses the degree of *source* nodes too, which a 1-hop chunk does not
hold; like PyG's own inference, the chunked GCN is then an approximation.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from lightgraph.nn.destination import check_layered_gnn, conv_to_destinations
from lightgraph.utilities.checks import check_int


def _chunk_subgraph(
    indptr: Tensor, indices: Tensor, start: int, stop: int, scratch: Tensor
) -> tuple[Tensor, Tensor]:
    """Nodes (destinations ``[start, stop)`` first) and local ``edge_index`` of a chunk."""
    lo, hi = int(indptr[start]), int(indptr[stop])
    src = indices[lo:hi].to(torch.long)
    counts = (indptr[start + 1 : stop + 1] - indptr[start:stop]).to(torch.long)
    dst_local = torch.repeat_interleave(torch.arange(stop - start), counts)
    dst = torch.arange(start, stop)
    # Local ids: destinations keep their order, other sources follow in first-seen order.
    scratch[dst] = torch.arange(stop - start)
    is_dst = (src >= start) & (src < stop)
    others = torch.unique(src[~is_dst])
    scratch[others] = torch.arange(stop - start, stop - start + others.numel())
    nodes = torch.cat([dst, others])
    edge_index = torch.stack([scratch[src], dst_local])
    return nodes, edge_index


@torch.no_grad()
def layerwise_inference(
    model: nn.Module,
    indptr: Tensor,
    indices: Tensor,
    x: Tensor,
    chunk_size: int = 4096,
    device: torch.device | str | None = None,
    buffer: Callable[[int, int, int], Tensor] | None = None,
    depth: int | None = None,
    rows: tuple[int, int] | None = None,
    exchange: Callable[[int, Tensor], None] | None = None,
) -> Tensor:
    """Every node's output of ``model`` (a PyG ``BasicGNN``), one layer at a time.

    Args:
        model: a :class:`torch_geometric.nn.models.basic_gnn.BasicGNN` (GraphSAGE, GAT,
            GCN, GIN, …) with ``jk`` ``None`` or ``"last"``. It is run in eval mode.
        indptr: CSC row pointers ``[num_nodes + 1]``: the in-neighbours of ``v`` are
            ``indices[indptr[v]:indptr[v + 1]]`` (may be memory-mapped, int32 or int64).
        indices: CSC sources.
        x: input features ``[num_nodes, in_channels]`` (may be memory-mapped).
        chunk_size: destination nodes per chunk.
        device: where the layers run (default: the model's device).
        buffer: ``buffer(layer, num_nodes, channels) -> Tensor`` allocates each layer's
            output (e.g. a memory-mapped file for graphs whose embeddings exceed memory);
            default: an ordinary CPU tensor.
        depth: run only the first ``depth`` layers (default: all of them) and return the
            output of layer ``depth - 1``; for ``depth < model.num_layers`` that is a
            hidden layer's output (activation and norm applied, as in the full forward
            pass in eval mode). With ``buffer``, every layer's output stays readable in
            the tensors ``buffer`` returned, e.g. to keep all hidden embeddings.
        rows: compute only the destinations ``[start, stop)`` of every layer (this
            process's share when several processes split the work); requires ``exchange``.
        exchange: ``exchange(layer, out)``, called once this process has written its
            ``rows`` of layer ``layer``'s output ``out``; it must write the other rows (e.g.
            an all-gather from the processes that computed them) before the next layer
            reads them.

    Returns:
        ``[num_nodes, out_channels]`` outputs (on the CPU, or whatever ``buffer`` gives);
        ``[num_nodes, hidden_channels]`` with ``depth < model.num_layers``.
    """
    owner = "layerwise_inference"
    jk_mode = check_layered_gnn(owner, model, "layer-wise inference keeps one layer at a time")
    chunk_size = check_int(owner, "chunk_size", chunk_size, low=1)
    num_layers = len(model.convs)
    if depth is not None:
        depth = check_int(owner, "depth", depth, low=1, high=num_layers)
    num_run = num_layers if depth is None else depth
    num_nodes = int(indptr.numel()) - 1
    if (rows is None) != (exchange is None):
        raise ValueError(
            f"{owner}: expected `rows` and `exchange` together (a share of the rows needs an "
            f"exchange that fills in the others) but got rows={rows!r} and "
            f"exchange={'None' if exchange is None else 'a callable'}."
        )
    first, end = (0, num_nodes) if rows is None else rows
    if rows is not None and not (
        isinstance(first, int) and isinstance(end, int) and 0 <= first <= end <= num_nodes
    ):
        raise ValueError(
            f"{owner}: expected `rows` to be (start, stop) with 0 <= start <= stop <= "
            f"{num_nodes} but got {rows!r}."
        )
    if x.size(0) != num_nodes:
        raise ValueError(
            f"{owner}: expected `x` to have one row per node of the CSC graph ({num_nodes}) but "
            f"got {x.size(0)} rows."
        )
    if device is None:
        params = list(model.parameters())
        device = params[0].device if params else torch.device("cpu")
    was_training = model.training
    model.eval()
    scratch = torch.empty(num_nodes, dtype=torch.long)
    current = x
    try:
        for i, conv in enumerate(model.convs):
            if i >= num_run:
                break
            last = i == model.num_layers - 1
            out: Tensor | None = None
            for start in range(first, end, chunk_size):
                stop = min(start + chunk_size, end)
                nodes, edge_index = _chunk_subgraph(indptr, indices, start, stop, scratch)
                h = current[nodes].to(device=device, dtype=torch.float32)
                h = conv_to_destinations(conv, h, edge_index.to(device), stop - start)
                if not last or jk_mode is not None:
                    if model.act is not None and model.act_first:
                        h = model.act(h)
                    h = model.norms[i](h)
                    if model.act is not None and not model.act_first:
                        h = model.act(h)
                if last and hasattr(model, "lin"):
                    h = model.lin(h)
                if out is None:
                    out = (
                        buffer(i, num_nodes, h.size(1))
                        if buffer is not None
                        else torch.empty(num_nodes, h.size(1))
                    )
                out[start:stop] = h.to(out.device)
            if out is None:  # an empty share of `rows`: the widths come from the model
                channels = int(model.out_channels if last else model.hidden_channels)
                out = (
                    buffer(i, num_nodes, channels)
                    if buffer is not None
                    else torch.empty(num_nodes, channels)
                )
            if exchange is not None:
                exchange(i, out)
            current = out
    finally:
        model.train(was_training)
    return current
