"""Partition-parallel models equal single-process PyG on the whole graph."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
from torch_geometric.nn import GATConv, GCNConv, SAGEConv, SGConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from lightgraph.data import PartitionPlan
from lightgraph.data.partition import build_partition_plans
from lightgraph.distributed import HaloExchanger
from lightgraph.nn import (
    DAGNN,
    GAT,
    GCN,
    GCNII,
    SGC,
    GraphSAGE,
    JKNet,
    PartitionAware,
    PartitionedGraph,
)
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph

F_IN, C = 6, 3


def make_models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(12345)
    models = {
        "gcn": GCN(F_IN, C, hidden_channels=8, num_layers=3, dropout=0.0),
        "sage": GraphSAGE(F_IN, C, hidden_channels=8, num_layers=3, dropout=0.0),
        "gat": GAT(F_IN, C, hidden_channels=8, num_layers=3, dropout=0.0, heads=2),
        "gcnii": GCNII(F_IN, C, hidden_channels=8, num_layers=4, dropout=0.0),
        "dagnn": DAGNN(F_IN, C, hidden_channels=8, num_layers=4, dropout=0.0),
        "sgc": SGC(F_IN, C, num_layers=3),
        "jknet": JKNet(F_IN, C, hidden_channels=8, num_layers=3, dropout=0.0, mode="cat"),
    }
    return {k: m.double() for k, m in models.items()}


def loss_weights(num_nodes: int) -> torch.Tensor:
    return torch.randn(
        num_nodes, C, generator=torch.Generator().manual_seed(7), dtype=torch.float64
    )


# ---------------------------------------------------------------- independent references
def ref_forward(
    name: str, model: torch.nn.Module, x: torch.Tensor, ei: torch.Tensor
) -> torch.Tensor:
    """Whole-graph forward with PyG's own layers (and their own degree normalisation)."""
    if name in ("gcn", "sage", "gat"):
        for i, wrapped in enumerate(model.convs):
            conv = wrapped.conv
            if isinstance(conv, GCNConv):
                conv.normalize = True  # PyG normalises with whole-graph degrees itself
            x = conv(x, ei)
            if i < len(model.convs) - 1:
                x = torch.nn.functional.elu(x) if isinstance(conv, GATConv) else x.relu()
        return x
    if name == "gcnii":
        x = x0 = model.lin_in(x).relu()
        for wrapped in model.convs:
            wrapped.conv.normalize = True
            x = wrapped.conv(x, x0, ei).relu()
        return model.lin_out(x)
    if name == "jknet":
        hs = []
        for wrapped in model.convs:
            wrapped.conv.normalize = True
            x = wrapped.conv(x, ei).relu()
            hs.append(x)
        return model.lin(model.jk(hs))
    n = x.size(0)
    (row, col), w = gcn_norm(ei, None, n, add_self_loops=True, dtype=x.dtype)
    a_hat = torch.zeros(n, n, dtype=x.dtype).index_put_(
        (col, row), w, accumulate=True
    )  # dense, tiny
    if name == "dagnn":
        z = model.lin2(model.lin1(x).relu())
        hops = [z]
        for _ in model.props:
            hops.append(a_hat @ hops[-1])
        h = torch.stack(hops, 1)
        return (torch.sigmoid(model.proj(h)) * h).sum(1)
    if name == "sgc":
        conv = SGConv(F_IN, C, K=len(model.props)).double()
        conv.lin.weight = model.lin.weight
        conv.lin.bias = model.bias
        return conv(x, ei)
    raise KeyError(name)


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.clone() for k, p in model.named_parameters()}


