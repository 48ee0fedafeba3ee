from __future__ import annotations

import pytest
import torch

from lightgraph.nn import SGC
from tests.graphs import tricky_graph
from tests.nn.models.model_checks import dropout_is_active, run_model


def test_forward_backward_shapes() -> None:
    out, graph = run_model(SGC(6, 3, num_layers=3))
    assert out.shape == (graph.num_inner, 3)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training() -> None:
    model = SGC(6, 3, num_layers=3, dropout=0.5)
    assert dropout_is_active(model)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_layers": 0}, "`num_layers`"),
        ({"in_channels": 0}, "`in_channels`"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = dict(in_channels=6, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        SGC(**args)


def test_bias_added_after_propagation() -> None:
    from torch_geometric.nn import SGConv

    model = SGC(6, 3, num_layers=2).double()
    with torch.no_grad():
        model.bias.fill_(0.5)
    out, graph = run_model(model)
    data, _ = tricky_graph(1)
    ref = SGConv(6, 3, K=2).double()
    ref.lin.weight, ref.lin.bias = model.lin.weight, model.bias
    torch.testing.assert_close(out, ref(data.x, data.edge_index))
