"""GraphTransformerLayer: pre- and post-norm blocks, argument checks."""

from __future__ import annotations

import pytest
import torch

from lightgraph.nn.models.graph_transformer_layer import GraphTransformerLayer
from tests.nn.models.transformer_checks import sequence


@pytest.mark.parametrize("norm", ["layer", "batch"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_block_keeps_the_shape_and_trains(norm: str, norm_first: bool) -> None:
    item = sequence()
    torch.manual_seed(0)
    layer = GraphTransformerLayer(8, 2, norm=norm, norm_first=norm_first).double()
    x = torch.randn(item.num_tokens, 8, dtype=torch.float64)
    out = layer(x, item.graph)
    assert out.shape == x.shape
    out.square().sum().backward()
    assert all(p.grad is not None for p in layer.parameters())


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"`norm` to be one of \('layer', 'batch'\)"):
        GraphTransformerLayer(8, 2, norm="group")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`activation` to be one of \('gelu', 'relu'\)"):
        GraphTransformerLayer(8, 2, activation="tanh")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match="`ffn_channels` to be (a positive integer|an integer >= 1)"
    ):
        GraphTransformerLayer(8, 2, ffn_channels=0)
