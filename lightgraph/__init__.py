"""lightgraph: PyTorch Lightning components for training graph models on large graphs."""

from lightgraph import (
    callbacks,
    data,
    distributed,
    functional,
    models,
    nn,
    quant,
    strategies,
    utilities,
)

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "callbacks",
    "data",
    "distributed",
    "functional",
    "models",
    "nn",
    "quant",
    "strategies",
    "utilities",
]