def _partitioned(rank: int, world: int, transport: str) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    graph = PartitionedGraph(plan, HaloExchanger(transport=transport))
    coeff = loss_weights(data.num_nodes)[plan.global_ids[: plan.num_inner]]
    out = {}
    for name, model in make_models().items():
        y = model(plan.x, graph)
        (y * coeff).sum().backward()
        grads = _grads(model)
        for g in grads.values():
            dist.all_reduce(g)  # what DDP does (up to its 1/world scaling)
        out[name] = {"y": y.detach(), "ids": plan.global_ids[: plan.num_inner], "grads": grads}
    out["bytes"] = graph.exchanger.stats.total()
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
@pytest.mark.parametrize("world,transport", [(2, "all_to_all"), (4, "all_to_all"), (4, "ring")])
def test_partitioned_equals_single_process_pyg(world: int, transport: str) -> None:
    results = run_distributed(_partitioned, world, transport, timeout=150)
    data, _ = tricky_graph(world)
    coeff = loss_weights(data.num_nodes)
    for name, model in make_models().items():
        ref = copy.deepcopy(model)
        y_ref = ref_forward(name, ref, data.x, data.edge_index)
        (y_ref * coeff).sum().backward()
        y = torch.empty_like(y_ref)
        for r in results:
            y[r[name]["ids"]] = r[name]["y"]
        torch.testing.assert_close(y, y_ref, atol=1e-10, rtol=0, msg=f"{name}: forward differs")
        for key, g_ref in _grads(ref).items():
            g = results[0][name]["grads"][key]
            torch.testing.assert_close(
                g, g_ref, atol=1e-10, rtol=0, msg=f"{name}: grad of {key} differs"
            )
            for r in results[1:]:  # every rank holds the same reduced gradient
                torch.testing.assert_close(r[name]["grads"][key], g)
    assert sum(r["bytes"] for r in results) > 0


def test_single_partition_needs_no_exchange() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    assert graph.plan.num_halo == 0
    model = make_models()["gcn"]
    y = model(data.x, graph)
    y_ref = ref_forward("gcn", copy.deepcopy(model), data.x, data.edge_index)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)


def test_partitioned_plan_without_exchanger_is_rejected() -> None:
    data, part = tricky_graph(2)
    plan = build_partition_plans(data, part, 2)[0]
    with pytest.raises(ValueError, match="needs an `exchanger`"):
        PartitionedGraph(plan)


def test_wrapper_rejects_multi_hop_and_non_message_passing() -> None:
    with pytest.raises(ValueError, match="SGConv propagates over several hops"):
        PartitionAware(SGConv(4, 4, K=2))
    with pytest.raises(TypeError, match="MessagePassing"):
        PartitionAware(torch.nn.Linear(4, 4))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`adjacency`"):
        PartitionAware(GCNConv(4, 4), adjacency="dense")  # type: ignore[arg-type]


def test_gcn_settings_that_cannot_be_partitioned_are_rejected() -> None:
    with pytest.raises(ValueError, match="add_self_loops=False"):
        PartitionAware(GCNConv(4, 4, add_self_loops=False))
    with pytest.raises(ValueError, match="normalization='gcn'"):
        PartitionAware(GCNConv(4, 4), normalization="none")
    assert (
        PartitionAware(GCNConv(4, 4, normalize=False), normalization="none").normalization == "none"
    )


def test_wrapper_defaults() -> None:
    gcn = PartitionAware(GCNConv(4, 4))
    assert gcn.normalization == "gcn" and gcn.adjacency == "adj_t" and not gcn.bipartite
    assert gcn.conv.normalize is False
    gat = PartitionAware(GATConv(4, 4))
    assert gat.normalization == "none" and gat.adjacency == "edge_index" and gat.bipartite
    sage = PartitionAware(SAGEConv(4, 4))
    assert sage.adjacency == "adj_t" and sage.bipartite


@pytest.mark.parametrize("adjacency", ["adj_t", "edge_index"])
def test_edge_index_and_csr_paths_agree(adjacency: str) -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph(PartitionPlan.from_data(data))
    torch.manual_seed(0)
    for conv in (GCNConv(F_IN, 5), SAGEConv(F_IN, 5)):
        conv = conv.double()
        ref = copy.deepcopy(conv)
        y = PartitionAware(conv, adjacency=adjacency)(data.x, graph)
        torch.testing.assert_close(y, ref(data.x, data.edge_index), atol=1e-12, rtol=0)


def test_wrong_row_count_is_rejected() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    with pytest.raises(ValueError, match="one row per inner node"):
        PartitionAware(GCNConv(F_IN, 2).double())(data.x[:-1], graph)


