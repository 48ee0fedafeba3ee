"""Destination-only layers against PyG's trimmed forward and the full-graph model."""

from __future__ import annotations

from typing import Union

import pytest
import torch
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv import GATConv, GCNConv, GINConv, GraphConv, SAGEConv
from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torch_geometric.typing import PairTensor
from torch_geometric.utils import to_undirected

from lightgraph.nn.destination import conv_to_destinations, destination_forward
from tests.graphs import hop_ordered_sample

NUM_NODES, F_IN, L = 40, 5, 3
SEEDS = [0, 7, 19]


# ------------------------------------------------------------------- a user's convs
class PairConv(MessagePassing):
    """A user's conv that takes ``(x_src, x_dst)``: max of neighbours plus its own row."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(aggr="max")
        self.lin = torch.nn.Linear(in_channels, out_channels)
        self.root = torch.nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: Union[Tensor, PairTensor], edge_index: Tensor) -> Tensor:  # noqa: UP007
        if isinstance(x, Tensor):
            x = (x, x)
        return self.lin(self.propagate(edge_index, x=x)) + self.root(x[1])


class SquareConv(MessagePassing):
    """A user's conv with square input only (weights by the source's out-degree)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(aggr="add")
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        out_deg = torch.zeros(x.size(0), dtype=x.dtype).index_add_(
            0, edge_index[0], torch.ones(edge_index.size(1), dtype=x.dtype)
        )
        h = self.lin(x)
        return self.propagate(edge_index, x=h, w=(out_deg + 1).reciprocal().view(-1, 1)) + h

    def message(self, x_j: Tensor, w_j: Tensor) -> Tensor:
        return w_j * x_j


class GraphConvNet(BasicGNN):
    supports_edge_weight = True
    supports_edge_attr = False

    def init_conv(self, in_channels, out_channels, **kwargs):
        return GraphConv(in_channels, out_channels, **kwargs)


class PairNet(BasicGNN):
    supports_edge_weight = False
    supports_edge_attr = False

    def init_conv(self, in_channels, out_channels, **kwargs):
        return PairConv(in_channels, out_channels)


class SquareNet(BasicGNN):
    supports_edge_weight = False
    supports_edge_attr = False

    def init_conv(self, in_channels, out_channels, **kwargs):
        return SquareConv(in_channels, out_channels)


# ------------------------------------------------------------------------- helpers
def _graph() -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    edge_index = to_undirected(torch.randint(0, NUM_NODES, (2, 70), generator=g), NUM_NODES)
    edge_index = torch.cat([edge_index, torch.tensor([[3, 3], [3, 3]])], 1)  # self-loops
    x = torch.randn(NUM_NODES, F_IN, generator=g, dtype=torch.float64)
    return x, edge_index


def _full_sample(edge_index: Tensor, seeds: list[int], num_hops: int):
    """Every in-neighbour of every node up to ``num_hops`` hops (PyG's hop-ordered layout):
    nodes ordered by hop, edges grouped by the hop of their target."""
    pairs = [(int(u), int(v)) for u, v in edge_index.t()]
    return hop_ordered_sample(pairs, seeds, num_hops)


def _model(cls, **kwargs):
    torch.manual_seed(0)
    return cls(F_IN, 8, num_layers=L, out_channels=3, **kwargs).double()


MODELS = [
    pytest.param(GraphSAGE, {}, True, id="sage"),
    pytest.param(GraphSAGE, {"jk": "last", "act_first": True}, True, id="sage-jk-last"),
    pytest.param(GraphSAGE, {"norm": "batch_norm", "dropout": 0.5}, True, id="sage-bn-eval"),
    pytest.param(GAT, {"heads": 2}, True, id="gat"),
    pytest.param(GAT, {"v2": True, "heads": 2}, True, id="gatv2"),
    pytest.param(GIN, {}, True, id="gin"),
    pytest.param(GCN, {"normalize": False}, True, id="gcn-unnormalised"),
    pytest.param(GCN, {}, False, id="gcn"),
    pytest.param(GCN, {"improved": True}, False, id="gcn-improved"),
    pytest.param(GCN, {"add_self_loops": False}, False, id="gcn-no-loops"),
    pytest.param(PairNet, {}, True, id="user-pair-conv"),
    pytest.param(SquareNet, {}, False, id="user-square-conv"),
]


