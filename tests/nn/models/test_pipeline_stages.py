"""split_stages: stages composed in order compute the model, share its parameters, and
refuse what cannot be split."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.utils import erdos_renyi_graph

from lightgraph.nn import GAT, GCN, MLP, GraphSAGE, JKNet, ResGEN, RevGAT, RevGCN
from lightgraph.nn.models.pipeline_stages import (
    pipeline_depth,
    reset_dropout,
    shared_dropouts,
    split_stages,
    stage_layer_ranges,
)
from lightgraph.nn.partitioned_graph import PartitionedGraph

IN, HIDDEN, OUT, NODES = 6, 12, 3, 30


def _graph(seed: int = 0) -> tuple[Tensor, Tensor]:
    torch.manual_seed(seed)
    return torch.randn(NODES, IN, dtype=torch.float64), erdos_renyi_graph(NODES, 0.15)


def _deep(name: str, dropout: float) -> nn.Module:
    torch.manual_seed(0)
    if name == "RevGCN":
        model: nn.Module = RevGCN(IN, HIDDEN, OUT, num_layers=5, dropout=dropout)
    elif name == "RevGCN-3groups":
        model = RevGCN(IN, HIDDEN, OUT, num_layers=5, num_groups=3, dropout=dropout)
    elif name == "RevGAT":
        model = RevGAT(IN, HIDDEN, OUT, num_layers=4, heads=2, dropout=dropout)
    else:
        model = ResGEN(IN, HIDDEN, OUT, num_layers=5, dropout=dropout)
    return model.double().train()


def _run_stages(stages: list[nn.Module], x: Tensor, edge_index: Tensor) -> Tensor:
    h = x
    for stage in stages:
        h = stage(h, edge_index)
    return h


def test_layer_ranges_are_consecutive_and_balanced() -> None:
    for layers in range(1, 12):
        for stages in range(1, layers + 1):
            ranges = stage_layer_ranges(layers, stages)
            assert ranges[0][0] == 0 and ranges[-1][1] == layers
            sizes = [end - start for start, end in ranges]
            assert max(sizes) - min(sizes) <= 1 and sorted(sizes, reverse=True) == sizes
            assert all(ranges[i][1] == ranges[i + 1][0] for i in range(stages - 1))
    assert stage_layer_ranges(7, 3) == [(0, 3), (3, 5), (5, 7)]


@pytest.mark.parametrize("name", ["RevGCN", "RevGCN-3groups", "RevGAT", "ResGEN"])
@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])
def test_stages_in_order_equal_the_model(name: str, num_stages: int) -> None:
    """Outputs and every parameter gradient, with dropout (same random stream)."""
    x, edge_index = _graph()
    model = _deep(name, dropout=0.3)
    torch.manual_seed(7)
    ref = model(x, edge_index)
    (ref * torch.linspace(-1, 1, ref.numel(), dtype=ref.dtype).view_as(ref)).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()

    stages = split_stages(model, num_stages)
    for stage in stages:
        reset_dropout(stage)
    torch.manual_seed(7)  # the stages draw their masks in the model's order
    out = _run_stages(stages, x, edge_index)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n], rtol=1e-10, atol=1e-12, msg=n)

    # Stage shapes: model input -> hidden -> ... -> classes.
    assert stages[0].in_channels == IN and stages[-1].out_channels == OUT
    for a, b in zip(stages[:-1], stages[1:], strict=True):
        assert a.out_channels == b.in_channels == HIDDEN


@pytest.mark.parametrize("name", ["RevGCN", "RevGAT", "ResGEN"])
def test_stages_share_and_partition_the_parameters(name: str) -> None:
    model = _deep(name, dropout=0.0)
    stages = split_stages(model, 3)
    model_params = {id(p): n for n, p in model.named_parameters()}
    seen: dict[int, int] = {}
    for i, stage in enumerate(stages):
        for p in stage.parameters():
            assert id(p) in model_params, "a stage holds a parameter the model does not"
            assert id(p) not in seen, f"{model_params[id(p)]} is in stages {seen[id(p)]} and {i}"
            seen[id(p)] = i
    assert set(seen) == set(model_params)
    # The input layer is in stage 0, the output head in the last stage.
    assert seen[id(model.lin_in.weight)] == 0
    assert seen[id(model.lin_out.weight)] == 2
    # Training a stage trains the model: the model's state dict sees the change.
    with torch.no_grad():
        next(stages[1].parameters()).add_(1.0)
    name1 = model_params[id(next(stages[1].parameters()))]
    assert torch.equal(model.state_dict()[name1], next(stages[1].parameters()).detach())


def test_reversible_stage_leaves_its_input_intact() -> None:
    """A reversible block frees its input; a stage copies it (the pipeline's receive buffer)."""
    x, edge_index = _graph()
    model = _deep("RevGCN", dropout=0.0)
    stages = split_stages(model, 2)
    h = stages[0](x, edge_index).detach().requires_grad_()
    before = h.detach().clone()
    out = stages[1](h, edge_index)
    assert h.untyped_storage().size() > 0
    torch.testing.assert_close(h.detach(), before)
    out.sum().backward()
    assert h.grad is not None and h.grad.shape == h.shape
    # Forward without gradients (evaluation) keeps the input too.
    with torch.no_grad():
        stages[1](h, edge_index)
    torch.testing.assert_close(h.detach(), before)


def test_reset_dropout_forgets_every_shared_mask() -> None:
    x, edge_index = _graph()
    model = _deep("RevGCN", dropout=0.5)
    stages = split_stages(model, 2)
    drops = shared_dropouts(stages[1])
    # The group masks (shared by every block) and the output dropout.
    assert len(drops) == model.num_groups + 1
    assert shared_dropouts(split_stages(_deep("ResGEN", 0.5), 2)[0]) == []
    h = stages[0](x, edge_index)
    stages[1](h, edge_index)
    assert all(d.mask is not None for d in drops)
    reset_dropout(stages[1])
    assert all(d.mask is None for d in drops)


def _data(x: Tensor, edge_index: Tensor) -> Data:
    n = x.size(0)
    mask = torch.ones(n, dtype=torch.bool)
    y = torch.zeros(n, dtype=torch.long)
    return Data(x=x, edge_index=edge_index, y=y, train_mask=mask, val_mask=mask, test_mask=mask)


@pytest.mark.parametrize(
    "make",
    [
        lambda: GCN(IN, OUT, hidden_channels=HIDDEN, num_layers=4, dropout=0.0),
        lambda: GraphSAGE(IN, OUT, hidden_channels=HIDDEN, num_layers=3, dropout=0.0),
        lambda: GAT(IN, OUT, hidden_channels=HIDDEN, num_layers=3, dropout=0.0, heads=2),
    ],
)
@pytest.mark.parametrize("num_stages", [1, 2, 3])
def test_basic_gnn_stages_equal_the_model(make, num_stages: int) -> None:
    x, edge_index = _graph()
    torch.manual_seed(0)
    model = make().double()
    ref = model(x, PartitionedGraph.from_data(_data(x, edge_index)))
    ref.square().sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    stages = split_stages(model, num_stages)
    out = _run_stages(stages, x, edge_index)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    out.square().sum().backward()
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, ref_grads[n], rtol=1e-10, atol=1e-12, msg=n)
    # A second, different graph through the same stages (the cached views are per edge list).
    sub = edge_index[:, : edge_index.size(1) // 2]
    ref2 = model(x, PartitionedGraph.from_data(_data(x, sub)))
    torch.testing.assert_close(_run_stages(stages, x, sub), ref2, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("num_stages", [0, 6, 2.0, True])
def test_num_stages_outside_the_layer_count_is_an_error(num_stages) -> None:
    model = _deep("RevGCN", dropout=0.0)  # 5 layers
    with pytest.raises(
        ValueError, match=r"split_stages: expected `num_stages` to be an integer in \[1, 5\].*"
    ) as info:
        split_stages(model, num_stages)
    assert repr(num_stages) in str(info.value)


def test_unsupported_models_are_named() -> None:
    with pytest.raises(
        TypeError, match="split_stages: expected `model` to be one of .*RevGCN.*ResGEN.*but got MLP"
    ):
        split_stages(MLP(IN, OUT, hidden_channels=HIDDEN, num_layers=3), 2)
    with pytest.raises(TypeError, match="expected `model` to be a .*but got str"):
        split_stages("RevGCN", 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="jumping knowledge"):
        split_stages(JKNet(IN, OUT, hidden_channels=HIDDEN, num_layers=3), 2)


def test_pipeline_depth_is_the_most_stages_split_stages_accepts() -> None:
    for model in (
        _deep("RevGCN", dropout=0.0),
        ResGEN(IN, HIDDEN, OUT, num_layers=3),
        GCN(IN, OUT, hidden_channels=HIDDEN, num_layers=4),
    ):
        depth = pipeline_depth(model)
        assert depth == len(split_stages(model, depth))  # one layer per stage
        with pytest.raises(ValueError, match="`num_stages`"):
            split_stages(model, depth + 1)
    with pytest.raises(TypeError, match="pipeline_depth: expected `model` to be one of"):
        pipeline_depth(MLP(IN, OUT, hidden_channels=HIDDEN, num_layers=3))
