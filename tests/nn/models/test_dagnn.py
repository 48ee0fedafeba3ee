from __future__ import annotations

import pytest
import torch

from lightgraph.nn import DAGNN
from tests.nn.models.model_checks import dropout_is_active, run_model


def test_forward_backward_shapes() -> None:
    out, graph = run_model(DAGNN(6, 3, hidden_channels=8, num_layers=5))
    assert out.shape == (graph.num_inner, 3)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training() -> None:
    model = DAGNN(6, 3, hidden_channels=8, num_layers=5, dropout=0.5)
    assert dropout_is_active(model)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_layers": 0}, "`num_layers`"),
        ({"dropout": -0.1}, "`dropout`"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = dict(in_channels=6, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        DAGNN(**args)


def test_hops_exchange_class_width_rows() -> None:
    model = DAGNN(6, 3, hidden_channels=8, num_layers=5)
    assert len(model.props) == 5 and all(p.normalization == "gcn" for p in model.props)
