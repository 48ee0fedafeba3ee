from __future__ import annotations

import pytest
import torch

from lightgraph.nn import GCN
from tests.nn.models.model_checks import dropout_is_active, run_model


def test_forward_backward_shapes() -> None:
    out, graph = run_model(GCN(6, 3, hidden_channels=8, num_layers=3))
    assert out.shape == (graph.num_inner, 3)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training() -> None:
    model = GCN(6, 3, hidden_channels=8, num_layers=3, dropout=0.5)
    assert dropout_is_active(model)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_layers": 0}, "`num_layers`"),
        ({"hidden_channels": -1}, "`hidden_channels`"),
        ({"dropout": 1.0}, "`dropout`"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = dict(in_channels=6, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GCN(**args)


def test_layer_count_and_names() -> None:
    model = GCN(6, 3, hidden_channels=8, num_layers=4)
    assert [c.name for c in model.convs] == ["layer0", "layer1", "layer2", "layer3"]
    assert [c.conv.out_channels for c in model.convs] == [8, 8, 8, 3]
