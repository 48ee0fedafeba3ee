"""Argument checks shared by the GNN models."""

from __future__ import annotations


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
