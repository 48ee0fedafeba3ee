"""Aggregate-first vs transform-first: identical math, unchanged state, profiling."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch_geometric.nn import GATConv, GCNConv, SAGEConv
from torch_geometric.nn.models import GCN, GraphSAGE

from lightgraph.data.loader.minibatch import sample_minibatch
from lightgraph.functional.neighbor_sampling import to_csc
from lightgraph.nn.aggregation_order import (
    AGGREGATE_FIRST,
    ORDERS,
    TRANSFORM_FIRST,
    conv_layers,
    get_order,
    native_order,
    profile_layer_orders,
    reorderable,
    set_order,
)
from lightgraph.utilities.random_state import make_generator

AGGREGATION_NODES = ("IndexSelect", "Scatter", "Gather", "Segment", "Spmm", "Sparse")


def _graph(n: int = 30, e: int = 120, dim: int = 8, seed: int = 0):
    """Random edges into nodes 0..n-11 only: the last 10 nodes have no in-neighbours."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (e,), generator=g)
    dst = torch.randint(0, n - 10, (e,), generator=g)
    return torch.randn(n, dim, generator=g), torch.stack([src, dst])


def _run(conv, x, *args, **kwargs):
    """Output, parameter gradients and input gradient of a fixed random loss."""
    x = x.detach().clone().requires_grad_(True)
    conv.zero_grad(set_to_none=True)
    out = conv(x, *args, **kwargs)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * weight).sum().backward()
    grads = {name: p.grad.clone() for name, p in conv.named_parameters() if p.grad is not None}
    return out.detach(), grads, x.grad.clone()


def _assert_same_layer(conv, reference, x, *args, **kwargs):
    out, grads, x_grad = _run(conv, x, *args, **kwargs)
    ref_out, ref_grads, ref_x_grad = _run(reference, x, *args, **kwargs)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    assert grads.keys() == ref_grads.keys() and grads
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x_grad, ref_x_grad, atol=1e-5, rtol=1e-5)
    return out


def _autograd_node_names(tensor):
    seen, names, stack = set(), set(), [tensor.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(fn for fn, _ in node.next_functions)
    return names


# ------------------------------------------------------------------------------ SAGEConv
@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("root_weight", [True, False])
@pytest.mark.parametrize("order", ORDERS)
def test_sage_both_orders_equal_pyg(aggr, normalize, root_weight, order):
    torch.manual_seed(0)
    reference = SAGEConv(8, 5, aggr=aggr, normalize=normalize, root_weight=root_weight)
    with torch.no_grad():
        reference.lin_l.bias.uniform_(-1, 1)  # a visible bias for the isolated nodes
    conv = copy.deepcopy(reference)
    set_order(conv, order)
    assert get_order(conv) == order
    x, edge_index = _graph()
    out = _assert_same_layer(conv, reference, x, edge_index)
    # Nodes without in-neighbours get lin_l(0) = bias (+ root), exactly PyG's value.
    isolated = out[20:]
    expected = reference.lin_l.bias.expand(10, -1)
    if root_weight:
        expected = expected + reference.lin_r(x[20:])
    if normalize:
        expected = torch.nn.functional.normalize(expected, dim=-1)
    torch.testing.assert_close(isolated, expected.detach(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("options", [{"project": True}, {"bias": False}])
def test_sage_project_and_no_bias_in_transform_first(options):
    torch.manual_seed(1)
    reference = SAGEConv(8, 5, **options)
    conv = copy.deepcopy(reference)
    set_order(conv, TRANSFORM_FIRST)
    _assert_same_layer(conv, reference, *_graph())


def test_sage_bipartite_input_in_transform_first():
    torch.manual_seed(2)
    reference = SAGEConv((8, 6), 5)
    conv = copy.deepcopy(reference)
    set_order(conv, TRANSFORM_FIRST)
    x_src, edge_index = _graph()
    x_dst = torch.randn(20, 6)
    size = (30, 20)
    out = conv((x_src, x_dst), edge_index, size=size)
    torch.testing.assert_close(out, reference((x_src, x_dst), edge_index, size=size))
    assert out.shape == (20, 5)


# ------------------------------------------------------------------------------- GCNConv
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"add_self_loops": False},
        {"normalize": False},
        {"improved": True},
        {"bias": False},
        {"cached": True},
    ],
)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("weighted", [False, True])
def test_gcn_both_orders_equal_pyg(options, order, weighted):
    torch.manual_seed(0)
    reference = GCNConv(8, 5, **options)
    if reference.bias is not None:
        with torch.no_grad():
            reference.bias.uniform_(-1, 1)
    conv = copy.deepcopy(reference)
    set_order(conv, order)
    assert get_order(conv) == order
    x, edge_index = _graph()
    weight = torch.rand(edge_index.size(1)) + 0.5 if weighted else None
    for _ in range(2):  # the second call reads the cache when `cached=True`
        _assert_same_layer(conv, reference, x, edge_index, edge_weight=weight)
    if options.get("cached"):
        for ours, theirs in zip(conv._cached_edge_index, reference._cached_edge_index, strict=True):
            torch.testing.assert_close(ours, theirs)


