from __future__ import annotations

import pytest
import torch

from lightgraph.nn import GAT
from tests.nn.models.model_checks import dropout_is_active, run_model


def test_forward_backward_shapes() -> None:
    out, graph = run_model(GAT(6, 3, hidden_channels=8, num_layers=2, heads=2))
    assert out.shape == (graph.num_inner, 3)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training() -> None:
    model = GAT(6, 3, hidden_channels=8, num_layers=2, heads=2, dropout=0.5)
    assert dropout_is_active(model)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"heads": 0}, "`heads`"),
        ({"attention_dropout": 1.5}, "`attention_dropout`"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = dict(in_channels=6, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GAT(**args)


def test_heads_must_divide_hidden() -> None:
    with pytest.raises(
        ValueError, match="`hidden_channels` \\(10\\) to be divisible by `heads` \\(4\\)"
    ):
        GAT(6, 3, hidden_channels=10, heads=4)


def test_output_layer_has_one_head() -> None:
    model = GAT(6, 3, hidden_channels=8, num_layers=2, heads=4)
    assert model.convs[0].conv.heads == 4 and model.convs[-1].conv.heads == 1