def _run(fn, model, x_in, weight):
    """Forward ``fn(x)`` then backward of a fixed random readout of the seeds' rows."""
    model.zero_grad()
    x_in = x_in.clone().requires_grad_()
    out = fn(x_in)
    (out * weight).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads, x_in.grad


@pytest.mark.parametrize("cls,kwargs,equals_full_graph", MODELS)
def test_forward_and_backward_equal_trimmed_and_full_graph(cls, kwargs, equals_full_graph):
    """Seeds' outputs, every parameter's gradient and the input gradient equal (a) PyG's
    trimmed forward on the sample and (b) the full-graph model at the seeds (the sample
    holds every in-neighbour up to L hops). GCN's source degrees in a trimmed sample are
    not the full graph's (the outermost hop has no in-edges), so (b) holds without
    normalisation only."""
    x, edge_index = _graph()
    model = _model(cls, **kwargs).eval()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    assert nph[-1] > 0
    n = len(SEEDS)
    weight = torch.randn(n, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    out, grads, x_grad = _run(
        lambda xi: destination_forward(model, xi, local, nph, eph)[0], model, x[nodes], weight
    )
    assert out.shape == (n, 3)
    trim_kwargs = {"num_sampled_nodes_per_hop": nph, "num_sampled_edges_per_hop": eph}
    ref, ref_grads, ref_x_grad = _run(
        lambda xi: model(xi, local, **trim_kwargs)[:n], model, x[nodes], weight
    )
    torch.testing.assert_close(out, ref)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], msg=name)
    torch.testing.assert_close(x_grad, ref_x_grad)

    full, full_grads, full_x_grad = _run(lambda xi: model(xi, edge_index)[SEEDS], model, x, weight)
    if equals_full_graph:
        torch.testing.assert_close(out, full)
        for name in grads:
            torch.testing.assert_close(grads[name], full_grads[name], msg=name)
        torch.testing.assert_close(x_grad, full_x_grad[nodes])
    else:
        assert not torch.allclose(out, full)


def test_training_mode_without_norm_or_dropout_equals_trimmed():
    x, edge_index = _graph()
    model = _model(GAT, heads=2).train()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    weight = torch.ones(len(SEEDS), 3, dtype=torch.float64)
    out, grads, _ = _run(
        lambda xi: destination_forward(model, xi, local, nph, eph)[0], model, x[nodes], weight
    )
    kw = {"num_sampled_nodes_per_hop": nph, "num_sampled_edges_per_hop": eph}
    ref, ref_grads, _ = _run(
        lambda xi: model(xi, local, **kw)[: len(SEEDS)], model, x[nodes], weight
    )
    torch.testing.assert_close(out, ref)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], msg=name)


def test_training_mode_with_dropout_equals_square_layers_with_the_same_masks():
    """Dropout in training mode: destination_forward draws the one-pass CPU masks
    (``lightgraph.functional.dropout``) over each layer's destination rows. Reference: the
    convs' own square forward over the first S_l rows and E_l edges, cut to the D_l
    destination rows, then the same dropout with the same seed."""
    from lightgraph.functional import dropout

    x, edge_index = _graph()
    model = _model(GraphSAGE, dropout=0.5).train()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    weight = torch.randn(len(SEEDS), 3, generator=torch.Generator().manual_seed(1)).double()

    def reference(xi):
        h = xi
        for i, conv in enumerate(model.convs):
            sources, dests, edges = sum(nph[: L - i + 1]), sum(nph[: L - i]), sum(eph[: L - i])
            h = conv(h[:sources], local[:, :edges])[:dests]
            if i < L - 1:
                h = dropout(model.act(h), 0.5, True)
        return h[: len(SEEDS)]

    torch.manual_seed(5)
    out, grads, x_grad = _run(
        lambda xi: destination_forward(model, xi, local, nph, eph)[0], model, x[nodes], weight
    )
    torch.manual_seed(5)
    ref, ref_grads, ref_x_grad = _run(reference, model, x[nodes], weight)
    torch.testing.assert_close(out, ref)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], msg=name)
    torch.testing.assert_close(x_grad, ref_x_grad)
    torch.manual_seed(6)  # another draw: another mask
    assert not torch.allclose(destination_forward(model, x[nodes], local, nph, eph)[0], out)