# --------------------------------------------------------------------------------- models
def _batch(dim: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    n = 200
    edge_index = torch.randint(0, n, (2, 1600), generator=g)
    x, y = torch.randn(n, dim, generator=g), torch.randint(0, 3, (n,), generator=g)
    indptr, indices = to_csc(edge_index, n)
    seeds = torch.arange(0, 40)
    return sample_minibatch(indptr, indices, x, y, seeds, [4, 3, 2], make_generator(seed, 0))


def _model(kind: str):
    torch.manual_seed(0)
    cls = GraphSAGE if kind == "sage" else GCN
    return cls(8, 16, num_layers=3, out_channels=3, dropout=0.0)


@pytest.mark.parametrize("kind", ["sage", "gcn"])
@pytest.mark.parametrize(
    "orders",
    [
        (AGGREGATE_FIRST, TRANSFORM_FIRST, AGGREGATE_FIRST),
        (TRANSFORM_FIRST, AGGREGATE_FIRST, TRANSFORM_FIRST),
    ],
)
def test_three_layer_models_with_mixed_orders_equal_the_original(kind, orders):
    reference = _model(kind)
    model = copy.deepcopy(reference)
    for conv, order in zip(model.convs, orders, strict=True):
        set_order(conv, order)
    assert [get_order(c) for c in model.convs] == list(orders)
    assert list(model.state_dict()) == list(reference.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in reference.named_parameters()]
    batch = _batch()
    trim = {
        "num_sampled_nodes_per_hop": batch.num_sampled_nodes,
        "num_sampled_edges_per_hop": batch.num_sampled_edges,
    }
    for kwargs in ({}, trim):
        _assert_same_layer(model, reference, batch.x, batch.edge_index, **kwargs)
    # Checkpoints load both ways, strictly.
    model.load_state_dict(reference.state_dict())
    reference.load_state_dict(model.state_dict())


def test_native_order_removes_the_replacement_and_copies_keep_the_order():
    conv = SAGEConv(8, 5)
    assert native_order(conv) == AGGREGATE_FIRST and get_order(conv) == AGGREGATE_FIRST
    set_order(conv, TRANSFORM_FIRST)
    assert "forward" in conv.__dict__
    for clone in (copy.deepcopy(conv), pickle.loads(pickle.dumps(conv))):
        assert get_order(clone) == TRANSFORM_FIRST
        x, edge_index = _graph()
        torch.testing.assert_close(clone(x, edge_index), conv(x, edge_index))
    set_order(conv, AGGREGATE_FIRST)
    assert "forward" not in conv.__dict__ and conv.forward.__func__ is SAGEConv.forward
    gcn = GCNConv(8, 5)
    assert native_order(gcn) == TRANSFORM_FIRST and get_order(gcn) == TRANSFORM_FIRST


def test_layers_that_cannot_be_reordered_are_reported_and_kept():
    for conv in (GATConv(8, 5), SAGEConv(8, 5, aggr="max"), torch.nn.Linear(8, 5)):
        assert not reorderable(conv) and get_order(conv) is None
        with pytest.raises(ValueError, match="set_order: expected `conv` to be a reorderable"):
            set_order(conv, AGGREGATE_FIRST)
    with pytest.raises(ValueError, match=r"set_order: expected `order` to be one of .*'sideways'"):
        set_order(SAGEConv(8, 5), "sideways")
    x, edge_index = _graph()
    assert profile_layer_orders(GATConv(8, 5), x, edge_index) == {}


def test_conv_layers_finds_basic_gnn_layers_in_order():
    model = _model("sage")
    assert conv_layers(model) == list(model.convs)
    conv = GCNConv(4, 4)
    assert conv_layers(conv) == [conv]
    nested = torch.nn.Sequential(torch.nn.Linear(2, 2), conv)
    assert conv_layers(nested) == [conv]


# ------------------------------------------------------------- first layer: no input grad
@pytest.mark.parametrize("conv", [SAGEConv(8, 5), GCNConv(8, 5)], ids=["sage", "gcn"])
def test_first_layer_aggregate_first_never_backpropagates_the_aggregation(conv):
    x, edge_index = _graph()  # raw features: no gradient needed
    aggregated = []
    handle = conv.register_propagate_forward_hook(lambda m, i, out: aggregated.append(out))
    set_order(conv, AGGREGATE_FIRST)
    out = conv(x, edge_index)
    assert not aggregated[-1].requires_grad  # AX depends on nothing that needs a gradient
    assert not any(n.startswith(AGGREGATION_NODES) for n in _autograd_node_names(out))
    out.sum().backward()
    assert x.grad is None and all(p.grad is not None for p in conv.parameters())
    # Transform-first does back-propagate through the aggregation (so the check bites).
    set_order(conv, TRANSFORM_FIRST)
    out = conv(x, edge_index)
    assert aggregated[-1].requires_grad
    assert any(n.startswith(AGGREGATION_NODES) for n in _autograd_node_names(out))
    handle.remove()


def test_profiling_feeds_layer_zero_an_input_without_grad():
    model = _model("sage")
    batch = _batch()
    seen = {i: [] for i in range(3)}  # (order, AX or A(XW) requires grad, grad mode)
    for i, conv in enumerate(model.convs):
        conv.register_propagate_forward_hook(
            lambda m, inputs, out, i=i: seen[i].append(
                (get_order(m), out.requires_grad, torch.is_grad_enabled())
            )
        )
    profile = profile_layer_orders(model, batch.x, batch.edge_index, repeats=1, warmup=0)
    assert [profile[i].input_requires_grad for i in range(3)] == [False, True, True]
    assert (AGGREGATE_FIRST, False, True) in seen[0]  # timed with autograd on, AX needs none
    assert (AGGREGATE_FIRST, True, True) not in seen[0]
    assert (AGGREGATE_FIRST, True, True) in seen[1]  # later layers: the input needs grad
    # Features that need a gradient (learnable embeddings) are timed with it.
    x = batch.x.clone().requires_grad_(True)
    profile = profile_layer_orders(model, x, batch.edge_index, repeats=1, warmup=0)
    assert [profile[i].input_requires_grad for i in range(3)] == [True, True, True]


# ------------------------------------------------------------------------------ profiling
class _FakeClock:
    """A clock that each layer call advances by ``cost[layer][order]``."""

    def __init__(self, model, cost):
        self.now = 0.0
        for i, conv in enumerate(conv_layers(model)):
            conv.register_forward_hook(lambda m, a, o, i=i: self._tick(cost[i][get_order(m)]))

    def _tick(self, seconds):
        self.now += seconds

    def __call__(self):
        return self.now


@pytest.mark.parametrize("kind", ["sage", "gcn"])
@pytest.mark.parametrize("faster", [(0, 1, 0), (1, 0, 1), (0, 0, 0), (1, 1, 1)])
def test_injected_timer_forces_each_choice(kind, faster):
    model = _model(kind)
    cost = [
        {ORDERS[f]: 1.0, ORDERS[1 - f]: 3.0} for f in faster
    ]  # the "faster" order costs 1 s, the other 3 s
    clock = _FakeClock(model, cost)
    batch = _batch()
    profile = profile_layer_orders(
        model,
        batch.x,
        batch.edge_index,
        batch.num_sampled_nodes,
        batch.num_sampled_edges,
        repeats=2,
        timer=clock,
    )
    assert [profile[i].faster for i in range(3)] == [ORDERS[f] for f in faster]
    for i, f in enumerate(faster):
        assert profile[i].time(ORDERS[f]) == 1.0 and profile[i].time(ORDERS[1 - f]) == 3.0
    # Profiling measures only: every layer is back in PyG's order.
    assert all(get_order(c) == native_order(c) for c in model.convs)


def test_a_tie_keeps_the_native_order():
    model = _model("gcn")
    clock = _FakeClock(model, [dict.fromkeys(ORDERS, 1.0)] * 3)
    batch = _batch()
    profile = profile_layer_orders(model, batch.x, batch.edge_index, timer=clock)
    assert all(profile[i].faster == TRANSFORM_FIRST for i in range(3))


def test_profiling_leaves_grads_buffers_rng_and_orders_untouched():
    torch.manual_seed(0)
    model = GraphSAGE(8, 16, num_layers=3, out_channels=3, dropout=0.5, norm="batch_norm")
    set_order(model.convs[1], TRANSFORM_FIRST)
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    batch = _batch()
    rng = torch.get_rng_state()
    profile = profile_layer_orders(
        model, batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges
    )
    assert sorted(profile) == [0, 1, 2]
    assert all(p.time(o) > 0 for p in profile.values() for o in ORDERS)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(p.grad is None for p in model.parameters())
    for k, v in model.named_buffers():
        assert torch.equal(v, buffers[k]), k
    assert [get_order(c) for c in model.convs] == [
        AGGREGATE_FIRST,
        TRANSFORM_FIRST,
        AGGREGATE_FIRST,
    ]


def test_profile_arguments_are_checked():
    model = _model("sage")
    x, edge_index = _graph()
    with pytest.raises(ValueError, match="profile_layer_orders: expected `repeats`"):
        profile_layer_orders(model, x, edge_index, repeats=0)
    with pytest.raises(ValueError, match="profile_layer_orders: expected `warmup`"):
        profile_layer_orders(model, x, edge_index, warmup=-1)
    with pytest.raises(TypeError, match="profile_layer_orders: expected `timer` to be a callable"):
        profile_layer_orders(model, x, edge_index, timer=1.0)
    with pytest.raises(ValueError, match="`num_sampled_nodes` and `num_sampled_edges`"):
        profile_layer_orders(model, x, edge_index, num_sampled_nodes=[30, 0])
    with pytest.raises(TypeError, match="profile_layer_orders: expected `model`"):
        profile_layer_orders("GraphSAGE", x, edge_index)
