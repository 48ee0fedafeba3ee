"""lightgraph: PyTorch Lightning components for training graph models on large graphs."""

from lightgraph import callbacks, data, functional, models, nn, quant, strategies

__version__ = "0.1.0"

__all__ = ["__version__", "callbacks", "data", "functional", "models", "nn", "quant", "strategies"]
