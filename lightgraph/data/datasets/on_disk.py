"""A graph kept on disk: the arrays of the :class:`~lightgraph.data.GraphDataset` layout as
(memory-mapped) NumPy arrays, which preparation streams in bounded chunks instead of
loading the graph whole."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class OnDiskGraph:
    """The arrays of one graph, each possibly a read-only ``numpy.memmap``.

    Attributes:
        num_nodes: ``N``.
        edge_index: ``[2, E]`` ``int32`` or ``int64``; messages flow ``edge_index[0] ->
            edge_index[1]`` (undirected graphs hold both directions).
        x: ``[N, F]`` ``float16`` or ``float32`` node features.
        y: ``[N]`` ``int64`` class ids, or ``[N, C]`` float 0/1 labels (multi-label).
        train_mask, val_mask, test_mask: ``[N]`` ``bool``.
        num_classes: number of classes (labels when multi-label).
        multilabel: whether ``y`` is ``[N, C]``.
    """

    num_nodes: int
    edge_index: np.ndarray
    x: np.ndarray
    y: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray
    num_classes: int
    multilabel: bool = False

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])
