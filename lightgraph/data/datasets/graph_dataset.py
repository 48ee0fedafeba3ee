"""The interface every graph source of lightgraph implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightgraph.data.datasets.on_disk import OnDiskGraph

if TYPE_CHECKING:  # link_split imports nothing from here, but keep the import one-way
    from lightgraph.data.datasets.link_split import OfficialLinkSplit

MASK_NAMES = ("train_mask", "val_mask", "test_mask")


class GraphDataset(ABC):
    """A source of one node-level graph with static metadata.

    A :class:`GraphDataset` is cheap to construct: it only records its configuration.
    The graph itself is produced by :meth:`load`, which the data modules call once in
    ``prepare_data`` (rank 0) so the other ranks never materialise the whole graph.

    :meth:`load` returns a :class:`torch_geometric.data.Data` with

    * ``x``: float node features ``[num_nodes, num_features]``;
    * ``y``: class indices ``[num_nodes]`` (``torch.long``), or for multi-label
      graphs a float 0/1 matrix ``[num_nodes, num_classes]``;
    * ``edge_index``: ``[2, num_edges]`` with messages flowing from ``edge_index[0]``
      to ``edge_index[1]`` (undirected graphs hold both directions);
    * ``train_mask``, ``val_mask``, ``test_mask``: boolean ``[num_nodes]``.
    """

    @property
    @abstractmethod
    def num_features(self) -> int:
        """Node feature dimension, known without loading the graph."""

    @property
    @abstractmethod
    def num_classes(self) -> int:
        """Number of classes (labels for multi-label graphs), known without loading."""

    @property
    def multilabel(self) -> bool:
        """Whether every node carries several binary labels instead of one class."""
        return False

    @property
    def num_relations(self) -> int:
        """Relation types of the edges (``data.edge_type`` in ``[0, num_relations)``), known
        without loading; ``0`` (the default): the edges carry none."""
        return 0

    @abstractmethod
    def load(self) -> Data:
        """Materialise the graph (see the class docstring for the layout)."""

    @abstractmethod
    def fingerprint(self) -> str:
        """A stable string identifying this configuration, used as a cache key."""

    def on_disk(self) -> OnDiskGraph | None:
        """The graph's arrays on disk (memory-mapped), for preparation in bounded memory.

        ``None`` (the default): the graph exists only through :meth:`load`. A dataset whose
        arrays live in files (e.g. :class:`~lightgraph.data.NpyGraph`) returns them, and
        the store builders then stream them in chunks sized by their ``memory_budget``
        instead of loading the whole graph.
        """
        return None

    def official_link_split(self) -> OfficialLinkSplit | None:
        """A link benchmark's own split and evaluation negatives
        (:class:`~lightgraph.data.datasets.link_split.OfficialLinkSplit`), which link data
        modules use instead of a random split. ``None`` (the default): no official split.
        """
        return None


class DatasetSizes:
    """``num_features``, ``num_classes`` and ``multilabel`` of a data module's ``dataset``.

    Mixed into the data modules that wrap one :class:`GraphDataset`: these are the sizes
    ``lightgraph``'s CLI links into the model before anything is loaded.
    """

    dataset: GraphDataset

    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def multilabel(self) -> bool:
        return self.dataset.multilabel


def ensure_edge_index(data: Data) -> Data:
    """Give ``data`` an ``edge_index`` if it only carries a sparse ``adj_t``.

    PyG's ``ToSparseTensor`` replaces ``edge_index`` by ``adj_t`` (rows = destinations),
    either a ``torch_sparse.SparseTensor`` or a ``torch.sparse`` tensor; lightgraph accepts
    both wherever PyG does and converts them here, once.
    """
    if getattr(data, "edge_index", None) is not None or getattr(data, "adj_t", None) is None:
        return data
    adj_t = data.adj_t
    if isinstance(adj_t, Tensor) and adj_t.layout != torch.strided:
        dst, src = adj_t.to_sparse_coo().coalesce().indices()
    elif hasattr(adj_t, "coo"):  # torch_sparse.SparseTensor
        dst, src, _ = adj_t.coo()
    else:
        raise ValueError(
            f"Expected `adj_t` to be a torch sparse tensor or a torch_sparse.SparseTensor but got "
            f"{type(adj_t).__name__}."
        )
    data = data.clone()
    data.edge_index = torch.stack([src, dst]).long()
    del data.adj_t
    return data


def validate_graph(
    data: Data, num_classes: int | None = None, multilabel: bool | None = None
) -> None:
    """Check that ``data`` follows the :class:`GraphDataset` layout.

    Raises:
        ValueError: naming the offending attribute, what was expected and what was found.
    """
    for name in ("x", "y", "edge_index", *MASK_NAMES):
        if getattr(data, name, None) is None:
            raise ValueError(
                f"The graph has no `{name}`; lightgraph expects `x`, `y`, `edge_index`, "
                f"`train_mask`, `val_mask` and `test_mask` (add the missing masks, e.g. with "
                f"`torch_geometric.transforms.RandomNodeSplit`)."
            )
    x: Tensor = data.x
    num_nodes = x.size(0)
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(
            f"Expected `x` to be a 2-D floating point tensor [num_nodes, num_features] but got "
            f"shape {tuple(x.shape)} and dtype {x.dtype}."
        )
    declared = data._store.get("num_nodes") if hasattr(data, "_store") else None
    if declared is not None and int(declared) != num_nodes:
        raise ValueError(
            f"Expected `x` to have one row per node (num_nodes = {int(declared)}) but got {num_nodes} rows."
        )
    edge_index: Tensor = data.edge_index
    if edge_index.dim() != 2 or edge_index.size(0) != 2 or edge_index.dtype != torch.long:
        raise ValueError(
            f"Expected `edge_index` to be a torch.long tensor of shape [2, num_edges] but got "
            f"shape {tuple(edge_index.shape)} and dtype {edge_index.dtype}."
        )
    if edge_index.numel() > 0:
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"Expected node indices in `edge_index` to lie in [0, {num_nodes - 1}] "
                f"(num_nodes = x.size(0) = {num_nodes}) but found values in [{lo}, {hi}]."
            )
    y: Tensor = data.y
    if y.size(0) != num_nodes:
        raise ValueError(
            f"Expected `y` to have one entry per node ({num_nodes}) but got {y.size(0)}."
        )
    if multilabel is True and y.dim() != 2:
        raise ValueError(
            f"Expected a multi-label `y` of shape [num_nodes, num_classes] but got {tuple(y.shape)}."
        )
    if multilabel is False and y.dim() != 1:
        raise ValueError(
            f"Expected a single-label `y` of shape [num_nodes] but got {tuple(y.shape)}."
        )
    if num_classes is not None:
        if y.dim() == 2 and y.size(1) != num_classes:
            raise ValueError(
                f"Expected `y` to have {num_classes} label columns but got {y.size(1)}."
            )
        if y.dim() == 1 and y.numel() > 0 and int(y.max()) >= num_classes:
            raise ValueError(
                f"Expected class labels in `y` to lie in [0, {num_classes - 1}] but found {int(y.max())}."
            )
    for name in MASK_NAMES:
        mask: Tensor = getattr(data, name)
        if mask.dtype != torch.bool or mask.shape != (num_nodes,):
            raise ValueError(
                f"Expected `{name}` to be a boolean tensor of shape [{num_nodes}] but got shape "
                f"{tuple(mask.shape)} and dtype {mask.dtype}."
            )
