"""The BasicGNN base: a user subclass trains and equals PyG's own BasicGNN."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.nn.models as pyg_models
from torch_geometric.nn import MLP, GINConv, MessagePassing

from lightgraph.data.partition import build_partition_plans
from lightgraph.distributed import HaloExchanger
from lightgraph.nn import BasicGNN, PartitionedGraph
from tests.distributed_helpers import run_distributed
from tests.graphs import tricky_graph
from tests.nn.models.model_checks import dropout_is_active, run_model

F_IN, C = 6, 3
POSITIVE = "(a positive integer|an integer >= 1)"  # the allowed values, as checks.py words them


class GINNet(BasicGNN):
    """A user model: the base plus one method, with PyG's ``GINConv``."""

    def init_conv(self, in_channels: int, out_channels: int, **kwargs: Any) -> MessagePassing:
        return GINConv(MLP([in_channels, out_channels, out_channels], norm=None), **kwargs)


def make_pair(jk: str | None = None) -> tuple[GINNet, pyg_models.GIN]:
    """Our model and PyG's ``GIN`` holding the same weights (dropout off)."""
    torch.manual_seed(0)
    ours = GINNet(F_IN, C, hidden_channels=8, num_layers=3, dropout=0.0, jk=jk).double()
    ref = pyg_models.GIN(F_IN, 8, num_layers=3, out_channels=C, jk=jk).double()
    ref.load_state_dict({k.replace(".conv.", "."): v for k, v in ours.state_dict().items()})
    return ours, ref


@pytest.mark.parametrize("jk", [None, "cat", "max"])
def test_equals_pyg_basic_gnn_on_one_process(jk: str | None) -> None:
    data, _ = tricky_graph(1)
    ours, ref = make_pair(jk)
    y = ours(data.x, PartitionedGraph.from_data(data))
    y_ref = ref(data.x, data.edge_index)
    torch.testing.assert_close(y, y_ref, atol=1e-12, rtol=0)
    y.square().sum().backward()
    y_ref.square().sum().backward()
    grads = dict(ref.named_parameters())
    for name, p in ours.named_parameters():
        g_ref = grads[name.replace(".conv.", ".")].grad
        torch.testing.assert_close(p.grad, g_ref, atol=1e-12, rtol=0, msg=name)


def test_user_subclass_trains() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    torch.manual_seed(0)
    model = GINNet(F_IN, C, hidden_channels=16, num_layers=2, dropout=0.0).double()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(data.x, graph)[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]  # random labels: fitting them at all will do
    model.eval()  # still the PyG computation after training
    ref = pyg_models.GIN(F_IN, 16, num_layers=2, out_channels=C).double()
    ref.load_state_dict({k.replace(".conv.", "."): v for k, v in model.state_dict().items()})
    torch.testing.assert_close(
        model(data.x, graph), ref(data.x, data.edge_index), atol=1e-12, rtol=0
    )


def _partitioned(rank: int, world: int) -> dict:
    data, part = tricky_graph(world)
    plan = build_partition_plans(data, part, world)[rank]
    graph = PartitionedGraph(plan, HaloExchanger())
    out = {}
    for jk in (None, "cat"):
        ours, _ = make_pair(jk)
        out[jk] = ours(plan.x, graph).detach()
    out["ids"] = plan.global_ids[: plan.num_inner]
    return out


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_partitioned_equals_single_process_pyg() -> None:
    results = run_distributed(_partitioned, 2, timeout=100)
    data, _ = tricky_graph(2)
    for jk in (None, "cat"):
        _, ref = make_pair(jk)
        y_ref = ref(data.x, data.edge_index).detach()
        y = torch.empty_like(y_ref)
        for r in results:
            y[r["ids"]] = r[jk]
        torch.testing.assert_close(y, y_ref, atol=1e-10, rtol=0, msg=f"jk={jk}")


def test_layers_sizes_and_names() -> None:
    model = GINNet(F_IN, C, hidden_channels=8, num_layers=3, train_eps=True)
    assert [c.name for c in model.convs] == ["layer0", "layer1", "layer2"]
    assert [c.conv.nn.channel_list for c in model.convs] == [[6, 8, 8], [8, 8, 8], [8, 3, 3]]
    assert all(c.conv.eps.requires_grad for c in model.convs)  # kwargs reach init_conv
    jk = GINNet(F_IN, C, hidden_channels=8, num_layers=3, jk="cat")
    assert [c.conv.nn.channel_list[-1] for c in jk.convs] == [8, 8, 8]
    assert (jk.lin.in_features, jk.lin.out_features) == (24, 3)
    assert repr(model) == "GINNet(6, 3, num_layers=3)"


def test_activation_is_configurable() -> None:
    data, _ = tricky_graph(1)
    graph = PartitionedGraph.from_data(data)
    torch.manual_seed(0)
    tanh = GINNet(F_IN, C, hidden_channels=8, num_layers=2, dropout=0.0, act=torch.tanh).double()
    h = tanh.convs[0].conv(data.x, data.edge_index).tanh()
    y_ref = tanh.convs[1].conv(h, data.edge_index)
    torch.testing.assert_close(tanh(data.x, graph), y_ref, atol=1e-12, rtol=0)


def test_forward_backward_and_dropout() -> None:
    out, graph = run_model(GINNet(F_IN, C, hidden_channels=8, num_layers=3, jk="lstm"))
    assert out.shape == (graph.num_inner, C)
    assert dropout_is_active(GINNet(F_IN, C, hidden_channels=8, num_layers=2, dropout=0.5))


def test_reset_parameters() -> None:
    model = GINNet(F_IN, C, hidden_channels=8, num_layers=2, jk="lstm")
    before = copy.deepcopy(model.state_dict())
    model.reset_parameters()
    after = model.state_dict()
    assert list(before) == list(after)
    for name in ("convs.0.conv.nn.lins.0.weight", "convs.1.conv.nn.lins.1.weight", "lin.weight"):
        assert not torch.equal(before[name], after[name]), name
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("jk."))


def test_base_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        BasicGNN(F_IN, C)  # type: ignore[abstract]


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (
            {"in_channels": 0},
            ValueError,
            f"GINNet: expected `in_channels` to be {POSITIVE} but got 0",
        ),
        ({"out_channels": 2.0}, ValueError, f"GINNet: expected `out_channels` to be {POSITIVE}"),
        ({"hidden_channels": -1}, ValueError, f"expected `hidden_channels` to be {POSITIVE}"),
        ({"num_layers": 0}, ValueError, f"expected `num_layers` to be {POSITIVE} but got 0"),
        ({"dropout": 1.0}, ValueError, "expected `dropout` in \\[0, 1\\) but got 1.0"),
        ({"act": "relu"}, TypeError, "expected `act` to be a callable"),
        (
            {"jk": "last"},
            ValueError,
            "expected `jk` to be one of \\('cat', 'max', 'lstm'\\) but got 'last'",
        ),
    ],
)
def test_bad_arguments(kwargs: dict, error: type[Exception], match: str) -> None:
    args: dict[str, Any] = dict(in_channels=F_IN, out_channels=C)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        GINNet(**args)