@pytest.mark.skipif(
    not __import__("lightgraph.typing").typing.WITH_TORCH_SPARSE,
    reason="optional torch-sparse not installed",
)
def test_sparse_tensor_path_agrees() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph(PartitionPlan.from_data(data))
    for conv in (GCNConv(F_IN, 5), SAGEConv(F_IN, 5)):
        conv = conv.double()
        ref = copy.deepcopy(conv)
        y = PartitionAware(conv, adjacency="sparse_tensor")(data.x, graph)
        torch.testing.assert_close(y, ref(data.x, data.edge_index), atol=1e-12, rtol=0)


@pytest.mark.cuda
def test_cuda_matches_cpu() -> None:
    data, _ = tricky_graph(1)
    plan = PartitionPlan.from_data(data)
    for name, model in make_models().items():
        ref = model(plan.x, PartitionedGraph(plan))
        gpu = copy.deepcopy(model).cuda()
        out = gpu(plan.x.cuda(), PartitionedGraph(plan.to("cuda")))
        torch.testing.assert_close(out.cpu(), ref, atol=1e-8, rtol=0, msg=name)


# ------------------------------------------------ GCNConv(improved=True) on partitions
# (PartitionAware options, exchanger mode): the split path, the whole-layer fallback on the
# CSR and on the edge-list adjacency, and the fallback's overlapped two-pass form.
IMPROVED_PATHS: dict[str, tuple[dict, str]] = {
    "split": ({}, "sync"),
    "fallback-adj_t": ({"split": False}, "sync"),
    "fallback-edge_index": ({"adjacency": "edge_index"}, "sync"),
    "fallback-overlap": ({"split": False}, "overlap"),
}


def _improved_gcn() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.ModuleList(
        [GCNConv(F_IN, 8, improved=True), GCNConv(8, C, improved=True)]
    ).double()


def _improved_gcn_forward(layers: torch.nn.Module, x: torch.Tensor, graph: object) -> torch.Tensor:
    """Two layers with a ReLU between; ``graph`` is a PartitionedGraph or an edge_index."""
    return layers[1](layers[0](x, graph).relu(), graph)


def _partitioned_improved_gcn(rank: int, world: int) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    coeff = loss_weights(data.num_nodes)[plan.global_ids[: plan.num_inner]]
    out: dict = {"ids": plan.global_ids[: plan.num_inner]}
    for path, (options, mode) in IMPROVED_PATHS.items():
        graph = PartitionedGraph(plan, HaloExchanger(mode=mode))
        convs = _improved_gcn()
        wrapped = torch.nn.ModuleList(
            [PartitionAware(c, name=f"l{i}", **options) for i, c in enumerate(convs)]
        )
        x = plan.x.clone().requires_grad_()
        y = _improved_gcn_forward(wrapped, x, graph)
        (y * coeff).sum().backward()
        grads = {k: p.grad.clone() for k, p in convs.named_parameters()}
        for g in grads.values():
            dist.all_reduce(g)
        out[path] = {"y": y.detach(), "x_grad": x.grad.clone(), "grads": grads}
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world", [2, 3])
def test_improved_gcn_on_partitions_equals_single_process_pyg(world: int) -> None:
    results = run_distributed(_partitioned_improved_gcn, world, timeout=100)
    data, _ = tricky_graph(world)
    coeff = loss_weights(data.num_nodes)
    ref = _improved_gcn()  # PyG's GCNConv(improved=True) normalises on the whole graph itself
    x_ref = data.x.clone().requires_grad_()
    y_ref = _improved_gcn_forward(ref, x_ref, data.edge_index)
    (y_ref * coeff).sum().backward()
    grads_ref = {k: p.grad for k, p in ref.named_parameters()}
    for path in IMPROVED_PATHS:
        y, x_grad = torch.empty_like(y_ref), torch.empty_like(x_ref)
        for r in results:
            y[r["ids"]] = r[path]["y"]
            x_grad[r["ids"]] = r[path]["x_grad"]
        torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0, msg=f"{path}: forward")
        torch.testing.assert_close(x_grad, x_ref.grad, atol=1e-12, rtol=0, msg=f"{path}: x.grad")
        for key, g_ref in grads_ref.items():
            for r in results:
                torch.testing.assert_close(
                    r[path]["grads"][key], g_ref, atol=1e-12, rtol=0, msg=f"{path}: grad of {key}"
                )