def _count_rows(model):
    """Rows each layer's conv outputs and rows its message passing aggregates into."""
    conv_rows: list[int] = []
    mp_rows: list[int] = []
    handles = []
    for conv in model.convs:
        handles.append(conv.register_forward_hook(lambda m, i, o: conv_rows.append(o.size(0))))
        handles.append(
            conv.register_propagate_forward_hook(lambda m, i, o: mp_rows.append(o.size(0)))
        )
    return conv_rows, mp_rows, handles


@pytest.mark.parametrize(
    "cls,kwargs,pair",
    [
        (GraphSAGE, {}, True),
        (GAT, {"heads": 2}, True),
        (GIN, {}, True),
        (GCN, {}, False),
        (PairNet, {}, True),
        (SquareNet, {}, False),
    ],
)
def test_every_layer_computes_its_destination_rows_only(cls, kwargs, pair):
    x, edge_index = _graph()
    model = _model(cls, **kwargs).eval()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    destinations = [sum(nph[: L - layer]) for layer in range(L)]  # hops 0..L-1-l
    trimmed = [sum(nph[: L + 1 - layer]) for layer in range(L)]  # hops 0..L-l
    assert destinations[-1] == len(SEEDS) and all(
        d < t for d, t in zip(destinations, trimmed, strict=True)
    )

    conv_rows, mp_rows, handles = _count_rows(model)
    with torch.no_grad():
        destination_forward(model, x[nodes], local, nph, eph)
    if cls is GCN:  # its normalised propagation runs without calling the conv
        assert conv_rows == [] and mp_rows == destinations
    elif pair:
        assert conv_rows == destinations and mp_rows == destinations
    else:  # the documented fallback: the square graph of the layer's inputs
        assert conv_rows == trimmed and mp_rows == trimmed

    conv_rows.clear()
    mp_rows.clear()
    with torch.no_grad():
        model(x[nodes], local, num_sampled_nodes_per_hop=nph, num_sampled_edges_per_hop=eph)
    assert mp_rows == trimmed  # PyG's trimming computes every row left
    for h in handles:
        h.remove()


def test_without_counts_every_node_is_a_destination():
    x, edge_index = _graph()
    model = _model(GraphSAGE).eval()
    out, hidden = destination_forward(model, x, edge_index, None, None)
    torch.testing.assert_close(out, model(x, edge_index))
    assert hidden == []


def test_more_hops_than_layers_keep_the_inner_hops():
    x, edge_index = _graph()
    model = _model(GraphSAGE).eval()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L + 1)
    out, _ = destination_forward(model, x[nodes], local, nph, eph)
    assert out.size(0) == nph[0] + nph[1]
    kw = {"num_sampled_nodes_per_hop": nph, "num_sampled_edges_per_hop": eph}
    torch.testing.assert_close(out, model(x[nodes], local, **kw)[: out.size(0)])
    torch.testing.assert_close(out, model(x, edge_index)[nodes[: out.size(0)]])


# ----------------------------------------------------------------------- history
def _trimmed_history_forward(model, x, edge_index, nph, eph, halo_index, hist):
    """The history splice over PyG's trimmed layers (``model._trim``): rows halo_index[l]
    of hidden layer l, after its activation and before dropout, replaced by hist[l]."""
    hidden = []
    for i, conv in enumerate(model.convs):
        x, edge_index, _ = model._trim(i, nph, eph, x, edge_index)
        x = conv(x, edge_index)
        if i < model.num_layers - 1:
            x = model.act(x).index_copy(0, halo_index[i], hist[i])
            hidden.append(x)
            x = model.dropout(x)
    return x, hidden


