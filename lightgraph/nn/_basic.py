"""Argument checks shared by the GNN models."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch.nn.functional as F
from torch import Tensor


def check_model_args(model: str, **values: float) -> None:
    """Raise a ValueError naming ``model`` and the argument for out-of-range sizes/rates."""
    for name, value in values.items():
        if name == "dropout" or name.endswith("dropout") or name == "alpha":
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{model}: expected `{name}` in [0, 1) but got {value!r}.")
        elif not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"{model}: expected `{name}` to be a positive integer but got {value!r}."
            )


def stacked_forward(
    layers: Iterable[Callable[..., Tensor]],
    x: Tensor,
    dropout: float,
    training: bool,
    activation: Callable[[Tensor], Tensor],
    *args: Any,
) -> Tensor:
    """Dropout → layer → activation for every layer (no activation after the last)."""
    layers = list(layers)
    for i, layer in enumerate(layers):
        x = F.dropout(x, p=dropout, training=training)
        x = layer(x, *args)
        if i < len(layers) - 1:
            x = activation(x)
    return x
