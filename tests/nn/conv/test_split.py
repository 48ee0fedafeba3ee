"""The split path of PartitionAware on one partition equals PyG on the whole graph."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch_geometric.nn import GATConv, GCN2Conv, GCNConv, GraphConv, SAGEConv

from lightgraph.data import PartitionPlan
from lightgraph.nn import GCNPropagation, PartitionAware, PartitionedGraph
from lightgraph.nn.conv.split import split_layer
from tests.graphs import tricky_graph

F_IN = 6


def _dense_gcn(edge_index: torch.Tensor, n: int) -> torch.Tensor:
    """Whole-graph GCN matrix (remaining self-loops, symmetric normalisation), dense."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    (row, col), w = gcn_norm(edge_index, None, n, add_self_loops=True, dtype=torch.float64)
    return torch.zeros(n, n, dtype=torch.float64).index_put_((col, row), w, accumulate=True)


def _gcn_ref(conv: GCNConv) -> Callable:
    conv.normalize = True  # PyG normalises with whole-graph degrees itself
    return lambda x, ei: conv(x, ei)


# (name, make the layer, PartitionAware kwargs, reference forward on the whole graph)
CASES: list[tuple[str, Callable, dict, Callable]] = [
    ("gcn", lambda: GCNConv(F_IN, 5), {}, _gcn_ref),
    ("gcn-nobias", lambda: GCNConv(F_IN, 5, bias=False), {}, _gcn_ref),
    ("gcn-improved", lambda: GCNConv(F_IN, 5, improved=True), {}, _gcn_ref),
    (
        "gcn-unnormalised",
        lambda: GCNConv(F_IN, 5, normalize=False),
        {"normalization": "none"},
        lambda conv: lambda x, ei: conv(x, ei),
    ),
    ("sage-mean", lambda: SAGEConv(F_IN, 5), {}, lambda conv: lambda x, ei: conv(x, ei)),
    (
        "sage-sum",
        lambda: SAGEConv(F_IN, 5, aggr="sum"),
        {},
        lambda conv: lambda x, ei: conv(x, ei),
    ),
    (
        "gat-concat",
        lambda: GATConv(F_IN, 3, heads=2),
        {},
        lambda conv: lambda x, ei: conv(x, ei),
    ),
    (
        "gat-mean-residual",
        lambda: GATConv(F_IN, 4, heads=3, concat=False, residual=True),
        {},
        lambda conv: lambda x, ei: conv(x, ei),
    ),
    (
        "gat-no-self-loops",
        lambda: GATConv(F_IN, 4, add_self_loops=False, bias=False),
        {},
        lambda conv: lambda x, ei: conv(x, ei),
    ),
    ("propagation", lambda: GCNPropagation(), {"normalization": "gcn"}, None),
]


def _grads(module: torch.nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    out = {k: p.grad.clone() for k, p in module.named_parameters()}
    out["x"] = x.grad.clone()
    return out


@pytest.mark.parametrize("name,make,options,reference", CASES, ids=[c[0] for c in CASES])
def test_split_path_equals_pyg_on_the_whole_graph(
    name: str, make: Callable, options: dict, reference: Callable | None
) -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    torch.manual_seed(0)
    conv = make().double()
    ref = copy.deepcopy(conv)
    wrapped = PartitionAware(conv, **options)
    assert split_layer(conv, wrapped.adjacency, wrapped.normalization, {}) is not None, name
    x = data.x.clone().requires_grad_()
    y = wrapped(x, graph)
    w = torch.randn(y.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    (y * w).sum().backward()
    x_ref = data.x.clone().requires_grad_()
    if reference is None:  # GCNPropagation: the dense GCN matrix times x
        y_ref = _dense_gcn(data.edge_index, data.num_nodes) @ x_ref
    else:
        y_ref = reference(ref)(x_ref, data.edge_index)
    (y_ref * w).sum().backward()
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    got, want = _grads(conv, x), _grads(ref, x_ref)
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-12, rtol=0, msg=f"{name}: {key}")


@pytest.mark.parametrize("shared", [True, False])
def test_gcn2_split_path_equals_pyg(shared: bool) -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph(PartitionPlan.from_data(data))
    torch.manual_seed(0)
    conv = GCN2Conv(F_IN, alpha=0.2, theta=0.5, layer=2, shared_weights=shared).double()
    ref = copy.deepcopy(conv)
    wrapped = PartitionAware(conv)
    x0 = torch.randn(data.num_nodes, F_IN, dtype=torch.float64)
    assert split_layer(conv, wrapped.adjacency, wrapped.normalization, {"x_0": x0}) is not None
    w = torch.randn(data.num_nodes, F_IN, dtype=torch.float64)
    x = data.x.clone().requires_grad_()
    y = wrapped(x, graph, x_0=x0)
    (y * w).sum().backward()
    x_ref = data.x.clone().requires_grad_()
    ref.normalize = True
    y_ref = ref(x_ref, x0, data.edge_index)
    (y_ref * w).sum().backward()
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-12, rtol=0)
    for (key, p), q in zip(conv.named_parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-12, rtol=0, msg=key)


def test_gat_attention_dropout_in_eval_mode_is_exact() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    conv = GATConv(F_IN, 4, heads=2, dropout=0.5).double().eval()
    y = PartitionAware(conv)(data.x, graph)
    torch.testing.assert_close(y, copy.deepcopy(conv)(data.x, data.edge_index), atol=1e-12, rtol=0)


