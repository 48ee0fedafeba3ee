"""Shared type aliases and optional-dependency flags (probed once, here)."""

from __future__ import annotations

import importlib.util

from torch import Tensor

#: Whether the optional ``torch-sparse`` package (``pip install lightgraph[sparse]``) is importable.
WITH_TORCH_SPARSE: bool = importlib.util.find_spec("torch_sparse") is not None

#: Node-level tensors are indexed by local node id: inner nodes first, then halo nodes.
NodeTensor = Tensor


def require_torch_sparse(feature: str) -> None:
    """Raise an ImportError naming ``feature`` and the install command if torch-sparse is missing."""
    if not WITH_TORCH_SPARSE:
        raise ImportError(
            f"{feature} needs the optional `torch-sparse` package: `pip install lightgraph[sparse]` "
            f"(it builds from source where no wheel matches your torch)."
        )
