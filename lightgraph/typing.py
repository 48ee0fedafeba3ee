"""Shared type aliases (optional-dependency flags live in :mod:`lightgraph.utilities.imports`)."""

from __future__ import annotations

from torch import Tensor

from lightgraph.utilities.imports import WITH_TORCH_SPARSE, require_torch_sparse

#: Node-level tensors are indexed by local node id: inner nodes first, then halo nodes.
NodeTensor = Tensor

__all__ = ["NodeTensor", "WITH_TORCH_SPARSE", "require_torch_sparse"]