def _unsupported() -> list[tuple[str, torch.nn.Module, dict, dict]]:
    hooked = GCNConv(F_IN, 5)
    hooked.register_forward_hook(lambda *args: None)
    return [
        ("graph-conv", GraphConv(F_IN, 5), {}, {}),
        ("gcn-cached", GCNConv(F_IN, 5, cached=True), {}, {}),
        ("gcn-edge-index", GCNConv(F_IN, 5), {"adjacency": "edge_index"}, {}),
        ("gcn-hooked", hooked, {}, {}),
        ("sage-max", SAGEConv(F_IN, 5, aggr="max"), {}, {}),
        ("sage-project", SAGEConv(F_IN, 5, project=True), {}, {}),
        ("sage-normalize", SAGEConv(F_IN, 5, normalize=True), {}, {}),
        ("sage-no-root", SAGEConv(F_IN, 5, root_weight=False), {}, {}),
        ("gat-edge-dim", GATConv(F_IN, 5, edge_dim=2), {}, {}),
        ("gat-bipartite-channels", GATConv((F_IN, F_IN), 5), {}, {}),
        ("gat-attention-weights", GATConv(F_IN, 5), {}, {"return_attention_weights": True}),
        ("gcn2-cached", GCN2Conv(F_IN, alpha=0.1, cached=True), {}, {"x_0": torch.zeros(1)}),
    ]


@pytest.mark.parametrize("case", range(len(_unsupported())))
def test_options_without_a_split_path_fall_back(case: int) -> None:
    name, conv, options, kwargs = _unsupported()[case]
    wrapped = PartitionAware(conv, **options)
    assert split_layer(conv, wrapped.adjacency, wrapped.normalization, kwargs) is None, name


def test_fallback_on_one_partition_equals_pyg() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    torch.manual_seed(0)
    for conv in (GraphConv(F_IN, 5), SAGEConv(F_IN, 5, project=True)):
        conv = conv.double()
        ref = copy.deepcopy(conv)
        y = PartitionAware(conv)(data.x, graph)
        torch.testing.assert_close(y, ref(data.x, data.edge_index), atol=1e-12, rtol=0)


def test_split_can_be_switched_off() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    torch.manual_seed(0)
    conv = GCNConv(F_IN, 5).double()
    off_wrapper = PartitionAware(copy.deepcopy(conv), split=False)
    on = PartitionAware(conv)(data.x, graph)
    assert "split=False" in repr(off_wrapper)
    torch.testing.assert_close(off_wrapper(data.x, graph), on, atol=1e-12, rtol=0)
    with pytest.raises(TypeError, match="`split` to be a bool but got str"):
        PartitionAware(GCNConv(F_IN, 5), split="yes")  # type: ignore[arg-type]


def test_split_adjacency_blocks_add_up() -> None:
    data, part = tricky_graph(3)
    from lightgraph.data.partition import build_partition_plans

    plan = build_partition_plans(data, part, 3)[1]
    h = torch.randn(plan.num_local, 4, dtype=torch.float64)
    n = plan.num_inner
    for gcn in (False, True):
        full = plan.gcn_adj_t(torch.float64) if gcn else plan.adj_t(torch.float64)
        inner = plan.split_adj_t(torch.float64, gcn, "inner")
        halo = plan.split_adj_t(torch.float64, gcn, "halo")
        assert inner.shape == (n, n) and halo.shape == (n, plan.num_halo)
        torch.testing.assert_close(inner @ h[:n] + halo @ h[n:], full @ h, atol=1e-12, rtol=0)
        # central rows have no halo entries
        counts = halo.crow_indices().diff()
        assert bool((counts[~plan.marginal_mask] == 0).all())
        assert bool((counts[plan.marginal_mask] > 0).all())
    with pytest.raises(ValueError, match="`part` in \\('inner', 'halo'\\) but got 'all'"):
        plan.split_adj_t(torch.float64, False, "all")
    deg = torch.bincount(plan.edge_index[1], minlength=n).clamp(min=1).double()
    torch.testing.assert_close(plan.inverse_in_degree(torch.float64).flatten(), 1 / deg)
    loops = plan.attention_edge_index(True)
    assert int((loops[0] == loops[1]).sum()) == n
    central = plan.attention_edge_index(True, "central")
    marginal = plan.attention_edge_index(True, "marginal")
    assert central.size(1) + marginal.size(1) == loops.size(1)
    assert bool((central[0] < n).all())  # central nodes read only inner rows


@pytest.mark.parametrize("overlap", [False, True])
def test_exchanger_without_start_halo_serves_the_split_path(overlap: bool) -> None:
    """A protocol-only exchanger (``__call__``, ``start`` / ``finish``) still serves the split path."""
    from lightgraph.data.partition import build_partition_plans

    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    halo_rows = data.x[plan.global_ids[plan.num_inner :]]
    calls = []

    class Fake:
        def __call__(self, x, p, stage, layer):  # noqa: ANN001, ANN204
            calls.append(layer)
            return torch.cat([x, halo_rows])

        def overlaps(self, stage):  # noqa: ANN001, ANN202
            return overlap

        def start(self, x, p, layer):  # noqa: ANN001, ANN202
            calls.append(("start", layer))
            return "handle"

        def finish(self, handle, x, p):  # noqa: ANN001, ANN202
            assert handle == "handle"
            return torch.cat([x, halo_rows])

        def set_aggregation(self, layer, aggregation):  # noqa: ANN001, ANN202
            pass

    torch.manual_seed(0)
    conv = GCNConv(F_IN, 5).double()
    ref = copy.deepcopy(conv)
    y = PartitionAware(conv, name="l")(plan.x, PartitionedGraph(plan, Fake()))
    assert calls == ([("start", "l")] if overlap else ["l"])
    ref.normalize = True
    y_ref = ref(data.x, data.edge_index)[plan.global_ids[: plan.num_inner]]
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
