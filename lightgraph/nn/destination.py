"""Destination-only layers: a sampled mini-batch forward that computes only the rows read next.

A neighbour-sampled mini-batch (PyG's ``NeighborLoader`` layout) orders its nodes by hop
(``num_sampled_nodes``: seeds, then the nodes first reached at hop 1, 2, ...) and its edges
by the hop of their target (``num_sampled_edges``). Layer ``l`` (0-based, ``L`` layers) of a
``BasicGNN`` only has to produce the rows that layer ``l + 1`` reads: hops ``0..L-1-l``,
from inputs of hops ``0..L-l`` over the edges into those hops -- a prefix of both the rows
and the edges. PyG's trimming (``num_sampled_nodes_per_hop``) drops the hops no later
layer reads but still computes an output for every node left, the outermost hop included.
:func:`destination_forward` feeds every layer a bipartite block instead
(``(x_src, x_dst)`` with ``x_dst = x_src[:num_dst]``, DGL's *blocks*), so each layer's
output has exactly ``sum(num_sampled_nodes[:L-l])`` rows; the last layer's are the seeds'.

:func:`conv_to_destinations` runs one layer over such a block:

* a conv that takes a pair of node features (``SAGEConv``, ``GATConv``, ``GATv2Conv``,
  ``GraphConv``, ``GINConv``, ``TransformerConv``, ``EdgeConv``, or any conv whose
  ``forward`` annotates ``x`` with a tuple, e.g. PyG's ``PairTensor``/``OptPairTensor``)
  is called as ``conv((x, x[:num_dst]), edge_index)``;
* ``GCNConv`` (no pair input) runs its normalised propagation into the destinations only,
  with the degrees PyG's ``gcn_norm`` computes on the square graph of all ``num_src``
  nodes, so its rows equal the square graph's;
* any other conv falls back to the square graph and keeps its first ``num_dst`` rows
  (correct, not faster).

On CPU (float32/float64, outside ``torch.compile`` and autocast) the linear aggregations
multiply a ``torch.sparse_csr_tensor`` ``adj_t`` of shape ``[num_dst, num_src]``
(``adj_t[dst, src]``, PyG's convention) through PyG's ``message_and_aggregate``:
``SAGEConv``/``GraphConv``/``GINConv`` with ``aggr`` mean or sum (values 1,
``torch.sparse.mm`` with ``reduce="mean"`` for the mean) and ``GCNConv`` (the
``gcn_norm`` weights as values). The sampler's edges are grouped by target in
ascending order (hops in order, each hop grouped by target), so the row pointer is a
bincount and a cumulative sum, O(E), no sort; other orders are sorted by target first.
On the CPU a training step of GraphSAGE (mean) and GCN runs faster this way than over
``edge_index`` (docs/benchmarks.md, "Where the margin comes from"). Attention convs,
``max``-style aggregations, user convs and CUDA tensors (not measured) keep
``edge_index``; ``torch.compile`` keeps it too (a CSR product has data-dependent sizes
and breaks a full graph), as does CPU autocast (the sparse products take no bfloat16).

Outputs and gradients equal PyG's trimmed (and untrimmed) forward for the rows kept, up
to rounding, with two exceptions that depend on which rows a layer computes (as with
DGL's blocks): batch statistics (``BatchNorm`` and PyG's graph-mode norms in training
mode) are taken over the destination rows only, and dropout draws its masks for fewer
rows (same distribution, different random numbers). A model's ``nn.Dropout`` (PyG's
``BasicGNN``) or float ``dropout`` runs as :func:`lightgraph.functional.dropout`, whose
one-pass CPU mask replaced the per-element ``bernoulli_`` that had been 31 % of a
sampled-training epoch (same distribution; the drop probability rounded to a multiple of
``2^-21``); other dropout modules run as they are.

The function also splices historical embeddings (GNNAutoScale style, see
:mod:`lightgraph.nn.history`) into the halo rows of every hidden layer, the one layer
loop of sampled training, JOESTAR's PBS included.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch_geometric.nn.conv import GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lightgraph.functional.fast_dropout import dropout as fast_dropout
from lightgraph.nn.aggregation_order import (
    AGGREGATE_FIRST,
    LayerOrderProfile,
    LayerRecorder,
    get_order,
    profile_captured_orders,
)
from lightgraph.utilities.checks import check_callable, check_int

__all__ = [
    "check_layered_gnn",
    "conv_to_destinations",
    "destination_forward",
    "observe_blocks",
    "profile_destination_orders",
]

#: PyG convs known to give their square-graph result for a pair ``(x, x[:num_dst])``.
_PAIR_CONVS = (
    "SAGEConv",
    "GATConv",
    "GATv2Conv",
    "GraphConv",
    "GINConv",
    "TransformerConv",
    "EdgeConv",
)
_TAKES_PAIR: dict[type, bool] = {}

#: Convs whose ``message_and_aggregate`` multiplies a torch.sparse ``adj_t`` (PyG's
#: ``spmm``), for the aggregations in :data:`_CSR_AGGRS`; exact types only (a subclass
#: may change ``message``). Attention convs (``GATConv``, ...) have no such product.
_CSR_CONVS: tuple[type, ...] = (SAGEConv, GraphConv, GINConv)
_CSR_AGGRS = ("add", "sum", "mean")


def check_layered_gnn(owner: str, model: nn.Module, why: str) -> str | None:
    """Check that ``model`` is a PyG ``BasicGNN`` run one layer at a time; return its jk mode.

    Raises:
        TypeError: without ``convs`` and ``norms``.
        ValueError: with a jumping-knowledge mode other than ``None`` or ``"last"`` (``why``
            says why the caller cannot combine layers).
    """
    if getattr(model, "convs", None) is None or getattr(model, "norms", None) is None:
        raise TypeError(
            f"{owner}: expected `model` to be a torch_geometric BasicGNN (GraphSAGE, GAT, GCN, "
            f"GIN, ...) with `convs` and `norms` but got {type(model).__name__}."
        )
    jk_mode = getattr(model, "jk_mode", None)
    if jk_mode not in (None, "last"):
        raise ValueError(
            f"{owner}: expected a model with jk in (None, 'last') ({why}) but got jk={jk_mode!r}."
        )
    return jk_mode


def _takes_pair(conv: nn.Module) -> bool:
    """Whether ``conv`` accepts ``(x_src, x_dst)``: a known PyG conv or a tuple-annotated ``x``."""
    kind = type(conv)
    known = _TAKES_PAIR.get(kind)
    if known is None:
        names = {c.__name__ for c in kind.__mro__ if c.__module__.startswith("torch_geometric.")}
        if names.intersection(_PAIR_CONVS):
            known = True
        else:
            param = inspect.signature(kind.forward).parameters.get("x")
            hint = "" if param is None else str(param.annotation)
            known = any(word in hint for word in ("Tuple", "tuple", "PairTensor"))
        _TAKES_PAIR[kind] = known
    return known


def _csr_allowed(x: Tensor) -> bool:
    """Whether the block may aggregate through a CSR ``adj_t``: measured faster on CPU only;
    not under ``torch.compile`` (no sparse tracing) nor autocast (mixed dtypes)."""
    return (
        x.device.type == "cpu"
        and x.dtype in (torch.float32, torch.float64)
        and not torch.compiler.is_compiling()
        and not torch.is_autocast_enabled("cpu")
    )


def _aggregates_through_csr(conv: nn.Module) -> bool:
    aggr = getattr(conv, "aggr", None)
    return (
        type(conv) in _CSR_CONVS
        and isinstance(aggr, str)
        and aggr in _CSR_AGGRS
        and bool(getattr(conv, "fuse", False))
        and not getattr(conv, "explain", False)
    )


def _block_csr(
    edge_index: Tensor, num_dst: int, num_src: int, value: Tensor | None, dtype: torch.dtype
) -> Tensor | None:
    """The block's ``adj_t`` (``[num_dst, num_src]`` torch.sparse CSR, ``adj_t[dst, src]``,
    values ``value`` or ones); ``None`` (use ``edge_index``) without edges or with an index
    out of range, so PyG's own path reports it.

    Edges grouped by target in ascending order (the sampler's hop-ordered layout) need no
    sort: the row pointer is a bincount and a cumulative sum, O(E); other orders are sorted
    by target first (stable, so each row keeps its edges' order).
    """
    num_edges = edge_index.size(1)
    if num_edges == 0:
        return None
    src, dst = edge_index[0].long(), edge_index[1].long()
    if not bool((dst[1:] >= dst[:-1]).all()):
        perm = torch.sort(dst, stable=True).indices
        src, dst = src[perm], dst[perm]
        value = None if value is None else value[perm]
    lo, hi = src.aminmax()
    if int(dst[0]) < 0 or int(dst[-1]) >= num_dst or int(lo) < 0 or int(hi) >= num_src:
        return None
    crow = dst.new_zeros(num_dst + 1)
    torch.cumsum(torch.bincount(dst, minlength=num_dst), 0, out=crow[1:])
    if value is None:
        value = torch.ones(num_edges, dtype=dtype, device=dst.device)
    with warnings.catch_warnings():  # torch: "Sparse CSR tensor support is in beta state"
        warnings.filterwarnings("ignore", ".*Sparse CSR tensor support", UserWarning)
        return torch.sparse_csr_tensor(crow, src, value, (num_dst, num_src), check_invariants=False)


def _gcn_to_destinations(conv: GCNConv, x: Tensor, edge_index: Tensor, num_dst: int) -> Tensor:
    """``GCNConv`` over a bipartite block: its normalised propagation into ``num_dst`` rows.

    The degrees are those ``gcn_norm`` gives the square graph of all ``x.size(0)`` nodes
    (remaining self-loops added to every node, PyG's fill value included), so the rows
    equal ``conv(x, edge_index)[:num_dst]``.
    """
    if conv.cached:
        raise ValueError(
            "conv_to_destinations: expected a GCNConv with cached=False (sampled mini-batches "
            "change the graph every step, and a cached normalisation belongs to one graph) "
            "but got cached=True; build the model with cached=False."
        )
    num_src = x.size(0)
    weight: Tensor | None = None
    if conv.normalize:
        edge_index, weight = gcn_norm(
            edge_index, None, num_src, conv.improved, conv.add_self_loops, conv.flow, x.dtype
        )
        if conv.add_self_loops:
            # The self-loops of sources that are not destinations only feed rows dropped here.
            keep = edge_index[1] < num_dst
            edge_index, weight = edge_index[:, keep], weight[keep]
    adj: Tensor = edge_index
    size: tuple[int, int] | None = (num_src, num_dst)
    if _csr_allowed(x) and conv.fuse and not conv.explain:
        # The weights become the CSR's values (PyG's spmm: sum of weight * x_j).
        adj_t = _block_csr(edge_index, num_dst, num_src, weight, x.dtype)
        if adj_t is not None:
            adj, weight, size = adj_t, None, None
    if get_order(conv) == AGGREGATE_FIRST:
        # The order :func:`~lightgraph.nn.aggregation_order.set_order` chose: propagate the
        # inputs, then transform only the destinations' rows.
        out = conv.propagate(adj, x=x, edge_weight=weight, size=size)
        out = conv.lin(out)
    else:
        out = conv.propagate(adj, x=conv.lin(x), edge_weight=weight, size=size)
    if conv.bias is not None:
        out = out + conv.bias
    return out


#: Recorders told of every :func:`conv_to_destinations` call (see :func:`observe_blocks`).
_BLOCK_OBSERVERS: list[LayerRecorder] = []


@contextmanager
def observe_blocks(layers: list[nn.Module], record: LayerRecorder) -> Iterator[None]:
    """Inside the block, report every :func:`conv_to_destinations` call as
    ``record(conv, (x, edge_index, num_dst), {})`` (a
    :data:`~lightgraph.nn.aggregation_order.LayerObserver`; ``record`` filters ``layers``)."""
    _BLOCK_OBSERVERS.append(record)
    try:
        yield
    finally:
        _BLOCK_OBSERVERS.remove(record)


def profile_destination_orders(
    model: nn.Module,
    x: Tensor,
    edge_index: Tensor,
    num_sampled_nodes: Sequence[int],
    num_sampled_edges: Sequence[int],
    repeats: int = 3,
    timer: Callable[[], float] = time.perf_counter,
    warmup: int = 1,
) -> dict[int, LayerOrderProfile]:
    """:func:`~lightgraph.nn.aggregation_order.profile_layer_orders` for destination-only
    layers: every reorderable layer is timed, forward and backward in both orders, as
    :func:`destination_forward` runs it on this sampled mini-batch -- through
    :func:`conv_to_destinations`, on its destination rows only (a bipartite block, over a
    CSR ``adj_t`` where that path applies), with the input the preceding layers give it.

    Args:
        model: a PyG ``BasicGNN`` that :func:`destination_forward` accepts.
        x, edge_index, num_sampled_nodes, num_sampled_edges: the mini-batch, as
            :func:`destination_forward` takes it.
        repeats, timer, warmup: as for ``profile_layer_orders``.
    """
    owner = "profile_destination_orders"
    check_int(owner, "repeats", repeats, low=1)
    check_int(owner, "warmup", warmup, low=0)
    check_callable(owner, "timer", timer, hint="e.g. time.perf_counter")
    nodes = _check_counts(owner, "num_sampled_nodes", num_sampled_nodes)
    edges = _check_counts(owner, "num_sampled_edges", num_sampled_edges)
    return profile_captured_orders(
        model,
        lambda: destination_forward(model, x, edge_index, nodes, edges),
        lambda conv, args, kwargs: conv_to_destinations(conv, *args),
        repeats=repeats,
        timer=timer,
        warmup=warmup,
        device=x.device,
        observe=observe_blocks,
    )


def conv_to_destinations(conv: nn.Module, x: Tensor, edge_index: Tensor, num_dst: int) -> Tensor:
    """One layer over a bipartite block: outputs of the first ``num_dst`` nodes only.

    The block's nodes are ``x``'s rows; the destinations are its first ``num_dst`` rows
    and every edge of ``edge_index`` (messages ``edge_index[0] -> edge_index[1]``) points
    into them. The result equals ``conv(x, edge_index)[:num_dst]``, the square graph's
    rows of the destinations (up to rounding), computed by

    * ``conv((x, x[:num_dst]), edge_index)`` for convs that take a pair of node features
      (PyG's ``SAGEConv``, ``GATConv``, ``GATv2Conv``, ``GraphConv``, ``GINConv``,
      ``TransformerConv``, ``EdgeConv``, and any conv whose ``forward`` annotates ``x``
      with a tuple such as ``PairTensor``/``OptPairTensor``; such a conv must treat a
      pair as the square graph restricted to the destinations, as PyG's do);
    * for ``GCNConv``: ``lin`` on the sources, propagation into the destinations with the
      square graph's ``gcn_norm`` weights (``normalize``, ``add_self_loops`` and
      ``improved`` respected; ``cached=True`` is rejected), ``bias``; in the
      aggregate-first order (:func:`~lightgraph.nn.aggregation_order.set_order`) the
      propagation runs on the inputs and ``lin`` on the destinations' rows only;
    * any other conv (subclasses of ``GCNConv`` included: they may change the math), or a
      conv with ``flow="target_to_source"``: the fallback
      ``conv(x, edge_index)[:num_dst]`` -- correct, but it computes every row.

    On CPU in float32/float64 (outside ``torch.compile`` and autocast), ``SAGEConv``,
    ``GraphConv`` and ``GINConv`` with a mean or sum aggregation, and ``GCNConv``, get a
    ``[num_dst, num_src]`` torch.sparse CSR ``adj_t`` in place of ``edge_index`` (O(E) to
    build when the edges are grouped by target in ascending order, a stable sort
    otherwise); see the module docstring.

    Args:
        conv: a PyG message-passing layer, called without edge weights or features.
        x: ``[num_src, in_channels]`` features of the block's nodes, destinations first.
        edge_index: ``[2, E]`` local edges whose targets are ``< num_dst``.
        num_dst: number of destinations (``0 <= num_dst <= num_src``).

    Returns:
        ``[num_dst, out_channels]``.
    """
    for record in tuple(_BLOCK_OBSERVERS):
        record(conv, (x, edge_index, num_dst), {})
    if getattr(conv, "flow", "source_to_target") == "source_to_target":
        if _takes_pair(conv):
            if _aggregates_through_csr(conv) and _csr_allowed(x):
                adj_t = _block_csr(edge_index, num_dst, x.size(0), None, x.dtype)
                if adj_t is not None:
                    return conv((x, x[:num_dst]), adj_t)
            return conv((x, x[:num_dst]), edge_index)
        if type(conv) is GCNConv:  # a subclass may change the math: the fallback
            return _gcn_to_destinations(conv, x, edge_index, num_dst)
    return conv(x, edge_index)[:num_dst]


def _check_counts(owner: str, name: str, value: Sequence[int]) -> list[int]:
    if isinstance(value, Tensor):
        value = value.tolist()
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(
            f"{owner}: expected `{name}` to be a list of non-negative integers (one per hop) "
            f"but got {value!r}."
        )
    out = [int(v) for v in value]
    if any(v < 0 for v in out):
        raise ValueError(f"{owner}: expected `{name}` to hold non-negative integers but got {out}.")
    return out


def _check_history(
    owner: str, num_layers: int, halo_index: Sequence[Tensor], hist: Sequence[Tensor]
) -> None:
    for name, value in (("halo_index", halo_index), ("hist", hist)):
        if not isinstance(value, (list, tuple)) or len(value) != num_layers - 1:
            got = len(value) if isinstance(value, (list, tuple)) else type(value).__name__
            raise ValueError(
                f"{owner}: expected `{name}` to be a list with one tensor per hidden layer "
                f"({num_layers - 1}) but got {got}."
            )
    for i, (idx, h) in enumerate(zip(halo_index, hist, strict=True)):
        if idx.dim() != 1 or h.dim() != 2 or h.size(0) != idx.size(0):
            raise ValueError(
                f"{owner}: expected `hist[{i}]` to be [len(halo_index[{i}]), d] = "
                f"[{idx.size(0)}, d] with 1-D `halo_index[{i}]` but got hist shape "
                f"{tuple(h.shape)} and halo_index shape {tuple(idx.shape)}."
            )


def destination_forward(
    model: nn.Module,
    x: Tensor,
    edge_index: Tensor,
    num_sampled_nodes: Sequence[int] | None,
    num_sampled_edges: Sequence[int] | None,
    halo_index: Sequence[Tensor] | None = None,
    hist: Sequence[Tensor] | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """``BasicGNN.forward`` over a sampled mini-batch, every layer on its destinations only.

    With the per-hop counts (``H = len(num_sampled_edges)`` hops, ``H >= L`` layers),
    layer ``l`` reads the rows of hops ``0..H-l`` and outputs those of hops ``0..H-1-l``
    (``sum(num_sampled_nodes[:H-l])`` rows) over the edges into them (the first
    ``sum(num_sampled_edges[:H-l])``), through :func:`conv_to_destinations`; with
    ``H = L`` the output holds the ``num_sampled_nodes[0]`` seeds. Without the counts
    every node is a destination of every layer (the untrimmed forward). Activation, norm,
    dropout, ``jk="last"`` and ``lin`` follow PyG's ``BasicGNN.forward``.

    With ``halo_index``/``hist`` (historical embeddings, :mod:`lightgraph.nn.history`):
    after hidden layer ``l`` (``l = 0..L-2``) has its norm and activation applied, and
    *before* dropout, its rows ``halo_index[l]`` are replaced (out of place) by
    ``hist[l]``, which are constants (no gradient flows into them).

    The seeds' outputs and all gradients equal PyG's trimmed forward up to rounding, in
    eval mode or with row-independent layers; in training mode ``BatchNorm``-style norms
    see only the destination rows and dropout draws masks for fewer rows (see the module
    docstring). All shapes are static, so the function traces under ``torch.compile``.

    Args:
        model: a PyG ``BasicGNN`` (``convs``, ``norms``, ``act``, ``act_first``,
            ``dropout``, optional ``lin``) with ``jk`` ``None`` or ``"last"``. Convs are
            called without edge weights or features.
        x: ``[sum(num_sampled_nodes), in_channels]`` features of the sampled nodes,
            ordered by hop.
        edge_index: ``[2, sum(num_sampled_edges)]`` local edges, messages
            ``edge_index[0] -> edge_index[1]``, ordered by the hop of their target.
        num_sampled_nodes: nodes per hop (``H + 1`` entries, seeds first), or ``None``.
        num_sampled_edges: edges per hop (``H`` entries), or ``None`` (both or neither).
        halo_index: ``L - 1`` integer tensors, rows of the halo nodes in the output of
            hidden layer ``l`` (among hops ``0..H-1-l``), or ``None``.
        hist: ``L - 1`` tensors ``[len(halo_index[l]), d_l]``, the history of those rows.

    Returns:
        ``(out, hidden)``: ``out`` the model's output rows (the seeds first);
        ``hidden[l]`` the output of hidden layer ``l`` after the splice and before
        dropout when a history is given, otherwise ``[]``.
    """
    owner = "destination_forward"
    jk_mode = check_layered_gnn(owner, model, "its layers are run one at a time")
    convs, norms = model.convs, model.norms
    num_layers = len(convs)
    if (num_sampled_nodes is None) != (num_sampled_edges is None):
        raise ValueError(
            f"{owner}: expected `num_sampled_nodes` and `num_sampled_edges` to be both given "
            f"(destination-only layers) or both None (every node a destination) but got "
            f"num_sampled_nodes={num_sampled_nodes!r}, num_sampled_edges={num_sampled_edges!r}."
        )
    if (halo_index is None) != (hist is None):
        raise ValueError(
            f"{owner}: expected `halo_index` and `hist` to be both given (historical "
            f"embeddings) or both None but got halo_index of type "
            f"{type(halo_index).__name__} and hist of type {type(hist).__name__}."
        )
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        got = tuple(edge_index.shape) if isinstance(edge_index, Tensor) else type(edge_index)
        raise ValueError(
            f"{owner}: expected `edge_index` to be a [2, E] integer tensor but got {got}."
        )
    if halo_index is not None and hist is not None:
        _check_history(owner, num_layers, halo_index, hist)

    # rows[l] / edges[l]: the destinations and the edges of layer l (None: all of them).
    rows: list[int | None] = [None] * num_layers
    edges: list[int | None] = [None] * num_layers
    if num_sampled_nodes is not None and num_sampled_edges is not None:
        nodes = _check_counts(owner, "num_sampled_nodes", num_sampled_nodes)
        per_hop = _check_counts(owner, "num_sampled_edges", num_sampled_edges)
        hops = len(per_hop)
        if len(nodes) != hops + 1 or hops < num_layers:
            raise ValueError(
                f"{owner}: expected `num_sampled_edges` to hold one entry per hop, at least "
                f"one per layer (>= {num_layers}), and `num_sampled_nodes` one more, but got "
                f"{len(nodes)} and {hops} entries."
            )
        if x.size(0) != sum(nodes) or edge_index.size(1) != sum(per_hop):
            raise ValueError(
                f"{owner}: expected `x` with sum(num_sampled_nodes) = {sum(nodes)} rows and "
                f"`edge_index` with sum(num_sampled_edges) = {sum(per_hop)} edges but got "
                f"{x.size(0)} rows and {edge_index.size(1)} edges."
            )
        for i in range(num_layers):
            rows[i] = sum(nodes[: hops - i])
            edges[i] = sum(per_hop[: hops - i])

    act = getattr(model, "act", None)
    act_first = bool(getattr(model, "act_first", False))
    dropout = getattr(model, "dropout", None)
    hidden: list[Tensor] = []
    for i, (conv, norm) in enumerate(zip(convs, norms, strict=True)):
        num_dst, num_edges = rows[i], edges[i]
        if num_dst is None or num_edges is None:
            x = conv(x, edge_index)
        else:
            x = conv_to_destinations(conv, x, edge_index.narrow(1, 0, num_edges), num_dst)
        if i < num_layers - 1 or jk_mode is not None:
            if act is not None and act_first:
                x = act(x)
            x = norm(x)
            if act is not None and not act_first:
                x = act(x)
            if halo_index is not None and hist is not None and i < num_layers - 1:
                index = halo_index[i].to(device=x.device, dtype=torch.long)
                values = hist[i].detach().to(device=x.device, dtype=x.dtype)
                if values.size(1) != x.size(1):
                    raise ValueError(
                        f"{owner}: expected `hist[{i}]` to have the width of hidden layer {i} "
                        f"({x.size(1)}) but got {values.size(1)} columns."
                    )
                x = x.index_copy(0, index, values)
                hidden.append(x)
            if type(dropout) is nn.Dropout:  # PyG's BasicGNN: the one-pass CPU mask
                x = fast_dropout(x, dropout.p, dropout.training)
            elif isinstance(dropout, nn.Module):
                x = dropout(x)
            elif isinstance(dropout, float) and dropout > 0:
                x = fast_dropout(x, dropout, model.training)
    lin = getattr(model, "lin", None)
    if lin is not None:
        x = lin(x)
    return x, hidden