@pytest.mark.parametrize("cls,kwargs", [(GraphSAGE, {}), (GAT, {"heads": 2}), (GCN, {})])
def test_history_splice_equals_the_trimmed_splice(cls, kwargs):
    x, edge_index = _graph()
    model = _model(cls, **kwargs).eval()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    g = torch.Generator().manual_seed(2)
    halo_index, hist = [], []
    for layer in range(L - 1):
        rows = sum(nph[: L - layer])
        halo_index.append(torch.randperm(rows, generator=g)[: rows // 3])
        hist.append(torch.randn(rows // 3, 8, generator=g, dtype=torch.float64))
    x_in = x[nodes].requires_grad_()
    out, hidden = destination_forward(model, x_in, local, nph, eph, halo_index, hist)
    ref, ref_hidden = _trimmed_history_forward(model, x_in, local, nph, eph, halo_index, hist)
    n = len(SEEDS)
    torch.testing.assert_close(out, ref[:n])
    for layer in range(L - 1):
        rows = sum(nph[: L - layer])
        assert hidden[layer].shape == (rows, 8)
        torch.testing.assert_close(hidden[layer], ref_hidden[layer][:rows])
    (grad,) = torch.autograd.grad(out.sum(), x_in)
    (ref_grad,) = torch.autograd.grad(ref[:n].sum(), x_in)
    torch.testing.assert_close(grad, ref_grad)


# ----------------------------------------------------------------- conv helper
@pytest.mark.parametrize("improved", [False, True])
@pytest.mark.parametrize("add_self_loops", [False, True])
def test_gcn_block_equals_the_square_graph_rows(improved, add_self_loops):
    """Sources beyond the destinations keep the degree PyG's gcn_norm gives them on the
    square graph (self-loop only), also with a self-loop already in the graph."""
    torch.manual_seed(0)
    conv = GCNConv(4, 3, improved=improved, add_self_loops=add_self_loops).double()
    x = torch.randn(9, 4, dtype=torch.float64)
    edge_index = torch.tensor([[5, 6, 7, 8, 1, 2, 0, 8, 3], [0, 0, 1, 2, 2, 3, 0, 3, 3]])
    out = conv_to_destinations(conv, x, edge_index, 4)
    torch.testing.assert_close(out, conv(x, edge_index)[:4])


def test_gcn_block_in_the_aggregate_first_order_transforms_destinations_only():
    """``set_order(conv, "aggregate_first")`` is honoured over a block: same rows as the
    square graph, and ``lin`` sees only the destinations' rows."""
    from lightgraph.nn.aggregation_order import set_order

    torch.manual_seed(0)
    conv = GCNConv(4, 3).double()
    x = torch.randn(9, 4, dtype=torch.float64)
    edge_index = torch.tensor([[5, 6, 7, 8, 1, 2, 0, 8, 3], [0, 0, 1, 2, 2, 3, 0, 3, 3]])
    ref = conv(x, edge_index)[:4]
    seen: list[int] = []
    handle = conv.lin.register_forward_hook(lambda _m, a, _o: seen.append(a[0].size(0)))
    conv_to_destinations(conv, x, edge_index, 4)
    assert seen == [9]  # transform first (PyG's order): every source row
    seen.clear()
    set_order(conv, "aggregate_first")
    out = conv_to_destinations(conv, x, edge_index, 4)
    handle.remove()
    assert seen == [4]
    torch.testing.assert_close(out, ref)


def test_a_gcn_subclass_takes_the_square_graph_fallback():
    class ScaledGCN(GCNConv):
        def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:  # type: ignore[override]
            return 2.0 * super().forward(x, edge_index)

    torch.manual_seed(0)
    conv = ScaledGCN(4, 3).double()
    x = torch.randn(9, 4, dtype=torch.float64)
    edge_index = torch.tensor([[5, 6, 7, 8, 1, 2, 0, 8, 3], [0, 0, 1, 2, 2, 3, 0, 3, 3]])
    torch.testing.assert_close(
        conv_to_destinations(conv, x, edge_index, 4), conv(x, edge_index)[:4]
    )


def test_bad_arguments_are_named():
    x, edge_index = _graph()
    model = _model(GraphSAGE)
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    xs = x[nodes]
    with pytest.raises(ValueError, match="both given"):
        destination_forward(model, xs, local, nph, None)
    with pytest.raises(ValueError, match=r"`num_sampled_edges`.*>= 3.*got 3 and 2"):
        destination_forward(model, xs, local, nph[:3], eph[:2])
    with pytest.raises(ValueError, match=r"`x` with sum\(num_sampled_nodes\)"):
        destination_forward(model, xs[:-1], local, nph, eph)
    with pytest.raises(ValueError, match="`num_sampled_nodes`.*non-negative"):
        destination_forward(model, xs, local, [*nph[:-1], -1], eph)
    with pytest.raises(ValueError, match="`edge_index`.*\\[2, E\\]"):
        destination_forward(model, xs, local.t(), nph, eph)
    with pytest.raises(ValueError, match="`halo_index` and `hist`"):
        destination_forward(model, xs, local, nph, eph, [torch.tensor([0])] * 2, None)
    with pytest.raises(ValueError, match="jk"):
        destination_forward(_model(GraphSAGE, jk="cat"), xs, local, nph, eph)
    with pytest.raises(TypeError, match="BasicGNN"):
        destination_forward(torch.nn.Linear(5, 3), xs, local, nph, eph)
    cached = _model(GCN, cached=True)
    with pytest.raises(ValueError, match="cached=False"):
        destination_forward(cached, xs, local, nph, eph)


# -------------------------------------------------------------- CSR aggregation
def _block(shuffle: bool):
    """A bipartite block: 12 sources, 5 destinations (destination 4 without in-edges),
    edges grouped by target (the sampler's layout) or in a shuffled order."""
    g = torch.Generator().manual_seed(3)
    dst = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])
    src = torch.tensor([5, 6, 0, 7, 11, 8, 2, 9, 9, 3])  # a repeated edge, a self-loop
    edge_index = torch.stack([src, dst])
    if shuffle:
        edge_index = edge_index[:, torch.randperm(dst.numel(), generator=g)]
    x = torch.randn(12, 4, generator=g, dtype=torch.float64)
    return x, edge_index, 5


def _layouts(conv):
    """Layouts of the adjacency each propagate of ``conv`` receives."""
    seen: list = []
    handle = conv.register_propagate_forward_pre_hook(
        lambda _m, inputs: seen.append(inputs[0].layout)
    )
    return seen, handle


CSR_CONVS = [
    pytest.param(lambda: SAGEConv(4, 3), id="sage-mean"),
    pytest.param(lambda: SAGEConv(4, 3, aggr="sum"), id="sage-sum"),
    pytest.param(lambda: SAGEConv(4, 3, root_weight=False, normalize=True), id="sage-normalize"),
    pytest.param(lambda: GraphConv(4, 3), id="graph-conv"),
    pytest.param(lambda: GraphConv(4, 3, aggr="mean"), id="graph-conv-mean"),
    pytest.param(lambda: GINConv(torch.nn.Linear(4, 3), train_eps=True), id="gin"),
    pytest.param(lambda: GCNConv(4, 3), id="gcn"),
    pytest.param(lambda: GCNConv(4, 3, improved=True), id="gcn-improved"),
    pytest.param(lambda: GCNConv(4, 3, add_self_loops=False), id="gcn-no-loops"),
    pytest.param(lambda: GCNConv(4, 3, normalize=False), id="gcn-unnormalised"),
]


@pytest.mark.parametrize("shuffle", [False, True], ids=["grouped", "shuffled"])
@pytest.mark.parametrize("make", CSR_CONVS)
def test_linear_aggregations_run_through_a_csr_and_equal_pyg(make, shuffle):
    """Sum/mean convs and GCN aggregate over a torch.sparse CSR ``adj_t [num_dst,
    num_src]``; outputs, parameter and input gradients equal PyG's own ``edge_index``
    forward on the square graph (float64)."""
    torch.manual_seed(0)
    conv = make().double()
    x, edge_index, num_dst = _block(shuffle)
    weight = torch.randn(num_dst, 3, generator=torch.Generator().manual_seed(4), dtype=x.dtype)

    seen, handle = _layouts(conv)
    out, grads, x_grad = _run(
        lambda xi: conv_to_destinations(conv, xi, edge_index, num_dst), conv, x, weight
    )
    handle.remove()
    assert seen == [torch.sparse_csr]
    ref, ref_grads, ref_x_grad = _run(lambda xi: conv(xi, edge_index)[:num_dst], conv, x, weight)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x_grad, ref_x_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "cls,kwargs",
    [(GraphSAGE, {}), (GraphSAGE, {"aggr": "sum"}), (GIN, {}), (GCN, {}), (GraphConvNet, {})],
)
def test_destination_forward_aggregates_every_layer_through_a_csr(cls, kwargs):
    x, edge_index = _graph()
    model = _model(cls, **kwargs).eval()
    nodes, local, nph, eph = _full_sample(edge_index, SEEDS, L)
    weight = torch.randn(len(SEEDS), 3, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    seen: list = []
    handles = [
        conv.register_propagate_forward_pre_hook(lambda _m, i: seen.append(i[0].layout))
        for conv in model.convs
    ]
    out, grads, x_grad = _run(
        lambda xi: destination_forward(model, xi, local, nph, eph)[0], model, x[nodes], weight
    )
    for h in handles:
        h.remove()
    assert seen == [torch.sparse_csr] * L
    kw = {"num_sampled_nodes_per_hop": nph, "num_sampled_edges_per_hop": eph}
    ref, ref_grads, ref_x_grad = _run(
        lambda xi: model(xi, local, **kw)[: len(SEEDS)], model, x[nodes], weight
    )
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x_grad, ref_x_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: GATConv(4, 3, heads=2), id="attention"),
        pytest.param(lambda: SAGEConv(4, 3, aggr="max"), id="max"),
        pytest.param(lambda: PairConv(4, 3), id="user-conv"),
    ],
)
def test_attention_max_and_unknown_convs_keep_the_edge_index(make):
    torch.manual_seed(0)
    conv = make().double()
    x, edge_index, num_dst = _block(False)
    seen, handle = _layouts(conv)
    out = conv_to_destinations(conv, x, edge_index, num_dst)
    handle.remove()
    assert seen == [torch.strided]
    torch.testing.assert_close(out, conv(x, edge_index)[:num_dst])


def test_compile_and_autocast_keep_the_edge_index():
    """torch.compile does not trace sparse CSR products (a full graph fails on their
    data-dependent sizes), and CPU autocast would feed bfloat16 rows to a float CSR: both
    aggregate over ``edge_index``."""
    torch.manual_seed(0)
    conv = SAGEConv(4, 3)
    x, edge_index, num_dst = _block(False)
    x = x.float()
    compiled = torch.compile(conv_to_destinations, backend="eager", fullgraph=True, dynamic=False)
    torch.testing.assert_close(
        compiled(conv, x, edge_index, num_dst), conv(x, edge_index)[:num_dst]
    )
    seen, handle = _layouts(conv)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        conv_to_destinations(conv, x, edge_index, num_dst)
    handle.remove()
    assert seen == [torch.strided]


def test_an_index_out_of_range_is_reported_by_pyg_not_read_from_a_csr():
    conv = SAGEConv(4, 3).double()
    x, edge_index, num_dst = _block(False)
    bad = edge_index.clone()
    bad[0, 3] = x.size(0)  # a source past the last row
    with pytest.raises((IndexError, RuntimeError)):
        conv_to_destinations(conv, x, bad, num_dst)
