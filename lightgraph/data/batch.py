"""The evaluation batch of exact layer-wise inference: the whole graph, left where it is."""

from __future__ import annotations

import torch
from torch import Tensor

_SPLITS = ("train", "val", "test")


class FullGraphBatch:
    """The whole graph in CSC form for exact layer-wise evaluation of a mini-batch model.

    Sampled-training data modules yield one of these from their validation/test loaders
    when asked for exact evaluation; :class:`~lightgraph.models.MiniBatchNodeClassifier`
    then runs :func:`~lightgraph.nn.layerwise.layerwise_inference` over it. The tensors
    may be memory-mapped (an on-disk store): nothing here copies them, and the class is
    deliberately not a dataclass or ``Data`` so Lightning's device transfer leaves the
    graph where it is (the layers move one chunk at a time).

    Attributes:
        indptr: CSC row pointers ``[num_nodes + 1]`` (in-neighbours of each node).
        indices: CSC sources.
        x: node features ``[num_nodes, num_features]``.
        y: labels ``[num_nodes]`` (or ``[num_nodes, num_classes]`` multi-label).
        masks: ``{"train"|"val"|"test": bool [num_nodes]}``.
        node_ids: the original node id of every row (identity when ``None``).
    """

    def __init__(
        self,
        indptr: Tensor,
        indices: Tensor,
        x: Tensor,
        y: Tensor,
        masks: dict[str, Tensor],
        node_ids: Tensor | None = None,
    ) -> None:
        num_nodes = int(indptr.numel()) - 1
        for name, value in (("x", x), ("y", y)):
            if value.size(0) != num_nodes:
                raise ValueError(
                    f"FullGraphBatch: expected `{name}` to have one row per node ({num_nodes}) "
                    f"but got {value.size(0)}."
                )
        unknown = set(masks) - set(_SPLITS)
        if unknown:
            raise ValueError(
                f"FullGraphBatch: expected mask names in {_SPLITS} but got {sorted(unknown)}."
            )
        self.indptr = indptr
        self.indices = indices
        self.x = x
        self.y = y
        self.masks = masks
        self.node_ids = torch.arange(num_nodes) if node_ids is None else node_ids

    @property
    def num_nodes(self) -> int:
        return int(self.indptr.numel()) - 1

    def nodes(self, split: str) -> Tensor:
        """Row indices of the nodes of ``split`` (``"train"``, ``"val"``, ``"test"``; ``"predict"`` = all)."""
        if split == "predict":
            return torch.arange(self.num_nodes)
        if split not in self.masks:
            raise ValueError(
                f"FullGraphBatch: expected `split` in {tuple(self.masks) + ('predict',)} but got "
                f"{split!r}."
            )
        return self.masks[split].nonzero().view(-1)

    def __repr__(self) -> str:
        return (
            f"FullGraphBatch(num_nodes={self.num_nodes}, num_edges={int(self.indices.numel())}, "
            f"num_features={self.x.size(1)})"
        )
