from __future__ import annotations

import pytest
import torch

from lightgraph.nn import GraphSAGE
from tests.nn.models.model_checks import dropout_is_active, run_model


def test_forward_backward_shapes() -> None:
    out, graph = run_model(GraphSAGE(6, 3, hidden_channels=8, num_layers=2))
    assert out.shape == (graph.num_inner, 3)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training() -> None:
    model = GraphSAGE(6, 3, hidden_channels=8, num_layers=2, dropout=0.5)
    assert dropout_is_active(model)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_layers": 0}, "`num_layers`"),
        ({"aggr": "lstm"}, "`aggr`"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = dict(in_channels=6, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GraphSAGE(**args)


def test_aggregations() -> None:
    for aggr in ("mean", "sum", "max"):
        out, _ = run_model(GraphSAGE(6, 3, hidden_channels=8, num_layers=2, aggr=aggr))
        assert torch.isfinite(out).all()
