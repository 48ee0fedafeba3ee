from __future__ import annotations

import pytest
import torch

from lightgraph.nn import GCNII
from tests.nn.models.model_checks import dropout_is_active, run_model


def test_forward_backward_shapes() -> None:
    out, graph = run_model(GCNII(6, 3, hidden_channels=8, num_layers=4))
    assert out.shape == (graph.num_inner, 3)
    assert torch.isfinite(out).all()


def test_dropout_only_in_training() -> None:
    model = GCNII(6, 3, hidden_channels=8, num_layers=4, dropout=0.5)
    assert dropout_is_active(model)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"alpha": 1.0}, "`alpha`"),
        ({"theta": 0.0}, "`theta`"),
        ({"num_layers": 0}, "`num_layers`"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    args = dict(in_channels=6, out_channels=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        GCNII(**args)


def test_beta_decays_with_depth() -> None:
    model = GCNII(6, 3, hidden_channels=8, num_layers=4, theta=0.5)
    betas = [c.conv.beta for c in model.convs]
    assert betas == sorted(betas, reverse=True)
